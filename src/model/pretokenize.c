/* pretokenize.c - splits text into pre-tokens with the regex list that
 * belongs to a tokenizer.ggml.pre name, using PCRE2 (UTF + UCP).
 *
 * llama.cpp applies a list of regexes: the text starts as one piece, each
 * regex runs over every current piece on its own (so look-aheads cannot see
 * past a piece), and both the matches and the non-empty gaps between them
 * become the pieces fed to the next regex ("isolated" splitting).
 *
 * The regexes are those of llama-vocab.cpp (docs/engine-reference.md), written
 * with two deliberate spellings so that PCRE2 agrees with llama.cpp:
 *  - `\s` / `\S` are spelled as llama.cpp's whitespace set (the code points
 *    it flags as whitespace: \t \n \v \f \r, space, U+0085, U+00A0, U+1680,
 *    U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000). PCRE2's own `\s`
 *    lacks U+0085.
 *  - kimi-k2: llama.cpp does not run the tiktoken regex but a hand-written
 *    splitter. Its behaviour is exactly the regex used below: Han runs (by
 *    llama.cpp's CJK ranges), then runs of any non-Han letter (no upper /
 *    lower case structure, marks not included) with an optional leading
 *    non-letter and an optional contraction, then the usual number /
 *    punctuation / whitespace alternatives. We follow llama.cpp (the
 *    project's reference) rather than tiktoken here; the two differ on
 *    camelCase words and on combining marks (e.g. Devanagari vowel signs).
 *  - Contractions are written `'[sS]|'[tT]|...` as in llama.cpp (PCRE2's
 *    (?i) would also fold U+017F and U+212A).
 *
 * Letters, numbers, marks, punctuation and symbols come from PCRE2's
 * Unicode tables; llama.cpp has its own tables, so characters assigned in a
 * newer Unicode version than one of them knows may split differently. */
#include "vocab_internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- regexes */

// clang-format off

/* Body of a character class: llama.cpp's whitespace set. */
#define WS                                                                                         \
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"          \
    "\\x{202F}\\x{205F}\\x{3000}"
/* Body of a character class: llama.cpp's unicode_cpt_is_han ranges. */
#define HAN                                                                                        \
    "\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{20000}-\\x{2A6DF}\\x{2A700}-\\x{2B73F}"             \
    "\\x{2B740}-\\x{2B81F}\\x{2B820}-\\x{2CEAF}\\x{2CEB0}-\\x{2EBEF}\\x{F900}-\\x{FAFF}"          \
    "\\x{2F800}-\\x{2FA1F}"
#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
/* The whitespace tail shared by most patterns: \s*[\r\n]+|\s+(?!\S)|\s+ */
#define WS_TAIL "|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"

/* qwen2: single digits. */
static const char *const RX_QWEN2[] = {
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*" WS_TAIL,
    NULL};

/* llama3 / llama-bpe: digits in groups of 1-3. */
static const char *const RX_LLAMA3[] = {
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*" WS_TAIL,
    NULL};

/* deepseek-v3: three regexes in order. */
static const char *const RX_DEEPSEEK3[] = {
    "\\p{N}{1,3}",
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\\r\\n]*" WS_TAIL,
    NULL};

/* kimi-k2: llama.cpp's splitter as a regex (see the file comment).
 * [^\P{L}HAN] is "a letter that is not Han". */
static const char *const RX_KIMI_K2[] = {
    "[" HAN "]+"
    "|[^\\r\\n\\p{L}\\p{N}]?[^\\P{L}" HAN "]+" CONTRACTIONS "?"
    "|\\p{N}{1,3}"
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*" WS_TAIL,
    NULL};

/* The GPT-2 regex (no trailing \s+ alternative). */
#define RX_GPT2_1                                                                                  \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])"

static const char *const RX_GPT2[] = {RX_GPT2_1, NULL};

/* llama.cpp's "default" list (also used when tokenizer.ggml.pre is absent). */
static const char *const RX_DEFAULT[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2_1, "\\p{N}+",
                                         "[0-9][0-9][0-9]", NULL};

// clang-format on

typedef struct pre_def {
    const char *const *names; /* NULL-terminated */
    const char *const *rx;
    bool ignore_merges, add_bos;
} pre_def;

static const char *const N_QWEN2[] = {
    "qwen2",     "deepseek-r1-qwen", "megrez",     "kormo",  "f2llmv2",
    "stablelm2", "hunyuan",          "solar-open", "grok-2", NULL};
static const char *const N_LLAMA3[] = {"llama3",       "llama-v3", "llama-bpe", "falcon3",
                                       "falcon-h1",    "pixtral",  "midm-2.0",  "lfm2",
                                       "jina-v5-nano", NULL};
static const char *const N_LLAMA3_PLAIN[] = {"dbrx", "smaug-bpe", NULL};
static const char *const N_DEEPSEEK3[] = {"deepseek-v3", "hunyuan-dense", "joyai-llm", NULL};
static const char *const N_KIMI[] = {"kimi-k2", NULL};
static const char *const N_GPT2[] = {"gpt-2",      "phi-2",      "jina-es", "jina-de", "gigachat",
                                     "jina-v2-es", "jina-v2-de", "mpt",     "olmo",    "jais",
                                     "exaone4",    "trillion",   NULL};
static const char *const N_DEFAULT[] = {"default", "", NULL};

/* Flags as llama-vocab.cpp sets them for each name. */
static const pre_def PRE_DEFS[] = {
    {N_QWEN2, RX_QWEN2, false, false},         {N_LLAMA3, RX_LLAMA3, true, true},
    {N_LLAMA3_PLAIN, RX_LLAMA3, false, false}, {N_DEEPSEEK3, RX_DEEPSEEK3, false, false},
    {N_KIMI, RX_KIMI_K2, false, false},        {N_GPT2, RX_GPT2, false, false},
    {N_DEFAULT, RX_DEFAULT, false, false},
};

/* ---------------------------------------------------------------- compile */

#define MAX_RX 8

struct mt_pretok {
    int n;
    pcre2_code *code[MAX_RX];
};

void mt_pretok_free(mt_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->code[i]);
    free(p);
}

mt_pretok *mt_pretok_new(const char *pre, mt_pretok_flags *flags, mt_error *err) {
    if (!pre) pre = "";
    const pre_def *def = NULL;
    for (size_t d = 0; !def && d < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; d++)
        for (const char *const *nm = PRE_DEFS[d].names; *nm; nm++)
            if (strcmp(*nm, pre) == 0) {
                def = &PRE_DEFS[d];
                break;
            }
    if (!def) {
        mt_error_set(err,
                     "pre-tokenizer '%s' is not supported yet (supported: qwen2, llama-bpe/llama3,"
                     " deepseek-v3, kimi-k2, gpt-2, default and their llama.cpp aliases)",
                     pre);
        return NULL;
    }
    mt_pretok *p = calloc(1, sizeof *p);
    if (!p) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    for (const char *const *rx = def->rx; *rx; rx++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *c = pcre2_compile((PCRE2_SPTR)*rx, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                      &ec, &eo, NULL);
        if (!c) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(ec, msg, sizeof msg);
            mt_error_set(err, "pre-tokenizer '%s': regex %d does not compile at offset %zu: %s",
                         pre, p->n, (size_t)eo, (const char *)msg);
            mt_pretok_free(p);
            return NULL;
        }
        /* JIT is an optimisation only: without it PCRE2 interprets. */
        (void)pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
        p->code[p->n++] = c;
    }
    if (flags) {
        flags->ignore_merges = def->ignore_merges;
        flags->add_bos = def->add_bos;
    }
    return p;
}

/* ---------------------------------------------------------------- split */

typedef struct span_vec {
    mt_span *v;
    size_t n, cap;
} span_vec;

static int span_push(span_vec *s, size_t off, size_t len) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        mt_span *v = realloc(s->v, cap * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n].off = off;
    s->v[s->n].len = len;
    s->n++;
    return 0;
}

/* Runs one regex over one piece, appending matches and gaps to out. */
static int split_piece(pcre2_code *code, pcre2_match_data *md, const char *text, mt_span piece,
                       span_vec *out, mt_error *err) {
    PCRE2_SPTR subj = (PCRE2_SPTR)(text + piece.off);
    size_t len = piece.len, start = 0, prev = 0;
    while (start < len) {
        int rc = pcre2_match(code, subj, len, start, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(code, subj, len, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return mt_error_set(err, "pre-tokenizer regex failed on a %zu-byte piece: %s", len,
                                (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me > ms) {
            if (ms > prev && span_push(out, piece.off + prev, ms - prev)) goto oom;
            if (span_push(out, piece.off + ms, me - ms)) goto oom;
            prev = start = me;
        } else {
            /* Empty match (none of our regexes produce one): step one character. */
            start = ms + 1;
            while (start < len && (subj[start] & 0xC0) == 0x80) start++;
        }
    }
    if (len > prev && span_push(out, piece.off + prev, len - prev)) goto oom;
    return 0;
oom:
    return mt_error_set(err, "out of memory while pre-tokenizing");
}

int64_t mt_pretok_split(const mt_pretok *p, const char *text, size_t len, mt_span **out,
                        mt_error *err) {
    span_vec cur = {0}, next = {0};
    *out = NULL;
    if (len == 0) return 0;
    if (span_push(&cur, 0, len)) goto oom;
    for (int r = 0; r < p->n; r++) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->code[r], NULL);
        if (!md) goto oom;
        next.n = 0;
        for (size_t i = 0; i < cur.n; i++)
            if (split_piece(p->code[r], md, text, cur.v[i], &next, err)) {
                pcre2_match_data_free(md);
                free(cur.v);
                free(next.v);
                return -1;
            }
        pcre2_match_data_free(md);
        span_vec t = cur;
        cur = next;
        next = t;
    }
    free(next.v);
    *out = cur.v;
    return (int64_t)cur.n;
oom:
    free(cur.v);
    free(next.v);
    return mt_error_set(err, "out of memory while pre-tokenizing");
}

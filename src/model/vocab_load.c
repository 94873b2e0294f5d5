/* vocab_load.c - loads and validates the tokenizer.* metadata of a GGUF
 * file into an mt_vocab, applying the rules llama.cpp applies on load:
 *
 *  - `tokenizer.ggml.model` gpt2 (byte-level BPE) and llama (SentencePiece
 *    BPE) are supported; other models get a "not supported yet" error;
 *  - SentencePiece defaults: BOS 1, EOS 2, UNK 0, add_bos and
 *    add_space_prefix on (keys override them); merges are not used;
 *  - the pre-tokenizer name picks the regex list and the defaults of
 *    add_bos and ignore_merges (llama3 family: both true);
 *  - BOS and EOS default to id 11 for gpt2 vocabularies (llama.cpp's
 *    default), overridden by the *_token_id keys;
 *  - tokens whose text marks them as end-of-turn / end-of-generation / FIM
 *    tokens become control tokens; control tokens whose text contains
 *    "unused" are also marked unused; the end-of-generation set is built
 *    from token texts plus the EOS / EOT / EOM ids (llama-vocab.cpp).
 *
 * Everything read from the file is checked: types, array lengths, token
 * texts (no NUL bytes, no duplicates), token types (0-6), merges (a space
 * at index >= 1 with non-empty halves), special ids (inside the
 * vocabulary). Errors read "<file>: <key>: <problem>". llama.cpp is more
 * lenient in places (it ignores out-of-range special ids, accepts longer
 * type arrays); we refuse such files because they are broken. */
#include "vocab_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K_MODEL  "tokenizer.ggml.model"
#define K_PRE    "tokenizer.ggml.pre"
#define K_TOKENS "tokenizer.ggml.tokens"
#define K_TYPES  "tokenizer.ggml.token_type"
#define K_SCORES "tokenizer.ggml.scores"
#define K_MERGES "tokenizer.ggml.merges"

/* ---------------------------------------------------------------- helpers */

static const gguf_kv *find_array(const gguf_file *f, const char *key, gguf_value_type et,
                                 gguf_value_type et2, mt_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return NULL;
    if (kv->value.type != GGUF_TYPE_ARRAY) {
        mt_error_set(err, "%s: %s is a %s, expected an array of %s", f->path, key,
                     gguf_type_name(kv->value.type), gguf_type_name(et));
        return NULL;
    }
    if (kv->value.arr.type != et && kv->value.arr.type != et2) {
        mt_error_set(err, "%s: %s is an array of %s, expected %s", f->path, key,
                     gguf_type_name(kv->value.arr.type), gguf_type_name(et));
        return NULL;
    }
    return kv;
}

static int32_t find_text(const mt_vocab *v, const char *s) {
    return mt_strmap_get(&v->tok_map, s, strlen(s));
}

static void make_control(mt_vocab *v, int32_t id) {
    if (!(v->attr[id] & MT_ATTR_CONTROL)) v->attr[id] |= MT_ATTR_CONTROL;
}

/* If *id is unset, sets it to the first token of names[] present, and makes
 * that token a control token (llama.cpp's auto-detection by text). */
static void detect(mt_vocab *v, int32_t *id, const char *const *names) {
    if (*id >= 0) return;
    for (; *names; names++) {
        int32_t t = find_text(v, *names);
        if (t >= 0) {
            *id = t;
            make_control(v, t);
            return;
        }
    }
}

/* ---------------------------------------------------------------- tokens */

static int load_tokens(mt_vocab *v, const gguf_file *f, mt_error *err) {
    mt_error e2 = {{0}};
    const gguf_kv *kv = find_array(f, K_TOKENS, GGUF_TYPE_STRING, GGUF_TYPE_STRING, &e2);
    if (!kv) {
        if (e2.msg[0]) return mt_error_set(err, "%s", e2.msg);
        return mt_error_set(err, "%s: %s is missing; the file has no vocabulary", f->path,
                            K_TOKENS);
    }
    uint64_t n = kv->value.arr.n;
    if (n == 0 || n >= INT32_MAX)
        return mt_error_set(err, "%s: %s has %llu entries (must be 1 .. 2^31-2)", f->path, K_TOKENS,
                            (unsigned long long)n);
    v->n_tokens = (int32_t)n;
    const gguf_str *s = kv->value.arr.strs;
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (s[i].len > UINT32_MAX - 32)
            return mt_error_set(err, "%s: %s[%llu] is %llu bytes long", f->path, K_TOKENS,
                                (unsigned long long)i, (unsigned long long)s[i].len);
        if (memchr(s[i].ptr, 0, s[i].len))
            return mt_error_set(err, "%s: %s[%llu] contains a NUL byte", f->path, K_TOKENS,
                                (unsigned long long)i);
        total += (s[i].len ? s[i].len : 32) + 1; /* "[EMPTY_<i>]" fits in 32 */
    }
    v->text_pool = malloc(total);
    v->text_off = malloc(n * sizeof *v->text_off);
    v->text_len = malloc(n * sizeof *v->text_len);
    v->attr = malloc(n * sizeof *v->attr);
    if (!v->text_pool || !v->text_off || !v->text_len || !v->attr || mt_strmap_init(&v->tok_map, n))
        return mt_error_set(err, "%s: out of memory for %llu tokens", f->path,
                            (unsigned long long)n);
    size_t pos = 0;
    for (uint64_t i = 0; i < n; i++) {
        char *dst = v->text_pool + pos;
        size_t len = s[i].len;
        if (len == 0) {
            /* llama.cpp renames empty tokens so that they can never match. */
            len = (size_t)snprintf(dst, 32, "[EMPTY_%llu]", (unsigned long long)i);
        } else {
            memcpy(dst, s[i].ptr, len);
            dst[len] = 0;
        }
        v->text_off[i] = pos;
        v->text_len[i] = (uint32_t)len;
        v->attr[i] = MT_ATTR_NORMAL;
        pos += len + 1;
        int32_t old;
        if (mt_strmap_put(&v->tok_map, dst, (uint32_t)len, (int32_t)i, &old) == 0)
            return mt_error_set(err, "%s: %s[%llu] repeats the text of token %d ('%.40s')", f->path,
                                K_TOKENS, (unsigned long long)i, old, dst);
    }
    return 0;
}

static int load_types(mt_vocab *v, const gguf_file *f, mt_error *err) {
    mt_error e2 = {{0}};
    const gguf_kv *kv = find_array(f, K_TYPES, GGUF_TYPE_INT32, GGUF_TYPE_INT32, &e2);
    if (!kv) return e2.msg[0] ? mt_error_set(err, "%s", e2.msg) : 0;
    if (kv->value.arr.n != (uint64_t)v->n_tokens)
        return mt_error_set(err, "%s: %s has %llu entries but there are %d tokens", f->path,
                            K_TYPES, (unsigned long long)kv->value.arr.n, v->n_tokens);
    for (int32_t i = 0; i < v->n_tokens; i++) {
        int32_t t;
        memcpy(&t, kv->value.arr.data + 4 * (size_t)i, 4);
        switch (t) {
        case MT_TOKTYPE_UNDEFINED:
            v->attr[i] = MT_ATTR_UNDEFINED;
            break;
        case MT_TOKTYPE_NORMAL:
            v->attr[i] = MT_ATTR_NORMAL;
            break;
        case MT_TOKTYPE_UNKNOWN:
            v->attr[i] = MT_ATTR_UNKNOWN;
            break;
        case MT_TOKTYPE_CONTROL:
            v->attr[i] = MT_ATTR_CONTROL;
            break;
        case MT_TOKTYPE_USER_DEFINED:
            v->attr[i] = MT_ATTR_USER_DEFINED;
            break;
        case MT_TOKTYPE_UNUSED:
            v->attr[i] = MT_ATTR_UNUSED;
            break;
        case MT_TOKTYPE_BYTE:
            v->attr[i] = MT_ATTR_BYTE;
            break;
        default:
            return mt_error_set(err, "%s: %s[%d] is %d (valid token types are 0-6)", f->path,
                                K_TYPES, i, t);
        }
    }
    return 0;
}

/* Scores (float32 or int32, one per token); all 0 when absent. */
static int load_scores(mt_vocab *v, const gguf_file *f, mt_error *err) {
    mt_error e2 = {{0}};
    v->scores = calloc((size_t)v->n_tokens, sizeof *v->scores);
    if (!v->scores) return mt_error_set(err, "%s: out of memory for scores", f->path);
    const gguf_kv *kv = find_array(f, K_SCORES, GGUF_TYPE_FLOAT32, GGUF_TYPE_INT32, &e2);
    if (!kv) return e2.msg[0] ? mt_error_set(err, "%s", e2.msg) : 0;
    if (kv->value.arr.n != (uint64_t)v->n_tokens)
        return mt_error_set(err, "%s: %s has %llu entries but there are %d tokens", f->path,
                            K_SCORES, (unsigned long long)kv->value.arr.n, v->n_tokens);
    for (int32_t i = 0; i < v->n_tokens; i++) {
        const uint8_t *p = kv->value.arr.data + 4 * (size_t)i;
        if (kv->value.arr.type == GGUF_TYPE_INT32) {
            int32_t x;
            memcpy(&x, p, 4);
            v->scores[i] = (float)x;
        } else {
            memcpy(&v->scores[i], p, 4);
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- merges */

static int load_merges(mt_vocab *v, const gguf_file *f, bool required, mt_error *err) {
    mt_error e2 = {{0}};
    const gguf_kv *kv = find_array(f, K_MERGES, GGUF_TYPE_STRING, GGUF_TYPE_STRING, &e2);
    if (!kv) {
        if (e2.msg[0]) return mt_error_set(err, "%s", e2.msg);
        if (required)
            return mt_error_set(err, "%s: %s is missing (a gpt2 vocabulary needs its merges)",
                                f->path, K_MERGES);
        return mt_strmap_init(&v->merge_map, 0) ? mt_error_set(err, "out of memory") : 0;
    }
    uint64_t n = kv->value.arr.n;
    if (n >= INT32_MAX)
        return mt_error_set(err, "%s: %s has %llu entries (too many)", f->path, K_MERGES,
                            (unsigned long long)n);
    const gguf_str *s = kv->value.arr.strs;
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *sp = s[i].len > 1 ? memchr(s[i].ptr + 1, ' ', s[i].len - 1) : NULL;
        if (!sp)
            return mt_error_set(err, "%s: %s[%llu] ('%.*s') has no space separating two parts",
                                f->path, K_MERGES, (unsigned long long)i,
                                (int)(s[i].len < 40 ? s[i].len : 40), s[i].ptr);
        if ((size_t)(sp - s[i].ptr) + 1 == s[i].len)
            return mt_error_set(err, "%s: %s[%llu] ('%.*s') has an empty right part", f->path,
                                K_MERGES, (unsigned long long)i,
                                (int)(s[i].len < 40 ? s[i].len : 40), s[i].ptr);
        if (s[i].len > UINT32_MAX)
            return mt_error_set(err, "%s: %s[%llu] is too long", f->path, K_MERGES,
                                (unsigned long long)i);
        total += s[i].len;
    }
    v->merge_pool = malloc(total ? total : 1);
    if (!v->merge_pool || mt_strmap_init(&v->merge_map, n))
        return mt_error_set(err, "%s: out of memory for %llu merges", f->path,
                            (unsigned long long)n);
    size_t pos = 0;
    for (uint64_t i = 0; i < n; i++) {
        memcpy(v->merge_pool + pos, s[i].ptr, s[i].len);
        /* A repeated pair keeps its first (lowest) rank, as in llama.cpp. */
        mt_strmap_put(&v->merge_map, v->merge_pool + pos, (uint32_t)s[i].len, (int32_t)i, NULL);
        pos += s[i].len;
    }
    return 0;
}

/* ---------------------------------------------------------------- ids */

static int read_id(mt_vocab *v, const gguf_file *f, const char *key, int32_t *id, mt_error *err) {
    mt_error e2 = {{0}};
    uint32_t x;
    if (!gguf_get_u32(f, key, &x, &e2)) return e2.msg[0] ? mt_error_set(err, "%s", e2.msg) : 0;
    if (x >= (uint32_t)v->n_tokens)
        return mt_error_set(err, "%s: %s is %u, outside the vocabulary of %d tokens", f->path, key,
                            x, v->n_tokens);
    *id = (int32_t)x;
    return 0;
}

static int read_flag(const gguf_file *f, const char *key, bool *flag, mt_error *err) {
    mt_error e2 = {{0}};
    bool b;
    if (gguf_get_bool(f, key, &b, &e2))
        *flag = b;
    else if (e2.msg[0])
        return mt_error_set(err, "%s", e2.msg);
    return 0;
}

static int load_special_ids(mt_vocab *v, const gguf_file *f, mt_error *err) {
    const struct {
        const char *key;
        int32_t *id;
    } keys[] = {
        {"tokenizer.ggml.bos_token_id", &v->bos},
        {"tokenizer.ggml.eos_token_id", &v->eos},
        {"tokenizer.ggml.eot_token_id", &v->eot},
        {"tokenizer.ggml.eom_token_id", &v->eom},
        {"tokenizer.ggml.unknown_token_id", &v->unk},
        {"tokenizer.ggml.seperator_token_id", &v->sep},
        {"tokenizer.ggml.padding_token_id", &v->pad},
        {"tokenizer.ggml.mask_token_id", &v->mask},
        {"tokenizer.ggml.fim_pre_token_id", &v->fim_pre},
        {"tokenizer.ggml.fim_suf_token_id", &v->fim_suf},
        {"tokenizer.ggml.fim_mid_token_id", &v->fim_mid},
        {"tokenizer.ggml.fim_pad_token_id", &v->fim_pad},
        {"tokenizer.ggml.fim_rep_token_id", &v->fim_rep},
        {"tokenizer.ggml.fim_sep_token_id", &v->fim_sep},
        /* deprecated spellings, read after the new ones like llama.cpp */
        {"tokenizer.ggml.prefix_token_id", &v->fim_pre},
        {"tokenizer.ggml.suffix_token_id", &v->fim_suf},
        {"tokenizer.ggml.middle_token_id", &v->fim_mid},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (read_id(v, f, keys[i].key, keys[i].id, err)) return -1;
    if (read_flag(f, "tokenizer.ggml.add_bos_token", &v->add_bos, err) ||
        read_flag(f, "tokenizer.ggml.add_eos_token", &v->add_eos, err))
        return -1;
    if (v->add_bos && v->bos < 0)
        return mt_error_set(err, "%s: the vocabulary asks for a BOS token but has none", f->path);
    if (v->add_eos && v->eos < 0)
        return mt_error_set(err, "%s: the vocabulary asks for an EOS token but has none", f->path);
    return 0;
}

/* ------------------------------------------------------- special-token rules */

static const char *const EOT_NAMES[] = {"<|eot_id|>",
                                        "<|im_end|>",
                                        "<|end|>",
                                        "<end_of_turn>",
                                        "<|endoftext|>",
                                        "<|end_of_text|>",
                                        "<EOT>",
                                        "_<EOT>",
                                        "[EOT]",
                                        "<\xef\xbd\x9c"
                                        "end\xe2\x96\x81"
                                        "of"
                                        "\xe2\x96\x81"
                                        "sentence\xef\xbd\x9c>",
                                        "<end_of_utterance>",
                                        NULL};
static const char *const EOM_NAMES[] = {"<|eom_id|>", NULL};
static const char *const FIM_PRE_NAMES[] = {"<|fim_prefix|>",
                                            "<fim-prefix>",
                                            "<fim_prefix>",
                                            "<\xef\xbd\x9c"
                                            "fim\xe2\x96\x81"
                                            "begin\xef\xbd\x9c>",
                                            "<PRE>",
                                            "\xe2\x96\x81<PRE>",
                                            "<|code_prefix|>",
                                            "<|prefix|>",
                                            NULL};
static const char *const FIM_SUF_NAMES[] = {"<|fim_suffix|>",
                                            "<fim-suffix>",
                                            "<fim_suffix>",
                                            "<\xef\xbd\x9c"
                                            "fim\xe2\x96\x81"
                                            "hole\xef\xbd\x9c>",
                                            "<SUF>",
                                            "\xe2\x96\x81<SUF>",
                                            "<|code_suffix|>",
                                            "<|suffix|>",
                                            NULL};
static const char *const FIM_MID_NAMES[] = {"<|fim_middle|>",
                                            "<fim-middle>",
                                            "<fim_middle>",
                                            "<\xef\xbd\x9c"
                                            "fim\xe2\x96\x81"
                                            "end\xef\xbd\x9c>",
                                            "<MID>",
                                            "\xe2\x96\x81<MID>",
                                            "<|code_middle|>",
                                            "<|middle|>",
                                            NULL};
static const char *const FIM_PAD_NAMES[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                            "<PAD>",       "[PAD]",     NULL};
static const char *const FIM_REP_NAMES[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                            "<REPO>",       "<reponame>",    NULL};
static const char *const FIM_SEP_NAMES[] = {"<|file_sep|>", NULL};

/* Token texts that end generation (llama-vocab.cpp's list). */
static const char *const EOG_NAMES[] = {"<|eot_id|>",
                                        "<|im_end|>",
                                        "<|end|>",
                                        "<|return|>",
                                        "<|call|>",
                                        "<|flush|>",
                                        "<|calls|>",
                                        "<end_of_turn>",
                                        "<|endoftext|>",
                                        "</s>",
                                        "<|eom_id|>",
                                        "<EOT>",
                                        "_<EOT>",
                                        "[EOT]",
                                        "[EOS]",
                                        "<|end_of_text|>",
                                        "<end_of_utterance>",
                                        "<eos>",
                                        "<turn|>",
                                        "<|tool_response>",
                                        "<\xef\xbd\x9c"
                                        "end\xe2\x96\x81"
                                        "of\xe2\x96\x81"
                                        "sentence\xef\xbd\x9c>",
                                        "[e~[",
                                        NULL};

static void eog_add(mt_vocab *v, int32_t id) {
    if (id >= 0 && id < v->n_tokens) v->eog[id] = 1;
}

static void apply_special_rules(mt_vocab *v) {
    detect(v, &v->eot, EOT_NAMES);
    detect(v, &v->eom, EOM_NAMES);
    detect(v, &v->fim_pre, FIM_PRE_NAMES);
    detect(v, &v->fim_suf, FIM_SUF_NAMES);
    detect(v, &v->fim_mid, FIM_MID_NAMES);
    detect(v, &v->fim_pad, FIM_PAD_NAMES);
    detect(v, &v->fim_rep, FIM_REP_NAMES);
    detect(v, &v->fim_sep, FIM_SEP_NAMES);

    /* Control tokens named "...unused..." are unused. */
    for (int32_t i = 0; i < v->n_tokens; i++)
        if ((v->attr[i] & MT_ATTR_CONTROL) && strstr(mt_vocab_text(v, i), "unused"))
            v->attr[i] |= MT_ATTR_UNUSED;

    eog_add(v, v->fim_pad);
    eog_add(v, v->fim_rep);
    eog_add(v, v->fim_sep);
    for (const char *const *nm = EOG_NAMES; *nm; nm++) {
        int32_t t = find_text(v, *nm);
        if (t >= 0) {
            eog_add(v, t);
            make_control(v, t);
        }
    }
    /* gpt-oss: these are always rendered. */
    static const char *const ALWAYS_RENDER[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                "<|constrain|>", NULL};
    for (const char *const *nm = ALWAYS_RENDER; *nm; nm++) {
        int32_t t = find_text(v, *nm);
        if (t >= 0) v->attr[t] = MT_ATTR_USER_DEFINED;
    }
    eog_add(v, v->eos);
    eog_add(v, v->eot);
    eog_add(v, v->eom);

    /* o200k_harmony / solar-open: <|end|> is not an end of generation there. */
    int32_t ret = find_text(v, "<|return|>"), call = find_text(v, "<|call|>");
    int32_t calls = find_text(v, "<|calls|>"), flush = find_text(v, "<|flush|>");
    int32_t end = find_text(v, "<|end|>");
    bool has_call = (call >= 0 && v->eog[call]) || (calls >= 0 && v->eog[calls]);
    bool has_ret = ret >= 0 && v->eog[ret], has_flush = flush >= 0 && v->eog[flush];
    if (end >= 0 && v->eog[end] && ((has_ret && has_call) || (has_call && has_flush))) {
        v->eog[end] = 0;
        v->attr[end] = MT_ATTR_USER_DEFINED;
    }
    /* gemma4 / paddleocr: </s> is not an end of generation next to <|tool_response>. */
    int32_t tr = find_text(v, "<|tool_response>"), s = find_text(v, "</s>");
    if (tr >= 0 && v->eog[tr] && s >= 0 && v->eog[s]) {
        v->eog[s] = 0;
        v->attr[s] = MT_ATTR_NORMAL;
    }
}

/* ---------------------------------------------------------------- load */

mt_vocab *mt_vocab_load(const gguf_file *f, mt_error *err) {
    mt_error e2 = {{0}};
    mt_vocab *v = calloc(1, sizeof *v);
    if (!v || !(v->path = strdup(f->path))) {
        free(v);
        mt_error_set(err, "out of memory");
        return NULL;
    }
    v->bos = v->eos = v->eot = v->eom = v->unk = v->sep = v->pad = v->mask = -1;
    v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = -1;

    char *model = gguf_get_string(f, K_MODEL, &e2);
    if (!model) {
        if (e2.msg[0])
            mt_error_set(err, "%s", e2.msg);
        else
            mt_error_set(err, "%s: %s is missing; the file has no vocabulary", f->path, K_MODEL);
        goto fail;
    }
    if (strcmp(model, "gpt2") == 0) {
        v->type = MT_VOCAB_BPE;
    } else if (strcmp(model, "llama") == 0) {
        v->type = MT_VOCAB_SPM;
    } else {
        mt_error_set(err,
                     "%s: %s is '%.64s', which is not supported yet (supported: 'gpt2', byte-level"
                     " BPE, and 'llama', SentencePiece)",
                     f->path, K_MODEL, model);
        free(model);
        goto fail;
    }
    free(model);

    v->pre_name = gguf_get_string(f, K_PRE, &e2);
    if (!v->pre_name) {
        if (e2.msg[0]) {
            mt_error_set(err, "%s", e2.msg);
            goto fail;
        }
        v->pre_name = strdup("default"); /* llama.cpp's fallback, with a warning */
        if (!v->pre_name) goto oom;
    }
    if (v->type == MT_VOCAB_BPE) {
        mt_pretok_flags fl;
        v->pretok = mt_pretok_new(v->pre_name, &fl, err);
        if (!v->pretok) {
            mt_error_prefix(err, "%s: %s", f->path, K_PRE);
            goto fail;
        }
        v->ignore_merges = fl.ignore_merges;
        v->add_bos = fl.add_bos;
    } else {
        /* SentencePiece: no pre-tokenizer; BOS and a leading space by default. */
        v->add_bos = true;
        v->add_space_prefix = true;
    }
    if (read_flag(f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err)) goto fail;

    if (load_tokens(v, f, err) || load_types(v, f, err) || load_scores(v, f, err)) goto fail;
    if (v->type == MT_VOCAB_BPE) {
        if (load_merges(v, f, strcmp(v->pre_name, "kimi-k2") != 0, err)) goto fail;
    } else if (mt_strmap_init(&v->merge_map, 0)) {
        goto oom;
    }

    /* llama.cpp's default ids, each disabled when out of range. */
    if (v->type == MT_VOCAB_BPE) {
        if (v->n_tokens > 11) v->bos = v->eos = 11;
    } else {
        v->unk = 0;
        if (v->n_tokens > 1) v->bos = 1;
        if (v->n_tokens > 2) v->eos = 2;
    }
    if (load_special_ids(v, f, err)) goto fail;

    v->eog = calloc((size_t)v->n_tokens, 1);
    if (!v->eog) goto oom;
    apply_special_rules(v);
    if (mt_special_build(v, err) || mt_detok_build_pieces(v, err)) goto fail;
    return v;
oom:
    mt_error_set(err, "%s: out of memory while loading the vocabulary", f->path);
fail:
    mt_vocab_free(v);
    return NULL;
}

void mt_vocab_free(mt_vocab *v) {
    if (!v) return;
    free(v->path);
    free(v->scores);
    free(v->text_pool);
    free(v->text_off);
    free(v->text_len);
    free(v->attr);
    free(v->piece_pool);
    free(v->piece_off);
    free(v->piece_len);
    mt_strmap_free(&v->tok_map);
    free(v->merge_pool);
    mt_strmap_free(&v->merge_map);
    free(v->special);
    free(v->eog);
    free(v->pre_name);
    mt_pretok_free(v->pretok);
    free(v);
}

/* ---------------------------------------------------------------- queries */

int32_t mt_vocab_n_tokens(const mt_vocab *v) {
    return v->n_tokens;
}
int32_t mt_vocab_bos(const mt_vocab *v) {
    return v->bos;
}
int32_t mt_vocab_eos(const mt_vocab *v) {
    return v->eos;
}
bool mt_vocab_add_bos(const mt_vocab *v) {
    return v->add_bos;
}
bool mt_vocab_add_eos(const mt_vocab *v) {
    return v->add_eos;
}
const char *mt_vocab_pre_name(const mt_vocab *v) {
    return v->pre_name;
}

bool mt_vocab_is_eog(const mt_vocab *v, int32_t id) {
    return id >= 0 && id < v->n_tokens && v->eog[id];
}

bool mt_vocab_is_control(const mt_vocab *v, int32_t id) {
    return id >= 0 && id < v->n_tokens && (v->attr[id] & MT_ATTR_CONTROL);
}

const char *mt_vocab_token_text(const mt_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->n_tokens) return NULL;
    if (len) *len = v->text_len[id];
    return mt_vocab_text(v, id);
}

int32_t mt_vocab_find(const mt_vocab *v, const char *text, size_t len) {
    return mt_strmap_get(&v->tok_map, text, len);
}

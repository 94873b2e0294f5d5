/* vocab_write.c - writes tokenizer.* metadata into a GGUF being built:
 * a tiny byte-level vocabulary for synthetic test models, and a converter
 * from a Hugging Face tokenizer.json that produces the keys llama.cpp's
 * convert_hf_to_gguf.py writes for Qwen-style (gpt2 / byte-level BPE)
 * tokenizers.
 *
 * What the converter reproduces (get_vocab_base + gguf.SpecialVocab):
 *  - tokens in id order, ids missing from the vocabulary filled with
 *    "[PAD<id>]" of type UNUSED; vocabulary size = config.json's
 *    vocab_size when a config.json sits beside tokenizer.json, else the
 *    number of ids (max id + 1 when ids have gaps);
 *  - types: added tokens that are "special" or look special (<|...|>,
 *    <｜...｜>, <unused...>, <pad>, <mask>, ...) are CONTROL, other added
 *    tokens USER_DEFINED (with U+2581 turned into spaces), the rest NORMAL;
 *  - merges as "left right" strings; the newer [left, right] pair form is
 *    joined with a space after turning spaces inside a part into U+0120;
 *  - tokenizer_config.json beside it: add_bos/add_eos/add_sep flags,
 *    bos/eos/unk/sep/pad/mask token ids (looked up by content among the
 *    added tokens), the chat template (or chat_template.jinja);
 *  - config.json beside it: *_token_id values not already set.
 * Not reproduced: the TemplateProcessing / RobertaProcessing post-processor
 * heuristics and normalizer flags (Qwen tokenizers use neither), and the
 * encode/decode round trip of non-normalized added tokens (a no-op for
 * Qwen's added tokens). */
#include "vocab_internal.h"

#include "moontail/gguf.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- bytes vocab */

int32_t mt_vocab_write_bytes_with(struct gguf_writer *w, const char *pre, bool add_bos,
                                  const char *const *specials, int n) {
    return mt_vocab_write_bytes_typed(w, pre, add_bos, specials, NULL, n);
}

int32_t mt_vocab_write_bytes_typed(struct gguf_writer *w, const char *pre, bool add_bos,
                                   const char *const *specials, const bool *control, int n) {
    enum { MAX_SPECIALS = 64 };
    if (n < 0 || n > MAX_SPECIALS) abort(); /* a caller's bug */
    char bytes[256][3];
    const char *tokens[256 + MAX_SPECIALS];
    int32_t types[256 + MAX_SPECIALS];
    for (int b = 0; b < 256; b++) {
        int k;
        const char *e = mt_bytelevel_encode((uint8_t)b, &k);
        memcpy(bytes[b], e, (size_t)k);
        bytes[b][k] = 0;
        tokens[b] = bytes[b];
        types[b] = MT_TOKTYPE_NORMAL;
    }
    for (int i = 0; i < n; i++) {
        tokens[256 + i] = specials[i];
        types[256 + i] = !control || control[i] ? MT_TOKTYPE_CONTROL : MT_TOKTYPE_USER_DEFINED;
    }
    gguf_writer_set_string(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_string(w, "tokenizer.ggml.pre", pre ? pre : "default");
    gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", tokens, (size_t)(256 + n));
    gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types,
                          (size_t)(256 + n));
    gguf_writer_set_string_array(w, "tokenizer.ggml.merges", NULL, 0);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 256);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 256);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
    return 256 + n;
}

int32_t mt_vocab_write_bytes(struct gguf_writer *w, const char *pre, bool add_bos) {
    static const char *const specials[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    return mt_vocab_write_bytes_with(w, pre, add_bos, specials, 3);
}

/* ---------------------------------------------------------------- helpers */

/* Loads dir/name as JSON. Returns NULL when the file does not exist (no
 * error) or cannot be parsed (err filled, *bad set). */
static json_t *load_side_file(const char *dir, const char *name, bool *bad, mt_error *err) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s%s", dir, name) >= (int)sizeof p) {
        *bad = true;
        mt_error_set(err, "%s: the path is longer than %zu bytes; use a shorter directory", dir,
                     sizeof p - 1);
        return NULL;
    }
    if (access(p, F_OK) != 0) return NULL;
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    if (!j) {
        *bad = true;
        mt_error_set(err, "%s:%d: %s", p, je.line, je.text);
    }
    return j;
}

static char *read_text_file(const char *dir, const char *name) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s%s", dir, name) >= (int)sizeof p) return NULL;
    FILE *fp = fopen(p, "rb");
    if (!fp) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            char *b = realloc(buf, cap);
            if (!b) break;
            buf = b;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, fp);
        n += r;
        if (r == 0) break;
    }
    fclose(fp);
    if (buf) buf[n] = 0;
    return buf;
}

static bool starts_ends(const char *s, const char *a, const char *b) {
    size_t n = strlen(s), na = strlen(a), nb = strlen(b);
    return n >= na && n >= nb && memcmp(s, a, na) == 0 && memcmp(s + n - nb, b, nb) == 0;
}

/* convert_hf_to_gguf.py's does_token_look_special. */
static bool looks_special(const char *t) {
    return strcmp(t, "<pad>") == 0 || strcmp(t, "<mask>") == 0 || strcmp(t, "<2mass>") == 0 ||
           strcmp(t, "[@BOS@]") == 0 || starts_ends(t, "<|", "|>") ||
           starts_ends(t, "<\xef\xbd\x9c", "\xef\xbd\x9c>") || starts_ends(t, "<unused", ">");
}

/* Copy of s with every U+2581 replaced by a space. */
static char *unescape_spaces(const char *s) {
    char *o = malloc(strlen(s) + 1), *d = o;
    if (!o) return NULL;
    while (*s) {
        if (memcmp(s, "\xe2\x96\x81", 3) == 0) {
            *d++ = ' ';
            s += 3;
        } else {
            *d++ = *s++;
        }
    }
    *d = 0;
    return o;
}

/* "a b" from a [a, b] pair, spaces inside a part written as U+0120. */
static char *join_pair(const char *a, const char *b) {
    size_t n = 0;
    for (const char *p = a; *p; p++) n += *p == ' ' ? 2 : 1;
    for (const char *p = b; *p; p++) n += *p == ' ' ? 2 : 1;
    char *o = malloc(n + 2), *d = o;
    if (!o) return NULL;
    for (int part = 0; part < 2; part++) {
        for (const char *p = part ? b : a; *p; p++) {
            if (*p == ' ') {
                *d++ = (char)0xC4; /* U+0120 */
                *d++ = (char)0xA0;
            } else {
                *d++ = *p;
            }
        }
        if (part == 0) *d++ = ' ';
    }
    *d = 0;
    return o;
}

/* ---------------------------------------------------------------- converter */

typedef struct hf_conv {
    const char *path;
    int64_t n;
    const char **text; /* n; points into JSON or owned[] */
    char **owned;      /* n; strings we allocated */
    int32_t *type;     /* n */
    json_t *added;     /* added_tokens array (may be NULL) */
    int64_t ids[7];    /* bos eos unk sep pad cls mask; -1 unset */
} hf_conv;

static const char *const SPECIAL_TYPES[7] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
static const char *const SPECIAL_KEYS[7] = {
    "tokenizer.ggml.bos_token_id",     "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
    "tokenizer.ggml.padding_token_id", NULL, /* no GGUF key for cls */
    "tokenizer.ggml.mask_token_id"};

/* gguf.SpecialVocab._set_special_token: first setting wins, ids outside the
 * vocabulary are skipped. */
static int set_special(hf_conv *c, int t, json_int_t id, const char *src, mt_error *err) {
    if (id < 0)
        return mt_error_set(err, "%s: %s_token id %lld is negative", src, SPECIAL_TYPES[t],
                            (long long)id);
    if (c->ids[t] < 0 && id < c->n) c->ids[t] = id;
    return 0;
}

static int read_added(hf_conv *c, json_t *root, int64_t *max_id, mt_error *err) {
    c->added = json_object_get(root, "added_tokens");
    if (!c->added) return 0;
    if (!json_is_array(c->added))
        return mt_error_set(err, "%s: added_tokens is not an array", c->path);
    size_t i;
    json_t *a;
    json_array_foreach(c->added, i, a) {
        json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        json_t *special = json_object_get(a, "special");
        if (!json_is_object(a) || !json_is_integer(id) || !json_is_string(content) ||
            (special && !json_is_boolean(special)))
            return mt_error_set(err,
                                "%s: added_tokens[%zu] needs an integer id, a string content"
                                " and an optional boolean special",
                                c->path, i);
        json_int_t v = json_integer_value(id);
        if (v < 0 || v >= (1 << 28))
            return mt_error_set(err, "%s: added_tokens[%zu] has id %lld (must be 0 .. 2^28)",
                                c->path, i, (long long)v);
        if (json_string_length(content) == 0)
            return mt_error_set(err, "%s: added_tokens[%zu] has empty content", c->path, i);
        if (v > *max_id) *max_id = v;
    }
    return 0;
}

static int fill_tokens(hf_conv *c, json_t *vocab, mt_error *err) {
    c->text = calloc((size_t)c->n, sizeof *c->text);
    c->owned = calloc((size_t)c->n, sizeof *c->owned);
    c->type = calloc((size_t)c->n, sizeof *c->type);
    if (!c->text || !c->owned || !c->type) return mt_error_set(err, "out of memory");
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        int64_t id = json_integer_value(val);
        if (c->text[id])
            return mt_error_set(err, "%s: model.vocab gives id %lld to both '%s' and '%s'", c->path,
                                (long long)id, c->text[id], key);
        if (key[0] == 0)
            return mt_error_set(err, "%s: model.vocab has an empty token (id %lld)", c->path,
                                (long long)id);
        c->text[id] = key;
        c->type[id] = MT_TOKTYPE_NORMAL;
    }
    size_t i;
    json_t *a;
    if (c->added) json_array_foreach(c->added, i, a) {
            int64_t id = json_integer_value(json_object_get(a, "id"));
            const char *t = json_string_value(json_object_get(a, "content"));
            json_t *sp = json_object_get(a, "special");
            if (sp && json_is_true(sp)) {
                c->text[id] = t;
                c->type[id] = MT_TOKTYPE_CONTROL;
            } else if (looks_special(t)) {
                c->text[id] = t;
                c->type[id] = MT_TOKTYPE_CONTROL;
            } else {
                free(c->owned[id]);
                if (!(c->owned[id] = unescape_spaces(t))) return mt_error_set(err, "out of memory");
                c->text[id] = c->owned[id];
                c->type[id] = MT_TOKTYPE_USER_DEFINED;
            }
        }
    for (int64_t id = 0; id < c->n; id++) {
        if (c->text[id]) continue;
        char buf[32];
        snprintf(buf, sizeof buf, "[PAD%lld]", (long long)id);
        if (!(c->owned[id] = strdup(buf))) return mt_error_set(err, "out of memory");
        c->text[id] = c->owned[id];
        c->type[id] = MT_TOKTYPE_UNUSED;
    }
    return 0;
}

static int write_merges(gguf_writer *w, const hf_conv *c, json_t *merges, mt_error *err) {
    if (!merges) {
        gguf_writer_set_string_array(w, "tokenizer.ggml.merges", NULL, 0);
        return 0;
    }
    if (!json_is_array(merges))
        return mt_error_set(err, "%s: model.merges is not an array", c->path);
    size_t n = json_array_size(merges);
    char **m = calloc(n ? n : 1, sizeof *m);
    if (!m) return mt_error_set(err, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        json_t *e = json_array_get(merges, i);
        if (json_is_string(e)) {
            m[i] = strdup(json_string_value(e));
        } else if (json_is_array(e) && json_array_size(e) == 2 &&
                   json_is_string(json_array_get(e, 0)) && json_is_string(json_array_get(e, 1))) {
            m[i] = join_pair(json_string_value(json_array_get(e, 0)),
                             json_string_value(json_array_get(e, 1)));
        } else {
            rc = mt_error_set(err, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]",
                              c->path, i);
            break;
        }
        if (!m[i]) {
            rc = mt_error_set(err, "out of memory");
            break;
        }
        const char *sp = m[i][0] ? strchr(m[i] + 1, ' ') : NULL;
        if (!sp || sp[1] == 0)
            rc = mt_error_set(err, "%s: model.merges[%zu] ('%.40s') is not two parts", c->path, i,
                              m[i]);
    }
    if (rc == 0)
        gguf_writer_set_string_array(w, "tokenizer.ggml.merges", (const char *const *)m, n);
    for (size_t i = 0; i < n; i++) free(m[i]);
    free(m);
    return rc;
}

/* tokenizer_config.json: add_* flags, *_token contents, chat template. */
static int apply_tokenizer_config(gguf_writer *w, hf_conv *c, json_t *cfg, const char *dir,
                                  mt_error *err) {
    for (int t = 0; t < 7; t++) {
        char key[32];
        snprintf(key, sizeof key, "add_%s_token", SPECIAL_TYPES[t]);
        json_t *flag = json_object_get(cfg, key);
        if (json_is_boolean(flag) && (t == 0 || t == 1 || t == 3)) {
            char gk[64];
            snprintf(gk, sizeof gk, "tokenizer.ggml.add_%s_token", SPECIAL_TYPES[t]);
            gguf_writer_set_bool(w, gk, json_is_true(flag));
        }
        snprintf(key, sizeof key, "%s_token", SPECIAL_TYPES[t]);
        json_t *e = json_object_get(cfg, key);
        const char *content = NULL;
        if (json_is_string(e))
            content = json_string_value(e);
        else if (json_is_object(e) && json_is_string(json_object_get(e, "content")))
            content = json_string_value(json_object_get(e, "content"));
        if (!content || !c->added) continue;
        size_t i;
        json_t *a;
        json_array_foreach(c->added, i, a) {
            if (strcmp(json_string_value(json_object_get(a, "content")), content) == 0) {
                if (set_special(c, t, json_integer_value(json_object_get(a, "id")),
                                "tokenizer_config.json", err))
                    return -1;
                break;
            }
        }
    }
    json_t *tmpl = json_object_get(cfg, "chat_template");
    if (json_is_string(tmpl)) {
        gguf_writer_set_string(w, "tokenizer.chat_template", json_string_value(tmpl));
    } else if (json_is_array(tmpl)) {
        /* [{name, template}]: "default" is the main one, others are named. */
        size_t i;
        json_t *a;
        json_array_foreach(tmpl, i, a) {
            const char *name = json_string_value(json_object_get(a, "name"));
            const char *body = json_string_value(json_object_get(a, "template"));
            if (!name || !body || !name[0]) continue;
            if (strcmp(name, "default") == 0) {
                gguf_writer_set_string(w, "tokenizer.chat_template", body);
            } else {
                char key[128];
                int k = snprintf(key, sizeof key, "tokenizer.chat_template.");
                for (const char *p = name; *p && k < (int)sizeof key - 1; p++)
                    key[k++] = ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                                (*p >= '0' && *p <= '9'))
                                   ? *p
                                   : '_';
                key[k] = 0;
                gguf_writer_set_string(w, key, body);
            }
        }
    } else if (!tmpl) {
        char *j = read_text_file(dir, "chat_template.jinja");
        if (j) gguf_writer_set_string(w, "tokenizer.chat_template", j);
        free(j);
    }
    return 0;
}

static int apply_config(hf_conv *c, json_t *cfg, mt_error *err) {
    json_t *text_cfg = json_object_get(cfg, "text_config");
    for (int t = 0; t < 7; t++) {
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", SPECIAL_TYPES[t]);
        json_t *v = json_object_get(cfg, key);
        if (!v && json_is_object(text_cfg)) v = json_object_get(text_cfg, key);
        if (json_is_integer(v) && set_special(c, t, json_integer_value(v), "config.json", err))
            return -1;
    }
    return 0;
}

int32_t mt_vocab_write_hf_json(struct gguf_writer *w, const char *tokenizer_json_path,
                               const char *pre, mt_error *err) {
    hf_conv c = {.path = tokenizer_json_path, .ids = {-1, -1, -1, -1, -1, -1, -1}};
    json_t *root = NULL, *tcfg = NULL, *cfg = NULL;
    int32_t rc = -1;
    if (!pre || !pre[0]) {
        mt_error_set(err, "%s: a pre-tokenizer name is required (e.g. 'qwen2')",
                     tokenizer_json_path);
        return -1;
    }
    json_error_t je;
    root = json_load_file(tokenizer_json_path, 0, &je);
    if (!root) {
        mt_error_set(err, "%s:%d: %s", tokenizer_json_path, je.line, je.text);
        return -1;
    }
    char dir[4096];
    const char *slash = strrchr(tokenizer_json_path, '/');
    size_t dl = slash ? (size_t)(slash - tokenizer_json_path) + 1 : 0;
    if (dl >= sizeof dir) {
        mt_error_set(err, "%s: path too long", tokenizer_json_path);
        goto done;
    }
    memcpy(dir, tokenizer_json_path, dl);
    dir[dl] = 0;

    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) {
        mt_error_set(err, "%s: no 'model' object; not a tokenizer.json", c.path);
        goto done;
    }
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type || strcmp(type, "BPE") != 0) {
        mt_error_set(err, "%s: model.type is '%s'; only BPE tokenizers are supported", c.path,
                     type ? type : "(missing)");
        goto done;
    }
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab) || json_object_size(vocab) == 0) {
        mt_error_set(err, "%s: model.vocab is missing or empty", c.path);
        goto done;
    }
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (id < 0 || id >= (1 << 28)) {
            mt_error_set(err, "%s: model.vocab['%.40s'] is not an id in 0 .. 2^28", c.path, key);
            goto done;
        }
        if (id > max_id) max_id = id;
    }
    if (read_added(&c, root, &max_id, err)) goto done;

    bool bad = false;
    tcfg = load_side_file(dir, "tokenizer_config.json", &bad, err);
    if (!bad) cfg = load_side_file(dir, "config.json", &bad, err);
    if (bad) goto done;

    /* len(tokenizer.vocab) counts distinct ids; gaps make max id + 1 larger. */
    c.n = max_id + 1;
    json_t *vs = cfg ? json_object_get(cfg, "vocab_size") : NULL;
    if (json_is_integer(vs)) {
        if (json_integer_value(vs) <= max_id || json_integer_value(vs) >= (1 << 28)) {
            mt_error_set(err, "%sconfig.json: vocab_size %lld does not cover token id %lld", dir,
                         (long long)json_integer_value(vs), (long long)max_id);
            goto done;
        }
        c.n = json_integer_value(vs);
    }
    if (fill_tokens(&c, vocab, err)) goto done;

    gguf_writer_set_string(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_string(w, "tokenizer.ggml.pre", pre);
    gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", c.text, (uint64_t)c.n);
    gguf_writer_set_array(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, c.type, (uint64_t)c.n);
    if (write_merges(w, &c, json_object_get(model, "merges"), err)) goto done;
    if (tcfg && apply_tokenizer_config(w, &c, tcfg, dir, err)) goto done;
    if (cfg && apply_config(&c, cfg, err)) goto done;
    for (int t = 0; t < 7; t++)
        if (c.ids[t] >= 0 && SPECIAL_KEYS[t])
            gguf_writer_set_u32(w, SPECIAL_KEYS[t], (uint32_t)c.ids[t]);
    rc = (int32_t)c.n;
done:
    if (c.owned)
        for (int64_t i = 0; i < c.n; i++) free(c.owned[i]);
    free(c.owned);
    free(c.text);
    free(c.type);
    json_decref(root);
    json_decref(tcfg);
    json_decref(cfg);
    return rc;
}

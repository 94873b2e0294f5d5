/* tokenize.c - text -> token ids: the steps of llama.cpp's tokenizer
 * around the merge engines of tokenize_bpe.c.
 *
 *   1. BOS when add_special is set and the vocabulary's add_bos is on;
 *   2. special-token partition of the raw bytes (special_tokens.c);
 *   3. each raw fragment through the vocabulary's engine:
 *        gpt2:  lenient UTF-8, regex pre-tokens, byte-level BPE;
 *        llama: a space in front when add_space_prefix is on and the
 *               fragment starts the text or follows a special token, every
 *               space turned into U+2581, then SentencePiece merging;
 *   4. EOS when add_special is set and add_eos is on. */
#include "vocab_internal.h"

#include <stdlib.h>
#include <string.h>

/* SentencePiece: optional leading space, then ' ' -> U+2581. */
static int spm_raw(const mt_vocab *v, const char *text, size_t len, bool prefix, int32_t **ids,
                   size_t *n, size_t *cap, mt_error *err) {
    size_t spaces = prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    char *esc = malloc(len + 2 * spaces + 1);
    if (!esc) return mt_error_set(err, "out of memory tokenizing %zu bytes", len);
    size_t o = 0;
    if (prefix) {
        memcpy(esc, "\xe2\x96\x81", 3);
        o = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(esc + o, "\xe2\x96\x81", 3);
            o += 3;
        } else {
            esc[o++] = text[i];
        }
    }
    int rc = mt_spm_fragment(v, esc, o, ids, n, cap, err);
    free(esc);
    return rc;
}

static int64_t tokenize(const mt_vocab *v, const char *text, size_t len, bool add_special,
                        bool parse_special, const mt_text_span *plain, size_t n_plain,
                        int32_t **out, mt_error *err) {
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    mt_fragment *fr = NULL;
    *out = NULL;
    if (!text && len) return mt_error_set(err, "mt_tokenize: NULL text with length %zu", len);
    if (len > MT_TOKENIZE_MAX_BYTES)
        return mt_error_set(err, "mt_tokenize: text of %zu bytes is longer than the limit (%d)",
                            len, MT_TOKENIZE_MAX_BYTES);
    if (add_special && v->add_bos && mt_ids_push(&ids, &n, &cap, v->bos)) goto oom;
    int64_t nf = plain ? mt_special_partition_spans(v, text, len, plain, n_plain, &fr, err)
                       : mt_special_partition(v, text, len, parse_special, &fr, err);
    if (nf < 0) goto fail;
    bool prev_special = true; /* SPM: the text start counts as "after a special token" */
    for (int64_t i = 0; i < nf; i++) {
        if (fr[i].token >= 0) {
            if (mt_ids_push(&ids, &n, &cap, fr[i].token)) goto oom;
            prev_special = true;
            continue;
        }
        const char *t = text + fr[i].off;
        int rc =
            v->type == MT_VOCAB_SPM
                ? spm_raw(v, t, fr[i].len, v->add_space_prefix && prev_special, &ids, &n, &cap, err)
                : mt_bpe_fragment(v, t, fr[i].len, &ids, &n, &cap, err);
        if (rc) goto fail;
        prev_special = false;
    }
    if (add_special && v->add_eos && mt_ids_push(&ids, &n, &cap, v->eos)) goto oom;
    free(fr);
    if (!ids && !(ids = malloc(sizeof *ids))) goto oom; /* callers always free *out */
    *out = ids;
    return (int64_t)n;
oom:
    mt_error_set(err, "out of memory while tokenizing %zu bytes", len);
fail:
    free(fr);
    free(ids);
    return -1;
}

int64_t mt_tokenize(const mt_vocab *v, const char *text, size_t len, bool add_special,
                    bool parse_special, int32_t **out, mt_error *err) {
    return tokenize(v, text, len, add_special, parse_special, NULL, 0, out, err);
}

int64_t mt_tokenize_spans(const mt_vocab *v, const char *text, size_t len, bool add_special,
                          const mt_text_span *plain, size_t n_plain, int32_t **out, mt_error *err) {
    for (size_t i = 0; i < n_plain; i++)
        if (plain[i].off > len || plain[i].len > len - plain[i].off ||
            (i && plain[i].off < plain[i - 1].off + plain[i - 1].len)) {
            *out = NULL;
            return mt_error_set(err,
                                "mt_tokenize_spans: plain range %zu is out of order or past"
                                " the text",
                                i);
        }
    static const mt_text_span none[1] = {{0, 0}};
    return tokenize(v, text, len, add_special, true, n_plain ? plain : none, n_plain, out, err);
}

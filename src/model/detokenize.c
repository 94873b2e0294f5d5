/* detokenize.c - token ids -> bytes, one token at a time or as a stream of
 * complete UTF-8 characters.
 *
 * The bytes of each token are computed once at load (like llama.cpp's
 * token-to-piece cache, rendered with special = true):
 *   - control, unknown and user-defined tokens: their raw text;
 *   - normal tokens: gpt2: the text mapped back from the byte-level
 *     alphabet; llama (SentencePiece): the text with U+2581 as spaces;
 *     a character outside that alphabet (only in broken vocabularies)
 *     becomes "[UNK_BYTE_0x<hex>]" (llama.cpp also appends the whole token
 *     text there, which can blow up quadratically; we do not);
 *   - byte tokens "<0xHH>": that one byte;
 *   - unused and undefined tokens: nothing.
 * mt_token_to_bytes hides control and unknown tokens unless asked.
 *
 * The streaming detokenizer holds back the bytes of a character that is
 * not yet complete, and turns byte sequences that can never become valid
 * UTF-8 into U+FFFD, one per maximal invalid subpart (the WHATWG / Unicode
 * "substitution of maximal subparts" rule). */
#include "vocab_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- pieces */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Writes the piece of token id to dst (NULL: only measure); returns its size. */
static size_t build_piece(const mt_vocab *v, int32_t id, char *dst) {
    const char *t = mt_vocab_text(v, id);
    size_t tl = v->text_len[id];
    uint16_t a = v->attr[id];
    if (a & (MT_ATTR_UNKNOWN | MT_ATTR_CONTROL | MT_ATTR_USER_DEFINED)) {
        if (dst) memcpy(dst, t, tl);
        return tl;
    }
    if ((a & MT_ATTR_NORMAL) && v->type == MT_VOCAB_SPM) { /* U+2581 -> space */
        size_t n = 0;
        for (size_t i = 0; i < tl;) {
            if (tl - i >= 3 && memcmp(t + i, "\xe2\x96\x81", 3) == 0) {
                if (dst) dst[n] = ' ';
                n++;
                i += 3;
            } else {
                if (dst) dst[n] = t[i];
                n++;
                i++;
            }
        }
        return n;
    }
    if (a & MT_ATTR_NORMAL) {
        size_t n = 0;
        for (size_t i = 0; i < tl;) {
            uint32_t cp;
            i += mt_utf8_decode_lax((const unsigned char *)t + i, tl - i, &cp);
            int b = mt_bytelevel_decode(cp);
            if (b >= 0) {
                if (dst) dst[n] = (char)b;
                n++;
                continue;
            }
            char u[4], tmp[32];
            int k = mt_utf8_encode(cp, u), m = snprintf(tmp, sizeof tmp, "[UNK_BYTE_0x");
            for (int j = 0; j < k; j++)
                m += snprintf(tmp + m, sizeof tmp - (size_t)m, "%02x", (unsigned char)u[j]);
            m += snprintf(tmp + m, sizeof tmp - (size_t)m, "]");
            if (dst) memcpy(dst + n, tmp, (size_t)m);
            n += (size_t)m;
        }
        return n;
    }
    if (a & MT_ATTR_BYTE) {
        int hi = tl == 6 ? hexval(t[3]) : -1, lo = tl == 6 ? hexval(t[4]) : -1;
        if (tl == 6 && memcmp(t, "<0x", 3) == 0 && t[5] == '>' && hi >= 0 && lo >= 0) {
            if (dst) dst[0] = (char)(hi * 16 + lo);
            return 1;
        }
    }
    return 0;
}

int mt_detok_build_pieces(mt_vocab *v, mt_error *err) {
    size_t n = (size_t)v->n_tokens, total = 0;
    v->piece_off = malloc(n * sizeof *v->piece_off);
    v->piece_len = malloc(n * sizeof *v->piece_len);
    if (!v->piece_off || !v->piece_len) goto oom;
    for (size_t i = 0; i < n; i++) {
        size_t len = build_piece(v, (int32_t)i, NULL);
        if (len > UINT32_MAX)
            return mt_error_set(err, "%s: token %zu decodes too long", v->path, i);
        v->piece_off[i] = total;
        v->piece_len[i] = (uint32_t)len;
        total += len;
    }
    v->piece_pool = malloc(total ? total : 1);
    if (!v->piece_pool) goto oom;
    for (size_t i = 0; i < n; i++) build_piece(v, (int32_t)i, v->piece_pool + v->piece_off[i]);
    return 0;
oom:
    return mt_error_set(err, "%s: out of memory for the token byte cache", v->path);
}

/* Piece of id as it should be shown, or NULL for an invalid id. */
static const char *visible_piece(const mt_vocab *v, int32_t id, bool render_special, size_t *len) {
    if (id < 0 || id >= v->n_tokens) return NULL;
    if (!render_special && (v->attr[id] & (MT_ATTR_UNKNOWN | MT_ATTR_CONTROL))) {
        *len = 0;
        return "";
    }
    *len = v->piece_len[id];
    return v->piece_pool + v->piece_off[id];
}

int64_t mt_token_to_bytes(const mt_vocab *v, int32_t id, bool render_special, char *buf,
                          size_t cap) {
    size_t len;
    const char *p = visible_piece(v, id, render_special, &len);
    if (!p) return -1;
    if (buf && cap) memcpy(buf, p, len < cap ? len : cap);
    return (int64_t)len;
}

/* ---------------------------------------------------------------- streaming */

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* Length of the sequence led by b and the allowed range of its second byte;
 * 0 when b can never start a valid sequence. */
static int utf8_lead(unsigned b, unsigned *lo, unsigned *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b == 0xE0) *lo = 0xA0;
    if (b == 0xED) *hi = 0x9F;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b == 0xF0) *lo = 0x90;
    if (b == 0xF4) *hi = 0x8F;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

/* Converts c[0..n) to valid UTF-8 in out; an incomplete tail is left out and
 * its length returned in *tail. Returns the bytes written (<= 3n). */
static size_t utf8_clean(const unsigned char *c, size_t n, char *out, size_t *tail) {
    size_t i = 0, o = 0;
    *tail = 0;
    while (i < n) {
        unsigned b = c[i];
        if (b < 0x80) {
            out[o++] = (char)b;
            i++;
            continue;
        }
        unsigned lo, hi;
        int need = utf8_lead(b, &lo, &hi);
        if (need == 0) {
            memcpy(out + o, REPLACEMENT, 3);
            o += 3;
            i++;
            continue;
        }
        int j = 1;
        bool bad = false;
        while (j < need) {
            if (i + (size_t)j >= n) break;
            unsigned x = c[i + (size_t)j];
            if (x < (j == 1 ? lo : 0x80) || x > (j == 1 ? hi : 0xBF)) {
                bad = true;
                break;
            }
            j++;
        }
        if (bad) { /* maximal subpart c[i, i+j) -> one U+FFFD */
            memcpy(out + o, REPLACEMENT, 3);
            o += 3;
            i += (size_t)j;
        } else if (j < need) { /* ran out of bytes: wait for more */
            *tail = n - i;
            break;
        } else {
            memcpy(out + o, c + i, (size_t)need);
            o += (size_t)need;
            i += (size_t)need;
        }
    }
    return o;
}

void mt_detok_init(mt_detok *d, const mt_vocab *v, bool render_special) {
    memset(d, 0, sizeof *d);
    d->vocab = v;
    d->render_special = render_special;
}

int64_t mt_detok_push(mt_detok *d, int32_t id, char *out, size_t cap) {
    size_t len;
    const char *p = visible_piece(d->vocab, id, d->render_special, &len);
    if (!p || !out || cap == 0) return -1;
    size_t n = d->n_pending + len;
    unsigned char small_in[256];
    char small_out[3 * sizeof small_in];
    unsigned char *in = n <= sizeof small_in ? small_in : malloc(n);
    char *tmp = n <= sizeof small_in ? small_out : malloc(3 * n);
    int64_t rc = -1;
    if (!in || !tmp) goto done;
    memcpy(in, d->pending, d->n_pending);
    memcpy(in + d->n_pending, p, len);
    size_t tail;
    size_t o = utf8_clean(in, n, tmp, &tail);
    if (o + 1 > cap) goto done; /* state unchanged: the caller may retry with more room */
    memcpy(out, tmp, o);
    out[o] = 0;
    memcpy(d->pending, in + n - tail, tail); /* tail <= 3 */
    d->n_pending = tail;
    rc = (int64_t)o;
done:
    if (in != small_in) free(in);
    if (tmp != small_out) free(tmp);
    return rc;
}

int64_t mt_detok_flush(mt_detok *d, char *out, size_t cap) {
    size_t o = d->n_pending ? 3 : 0;
    if (!out || o + 1 > cap) return -1;
    memcpy(out, REPLACEMENT, o);
    out[o] = 0;
    d->n_pending = 0;
    return (int64_t)o;
}

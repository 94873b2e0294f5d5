/* special_tokens.c - finds the literal text of special tokens in raw text
 * before anything else is tokenized.
 *
 * As in llama.cpp (tokenizer_st_partition): the special tokens are the
 * tokens marked control, user-defined or unknown; they are tried one after
 * another, longest text first, and each one splits every remaining raw
 * fragment at all of its (non-overlapping, leftmost-first) occurrences. A
 * control or unknown token only counts when parse_special is set (chat
 * prompts); user-defined tokens always count. Tokens of equal length are
 * tried in increasing id order (llama.cpp leaves that order unspecified; it
 * only matters for equal-length tokens that overlap in the text).
 *
 * Cost: one memmem pass over the raw fragments per special token, i.e.
 * O(n_special * text length) in the worst case. */
#include "vocab_internal.h"
#include "moontail/compat.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- build */

typedef struct len_id {
    uint32_t len;
    int32_t id;
} len_id;

static int cmp_len_desc(const void *a, const void *b) {
    const len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

int mt_special_build(mt_vocab *v, mt_error *err) {
    const uint16_t mask = MT_ATTR_CONTROL | MT_ATTR_USER_DEFINED | MT_ATTR_UNKNOWN;
    int32_t n = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (v->attr[i] & mask) n++;
    len_id *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    v->special = malloc((size_t)(n ? n : 1) * sizeof *v->special);
    if (!tmp || !v->special) {
        free(tmp);
        return mt_error_set(err, "%s: out of memory for the special-token list", v->path);
    }
    n = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (v->attr[i] & mask) tmp[n++] = (len_id){v->text_len[i], i};
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_len_desc);
    for (int32_t i = 0; i < n; i++) v->special[i] = tmp[i].id;
    v->n_special = n;
    free(tmp);
    return 0;
}

/* ---------------------------------------------------------------- partition */

typedef struct frag_vec {
    mt_fragment *v;
    size_t n, cap;
} frag_vec;

static int frag_push(frag_vec *f, int32_t token, size_t off, size_t len) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 16;
        mt_fragment *p = realloc(f->v, cap * sizeof *p);
        if (!p) return -1;
        f->v = p;
        f->cap = cap;
    }
    f->v[f->n++] = (mt_fragment){token, off, len};
    return 0;
}

/* Whether [at, at+n) overlaps one of the sorted ranges plain[0..np). */
static bool overlaps_plain(const mt_text_span *plain, size_t np, size_t at, size_t n) {
    size_t lo = 0, hi = np; /* the first range that ends after at */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (plain[mid].off + plain[mid].len <= at)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < np && plain[lo].off < at + n;
}

static int64_t partition(const mt_vocab *v, const char *text, size_t len, bool parse_special,
                         const mt_text_span *plain, size_t n_plain, mt_fragment **out,
                         mt_error *err) {
    frag_vec cur = {0}, next = {0};
    *out = NULL;
    if (len == 0) return 0;
    if (frag_push(&cur, -1, 0, len)) goto oom;
    size_t raw_left = len; /* bytes still in raw fragments */
    for (int32_t k = 0; k < v->n_special && raw_left > 0; k++) {
        int32_t id = v->special[k];
        if (!parse_special && (v->attr[id] & (MT_ATTR_CONTROL | MT_ATTR_UNKNOWN))) continue;
        const char *tt = mt_vocab_text(v, id);
        size_t tl = v->text_len[id];
        if (tl > raw_left) continue;
        next.n = 0;
        bool changed = false;
        for (size_t i = 0; i < cur.n; i++) {
            mt_fragment fr = cur.v[i];
            if (fr.token >= 0 || fr.len < tl) {
                if (frag_push(&next, fr.token, fr.off, fr.len)) goto oom;
                continue;
            }
            size_t pos = fr.off, end = fr.off + fr.len;
            const bool control = v->attr[id] & (MT_ATTR_CONTROL | MT_ATTR_UNKNOWN);
            size_t from = pos; /* where the search goes on (past a match in plain text) */
            for (;;) {
                const char *m = mt_memmem(text + from, end - from, tt, tl);
                if (!m) break;
                size_t at = (size_t)(m - text);
                if (control && n_plain && overlaps_plain(plain, n_plain, at, tl)) {
                    from = at + 1;
                    continue;
                }
                if (at > pos && frag_push(&next, -1, pos, at - pos)) goto oom;
                if (frag_push(&next, id, at, tl)) goto oom;
                raw_left -= tl;
                pos = from = at + tl;
                changed = true;
            }
            if (end > pos && frag_push(&next, -1, pos, end - pos)) goto oom;
        }
        if (changed) {
            frag_vec t = cur;
            cur = next;
            next = t;
        }
    }
    free(next.v);
    *out = cur.v;
    return (int64_t)cur.n;
oom:
    free(cur.v);
    free(next.v);
    return mt_error_set(err, "out of memory while looking for special tokens");
}

int64_t mt_special_partition(const mt_vocab *v, const char *text, size_t len, bool parse_special,
                             mt_fragment **out, mt_error *err) {
    return partition(v, text, len, parse_special, NULL, 0, out, err);
}

int64_t mt_special_partition_spans(const mt_vocab *v, const char *text, size_t len,
                                   const mt_text_span *plain, size_t n_plain, mt_fragment **out,
                                   mt_error *err) {
    return partition(v, text, len, true, plain, n_plain, out, err);
}

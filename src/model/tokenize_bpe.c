/* tokenize_bpe.c - the merge engines: byte-level BPE (gpt2 vocabularies)
 * and SentencePiece BPE (llama vocabularies), each on one raw fragment of
 * text that contains no special tokens (tokenize.c drives them).
 *
 * Both start from a row of symbols and repeatedly merge the best adjacent
 * pair; a binary heap holds every mergeable pair keyed by (priority,
 * position), stale entries (a side changed since the pair was queued) are
 * skipped, and each merge queues the new symbol's two neighbour pairs. That
 * is O(n log n) per piece and equals "repeatedly merge the best pair,
 * leftmost first".
 *
 * Byte-level BPE (llama.cpp's llm_tokenizer_bpe_session): the fragment is
 * decoded leniently (invalid bytes -> U+FFFD, byte_level.c) and split into
 * pre-tokens (pretokenize.c). Each pre-token's bytes are mapped to the
 * byte-level alphabet, one symbol per byte; a pair is mergeable when
 * "left right" is in the merge list, priority = its rank (lower first).
 * With ignore_merges (llama3 family) a pre-token that is itself a token is
 * emitted whole. A final symbol that is not a token is emitted through the
 * single-character tokens of its bytes (characters without one are
 * dropped, as in llama.cpp).
 *
 * SentencePiece (llm_tokenizer_spm_session): one symbol per UTF-8
 * character (length from the lead byte, no validation); a pair is mergeable
 * when its concatenation is a token, priority = that token's score (higher
 * first). A final symbol that is not a token is emitted as byte tokens
 * <0xXX> (or, failing that, the one-byte token). llama.cpp splits such a
 * symbol back along its recorded merges first, but every merged symbol is a
 * token by construction, so only unmerged characters reach that point. */
#include "vocab_internal.h"

#include <stdlib.h>
#include <string.h>

/* Appends id to a growing id array (tokenize.c uses it too). */
int mt_ids_push(int32_t **ids, size_t *n, size_t *cap, int32_t id) {
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        int32_t *p = realloc(*ids, c * sizeof *p);
        if (!p) return -1;
        *ids = p;
        *cap = c;
    }
    (*ids)[(*n)++] = id;
    return 0;
}

/* ---------------------------------------------------------------- scratch */

typedef struct symbol {
    uint32_t start, len; /* span in the piece text; len 0 = merged away */
    int32_t prev, next;
} symbol;

typedef struct bigram {
    double key; /* lower merges first: BPE rank, or minus the SPM score */
    int32_t left, right;
    uint32_t llen, rlen; /* lengths when queued, to detect stale entries */
} bigram;

typedef struct merge_work {
    const mt_vocab *v;
    bool spm;
    const char *text; /* the piece the symbols index (mapped[] for BPE) */
    char *mapped;     /* BPE: the pre-token in the byte-level alphabet (<= 2 bytes per byte) */
    symbol *sym;
    size_t cap; /* symbols the arrays can hold */
    bigram *heap;
    size_t n_heap, cap_heap;
} merge_work;

static int work_reserve(merge_work *w, size_t n) {
    if (n <= w->cap) return 0;
    if (n > (size_t)INT32_MAX / 2) return -1;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n) cap *= 2;
    char *m = realloc(w->mapped, 2 * cap);
    if (!m) return -1;
    w->mapped = m;
    symbol *s = realloc(w->sym, cap * sizeof *s);
    if (!s) return -1;
    w->sym = s;
    w->cap = cap;
    return 0;
}

static void work_free(merge_work *w) {
    free(w->mapped);
    free(w->sym);
    free(w->heap);
}

static bool bigram_less(const bigram *a, const bigram *b) {
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

static int heap_push(merge_work *w, bigram b) {
    if (w->n_heap == w->cap_heap) {
        size_t cap = w->cap_heap ? 2 * w->cap_heap : 64;
        bigram *h = realloc(w->heap, cap * sizeof *h);
        if (!h) return -1;
        w->heap = h;
        w->cap_heap = cap;
    }
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_less(&b, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = b;
    return 0;
}

static bigram heap_pop(merge_work *w) {
    bigram top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!bigram_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0) w->heap[i] = last;
    return top;
}

/* ---------------------------------------------------------------- merging */

/* Queues the pair (l, r) if it can merge. */
static int try_pair(merge_work *w, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return 0;
    const symbol *a = &w->sym[l], *b = &w->sym[r];
    double key;
    if (w->spm) {
        int32_t id = mt_strmap_get(&w->v->tok_map, w->text + a->start, (size_t)a->len + b->len);
        if (id < 0) return 0;
        key = -(double)w->v->scores[id];
    } else {
        int32_t rank = mt_strmap_get_pair(&w->v->merge_map, w->text + a->start, a->len,
                                          w->text + b->start, b->len);
        if (rank < 0) return 0;
        key = rank;
    }
    return heap_push(w, (bigram){key, l, r, a->len, b->len});
}

/* Merges the n symbols in w->sym until no pair can merge. */
static int run_merges(merge_work *w, size_t n) {
    w->n_heap = 0;
    for (size_t i = 1; i < n; i++)
        if (try_pair(w, (int32_t)i - 1, (int32_t)i)) return -1;
    while (w->n_heap > 0) {
        bigram b = heap_pop(w);
        symbol *l = &w->sym[b.left], *r = &w->sym[b.right];
        if (l->len != b.llen || r->len != b.rlen || l->next != b.right) continue; /* stale */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) w->sym[r->next].prev = b.left;
        if (try_pair(w, l->prev, b.left) || try_pair(w, b.left, l->next)) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- BPE */

/* Emits the token for s[0..len), or the single-character tokens of its bytes. */
static int emit_bpe_symbol(const mt_vocab *v, const char *s, size_t len, int32_t **ids, size_t *n,
                           size_t *cap) {
    int32_t id = mt_strmap_get(&v->tok_map, s, len);
    if (id >= 0) return mt_ids_push(ids, n, cap, id);
    for (size_t i = 0; i < len; i++) {
        int32_t b = mt_strmap_get(&v->tok_map, s + i, 1);
        if (b >= 0 && mt_ids_push(ids, n, cap, b)) return -1;
    }
    return 0;
}

static int bpe_piece(merge_work *w, const char *bytes, size_t n, int32_t **ids, size_t *nid,
                     size_t *cap) {
    const mt_vocab *v = w->v;
    if (work_reserve(w, n)) return -1;
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int k;
        const char *e = mt_bytelevel_encode((uint8_t)bytes[i], &k);
        w->sym[i] = (symbol){m, (uint32_t)k, (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1};
        memcpy(w->mapped + m, e, (size_t)k);
        m += (uint32_t)k;
    }
    w->text = w->mapped;
    if (v->ignore_merges) {
        int32_t id = mt_strmap_get(&v->tok_map, w->mapped, m);
        if (id >= 0) return mt_ids_push(ids, nid, cap, id);
    }
    if (run_merges(w, n)) return -1;
    for (int32_t i = 0; i >= 0; i = w->sym[i].next)
        if (emit_bpe_symbol(v, w->mapped + w->sym[i].start, w->sym[i].len, ids, nid, cap))
            return -1;
    return 0;
}

int mt_bpe_fragment(const mt_vocab *v, const char *text, size_t len, int32_t **ids, size_t *n,
                    size_t *cap, mt_error *err) {
    char *clean = NULL, *rx = NULL;
    size_t clen = 0;
    if (mt_utf8_sanitize(text, len, &clean, &clen, &rx))
        return mt_error_set(err, "out of memory tokenizing %zu bytes", len);
    mt_span *pieces = NULL;
    int64_t np = mt_pretok_split(v->pretok, rx, clen, &pieces, err);
    int rc = np < 0 ? -1 : 0;
    merge_work w = {.v = v, .spm = false};
    for (int64_t i = 0; rc == 0 && i < np; i++)
        if (bpe_piece(&w, clean + pieces[i].off, pieces[i].len, ids, n, cap))
            rc = mt_error_set(err, "out of memory during BPE of a %zu-byte pre-token",
                              pieces[i].len);
    work_free(&w);
    free(pieces);
    if (rx != clean) free(rx);
    free(clean);
    return rc;
}

/* ---------------------------------------------------------------- SentencePiece */

/* Byte length of the UTF-8 character led by b, as llama.cpp's
 * unicode_len_utf8 computes it (from the top four bits, no validation). */
static size_t spm_char_len(unsigned char b) {
    static const unsigned char len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[b >> 4];
}

static int emit_spm_symbol(const mt_vocab *v, const char *s, size_t len, int32_t **ids, size_t *n,
                           size_t *cap, mt_error *err) {
    int32_t id = mt_strmap_get(&v->tok_map, s, len);
    if (id >= 0) return mt_ids_push(ids, n, cap, id);
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char name[6] = {'<', '0', 'x', hex[c >> 4], hex[c & 15], '>'};
        int32_t b = mt_strmap_get(&v->tok_map, name, 6);
        if (b < 0) b = mt_strmap_get(&v->tok_map, s + i, 1);
        if (b < 0)
            return mt_error_set(err,
                                "%s: byte 0x%02X of the input has no token (neither <0x%02X> nor"
                                " the byte itself is in the vocabulary)",
                                v->path, c, c);
        if (mt_ids_push(ids, n, cap, b)) return mt_error_set(err, "out of memory");
    }
    return 0;
}

int mt_spm_fragment(const mt_vocab *v, const char *text, size_t len, int32_t **ids, size_t *n,
                    size_t *cap, mt_error *err) {
    merge_work w = {.v = v, .spm = true, .text = text};
    size_t ns = 0;
    for (size_t off = 0; off < len; ns++) off += spm_char_len((unsigned char)text[off]);
    int rc = 0;
    if (work_reserve(&w, ns)) {
        rc = mt_error_set(err, "out of memory for %zu symbols", ns);
        goto done;
    }
    size_t off = 0;
    for (size_t i = 0; i < ns; i++) {
        size_t k = spm_char_len((unsigned char)text[off]);
        if (k > len - off) k = len - off;
        w.sym[i] =
            (symbol){(uint32_t)off, (uint32_t)k, (int32_t)i - 1, i + 1 < ns ? (int32_t)i + 1 : -1};
        off += k;
    }
    if (ns == 0) goto done;
    if (run_merges(&w, ns)) {
        rc = mt_error_set(err, "out of memory during SentencePiece merging");
        goto done;
    }
    for (int32_t i = 0; rc == 0 && i >= 0; i = w.sym[i].next)
        rc = emit_spm_symbol(v, text + w.sym[i].start, w.sym[i].len, ids, n, cap, err);
done:
    work_free(&w);
    return rc;
}

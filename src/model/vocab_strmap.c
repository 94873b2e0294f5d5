/* vocab_strmap.c - a small open-addressing hash map from byte strings to
 * int32 values, used by the tokenizer for "token text -> id" and for
 * "merge pair -> rank" (151k+ entries each, looked up for every symbol pair
 * during BPE, so it has to be O(1) and allocation-free on look-up).
 *
 * Keys are not copied: they point into pools the vocabulary owns. Pair
 * look-ups hash "a", " ", "b" as one stream, so a merge stored as the
 * string "a b" is found without building that string. */
#include "vocab_internal.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a, 64 bit, continued from h over n bytes. */
static uint64_t fnv_more(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

#define FNV_SEED 1469598103934665603ull

int mt_strmap_init(mt_strmap *m, uint64_t max_n) {
    memset(m, 0, sizeof *m);
    if (max_n >= UINT32_MAX / 2) return -1;
    m->cap = 16;
    while (m->cap < 2 * max_n) m->cap *= 2;
    m->slots = calloc(m->cap, sizeof *m->slots);
    m->entries = malloc((max_n ? max_n : 1) * sizeof *m->entries);
    m->max_n = max_n;
    if (!m->slots || !m->entries) {
        mt_strmap_free(m);
        return -1;
    }
    return 0;
}

void mt_strmap_free(mt_strmap *m) {
    free(m->slots);
    free(m->entries);
    memset(m, 0, sizeof *m);
}

int mt_strmap_put(mt_strmap *m, const char *key, uint32_t len, int32_t value, int32_t *old) {
    uint64_t h = fnv_more(FNV_SEED, key, len);
    uint64_t mask = m->cap - 1;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        uint32_t s = m->slots[i];
        if (s == 0) {
            if (m->n >= m->max_n) return -1;
            mt_strmap_entry *e = &m->entries[m->n];
            e->key = key;
            e->len = len;
            e->value = value;
            e->hash = h;
            m->slots[i] = (uint32_t)(++m->n);
            return 1;
        }
        const mt_strmap_entry *e = &m->entries[s - 1];
        if (e->hash == h && e->len == len && memcmp(e->key, key, len) == 0) {
            if (old) *old = e->value;
            return 0;
        }
    }
}

int32_t mt_strmap_get(const mt_strmap *m, const char *key, size_t len) {
    if (!m->slots || len > UINT32_MAX) return -1;
    uint64_t h = fnv_more(FNV_SEED, key, len);
    uint64_t mask = m->cap - 1;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        uint32_t s = m->slots[i];
        if (s == 0) return -1;
        const mt_strmap_entry *e = &m->entries[s - 1];
        if (e->hash == h && e->len == len && memcmp(e->key, key, len) == 0) return e->value;
    }
}

int32_t mt_strmap_get_pair(const mt_strmap *m, const char *a, size_t alen, const char *b,
                           size_t blen) {
    if (!m->slots || alen + blen + 1 > UINT32_MAX) return -1;
    uint64_t h = fnv_more(fnv_more(fnv_more(FNV_SEED, a, alen), " ", 1), b, blen);
    uint64_t mask = m->cap - 1;
    size_t len = alen + 1 + blen;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        uint32_t s = m->slots[i];
        if (s == 0) return -1;
        const mt_strmap_entry *e = &m->entries[s - 1];
        if (e->hash == h && e->len == len && memcmp(e->key, a, alen) == 0 && e->key[alen] == ' ' &&
            memcmp(e->key + alen + 1, b, blen) == 0)
            return e->value;
    }
}

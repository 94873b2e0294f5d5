/* stop_text.c - the text of a generation and its stop strings (stop_text.h). */
#include "stop_text.h"

#include <stdlib.h>
#include <string.h>

bool mt_stop_text_add(mt_stop_text *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = 2 * (t->len + n + 1) + 256;
        char *p = realloc(t->p, cap);
        if (!p) return false;
        t->p = p, t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = 0;
    return true;
}

long mt_stop_text_find(const mt_stop_text *t, size_t *safe) {
    *safe = t->len;
    if (t->len == t->sent || t->n_stop == 0) return -1; /* nothing new (t->p may be NULL) */
    long best = -1;
    for (int i = 0; i < t->n_stop; i++) {
        if (!t->stop[i][0]) continue; /* an empty one would stop everything at once */
        const char *hit = memmem(t->p + t->sent, t->len - t->sent, t->stop[i], strlen(t->stop[i]));
        if (hit && (best < 0 || hit - t->p < best)) best = hit - t->p;
    }
    if (best >= 0) return best;
    size_t keep = 0; /* bytes at the end that could begin a stop string */
    for (int i = 0; i < t->n_stop; i++) {
        size_t sl = strlen(t->stop[i]);
        if (sl == 0) continue;
        for (size_t k = sl - 1; k > keep; k--) {
            if (k <= t->len - t->sent && memcmp(t->p + t->len - k, t->stop[i], k) == 0) {
                keep = k;
                break;
            }
        }
    }
    *safe = t->len - keep;
    return -1;
}

void mt_stop_text_free(mt_stop_text *t) {
    free(t->p);
    t->p = NULL;
    t->len = t->cap = t->sent = 0;
}

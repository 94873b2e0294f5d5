/* stop_text.c - the text of a generation and its stop strings (stop_text.h). */
#include "stop_text.h"

#include <string.h>

bool mt_stop_text_add(mt_stop_text *t, const char *s, size_t n) {
    return mt_text_buf_add(&t->text, s, n);
}

long mt_stop_text_find(const mt_stop_text *t, size_t *safe) {
    const char *p = t->text.p;
    const size_t len = t->text.len;
    *safe = len;
    if (len == t->sent || t->n_stop == 0) return -1; /* nothing new (p may be NULL) */
    long best = -1;
    for (int i = 0; i < t->n_stop; i++) {
        if (!t->stop[i][0]) continue; /* an empty one would stop everything at once */
        const char *hit = memmem(p + t->sent, len - t->sent, t->stop[i], strlen(t->stop[i]));
        if (hit && (best < 0 || hit - p < best)) best = hit - p;
    }
    if (best >= 0) return best;
    size_t keep = 0; /* bytes at the end that could begin a stop string */
    for (int i = 0; i < t->n_stop; i++) {
        size_t sl = strlen(t->stop[i]);
        if (sl == 0) continue;
        for (size_t k = sl - 1; k > keep; k--) {
            if (k <= len - t->sent && memcmp(p + len - k, t->stop[i], k) == 0) {
                keep = k;
                break;
            }
        }
    }
    *safe = len - keep;
    return -1;
}

void mt_stop_text_free(mt_stop_text *t) {
    mt_text_buf_free(&t->text);
    t->sent = 0;
}

/* text_buf.c - a growing NUL-terminated text (text_buf.h). */
#include "moontail/text_buf.h"

#include <stdlib.h>
#include <string.h>

bool mt_text_buf_add(mt_text_buf *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        const size_t cap = 2 * (t->len + n + 1) + 256;
        char *p = realloc(t->p, cap);
        if (!p) return false;
        t->p = p, t->cap = cap;
    }
    if (n) memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = 0;
    return true;
}

void mt_text_buf_drop(mt_text_buf *t, size_t n) {
    if (n == 0) return;
    memmove(t->p, t->p + n, t->len - n + 1); /* the NUL too */
    t->len -= n;
}

void mt_text_buf_free(mt_text_buf *t) {
    free(t->p);
    *t = (mt_text_buf){0};
}

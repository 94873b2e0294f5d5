/* compat.c - compat.h: glibc's own calls where the C library has them, our
 * own versions where it does not (Windows' msvcrt). */
#include "moontail/compat.h"

#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#include <malloc.h>
#endif

void *mt_aligned_alloc(size_t align, size_t size) {
#ifdef _WIN32
    return _aligned_malloc(size ? size : 1, align);
#else
    /* C17 asks for size to be a multiple of align */
    return aligned_alloc(align, (size + align - 1) / align * align);
#endif
}

void mt_aligned_free(void *p) {
#ifdef _WIN32
    _aligned_free(p);
#else
    free(p);
#endif
}

char *mt_strndup(const char *s, size_t n) {
    size_t len = strnlen(s, n);
    char *d = malloc(len + 1);
    if (!d) return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

void *mt_memmem(const void *hay, size_t hn, const void *needle, size_t nn) {
#ifdef __GLIBC__
    return memmem(hay, hn, needle, nn);
#else
    if (nn == 0) return (void *)hay;
    if (hn < nn) return NULL;
    const unsigned char *h = hay, *e = h + (hn - nn), *nd = needle;
    for (; (h = memchr(h, nd[0], (size_t)(e - h) + 1)); h++)
        if (memcmp(h, nd, nn) == 0) return (void *)h;
    return NULL;
#endif
}

ssize_t mt_getline(char **line, size_t *cap, FILE *f) {
#ifdef __GLIBC__
    return getline(line, cap, f);
#else
    size_t n = 0;
    int c;
    while ((c = fgetc(f)) != EOF) {
        if (n + 2 > *cap || !*line) {
            size_t want = *cap < 64 ? 128 : *cap * 2;
            char *p = realloc(*line, want);
            if (!p) return -1;
            *line = p, *cap = want;
        }
        (*line)[n++] = (char)c;
        if (c == '\n') break;
    }
    if (n == 0) return -1;
    (*line)[n] = '\0';
    return (ssize_t)n;
#endif
}

#ifdef __GLIBC__
void mt_qsort_r(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *, void *),
                void *arg) {
    qsort_r(base, n, size, cmp, arg);
}
#else
/* msvcrt's qsort_s passes the argument first */
struct qsort_ctx {
    int (*cmp)(const void *, const void *, void *);
    void *arg;
};

static int qsort_tramp(void *c, const void *a, const void *b) {
    const struct qsort_ctx *q = c;
    return q->cmp(a, b, q->arg);
}

void mt_qsort_r(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *, void *),
                void *arg) {
    struct qsort_ctx q = {cmp, arg};
    qsort_s(base, n, size, qsort_tramp, &q);
}
#endif

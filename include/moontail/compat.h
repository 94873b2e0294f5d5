/* compat.h - the C library calls that glibc has and Windows' C runtime
 * (msvcrt, what mingw-w64 links) lacks or spells differently. Code of every
 * layer calls these instead of the glibc names; on glibc they are glibc's
 * own, elsewhere compat.c implements them. */
#ifndef MOONTAIL_COMPAT_H
#define MOONTAIL_COMPAT_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* size bytes aligned to align (a power of two, a multiple of sizeof(void *)),
 * or NULL; freed only with mt_aligned_free (Windows keeps such blocks apart
 * from malloc's). */
void *mt_aligned_alloc(size_t align, size_t size);
void mt_aligned_free(void *p);
/* A copy of at most n bytes of s, NUL-terminated; NULL when out of memory. */
char *mt_strndup(const char *s, size_t n);
/* The first occurrence of needle (nn bytes) in hay (hn bytes), or NULL; an
 * empty needle is found at hay. */
void *mt_memmem(const void *hay, size_t hn, const void *needle, size_t nn);
/* One line of f, with its '\n', into *line (grown as needed): its length,
 * or -1 at end of file or on an error (as getline(3)). */
ssize_t mt_getline(char **line, size_t *cap, FILE *f);
/* qsort with an argument passed to cmp, in glibc's argument order. */
void mt_qsort_r(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *, void *),
                void *arg);

#endif

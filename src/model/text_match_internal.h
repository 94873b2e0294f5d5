/* text_match_internal.h - private to the model layer (not part of the public
 * API in include/moontail): looking for several strings at once in text that
 * arrives in pieces. The generation loop's stop strings (generate.c) and a
 * thinking reply's markers (reasoning.c) are found this way: where the first
 * of them occurs, or else how many bytes at the end must wait for the next
 * piece because they may begin one. An empty string is no string: it never
 * matches (a reasoning format leaves unused markers empty). */
#ifndef MOONTAIL_TEXT_MATCH_INTERNAL_H
#define MOONTAIL_TEXT_MATCH_INTERNAL_H

#include <stddef.h>

/* The offset of the first occurrence in p[0..n) of any of strs[0..n_strs), or -1; *which
 * (may be NULL) gets the index of the string found there (the lowest index on a tie). */
long mt_text_match_first(const char *p, size_t n, const char *const *strs, int n_strs, int *which);

/* How many bytes at the end of p[0..n) are the beginning of one of strs (the longest such
 * tail; a whole string there is mt_text_match_first's to find, not a beginning). */
size_t mt_text_match_tail(const char *p, size_t n, const char *const *strs, int n_strs);

#endif

/* text_match.c - the first of several strings in a text, and the tail of the
 * text that may begin one (text_match_internal.h). */
#include "text_match_internal.h"
#include "moontail/compat.h"

#include <string.h>

long mt_text_match_first(const char *p, size_t n, const char *const *strs, int n_strs, int *which) {
    long best = -1;
    for (int i = 0; i < n_strs; i++) {
        const size_t sl = strlen(strs[i]);
        const char *hit = sl && n ? mt_memmem(p, n, strs[i], sl) : NULL;
        if (hit && (best < 0 || hit - p < best)) {
            best = hit - p;
            if (which) *which = i;
        }
    }
    return best;
}

size_t mt_text_match_tail(const char *p, size_t n, const char *const *strs, int n_strs) {
    size_t keep = 0;
    for (int i = 0; i < n_strs; i++) {
        const size_t sl = strlen(strs[i]);
        for (size_t k = sl ? sl - 1 : 0; k > keep; k--) {
            if (k <= n && memcmp(p + n - k, strs[i], k) == 0) {
                keep = k;
                break;
            }
        }
    }
    return keep;
}

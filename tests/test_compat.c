/* test_compat.c - compat.h's stand-ins for the glibc calls Windows' C runtime
 * lacks, checked against plain loops written here: mt_memmem finds what a
 * byte-by-byte search finds (random haystacks over a small alphabet, so that
 * near misses are common), mt_strndup copies and terminates, mt_getline reads
 * lines with and without a final newline and a long one, mt_qsort_r passes
 * its argument and sorts, mt_aligned_alloc aligns. Built for Linux and, with
 * ./dev win, for Windows, where the own versions run. */
#include "check.h"
#include "moontail/compat.h"

#include <stdint.h>

static const unsigned char *naive_find(const unsigned char *h, size_t hn, const unsigned char *n,
                                       size_t nn) {
    if (nn == 0) return h;
    for (size_t i = 0; i + nn <= hn; i++)
        if (memcmp(h + i, n, nn) == 0) return h + i;
    return NULL;
}

static uint32_t rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(*s >> 33);
}

static void test_memmem(void) {
    uint64_t s = 7;
    unsigned char h[200], n[8];
    int found = 0;
    for (int trial = 0; trial < 20000; trial++) {
        size_t hn = rnd(&s) % sizeof h, nn = rnd(&s) % sizeof n;
        for (size_t i = 0; i < hn; i++) h[i] = (unsigned char)('a' + rnd(&s) % 3);
        for (size_t i = 0; i < nn; i++) n[i] = (unsigned char)('a' + rnd(&s) % 3);
        const unsigned char *want = naive_find(h, hn, n, nn);
        const unsigned char *got = mt_memmem(h, hn, n, nn);
        found += want != NULL;
        CHECK(got == want, "mt_memmem: trial %d (hay %zu, needle %zu): offset %td, want %td", trial,
              hn, nn, got ? got - h : -1, want ? want - h : -1);
    }
    CHECK(found > 1000 && found < 19000, "the trials found %d needles: too few misses or hits",
          found);
}

static void test_strndup(void) {
    char *a = mt_strndup("moontail", 4), *b = mt_strndup("ab", 10), *c = mt_strndup("", 0);
    CHECK(a && strcmp(a, "moon") == 0, "mt_strndup(\"moontail\", 4) = %s", a ? a : "(null)");
    CHECK(b && strcmp(b, "ab") == 0, "mt_strndup(\"ab\", 10) = %s", b ? b : "(null)");
    CHECK(c && c[0] == '\0', "mt_strndup(\"\", 0)");
    free(a), free(b), free(c);
}

static void test_getline(void) {
    FILE *f = tmpfile();
    CHECK(f != NULL, "tmpfile");
    if (!f) return;
    char longline[5000];
    memset(longline, 'x', sizeof longline - 1);
    longline[sizeof longline - 1] = '\0';
    fprintf(f, "one\n\n%s\nlast", longline);
    rewind(f);
    char *line = NULL;
    size_t cap = 0;
    const char *want[] = {"one\n", "\n", NULL, "last"};
    for (int i = 0; i < 4; i++) {
        ssize_t n = mt_getline(&line, &cap, f);
        if (i == 2) {
            CHECK(n == (ssize_t)sizeof longline && line[n - 1] == '\n' &&
                      strncmp(line, longline, sizeof longline - 1) == 0,
                  "mt_getline: the 4,999-character line came back as %zd bytes", n);
        } else {
            CHECK(n == (ssize_t)strlen(want[i]) && strcmp(line, want[i]) == 0,
                  "mt_getline: line %d: %zd bytes '%s'", i, n, n > 0 ? line : "");
        }
    }
    CHECK(mt_getline(&line, &cap, f) == -1, "mt_getline at the end of the file");
    free(line);
    fclose(f);
}

static int by_key_desc(const void *a, const void *b, void *arg) {
    const int *key = arg;
    int x = key[*(const int *)a], y = key[*(const int *)b];
    return (x < y) - (x > y);
}

static void test_qsort_r(void) {
    int key[100], idx[100];
    uint64_t s = 3;
    for (int i = 0; i < 100; i++) key[i] = (int)(rnd(&s) % 1000), idx[i] = i;
    mt_qsort_r(idx, 100, sizeof idx[0], by_key_desc, key);
    int ok = 1;
    for (int i = 1; i < 100; i++) ok &= key[idx[i - 1]] >= key[idx[i]];
    int seen[100] = {0};
    for (int i = 0; i < 100; i++) seen[idx[i]]++;
    for (int i = 0; i < 100; i++) ok &= seen[i] == 1;
    CHECK(ok, "mt_qsort_r did not sort 100 indices by their keys, descending");
}

static void test_aligned(void) {
    for (size_t align = 16; align <= 4096; align *= 4) {
        for (size_t size = 1; size < 100000; size = size * 7 + 3) {
            unsigned char *p = mt_aligned_alloc(align, size);
            CHECK(p && (uintptr_t)p % align == 0, "mt_aligned_alloc(%zu, %zu) = %p", align, size,
                  (void *)p);
            if (p) memset(p, 0xa5, size), mt_aligned_free(p);
        }
    }
}

int main(void) {
    test_memmem();
    test_strndup();
    test_getline();
    test_qsort_r();
    test_aligned();
    return check_report("test_compat");
}

/* check.h - the tiny assertion harness shared by the C tests: CHECK counts
 * failures and prints where; a test's main returns check_report(). */
#ifndef MOONTAIL_TEST_CHECK_H
#define MOONTAIL_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int check_failures;
static int check_count;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        check_count++;                                                                             \
        if (!(cond)) {                                                                             \
            if (++check_failures <= 50) {                                                          \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                               \
                fprintf(stderr, __VA_ARGS__);                                                      \
                fputc('\n', stderr);                                                               \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static inline int check_report(const char *name) {
    printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? 1 : 0;
}

/* A scratch file path unique to this process. */
static inline const char *check_tmp(const char *suffix) {
    static char buf[8][256];
    static int k;
    const char *dir = getenv("TMPDIR");
    snprintf(buf[k & 7], sizeof buf[0], "%s/mt-test-%d-%d%s", dir && *dir ? dir : "/tmp",
             (int)getpid(), k, suffix);
    return buf[k++ & 7];
}

#endif

/* error.c - formatting of mt_error messages (see error.h). */
#include "moontail/error.h"

#include <stdio.h>
#include <string.h>

int mt_error_vset(mt_error *err, const char *fmt, va_list ap) {
    if (err) vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    return -1;
}

int mt_error_set(mt_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mt_error_vset(err, fmt, ap);
    va_end(ap);
    return -1;
}

void mt_error_prefix(mt_error *err, const char *fmt, ...) {
    if (!err) return;
    char prefix[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* Truncation of an over-long message is acceptable; keep the prefix. */
    size_t n = strlen(prefix);
    if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
    memcpy(err->msg, prefix, n);
    memcpy(err->msg + n, ": ", 2);
    size_t room = sizeof err->msg - n - 3;
    size_t m = strnlen(old, room);
    memcpy(err->msg + n + 2, old, m);
    err->msg[n + 2 + m] = 0;
}

/* error.h - one small error record that every fallible MoonTail call fills in.
 *
 * Functions that can fail take an `mt_error *` (which may be NULL) and return
 * a negative value or NULL on failure. The message names the thing, the
 * problem and, where possible, the fix, e.g.
 *   "model.gguf: tensor 'blk.0.attn_q.weight' data [4096, 8192) lies past end of file (6000 bytes);
 * the file is truncated" */
#ifndef MOONTAIL_ERROR_H
#define MOONTAIL_ERROR_H

#include <stdarg.h>

typedef struct mt_error {
    char msg[512];
} mt_error;

/* Sets err->msg from a printf-style format; returns -1 so callers can write
 * `return mt_error_set(err, ...)`. A NULL err is allowed. */
int mt_error_set(mt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int mt_error_vset(mt_error *err, const char *fmt, va_list ap);

/* Prepends "prefix: " to an existing message (used to add context as an
 * error travels up, e.g. the file name). */
void mt_error_prefix(mt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

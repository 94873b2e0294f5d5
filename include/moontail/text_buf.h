/* text_buf.h - a text that grows as pieces of it arrive, kept NUL-terminated.
 * Generated text is collected this way wherever it is kept: the generation
 * loop's text not yet handed out, `run --json`'s text, the shell's answer,
 * the API's reply when it is not streamed. */
#ifndef MOONTAIL_TEXT_BUF_H
#define MOONTAIL_TEXT_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct mt_text_buf {
    char *p; /* len bytes and a NUL; NULL until the first mt_text_buf_add */
    size_t len, cap;
} mt_text_buf;

/* Appends s[0..n); false when out of memory (the text is unchanged). */
bool mt_text_buf_add(mt_text_buf *t, const char *s, size_t n);
/* Drops the first n bytes (n <= len): the rest moves to the front. */
void mt_text_buf_drop(mt_text_buf *t, size_t n);
/* Frees the bytes; the text is empty again. */
void mt_text_buf_free(mt_text_buf *t);

#endif

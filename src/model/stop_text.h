/* stop_text.h - generated text as the generation loop (generate.c) hands it
 * out: where stop strings are looked for, and how much of it may go out
 * without showing a piece of one. */
#ifndef MOONTAIL_STOP_TEXT_H
#define MOONTAIL_STOP_TEXT_H

#include "moontail/text_buf.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct mt_stop_text {
    mt_text_buf text;
    size_t sent; /* text.p[0..sent) was handed out */
    const char *const *stop;
    int n_stop;
} mt_stop_text;

/* Appends n bytes; false when out of memory. */
bool mt_stop_text_add(mt_stop_text *t, const char *s, size_t n);

/* Looks for a stop string in the text not yet handed out (text handed out never holds the
 * start of one). Returns where the first one starts, or -1; then *safe receives how far
 * text may go out: up to the longest tail that begins some stop string, which the next
 * token may complete. */
long mt_stop_text_find(const mt_stop_text *t, size_t *safe);

void mt_stop_text_free(mt_stop_text *t);

#endif

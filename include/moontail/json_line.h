/* json_line.h - a JSON value as one line of text: compact, ending in a
 * newline. The log's JSON lines and the HTTP server's JSON bodies are such
 * lines. */
#ifndef MOONTAIL_JSON_LINE_H
#define MOONTAIL_JSON_LINE_H

#include <jansson.h>
#include <stddef.h>

/* json_dumps(j, flags | JSON_COMPACT) with "\n" appended; *len (may be NULL)
 * gets its length. NULL when out of memory. The caller frees it. */
char *mt_json_line(const json_t *j, size_t flags, size_t *len);

#endif

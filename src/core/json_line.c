/* json_line.c - a JSON value as one compact line ending in a newline
 * (json_line.h). */
#include "moontail/json_line.h"

#include <stdlib.h>
#include <string.h>

char *mt_json_line(const json_t *j, size_t flags, size_t *len) {
    char *s = json_dumps(j, flags | JSON_COMPACT);
    if (!s) return NULL;
    size_t n = strlen(s);
    char *line = realloc(s, n + 2);
    if (!line) {
        free(s);
        return NULL;
    }
    line[n] = '\n';
    line[n + 1] = 0;
    if (len) *len = n + 1;
    return line;
}

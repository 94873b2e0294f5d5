/* win-deps smoke check: jansson parses a document and dumps it back, keys sorted. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    const char *in = "{\"b\": [1, 2.5, \"x\\u00e9\"], \"a\": null, \"c\": {\"d\": true}}";
    const char *want = "{\"a\":null,\"b\":[1,2.5,\"x\\u00E9\"],\"c\":{\"d\":true}}";
    json_error_t e;
    json_t *j = json_loads(in, 0, &e);
    if (!j) {
        printf("json_loads: %s at line %d\n", e.text, e.line);
        return 1;
    }
    char *out = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENSURE_ASCII);
    int good = out && strcmp(out, want) == 0;
    printf("%s: jansson %s: %s\n", good ? "ok" : "FAIL", jansson_version_str(),
           out ? out : "(null)");
    free(out);
    json_decref(j);
    return good ? 0 : 1;
}

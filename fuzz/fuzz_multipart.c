/* fuzz_multipart.c - libFuzzer target for the multipart/form-data reader of serve's
 * POST /v1/files (api_multipart_parse, src/api/api_multipart.c). The input is the
 * Content-Type header's value up to the first '\n', then the body (an exact-size copy, not
 * NUL-terminated, so a read past its end is caught). Beyond "no crash" it checks:
 *   - a refusal has a message;
 *   - an accepted form has 1 .. API_MULTIPART_MAX_PARTS parts whose names, filenames,
 *     content types and data lie inside the input, in order and without overlap, names
 *     distinct, and no part's data holds the delimiter (CRLF "--" boundary);
 *   - written again in the reader's canonical form (one Content-Disposition, the
 *     Content-Type when there was one, CRLFs) the parts are read back the same. */
#include "../src/api/api_multipart.h"
#include "fuzz_target.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool inside(const char *p, size_t n, const char *lo, const char *hi) {
    return p >= lo && p + n <= hi;
}

static void add(char **buf, size_t *len, const void *p, size_t n) {
    *buf = realloc(*buf, *len + n + 1);
    if (!*buf) abort(); /* a fixture's allocation, not a finding */
    memcpy(*buf + *len, p, n);
    *len += n;
}

static void adds(char **buf, size_t *len, const char *s) {
    add(buf, len, s, strlen(s));
}

/* The parts written canonically with boundary b; malloc'd, *len its size. */
static char *rewrite(const api_part *parts, int n, const char *b, size_t *len) {
    char *out = NULL;
    *len = 0;
    for (int i = 0; i < n; i++) {
        adds(&out, len, "--");
        adds(&out, len, b);
        adds(&out, len, "\r\nContent-Disposition: form-data; name=\"");
        add(&out, len, parts[i].name, parts[i].name_len);
        adds(&out, len, "\"");
        if (parts[i].has_filename) {
            adds(&out, len, "; filename=\"");
            add(&out, len, parts[i].filename, parts[i].filename_len);
            adds(&out, len, "\"");
        }
        adds(&out, len, "\r\n");
        if (parts[i].has_content_type) {
            adds(&out, len, "Content-Type: ");
            add(&out, len, parts[i].content_type, parts[i].content_type_len);
            adds(&out, len, "\r\n");
        }
        adds(&out, len, "\r\n");
        add(&out, len, parts[i].data, parts[i].len);
        adds(&out, len, "\r\n");
    }
    adds(&out, len, "--");
    adds(&out, len, b);
    adds(&out, len, "--\r\n");
    return out;
}

static bool same(const char *a, size_t an, const char *b, size_t bn) {
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nl = memchr(data, '\n', size);
    if (!nl) return 0;
    size_t ct_len = (size_t)(nl - data), len = size - ct_len - 1;
    char *ct = malloc(ct_len + 1);
    char *body = malloc(len ? len : 1);
    if (!ct || !body) abort(); /* a fixture's allocation, not a finding */
    memcpy(ct, data, ct_len);
    ct[ct_len] = 0;
    memcpy(body, nl + 1, len);
    api_part parts[API_MULTIPART_MAX_PARTS];
    mt_error err = {{0}};
    int n = api_multipart_parse(ct, body, len, parts, API_MULTIPART_MAX_PARTS, &err);
    if (n < 0) {
        if (!err.msg[0]) abort();
        goto out;
    }
    if (n < 1 || n > API_MULTIPART_MAX_PARTS) abort();
    /* the boundary is what the body starts with: "--" B CRLF */
    const char *crlf = memmem(body, len, "\r\n", 2);
    if (!crlf || crlf - body < 3 || crlf - body > 72) abort();
    char b[80], delim[84];
    size_t bn = (size_t)(crlf - body - 2);
    memcpy(b, body + 2, bn);
    b[bn] = 0;
    snprintf(delim, sizeof delim, "\r\n--%s", b);
    const char *lo = body, *hi = body + len, *prev_end = body;
    for (int i = 0; i < n; i++) {
        const api_part *p = &parts[i];
        if (!inside(p->name, p->name_len, lo, hi) || !inside(p->data, p->len, lo, hi) ||
            (p->has_filename && !inside(p->filename, p->filename_len, lo, hi)) ||
            (p->has_content_type && !inside(p->content_type, p->content_type_len, lo, hi)))
            abort();
        if (p->name < prev_end || p->data < p->name) abort();
        if (memmem(p->data, p->len, delim, strlen(delim))) abort();
        prev_end = p->data + p->len;
        for (int j = 0; j < i; j++)
            if (same(parts[j].name, parts[j].name_len, p->name, p->name_len)) abort();
    }
    size_t rlen;
    char *again = rewrite(parts, n, b, &rlen);
    char ct2[120];
    snprintf(ct2, sizeof ct2, "multipart/form-data; boundary=\"%s\"", b);
    api_part back[API_MULTIPART_MAX_PARTS];
    int n2 = api_multipart_parse(ct2, again, rlen, back, API_MULTIPART_MAX_PARTS, &err);
    if (n2 != n) abort();
    for (int i = 0; i < n; i++)
        if (!same(back[i].name, back[i].name_len, parts[i].name, parts[i].name_len) ||
            !same(back[i].data, back[i].len, parts[i].data, parts[i].len) ||
            back[i].has_filename != parts[i].has_filename ||
            !same(back[i].filename, back[i].filename_len, parts[i].filename,
                  parts[i].filename_len) ||
            back[i].has_content_type != parts[i].has_content_type ||
            !same(back[i].content_type, back[i].content_type_len, parts[i].content_type,
                  parts[i].content_type_len))
            abort();
    free(again);
out:
    free(ct);
    free(body);
    return 0;
}

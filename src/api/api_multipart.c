/* api_multipart.c - the strict multipart/form-data reader of POST /v1/files
 * (api_multipart.h): the boundary from the Content-Type, then the parts with their
 * Content-Disposition and Content-Type, refusing anything the header does not list. */
#include "api_multipart.h"
#include "moontail/compat.h"

#include <string.h>
#include <strings.h>

#define MAX_BOUNDARY    70
#define MAX_HEADER_LINE 1000

/* ---- the boundary ------------------------------------------------------------------------- */

static bool bchar(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           strchr("'()+_,-./:=? ", c) != NULL;
}

static const char *skip_ows(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p;
}

static bool prefix_ci(const char *p, const char *end, const char *word) {
    size_t n = strlen(word);
    return (size_t)(end - p) >= n && strncasecmp(p, word, n) == 0;
}

/* The boundary of a Content-Type value into b[] (NUL-terminated). */
static int boundary_of(const char *ct, char b[MAX_BOUNDARY + 1], mt_error *err) {
    if (!ct)
        return mt_error_set(err, "the request has no Content-Type; send the file as"
                                 " multipart/form-data");
    const char *p = ct, *end = ct + strlen(ct);
    if (!prefix_ci(p, end, "multipart/form-data"))
        return mt_error_set(err,
                            "Content-Type is '%.80s', not multipart/form-data; send the file as"
                            " a form (the OpenAI clients do)",
                            ct);
    p = skip_ows(p + strlen("multipart/form-data"), end);
    if (p == end || *p != ';') return mt_error_set(err, "Content-Type has no boundary parameter");
    p = skip_ows(p + 1, end);
    if (!prefix_ci(p, end, "boundary="))
        return mt_error_set(err, "Content-Type: the only parameter allowed is boundary=");
    p += strlen("boundary=");
    size_t n = 0;
    if (p < end && *p == '"') {
        const char *q = memchr(p + 1, '"', (size_t)(end - p - 1));
        if (!q) return mt_error_set(err, "Content-Type: the boundary's quote is not closed");
        n = (size_t)(q - p - 1);
        if (n > MAX_BOUNDARY) goto bad_length;
        memcpy(b, p + 1, n);
        p = q + 1;
    } else {
        while (p + n < end && p[n] != ' ' && p[n] != '\t' && p[n] != ';') n++;
        if (n > MAX_BOUNDARY) goto bad_length;
        memcpy(b, p, n);
        p += n;
    }
    b[n] = 0;
    if (skip_ows(p, end) != end)
        return mt_error_set(err, "Content-Type: unexpected text after the boundary");
    if (n == 0) goto bad_length;
    for (size_t i = 0; i < n; i++)
        if (!bchar(b[i]))
            return mt_error_set(err,
                                "Content-Type: the boundary holds a character not allowed"
                                " (byte 0x%02x)",
                                (unsigned)(unsigned char)b[i]);
    if (b[n - 1] == ' ') return mt_error_set(err, "Content-Type: the boundary ends in a space");
    return 0;
bad_length:
    return mt_error_set(err, "Content-Type: the boundary must have 1 to %d characters",
                        MAX_BOUNDARY);
}

/* ---- one part's headers ------------------------------------------------------------------- */

/* A quoted-string at *pp (no escapes) into v/vn; *pp moves past it. */
static int quoted(const char **pp, const char *end, const char **v, size_t *vn, int part,
                  const char *param, mt_error *err) {
    const char *p = *pp;
    if (p == end || *p != '"')
        return mt_error_set(err, "part %d: %s= must be a quoted string", part, param);
    const char *q = p + 1;
    while (q < end && *q != '"') {
        if (*q == '\r' || *q == '\n' || *q == 0)
            return mt_error_set(err, "part %d: %s holds a control character", part, param);
        q++;
    }
    if (q == end) return mt_error_set(err, "part %d: the quote of %s is not closed", part, param);
    *v = p + 1;
    *vn = (size_t)(q - p - 1);
    *pp = q + 1;
    return 0;
}

static int disposition(api_part *pt, const char *p, const char *end, int part, mt_error *err) {
    if (!prefix_ci(p, end, "form-data"))
        return mt_error_set(err, "part %d: Content-Disposition must be form-data", part);
    p += strlen("form-data");
    bool has_name = false;
    while ((p = skip_ows(p, end)) < end) {
        if (*p != ';')
            return mt_error_set(err,
                                "part %d: Content-Disposition: ';' expected between"
                                " parameters",
                                part);
        p = skip_ows(p + 1, end);
        if (prefix_ci(p, end, "name=")) {
            if (has_name)
                return mt_error_set(err, "part %d: Content-Disposition gives name twice", part);
            p += 5;
            if (quoted(&p, end, &pt->name, &pt->name_len, part, "name", err)) return -1;
            has_name = true;
        } else if (prefix_ci(p, end, "filename=")) {
            if (pt->has_filename)
                return mt_error_set(err, "part %d: Content-Disposition gives filename twice", part);
            p += 9;
            if (quoted(&p, end, &pt->filename, &pt->filename_len, part, "filename", err)) return -1;
            pt->has_filename = true;
        } else {
            return mt_error_set(err,
                                "part %d: Content-Disposition: only name= and filename="
                                " are allowed",
                                part);
        }
    }
    if (!has_name) return mt_error_set(err, "part %d: Content-Disposition has no name=", part);
    return 0;
}

/* The headers of part (1-based) from *pp up to and past the empty line. */
static int headers(api_part *pt, const char **pp, const char *end, int part, mt_error *err) {
    const char *p = *pp;
    bool has_disp = false;
    for (int lines = 0;; lines++) {
        const char *eol = NULL;
        for (const char *q = p; q + 1 < end && q - p <= MAX_HEADER_LINE; q++)
            if (q[0] == '\r' && q[1] == '\n') {
                eol = q;
                break;
            }
        if (!eol)
            return mt_error_set(err,
                                "part %d: a header line is not ended by CRLF within %d"
                                " bytes",
                                part, MAX_HEADER_LINE);
        if (eol == p) { /* the empty line */
            if (lines == 0) return mt_error_set(err, "part %d has no headers", part);
            break;
        }
        if (memchr(p, '\n', (size_t)(eol - p)) || memchr(p, 0, (size_t)(eol - p)))
            return mt_error_set(err, "part %d: a header holds a bare LF or a NUL", part);
        if (prefix_ci(p, eol, "Content-Disposition:")) {
            if (has_disp) return mt_error_set(err, "part %d: Content-Disposition twice", part);
            if (disposition(pt, skip_ows(p + 20, eol), eol, part, err)) return -1;
            has_disp = true;
        } else if (prefix_ci(p, eol, "Content-Type:")) {
            if (pt->has_content_type) return mt_error_set(err, "part %d: Content-Type twice", part);
            const char *v = skip_ows(p + 13, eol);
            pt->content_type = v;
            pt->content_type_len = (size_t)(eol - v);
            pt->has_content_type = true;
        } else {
            const char *colon = memchr(p, ':', (size_t)(eol - p));
            int n = colon ? (int)(colon - p) : (int)(eol - p);
            return mt_error_set(err,
                                "part %d: header '%.*s' is not allowed; a part has"
                                " Content-Disposition and Content-Type only",
                                part, n > 60 ? 60 : n, p);
        }
        p = eol + 2;
    }
    if (!has_disp) return mt_error_set(err, "part %d has no Content-Disposition", part);
    *pp = p + 2;
    return 0;
}

/* ---- the body ----------------------------------------------------------------------------- */

int api_multipart_parse(const char *content_type, const char *body, size_t len, api_part *parts,
                        int max_parts, mt_error *err) {
    char b[MAX_BOUNDARY + 1];
    if (boundary_of(content_type, b, err)) return -1;
    const size_t bn = strlen(b);
    char delim[MAX_BOUNDARY + 5]; /* CRLF "--" B */
    memcpy(delim, "\r\n--", 4);
    memcpy(delim + 4, b, bn);
    const size_t dn = bn + 4;
    const char *p = body, *end = body + len;
    /* the first delimiter has no CRLF before it: the body starts with it */
    if (len < dn - 2 || memcmp(p, delim + 2, dn - 2) != 0)
        return mt_error_set(err, "the body does not begin with the boundary (--%s)", b);
    p += dn - 2;
    int n = 0;
    for (;;) {
        if (end - p >= 2 && p[0] == '-' && p[1] == '-') { /* the close delimiter */
            p += 2;
            if (p == end || (end - p == 2 && p[0] == '\r' && p[1] == '\n')) break;
            return mt_error_set(err,
                                "%zu bytes after the closing boundary; nothing may follow"
                                " it",
                                (size_t)(end - p));
        }
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
            return mt_error_set(err, "part %d: the boundary is not followed by CRLF", n + 1);
        p += 2;
        if (n == max_parts)
            return mt_error_set(err, "more than %d parts; a file upload has file and purpose",
                                max_parts);
        api_part *pt = &parts[n];
        memset(pt, 0, sizeof *pt);
        if (headers(pt, &p, end, n + 1, err)) return -1;
        const char *d = mt_memmem(p, (size_t)(end - p), delim, dn);
        if (!d) return mt_error_set(err, "part %d is not ended by the boundary", n + 1);
        pt->data = p;
        pt->len = (size_t)(d - p);
        for (int i = 0; i < n; i++)
            if (parts[i].name_len == pt->name_len &&
                memcmp(parts[i].name, pt->name, pt->name_len) == 0)
                return mt_error_set(err, "parts %d and %d have the same name '%.*s'", i + 1, n + 1,
                                    (int)(pt->name_len > 60 ? 60 : pt->name_len), pt->name);
        n++;
        p = d + dn;
    }
    if (n == 0) return mt_error_set(err, "the form has no parts");
    return n;
}

const api_part *api_multipart_find(const api_part *parts, int n, const char *name) {
    size_t len = strlen(name);
    for (int i = 0; i < n; i++)
        if (parts[i].name_len == len && memcmp(parts[i].name, name, len) == 0) return &parts[i];
    return NULL;
}

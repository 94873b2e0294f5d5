/* api_multipart.h - a strict reader of multipart/form-data bodies (RFC 7578 over RFC 2046),
 * as the OpenAI clients send a file to POST /v1/files. Not a public API.
 *
 * What is accepted, and nothing else:
 *   Content-Type: multipart/form-data; boundary=B      (B: 1-70 of RFC 2046's bchars, not
 *                                                       ending in a space; may be quoted)
 *   body  = "--" B CRLF part *(CRLF "--" B CRLF part) CRLF "--" B "--" [CRLF]
 *   part  = 1*header CRLF data          (no preamble, no epilogue beyond one CRLF)
 *   header = "Content-Disposition:" OWS "form-data" 1*(OWS ";" OWS param)
 *          | "Content-Type:" OWS value  (header names in any case, each at most once)
 *   param = ("name" | "filename") "=" quoted-string   (no escapes, no CR, LF or NUL; each
 *                                                      at most once; name required)
 * At most API_MULTIPART_MAX_PARTS parts, header lines of at most 1000 bytes, part names
 * distinct. The data of a part is every byte up to the CRLF before the next delimiter. */
#ifndef MOONTAIL_API_MULTIPART_H
#define MOONTAIL_API_MULTIPART_H

#include "moontail/error.h"

#include <stdbool.h>
#include <stddef.h>

#define API_MULTIPART_MAX_PARTS 16

/* Views into the body (valid while it is). */
typedef struct api_part {
    const char *name, *filename, *content_type; /* not NUL-terminated: see the lengths */
    size_t name_len, filename_len, content_type_len;
    bool has_filename, has_content_type;
    const char *data;
    size_t len;
} api_part;

/* Reads body (len bytes) sent with the Content-Type header value content_type (may be NULL:
 * refused) into parts[0..n). Returns n (>= 1), or -1 with err saying what is wrong and where
 * (the part's number). */
int api_multipart_parse(const char *content_type, const char *body, size_t len, api_part *parts,
                        int max_parts, mt_error *err);

/* The part whose name is name, or NULL. */
const api_part *api_multipart_find(const api_part *parts, int n, const char *name);

#endif

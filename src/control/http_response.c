/* http_response.c - turning a handler's answer into a libmicrohttpd
 * response (http_internal.h): JSON, text, or a file with Range support, the
 * error bodies, and the refusals the server makes before a handler runs (429
 * for too many requests in flight, 413 for a body over the limit). The server
 * (http_server.c) and its streams (http_stream.c) both send through here. */
#include "http_internal.h"
#include "moontail/json_line.h"
#include "moontail/file.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void mt_http_error(mt_http_response *resp, int status, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_decref(resp->json);
    resp->status = status;
    resp->json = json_pack("{s:s}", "error", msg);
}

static void add_headers(struct MHD_Response *r, json_t *headers) {
    const char *k;
    json_t *v;
    json_object_foreach(headers, k, v) {
        if (json_is_string(v)) MHD_add_response_header(r, k, json_string_value(v));
    }
}

static enum MHD_Result queue(struct MHD_Connection *c, int status, const char *type, char *data,
                             size_t len, json_t *headers) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(data);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    add_headers(r, headers);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result queue_json(struct MHD_Connection *c, int status, json_t *j,
                                  json_t *headers) {
    /* a newline ends the body, so that curl output in a terminal stays readable */
    size_t n;
    char *t = mt_json_line(j, 0, &n);
    if (!t) return MHD_NO;
    return queue(c, status, "application/json", t, n, headers);
}

/* An error the server answers by itself, in the configured shape (headers: extra ones, or NULL). */
static enum MHD_Result queue_error(struct MHD_Connection *c, int status, const char *msg,
                                   json_t *headers, json_t *(*error_body)(int, const char *)) {
    json_t *j = error_body ? error_body(status, msg) : json_pack("{s:s}", "error", msg);
    enum MHD_Result ok = queue_json(c, status, j, headers);
    json_decref(j);
    return ok;
}

enum MHD_Result http_queue_busy(struct MHD_Connection *c, int limit,
                                json_t *(*error_body)(int, const char *)) {
    char msg[200];
    snprintf(msg, sizeof msg,
             "too many requests in flight from this address or for this token: the limit is %d"
             " at once; wait for answers before sending more",
             limit);
    json_t *h = json_pack("{s:s}", "Retry-After", "1");
    enum MHD_Result ok = queue_error(c, 429, msg, h, error_body);
    json_decref(h);
    return ok;
}

enum MHD_Result http_queue_too_big(struct MHD_Connection *c, const char *method, const char *url,
                                   size_t max_body, json_t *(*error_body)(int, const char *)) {
    char msg[400];
    snprintf(msg, sizeof msg,
             "%.16s %.200s: the request body is too large (the limit there is %zu bytes); send"
             " a smaller one",
             method, url, max_body);
    return queue_error(c, 413, msg, NULL, error_body);
}

bool http_digits(const char **p, uint64_t *v) {
    const char *s = *p;
    uint64_t x = 0;
    if (*s < '0' || *s > '9') return false;
    for (; *s >= '0' && *s <= '9'; s++)
        x = x > (UINT64_MAX - 9) / 10 ? UINT64_MAX : x * 10 + (uint64_t)(*s - '0');
    *p = s;
    *v = x;
    return true;
}

/* "bytes=A-B", "bytes=A-" or "bytes=-N" against a file of size n. Returns 0
 * and [*from, *to] (inclusive), 1 when there is no usable header (absent,
 * another unit, several ranges, or not well formed, as RFC 9110 says to
 * ignore: the whole file), -1 when unsatisfiable (416). */
static int parse_range(const char *h, uint64_t n, uint64_t *from, uint64_t *to) {
    if (!h || strncmp(h, "bytes=", 6) != 0) return 1;
    const char *p = h + 6;
    uint64_t a, b;
    if (*p == '-') { /* the last b bytes */
        p++;
        if (!http_digits(&p, &b) || *p) return 1;
        if (b == 0 || n == 0) return -1;
        *from = b >= n ? 0 : n - b;
        *to = n - 1;
        return 0;
    }
    if (!http_digits(&p, &a) || *p++ != '-') return 1;
    b = UINT64_MAX;
    if (*p && (!http_digits(&p, &b) || *p || b < a)) return 1;
    if (a >= n) return -1;
    *from = a;
    *to = b >= n ? n - 1 : b;
    return 0;
}

static enum MHD_Result queue_file(struct MHD_Connection *c, const char *path, int status,
                                  json_t *headers, json_t *(*error_body)(int, const char *)) {
    int fd = mt_file_open(path, MT_O_READ, 0);
    mt_file_info sb;
    if (fd < 0 || mt_file_fstat(fd, &sb) != 0) {
        if (fd >= 0) mt_file_close(fd);
        return queue_error(c, 404, "file not found", NULL, error_body);
    }
    uint64_t n = sb.size, from = 0, to = n ? n - 1 : 0;
    int pr = parse_range(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Range"), n, &from, &to);
    if (pr < 0) {
        mt_file_close(fd);
        char cr[64];
        snprintf(cr, sizeof cr, "bytes */%" PRIu64, n);
        struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Content-Range", cr);
        enum MHD_Result ok = MHD_queue_response(c, 416, r);
        MHD_destroy_response(r);
        return ok;
    }
    uint64_t len = n ? to - from + 1 : 0;
    struct MHD_Response *r = MHD_create_response_from_fd_at_offset64(len, fd, from);
    if (!r) {
        mt_file_close(fd);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/octet-stream");
    MHD_add_response_header(r, "Accept-Ranges", "bytes");
    add_headers(r, headers);
    if (pr == 0) {
        char cr[96];
        snprintf(cr, sizeof cr, "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, from, to, n);
        MHD_add_response_header(r, "Content-Range", cr);
        status = 206;
    }
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

enum MHD_Result http_send_response(struct MHD_Connection *c, mt_http_response *resp,
                                   json_t *(*error_body)(int, const char *)) {
    enum MHD_Result ok;
    int status = resp->status ? resp->status : 200;
    if (resp->file) {
        ok = queue_file(c, resp->file, status, resp->headers, error_body);
    } else if (resp->text) {
        ok = queue(c, status, resp->content_type ? resp->content_type : "text/plain; charset=utf-8",
                   resp->text, strlen(resp->text), resp->headers);
        resp->text = NULL;
    } else {
        if (!resp->json) resp->json = json_object();
        ok = queue_json(c, status, resp->json, resp->headers);
    }
    json_decref(resp->json);
    json_decref(resp->headers);
    free(resp->text);
    free(resp->file);
    memset(resp, 0, sizeof *resp);
    return ok;
}

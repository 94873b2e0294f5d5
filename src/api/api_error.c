/* api_error.c - errors in OpenAI's shape (api_openai.h): {"error": {"message",
 * "type", "param", "code"}} with its HTTP status, and a Retry-After header
 * when the server is busy. */
#include "api_openai.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int api_fail(api_error *e, int status, const char *type, const char *param, const char *code,
             const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

json_t *api_text_json(const char *p, size_t n) {
    json_t *s = json_stringn(p, n);
    if (s) return s;
    char *c = malloc(n + 1);
    if (!c) return json_string("");
    for (size_t i = 0; i < n; i++) c[i] = (unsigned char)p[i] < 0x80 && p[i] ? p[i] : '?';
    s = json_stringn(c, n);
    free(c);
    return s ? s : json_string("");
}

json_t *api_error_json(const api_error *e) {
    json_t *inner = json_object();
    json_object_set_new(inner, "message", api_text_json(e->message, strlen(e->message)));
    json_object_set_new(inner, "type", json_string(e->type ? e->type : "invalid_request_error"));
    json_object_set_new(inner, "param", e->param[0] ? json_string(e->param) : json_null());
    json_object_set_new(inner, "code", e->code ? json_string(e->code) : json_null());
    return json_pack("{s:o}", "error", inner);
}

void api_error_respond(const api_error *e, int retry_after, mt_http_response *resp) {
    json_decref(resp->json);
    resp->status = e->status;
    resp->json = api_error_json(e);
    if (retry_after > 0) {
        char v[24];
        snprintf(v, sizeof v, "%d", retry_after);
        json_decref(resp->headers);
        resp->headers = json_pack("{s:s}", "Retry-After", v);
    }
}

json_t *api_error_body(int status, const char *message) {
    api_error e;
    api_fail(&e, status, status >= 500 ? "server_error" : "invalid_request_error", NULL,
             status == 413 ? "request_too_large" : NULL, "%s", message);
    return api_error_json(&e);
}

/* registry_request.c - what the registry's endpoints (registry_api.c,
 * registry_reports.c) all check in a request: string and integer fields of a
 * JSON body, the operator's admin token, and the account a bearer token
 * belongs to. Each failure fills the response with a 4xx naming the field or
 * the token. */
#include "registry_internal.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

/* A string field of at most max bytes (printable ASCII), or NULL with resp set. */
const char *reg_api_str_field(json_t *body, const char *name, size_t max, bool required,
                              mt_http_response *resp) {
    json_t *v = json_object_get(body, name);
    if (!v) {
        if (required) mt_http_error(resp, 400, "field \"%s\" is required", name);
        return NULL;
    }
    const char *s = json_string_value(v);
    if (!s || strlen(s) > max) {
        mt_http_error(resp, 400, "field \"%s\" must be a string of at most %zu bytes", name, max);
        return NULL;
    }
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            mt_http_error(resp, 400, "field \"%s\" holds control characters", name);
            return NULL;
        }
    return s;
}

/* An integer field in [lo, hi]; *ok false (resp set) when present and bad or
 * required and absent. */
int64_t reg_api_int_field(json_t *body, const char *name, int64_t lo, int64_t hi, int64_t dflt,
                          bool required, bool *ok, mt_http_response *resp) {
    json_t *v = json_object_get(body, name);
    if (!v) {
        if (required) {
            mt_http_error(resp, 400, "field \"%s\" is required", name);
            *ok = false;
        }
        return dflt;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        mt_http_error(resp, 400, "field \"%s\" must be a whole number in [%lld, %lld]", name,
                      (long long)lo, (long long)hi);
        *ok = false;
        return dflt;
    }
    return json_integer_value(v);
}

/* Whether the request carries the operator's admin token; else resp is set
 * (401 without a token, 403 with another one). */
bool reg_api_admin_ok(mt_registry *r, const mt_http_request *req, const char *what,
                      mt_http_response *resp) {
    const char *tok = mt_http_bearer(req), *admin = r->cfg.admin_token;
    if (!admin) return true;
    size_t n = strlen(admin);
    if (tok && strlen(tok) == n && sodium_memcmp(tok, admin, n) == 0) return true;
    mt_http_error(resp, tok ? 403 : 401,
                  "%s needs the operator's admin token (Authorization: Bearer <admin token>)%s",
                  what, tok ? "; this is not it" : "");
    return false;
}

int64_t reg_api_account(mt_registry *r, const mt_http_request *req, mt_http_response *resp) {
    int64_t a = reg_account_by_token(r, mt_http_bearer(req));
    if (a <= 0)
        mt_http_error(resp, 401,
                      "missing or unknown account token (Authorization: Bearer <token>); create"
                      " an account with POST /v1/accounts or 'moontail account new'");
    return a;
}

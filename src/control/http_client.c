/* http_client.c - the HTTP client of http.h on libcurl: JSON calls to the
 * registry and ranged GETs of shard pieces. Only http:// and https:// URLs
 * are followed; redirects are not (a registry or a peer never sends one).
 * https:// URLs are trusted as mt_http_client_tls says (a pinned key, or CA
 * verification), and TLS failures are explained in terms of what to do. */
#include "moontail/http.h"
#include "moontail/tls_cert.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* mt_http_client_tls: the pinned key ("" none) and the CA bundle ("" the system's) */
static char tls_pin[MT_TLS_PIN_SIZE];
static char tls_ca[1024];

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void global_init(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

typedef struct sink {
    char *data;
    size_t len, cap, limit;
    bool overflow;
    /* ranged GETs: an answer other than 206 (or 200 for a range from 0) is
     * not the bytes asked for; its first bytes (the error) go to errbody */
    CURL *ranged;
    uint64_t from;
    char errbody[512];
    size_t errlen;
    char why[CURL_ERROR_SIZE]; /* libcurl's detail of a failure */
} sink;

static bool unwanted(long status, uint64_t from) {
    return status != 206 && !(status == 200 && from == 0);
}

static size_t on_data(char *p, size_t size, size_t n, void *ctx) {
    sink *s = ctx;
    size_t k = size * n;
    long status = 0;
    if (s->ranged && curl_easy_getinfo(s->ranged, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK &&
        unwanted(status, s->from)) {
        size_t room = sizeof s->errbody - 1 - s->errlen, take = k < room ? k : room;
        memcpy(s->errbody + s->errlen, p, take);
        s->errlen += take;
        s->errbody[s->errlen] = 0;
        return take == k ? k : 0; /* enough of an error: stop there */
    }
    if (s->len + k > s->limit) {
        s->overflow = true;
        return 0; /* aborts the transfer */
    }
    if (s->len + k + 1 > s->cap) {
        size_t cap = (s->len + k + 1) * 2;
        if (cap > s->limit + 1) cap = s->limit + 1;
        char *q = realloc(s->data, cap);
        if (!q) return 0;
        s->data = q, s->cap = cap;
    }
    memcpy(s->data + s->len, p, k);
    s->len += k;
    s->data[s->len] = 0;
    return k;
}

static CURL *easy(const char *url, int timeout_ms, sink *s) {
    pthread_once(&once, global_init);
    CURL *c = curl_easy_init();
    if (!c) return NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(timeout_ms > 0 ? timeout_ms : 30000));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(timeout_ms > 0 ? timeout_ms : 10000));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*"); /* never send the registry's traffic elsewhere */
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, s->why);
    if (strncasecmp(url, "https://", 8) == 0) {
        if (tls_pin[0]) { /* the key is the trust: no CA signed a self-signed certificate */
            curl_easy_setopt(c, CURLOPT_PINNEDPUBLICKEY, tls_pin);
            curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
            curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
        } else if (tls_ca[0]) {
            curl_easy_setopt(c, CURLOPT_CAINFO, tls_ca);
        }
    }
    return c;
}

int mt_http_client_tls(const char *pin, const char *ca_file, mt_error *err) {
    if (pin && !mt_tls_pin_valid(pin))
        return mt_error_set(err,
                            "registry pin '%.80s' is malformed: expected 'sha256//' and 44 base64"
                            " characters, as the registry prints at start ('TLS certificate"
                            " sha256//...')",
                            pin);
    if (ca_file && (!*ca_file || strlen(ca_file) >= sizeof tls_ca || access(ca_file, R_OK) != 0))
        return mt_error_set(
            err, "CA file '%.300s' cannot be read; give a PEM file of CA certificates", ca_file);
    snprintf(tls_pin, sizeof tls_pin, "%s", pin ? pin : "");
    snprintf(tls_ca, sizeof tls_ca, "%s", ca_file ? ca_file : "");
    return 0;
}

/* The host of url with its port: *host points past "://" (at url when there is none), *len
 * bytes up to the path, query or fragment. */
static void url_host(const char *url, const char **host, int *len) {
    const char *h = strstr(url, "://");
    *host = h ? h + 3 : url;
    *len = (int)strcspn(*host, "/?#");
}

/* The length of url's scheme and host ("http://10.0.0.5:8470"): what a person typed as
 * --registry. */
static int base_len(const char *url) {
    const char *host;
    int hl;
    url_host(url, &host, &hl);
    return (int)(host - url) + hl;
}

/* What went wrong in a transfer to url, and what to do about it. who names the server in
 * the messages that are about reaching it ("the registry"; NULL: its host). */
static const char *explain(char *out, size_t cap, const char *url, CURLcode rc, const char *why,
                           const char *who) {
    bool https = strncasecmp(url, "https://", 8) == 0;
    const char *host;
    int hl;
    url_host(url, &host, &hl);
    int bl = (int)(host - url) + hl;
    const char *detail = why && *why ? why : curl_easy_strerror(rc);
    char whom[700];
    if (who)
        snprintf(whom, sizeof whom, "%s at %.*s", who, bl, url);
    else
        snprintf(whom, sizeof whom, "%.*s", bl, url);
    if (rc == CURLE_COULDNT_CONNECT)
        snprintf(out, cap, "cannot reach %s (%s): is it running, and is the address right?", whom,
                 strstr(detail, "refused") || strstr(detail, "Couldn't connect")
                     ? "connection refused"
                     : detail);
    else if (rc == CURLE_COULDNT_RESOLVE_HOST)
        snprintf(out, cap, "cannot reach %s (no such host: %.*s): is the address right?", whom,
                 (int)(host[0] == '[' ? strcspn(host, "]") + 1 : strcspn(host, ":/?#")), host);
    else if (rc == CURLE_SSL_PINNEDPUBKEYNOTMATCH)
        snprintf(out, cap,
                 "the TLS certificate of the registry at %.*s does not match the pinned"
                 " fingerprint %s: if its operator gave it a new certificate, get the fingerprint"
                 " it prints at start ('TLS certificate sha256//...') and pass it with"
                 " --registry-pin (or run 'moontail setup --registry URL --registry-pin PIN'"
                 " again); if not, something is impersonating the registry: send it nothing",
                 hl, host, tls_pin);
    else if (https && rc == CURLE_PEER_FAILED_VERIFICATION)
        snprintf(out, cap,
                 "the TLS certificate of %.*s is not trusted (%s): for a registry's self-signed"
                 " certificate pass its fingerprint with --registry-pin sha256//... (it prints"
                 " it at start), or give the CA that signed it with --ca-file FILE",
                 hl, host, detail);
    else if (https &&
             (rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_RECV_ERROR || rc == CURLE_GOT_NOTHING))
        snprintf(out, cap,
                 "TLS handshake with %.*s failed (%s): if it speaks plain HTTP (a registry on"
                 " loopback does unless started with --tls), use an http:// URL: http://%.*s",
                 hl, host, detail, hl, host);
    else if (!https && (rc == CURLE_GOT_NOTHING || rc == CURLE_RECV_ERROR))
        snprintf(out, cap,
                 "%.*s closed the connection without an answer (%s): if it serves HTTPS (a"
                 " registry off loopback does by default), use an https:// URL: https://%.*s",
                 hl, host, detail, hl, host);
    else
        snprintf(out, cap, "%s", detail);
    return out;
}

int mt_http_check_base_url(const char *url, const char *what, mt_error *err) {
    bool http = strncasecmp(url, "http://", 7) == 0, https = strncasecmp(url, "https://", 8) == 0;
    if (!http && !https)
        return mt_error_set(err,
                            "%s '%.300s' is not a URL: give http://HOST:PORT (or https://HOST:PORT"
                            " for a registry that serves TLS), as the registry printed it at"
                            " start ('listening on ...')",
                            what, url);
    const char *host;
    int hl;
    url_host(url, &host, &hl);
    if (hl == 0)
        return mt_error_set(err, "%s '%.300s' names no host: give %sHOST:PORT", what, url,
                            https ? "https://" : "http://");
    const char *rest = host + hl;
    if (*rest && strcmp(rest, "/") != 0)
        return mt_error_set(err,
                            "%s '%.300s' has a path ('%.200s'); give the registry's base URL,"
                            " %.*s, without it",
                            what, url, rest, (int)(rest - url), url);
    return 0;
}

int mt_http_json(const char *method, const char *url, const char *token, const json_t *body,
                 int timeout_ms, json_t **out, mt_error *err) {
    if (out) *out = NULL;
    sink s = {.limit = 64u << 20};
    CURL *c = easy(url, timeout_ms, &s);
    if (!c) return mt_error_set(err, "%s %s: libcurl could not start", method, url);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    char auth[400];
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    char *payload = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (payload) curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload);
    CURLcode rc = curl_easy_perform(c);
    long status = -1;
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    else if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST)
        mt_error_set(err, "%s", explain((char[1600]){0}, 1600, url, rc, s.why, "the registry"));
    else
        mt_error_set(err, "%s %s: %s", method, url,
                     s.overflow ? "the answer is larger than 64 MiB"
                                : explain((char[1600]){0}, 1600, url, rc, s.why, "the registry"));
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    free(payload);
    if (rc != CURLE_OK) {
        free(s.data);
        return -1;
    }
    json_t *j = s.data ? json_loadb(s.data, s.len, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    /* a registry answers every request with JSON, its errors with {"error": ...}: anything
     * else is another server, or the registry's URL with a path after it */
    int bl = base_len(url);
    bool foreign = status == 404 || status == 405 || status == 501 || status < 400;
    if (foreign && !json_is_string(e) && !json_is_object(j) && !(status < 400 && s.len == 0))
        mt_error_set(err,
                     "%s %s: HTTP %ld, %s: %.*s is not a MoonTail registry, or not its base"
                     " URL; give the URL the registry printed at start ('listening on ...')",
                     method, url, status, s.len ? "not a registry's JSON answer" : "no answer", bl,
                     url);
    else if (status >= 400 && json_is_string(e))
        mt_error_set(err, "%s %s: HTTP %ld: %s", method, url, status, json_string_value(e));
    else if (status >= 400) { /* another server's page: its start, on one line */
        char text[200] = "(no body)";
        if (s.data) snprintf(text, sizeof text, "%s", s.data);
        for (char *p = text; *p; p++)
            if ((unsigned char)*p < 0x20) *p = ' ';
        mt_error_set(err, "%s %s: HTTP %ld: %s", method, url, status, text);
    }
    free(s.data);
    if (out)
        *out = j;
    else
        json_decref(j);
    return (int)status;
}

int mt_http_get_range(const char *url, uint64_t from, size_t len, void *buf, int timeout_ms,
                      mt_error *err) {
    if (len == 0) return 0; /* "bytes=from-(from-1)" is no range at all */
    sink s = {.limit = len, .from = from};
    CURL *c = easy(url, timeout_ms, &s);
    if (!c) return mt_error_set(err, "GET %s: libcurl could not start", url);
    s.ranged = c;
    char range[64];
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)from,
             (unsigned long long)(from + len - 1));
    curl_easy_setopt(c, CURLOPT_RANGE, range);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    int ret = 0;
    if (status > 0 && unwanted(status, from)) { /* even when the transfer was cut short */
        json_t *j = json_loadb(s.errbody, s.errlen, 0, NULL);
        const char *e = json_string_value(json_object_get(j, "error"));
        ret = mt_error_set(err, "GET %s bytes %s: HTTP %ld%s%s", url, range, status,
                           e || s.errlen ? ": " : "", e ? e : s.errbody);
        json_decref(j);
    } else if (rc != CURLE_OK) {
        ret = mt_error_set(err, "GET %s bytes %s: %s", url, range,
                           s.overflow ? "the peer sent more than asked for"
                                      : explain((char[1600]){0}, 1600, url, rc, s.why, NULL));
    } else if (s.len != len) {
        ret = mt_error_set(err, "GET %s bytes %s: got %zu bytes, expected %zu", url, range, s.len,
                           len);
    } else {
        memcpy(buf, s.data, len);
    }
    free(s.data);
    return ret;
}

int mt_http_peer_cert(const char *url, int timeout_ms, char **pem, mt_error *err) {
    *pem = NULL;
    if (strncasecmp(url, "https://", 8) != 0)
        return mt_error_set(err, "%s: not an https:// URL, there is no certificate to read", url);
    sink s = {.limit = 1u << 20};
    CURL *c = easy(url, timeout_ms, &s);
    if (!c) return mt_error_set(err, "GET %s: libcurl could not start", url);
    /* the certificate is what we want to see, not what we check (a person compares its pin) */
    curl_easy_setopt(c, CURLOPT_PINNEDPUBLICKEY, NULL);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    curl_easy_setopt(c, CURLOPT_CERTINFO, 1L);
    CURLcode rc = curl_easy_perform(c);
    struct curl_certinfo *ci = NULL;
    if (rc == CURLE_OK && curl_easy_getinfo(c, CURLINFO_CERTINFO, &ci) == CURLE_OK && ci &&
        ci->num_of_certs > 0)
        for (struct curl_slist *l = ci->certinfo[0]; l && !*pem; l = l->next)
            if (strncmp(l->data, "Cert:", 5) == 0 && !(*pem = strdup(l->data + 5)))
                mt_error_set(err, "out of memory");
    int ret = 0;
    if (rc != CURLE_OK)
        ret = mt_error_set(err, "GET %s: %s", url,
                           explain((char[1600]){0}, 1600, url, rc, s.why, "the registry"));
    else if (!*pem)
        ret = mt_error_set(
            err, "GET %s: the server presented no certificate that libcurl could show", url);
    curl_easy_cleanup(c);
    free(s.data);
    return ret;
}

/* win-deps smoke check: libmicrohttpd (the DLL) serves on 127.0.0.1 at a port the system
 * picks, the static libcurl fetches a page from it, the daemon stops. Loopback only. */
#include <curl/curl.h>
#include <microhttpd.h>
#include <stdio.h>
#include <string.h>
#include <winsock2.h>

static const char page[] = "hello from libmicrohttpd";

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *size, void **state) {
    (void)cls, (void)url, (void)version, (void)data, (void)size, (void)state;
    if (strcmp(method, "GET") != 0) return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(page), (void *)page, MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

struct sink {
    char buf[256];
    size_t len;
};

static size_t on_data(char *p, size_t size, size_t n, void *arg) {
    struct sink *s = arg;
    size_t take = size * n;
    if (take > sizeof s->buf - 1 - s->len) take = sizeof s->buf - 1 - s->len;
    memcpy(s->buf + s->len, p, take);
    s->len += take;
    s->buf[s->len] = 0;
    return size * n;
}

int main(void) {
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = 0;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct MHD_Daemon *d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, answer,
                         NULL, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_END);
    if (!d) {
        puts("MHD_start_daemon failed");
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    unsigned port = info ? info->port : 0;
    if (!port) {
        puts("no port");
        return 1;
    }
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/smoke", port);
    curl_global_init(CURL_GLOBAL_ALL);
    CURL *c = curl_easy_init();
    struct sink s = {.len = 0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 20000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    curl_global_cleanup();
    MHD_stop_daemon(d);
    int good = rc == CURLE_OK && status == 200 && strcmp(s.buf, page) == 0;
    printf("%s: libmicrohttpd %s (threads: %s) served GET %s -> %ld \"%s\"%s%s\n",
           good ? "ok" : "FAIL", MHD_get_version(),
           MHD_is_feature_supported(MHD_FEATURE_THREADS) ? "yes" : "no", url, status, s.buf,
           rc == CURLE_OK ? "" : ", curl: ", rc == CURLE_OK ? "" : curl_easy_strerror(rc));
    return good ? 0 : 1;
}

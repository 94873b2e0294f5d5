/* win-deps smoke check: the static libcurl is the one intended: Schannel, HTTP and HTTPS,
 * threaded resolver, no zlib; public key pinning and certificate info are accepted (a
 * TLS backend without them refuses CURLOPT_PINNEDPUBLICKEY with CURLE_NOT_BUILT_IN). */
#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    if (curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK) return 1;
    const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
    char protos[256] = "";
    int http = 0, https = 0, n = 0;
    for (const char *const *p = v->protocols; *p; p++, n++) {
        http |= strcmp(*p, "http") == 0;
        https |= strcmp(*p, "https") == 0;
        if (n) strcat(protos, " ");
        strncat(protos, *p, sizeof protos - strlen(protos) - 2);
    }
    int good = 1;
    const char *why = "";
#define NEED(cond, msg)                                                                            \
    if (good && !(cond)) good = 0, why = msg
    NEED(v->ssl_version && strstr(v->ssl_version, "Schannel"), "TLS backend is not Schannel");
    NEED(http && https && n == 2, "protocols are not exactly http and https");
    NEED(v->features & CURL_VERSION_SSL, "no SSL feature");
    NEED(v->features & CURL_VERSION_ASYNCHDNS, "no threaded resolver");
    NEED(!v->libz_version, "built with zlib");
    CURL *c = curl_easy_init();
    NEED(c, "curl_easy_init failed");
    if (c) {
        CURLcode pin = curl_easy_setopt(c, CURLOPT_PINNEDPUBLICKEY,
                                        "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
        NEED(pin == CURLE_OK, "CURLOPT_PINNEDPUBLICKEY not supported");
        NEED(curl_easy_setopt(c, CURLOPT_CERTINFO, 1L) == CURLE_OK, "CURLOPT_CERTINFO refused");
        curl_easy_cleanup(c);
    }
    printf("%s: libcurl %s, TLS %s, protocols: %s; pinned public key and certinfo accepted%s%s\n",
           good ? "ok" : "FAIL", v->version, v->ssl_version ? v->ssl_version : "none", protos,
           good ? "" : ": ", why);
    curl_global_cleanup();
    return good ? 0 : 1;
}

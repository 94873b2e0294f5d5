/* win-deps smoke check: the static libcurl's Schannel, under wine, against an HTTPS server
 * on 127.0.0.1 with a self-signed certificate (tls_server.py), the way MoonTail's
 * http_client.c talks to a registry: CURLOPT_PINNEDPUBLICKEY with peer verification off
 * accepts the right key and refuses another (CURLE_SSL_PINNEDPUBKEYNOTMATCH), and
 * CURLINFO_CERTINFO shows the certificate as PEM ("Cert:").
 * Usage: smoke_tls.exe https://127.0.0.1:PORT/ sha256//PIN */
#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

static size_t sink(char *p, size_t size, size_t n, void *arg) {
    (void)p, (void)arg;
    return size * n;
}

static CURLcode get(const char *url, const char *pin, int certinfo, int *pem) {
    CURL *c = curl_easy_init();
    if (!c) return CURLE_FAILED_INIT;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 20000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    if (pin) curl_easy_setopt(c, CURLOPT_PINNEDPUBLICKEY, pin);
    if (certinfo) curl_easy_setopt(c, CURLOPT_CERTINFO, 1L);
    CURLcode rc = curl_easy_perform(c);
    struct curl_certinfo *ci = NULL;
    if (pem && rc == CURLE_OK && curl_easy_getinfo(c, CURLINFO_CERTINFO, &ci) == CURLE_OK && ci &&
        ci->num_of_certs > 0)
        for (struct curl_slist *l = ci->certinfo[0]; l; l = l->next)
            if (strncmp(l->data, "Cert:-----BEGIN CERTIFICATE-----", 32) == 0) *pem = 1;
    curl_easy_cleanup(c);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    curl_global_init(CURL_GLOBAL_ALL);
    int pem = 0;
    CURLcode right = get(argv[1], argv[2], 0, NULL);
    CURLcode wrong = get(argv[1], "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", 0, NULL);
    CURLcode info = get(argv[1], NULL, 1, &pem);
    int good =
        right == CURLE_OK && wrong == CURLE_SSL_PINNEDPUBKEYNOTMATCH && info == CURLE_OK && pem;
    printf(
        "%s: Schannel TLS to 127.0.0.1: right pin -> %d (%s), other pin -> %d (%s), certinfo -> %d "
        "(%s)\n",
        good ? "ok" : "FAIL", right, curl_easy_strerror(right), wrong, curl_easy_strerror(wrong),
        info, pem ? "PEM certificate" : "no PEM certificate");
    curl_global_cleanup();
    return good ? 0 : 1;
}

/* win-deps smoke check of the CMake toolchain file: every library linked through
 * pkg_check_modules, a pthread (winpthreads, linked statically), C99 printf formats. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <curl/curl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pcre2.h>
#include <pthread.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#if !defined(_WIN32_WINNT) || _WIN32_WINNT != 0x0A00 || !__USE_MINGW_ANSI_STDIO
#error "cmake/mingw-w64.cmake's _WIN32_WINNT / __USE_MINGW_ANSI_STDIO flags are missing"
#endif

static void *hash_abc(void *out) {
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, (const unsigned char *)"abc", 3);
    sodium_bin2hex(out, 2 * sizeof h + 1, h, sizeof h);
    return NULL;
}

int main(void) {
    char hex[65] = "";
    pthread_t t;
    if (sodium_init() < 0 || pthread_create(&t, NULL, hash_abc, hex) != 0) return 1;
    pthread_join(t, NULL);
    json_t *j = json_pack("{s:s}", "sqlite", sqlite3_libversion());
    char *dump = json_dumps(j, JSON_COMPACT);
    char ver[32];
    pcre2_config(PCRE2_CONFIG_VERSION, ver);
    const curl_version_info_data *cv = curl_version_info(CURLVERSION_NOW);
    int good =
        strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0 &&
        dump && strstr(cv->ssl_version, "Schannel") && MHD_get_version()[0];
    /* %zu and %lld are the formats msvcrt's printf gets wrong without mingw's stdio */
    printf("%s: cmake toolchain: sha256 in a pthread %.8s..., %s, pcre2 %s, curl %s %s, mhd %s, "
           "%%zu %zu, %%lld %lld\n",
           good ? "ok" : "FAIL", hex, dump ? dump : "?", ver, cv->version, cv->ssl_version,
           MHD_get_version(), sizeof(long double), 1LL << 40);
    free(dump);
    json_decref(j);
    return good ? 0 : 1;
}

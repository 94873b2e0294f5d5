/* net_common.c - what every file of the data plane's identity code shares
 * (net_internal.h): libsodium start-up, public keys as hex, and reading a
 * small file (a key, a certificate, an authorized-keys file) whole, with its
 * size bounded and its status returned for permission checks. */
#include "moontail/keys.h"
#include "net_internal.h"
#include "moontail/file.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- libsodium start-up -------------------------------------------------- */

int net_sodium_init(mt_error *err) {
    if (sodium_init() < 0)
        return mt_error_set(err, "libsodium failed to initialise (sodium_init); the system's "
                                 "random number source may be unavailable");
    return 0;
}

/* ---- hex ----------------------------------------------------------------- */

void mt_keys_pk_to_hex(const uint8_t pk[MT_KEYS_PUBLIC_BYTES], char hex[MT_KEYS_HEX_SIZE]) {
    sodium_bin2hex(hex, MT_KEYS_HEX_SIZE, pk, MT_KEYS_PUBLIC_BYTES);
}

bool net_hex_decode(uint8_t *out, size_t n, const char *s, size_t len) {
    if (len != 2 * n) return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
              (s[i] >= 'A' && s[i] <= 'F')))
            return false;
    size_t got = 0;
    const char *end = NULL;
    return sodium_hex2bin(out, n, s, len, NULL, &got, &end) == 0 && got == n && end == s + len;
}

int mt_keys_pk_from_hex(uint8_t pk[MT_KEYS_PUBLIC_BYTES], const char *hex, mt_error *err) {
    size_t len = strlen(hex);
    if (!net_hex_decode(pk, MT_KEYS_PUBLIC_BYTES, hex, len))
        return mt_error_set(err,
                            "'%.80s%s' is not a public key: expected exactly %d hex digits, "
                            "got %zu characters",
                            hex, len > 80 ? "..." : "", 2 * MT_KEYS_PUBLIC_BYTES, len);
    return 0;
}

/* ---- small files ----------------------------------------------------- */

char *net_read_small_file(const char *path, size_t max, const char *what, mt_file_info *st,
                          size_t *len, mt_error *err) {
    int fd = mt_file_open(path, MT_O_READ, 0);
    if (fd < 0) {
        mt_error_set(err, "%s: cannot open %s: %s", path, what, strerror(errno));
        return NULL;
    }
    if (mt_file_fstat(fd, st) < 0) {
        mt_error_set(err, "%s: cannot stat %s: %s", path, what, strerror(errno));
        mt_file_close(fd);
        return NULL;
    }
    if (!st->regular || st->size > max) {
        if (!st->regular)
            mt_error_set(err, "%s: %s is not a regular file", path, what);
        else
            mt_error_set(err, "%s: %s is %lld bytes, larger than any valid one (%zu)", path, what,
                         (long long)st->size, max);
        mt_file_close(fd);
        return NULL;
    }
    char *buf = malloc(max + 1);
    size_t n = 0;
    while (buf && n <= max) {
        ssize_t r = mt_file_read(fd, buf + n, max + 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            mt_error_set(err, "%s: cannot read %s: %s", path, what, strerror(errno));
            free(buf);
            buf = NULL;
        }
        if (r <= 0) break;
        n += (size_t)r;
    }
    mt_file_close(fd);
    if (!buf) {
        if (err && !err->msg[0]) mt_error_set(err, "%s: out of memory reading %s", path, what);
        return NULL;
    }
    if (n > max) { /* grew while we read it */
        mt_error_set(err, "%s: %s is larger than any valid one (%zu bytes)", path, what, max);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

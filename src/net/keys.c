/* keys.c - node identities: Ed25519 key pairs with an optional certificate
 * and the secret key file (mode 0600, refused when others may read it). The
 * authorized-keys set is keys_authorized.c. Formats are documented in keys.h. */
#include "moontail/keys.h"
#include "net_internal.h"
#include "moontail/file.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SECRET_MAGIC    "moontail-secret-key v1"
#define SECRET_FILE_MAX 1024

/* ---- key pairs ----------------------------------------------------------- */

int mt_keys_generate(mt_keys *k, mt_error *err) {
    if (net_sodium_init(err)) return -1;
    memset(k, 0, sizeof *k);
    crypto_sign_keypair(k->pk, k->sk);
    return 0;
}

void mt_keys_wipe(mt_keys *k) {
    if (k) sodium_memzero(k, sizeof *k);
}

int mt_keys_save(const mt_keys *k, const char *path, mt_error *err) {
    int fd = mt_file_open(path, MT_O_WRITE | MT_O_CREATE | MT_O_EXCL, 0600);
    if (fd < 0) {
        if (errno == EEXIST)
            return mt_error_set(err,
                                "%s: file already exists; a secret key is never overwritten, "
                                "remove it first or choose another path",
                                path);
        return mt_error_set(err, "%s: cannot create secret key file: %s", path, strerror(errno));
    }
    /* 22 + 1 + 128 + 1 bytes; the hex is secret too, so wipe the buffer after. */
    char text[sizeof SECRET_MAGIC + 2 * MT_KEYS_SECRET_BYTES + 2];
    memcpy(text, SECRET_MAGIC "\n", sizeof SECRET_MAGIC);
    sodium_bin2hex(text + sizeof SECRET_MAGIC, 2 * MT_KEYS_SECRET_BYTES + 1, k->sk,
                   MT_KEYS_SECRET_BYTES);
    size_t n = sizeof SECRET_MAGIC + 2 * MT_KEYS_SECRET_BYTES;
    text[n++] = '\n';
    size_t off = 0;
    int rc = 0;
    /* umask may have removed bits, never added them; make sure it is exactly 0600. */
    if (mt_file_make_private(fd) < 0)
        rc = mt_error_set(err, "%s: cannot make it private: %s", path, strerror(errno));
    while (rc == 0 && off < n) {
        ssize_t w = mt_file_write(fd, text + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            rc = mt_error_set(err, "%s: cannot write: %s", path, strerror(errno));
        else
            off += (size_t)w;
    }
    if (rc == 0 && mt_file_sync(fd, false) < 0)
        rc = mt_error_set(err, "%s: cannot sync to disk: %s", path, strerror(errno));
    if (mt_file_close(fd) < 0 && rc == 0)
        rc = mt_error_set(err, "%s: cannot close: %s", path, strerror(errno));
    sodium_memzero(text, sizeof text);
    if (rc) mt_file_remove(path);
    return rc;
}

int mt_keys_load(mt_keys *k, const char *path, mt_error *err) {
    if (net_sodium_init(err)) return -1;
    mt_file_info st;
    size_t len = 0;
    if (err) err->msg[0] = 0;
    memset(k, 0, sizeof *k);
    char *text = net_read_small_file(path, SECRET_FILE_MAX, "secret key file", &st, &len, err);
    if (!text) return -1;
    int rc = 0;
    if (!st.private_) {
        char fix[600];
        rc = mt_error_set(err,
                          "%s: secret key file is accessible by other users (mode %04o); "
                          "refusing to use it. Run %s (and consider the key "
                          "exposed if others could read it)",
                          path, (unsigned)st.mode, mt_file_private_fix(path, fix, sizeof fix));
        goto done;
    }
    /* Line 1: the magic; line 2: 128 hex digits; an optional final newline
     * (LF or CRLF) and nothing else. */
    size_t m = sizeof SECRET_MAGIC - 1;
    const char *hex = text + m + 1;
    if (len < m + 1 || memcmp(text, SECRET_MAGIC, m) != 0 ||
        (text[m] != '\n' && !(text[m] == '\r' && text[m + 1] == '\n'))) {
        rc = mt_error_set(err,
                          "%s: not a MoonTail secret key file (line 1 must be '" SECRET_MAGIC
                          "'); create one with 'moontail keygen -o FILE'",
                          path);
        goto done;
    }
    if (text[m] == '\r') hex++;
    size_t hl = strcspn(hex, "\r\n");
    const char *rest = hex + hl;
    if (*rest == '\r') rest++;
    if (*rest == '\n') rest++;
    uint8_t seed_pk[MT_KEYS_PUBLIC_BYTES], seed_sk[MT_KEYS_SECRET_BYTES];
    if (!net_hex_decode(k->sk, MT_KEYS_SECRET_BYTES, hex, hl) || *rest != 0) {
        rc = mt_error_set(err,
                          "%s: line 2 must be the %d hex digits of the secret key and nothing "
                          "may follow it; the file is damaged",
                          path, 2 * MT_KEYS_SECRET_BYTES);
        goto done;
    }
    /* The 64-byte secret key is seed || public key: check they belong together. */
    crypto_sign_seed_keypair(seed_pk, seed_sk, k->sk);
    if (sodium_memcmp(seed_pk, k->sk + 32, MT_KEYS_PUBLIC_BYTES) != 0) {
        rc = mt_error_set(err,
                          "%s: the public half of the secret key does not match its seed; the "
                          "file is damaged",
                          path);
    } else {
        memcpy(k->pk, seed_pk, MT_KEYS_PUBLIC_BYTES);
    }
    sodium_memzero(seed_sk, sizeof seed_sk);
done:
    sodium_memzero(text, len);
    free(text);
    if (rc) sodium_memzero(k, sizeof *k);
    return rc;
}

int mt_keys_set_cert(mt_keys *k, const uint8_t *cert, size_t len, mt_error *err) {
    if (!cert || len == 0) {
        k->has_cert = false;
        memset(k->cert, 0, sizeof k->cert);
        return 0;
    }
    mt_cert c;
    if (mt_cert_decode(cert, len, &c, err)) return -1;
    if (sodium_memcmp(c.subject, k->pk, MT_KEYS_PUBLIC_BYTES) != 0) {
        char want[MT_KEYS_HEX_SIZE], got[MT_KEYS_HEX_SIZE];
        mt_keys_pk_to_hex(k->pk, want);
        mt_keys_pk_to_hex(c.subject, got);
        return mt_error_set(err,
                            "certificate is for another key: it vouches for %s, this identity "
                            "is %s; ask the registry for a certificate of this key",
                            got, want);
    }
    memcpy(k->cert, cert, MT_CERT_BYTES);
    k->has_cert = true;
    return 0;
}

/* cert.c - certificates (cert.h): an authority's Ed25519 signature over a
 * fixed 104-byte record that names a key, its role and account, and a
 * validity window. Issuing, decoding, the full check a peer's certificate
 * must pass (each failure with its own message), and the certificate file.
 * The exact bytes are specified in cert.h. */
#include "moontail/cert.h"
#include "moontail/clock.h"
#include "moontail/file_write.h"
#include "moontail/keys.h"
#include "net_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CERT_MAGIC      "MTC1"
#define CERT_FILE_MAGIC "moontail-cert v1"
#define CERT_FILE_MAX   4096

enum {
    C_MAGIC = 0,
    C_VERSION = 4,
    C_ROLE = 6,
    C_RESERVED = 7,
    C_SUBJECT = 8,
    C_ISSUER = 40,
    C_ACCOUNT = 72,
    C_NOT_BEFORE = 80,
    C_NOT_AFTER = 88,
    C_SERIAL = 96,
    C_SIG = 104,
};
_Static_assert(C_SIG == MT_CERT_SIGNED_BYTES && C_SIG + crypto_sign_BYTES == MT_CERT_BYTES,
               "certificate layout");
_Static_assert(MT_CERT_KEY_BYTES == MT_KEYS_PUBLIC_BYTES && C_ISSUER == MT_CERT_ISSUER_OFFSET,
               "key sizes");

/* ---- small helpers ------------------------------------------------------------ */

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

const char *mt_cert_role_name(int role) {
    return role == MT_CERT_ROLE_NODE        ? "node"
           : role == MT_CERT_ROLE_REQUESTER ? "requester"
                                            : "unknown";
}

int mt_cert_role_from_name(const char *name) {
    if (strcmp(name, "node") == 0) return MT_CERT_ROLE_NODE;
    if (strcmp(name, "requester") == 0) return MT_CERT_ROLE_REQUESTER;
    return -1;
}

uint64_t mt_cert_now(void) {
    time_t t = time(NULL);
    return t > 0 ? (uint64_t)t : 0;
}

void mt_cert_time_str(uint64_t t, char out[32]) {
    /* 253402300799 = 9999-12-31 23:59:59 UTC: beyond it gmtime's year overflows 4 digits */
    struct tm tm;
    time_t tt = (time_t)t;
    if (t > 253402300799ull || !mt_utc_tm(tt, &tm)) {
        snprintf(out, 32, "unix time %llu", (unsigned long long)t); /* at most 30 chars */
        return;
    }
    strftime(out, 32, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

/* ---- issue --------------------------------------------------------------------- */

int mt_cert_issue(const mt_cert *f, const mt_keys *issuer, uint8_t out[MT_CERT_BYTES],
                  mt_error *err) {
    if (net_sodium_init(err)) return -1;
    if (f->role != MT_CERT_ROLE_NODE && f->role != MT_CERT_ROLE_REQUESTER)
        return mt_error_set(err, "certificate role %d is unknown: use node (1) or requester (2)",
                            (int)f->role);
    if (f->not_before > f->not_after) {
        char a[32], b[32];
        mt_cert_time_str(f->not_before, a);
        mt_cert_time_str(f->not_after, b);
        return mt_error_set(err,
                            "certificate would never be valid: not_before %s is after "
                            "not_after %s",
                            a, b);
    }
    memset(out, 0, MT_CERT_BYTES);
    memcpy(out + C_MAGIC, CERT_MAGIC, 4);
    out[C_VERSION] = MT_CERT_VERSION & 0xff;
    out[C_VERSION + 1] = MT_CERT_VERSION >> 8;
    out[C_ROLE] = (uint8_t)f->role;
    out[C_RESERVED] = 0;
    memcpy(out + C_SUBJECT, f->subject, MT_CERT_KEY_BYTES);
    memcpy(out + C_ISSUER, issuer->pk, MT_CERT_KEY_BYTES);
    put_u64(out + C_ACCOUNT, f->account);
    put_u64(out + C_NOT_BEFORE, f->not_before);
    put_u64(out + C_NOT_AFTER, f->not_after);
    put_u64(out + C_SERIAL, f->serial);
    crypto_sign_detached(out + C_SIG, NULL, out, MT_CERT_SIGNED_BYTES, issuer->sk);
    return 0;
}

/* ---- checks -------------------------------------------------------------------- */

/* Size, magic, version, role and reserved byte; fills the fields of *c. */
static int cert_parse(const uint8_t *b, size_t len, mt_cert *c, mt_error *err) {
    if (!b || len != MT_CERT_BYTES)
        return mt_error_set(err,
                            "certificate has the wrong size: %zu bytes, a MoonTail certificate "
                            "is exactly %d (truncated, or not a certificate)",
                            b ? len : 0, MT_CERT_BYTES);
    if (memcmp(b + C_MAGIC, CERT_MAGIC, 4) != 0)
        return mt_error_set(err,
                            "certificate has the wrong magic: it starts with %02x %02x %02x %02x "
                            "instead of \"" CERT_MAGIC "\" (not a MoonTail certificate)",
                            b[0], b[1], b[2], b[3]);
    unsigned version = b[C_VERSION] | (unsigned)b[C_VERSION + 1] << 8;
    if (version != MT_CERT_VERSION)
        return mt_error_set(err,
                            "certificate has the wrong version: %u, this build reads version "
                            "%d; issue it again with this release",
                            version, MT_CERT_VERSION);
    if (b[C_ROLE] != MT_CERT_ROLE_NODE && b[C_ROLE] != MT_CERT_ROLE_REQUESTER)
        return mt_error_set(err, "certificate role %u is unknown (1 = node, 2 = requester)",
                            b[C_ROLE]);
    if (b[C_RESERVED] != 0)
        return mt_error_set(err, "certificate reserved byte 7 is 0x%02x; it must be 0",
                            b[C_RESERVED]);
    c->role = (mt_cert_role)b[C_ROLE];
    memcpy(c->subject, b + C_SUBJECT, MT_CERT_KEY_BYTES);
    memcpy(c->issuer, b + C_ISSUER, MT_CERT_KEY_BYTES);
    c->account = get_u64(b + C_ACCOUNT);
    c->not_before = get_u64(b + C_NOT_BEFORE);
    c->not_after = get_u64(b + C_NOT_AFTER);
    c->serial = get_u64(b + C_SERIAL);
    return 0;
}

static int cert_check_signature(const uint8_t *b, const mt_cert *c, mt_error *err) {
    if (crypto_sign_verify_detached(b + C_SIG, b, MT_CERT_SIGNED_BYTES, c->issuer) == 0) return 0;
    char hex[MT_KEYS_HEX_SIZE];
    mt_keys_pk_to_hex(c->issuer, hex);
    return mt_error_set(err,
                        "certificate has a bad signature: authority %s did not sign these bytes "
                        "(the certificate was altered or forged)",
                        hex);
}

int mt_cert_decode(const uint8_t *bytes, size_t len, mt_cert *out, mt_error *err) {
    mt_cert c;
    if (net_sodium_init(err) || cert_parse(bytes, len, &c, err) ||
        cert_check_signature(bytes, &c, err))
        return -1;
    if (out) *out = c;
    return 0;
}

int mt_cert_check_time(const mt_cert *c, uint64_t now, uint64_t skew, mt_error *err) {
    char a[32], b[32];
    uint64_t until = c->not_after > UINT64_MAX - skew ? UINT64_MAX : c->not_after + skew;
    uint64_t from = c->not_before < skew ? 0 : c->not_before - skew;
    if (now > until) {
        mt_cert_time_str(c->not_after, a);
        mt_cert_time_str(now, b);
        return mt_error_set(
            err, "certificate expired at %s (now %s); ask the registry for a new one", a, b);
    }
    if (now < from) {
        mt_cert_time_str(c->not_before, a);
        mt_cert_time_str(now, b);
        return mt_error_set(err,
                            "certificate is not valid before %s (now %s); check this machine's "
                            "clock",
                            a, b);
    }
    return 0;
}

int mt_cert_verify(const uint8_t *bytes, size_t len, const uint8_t (*trusted)[MT_CERT_KEY_BYTES],
                   size_t n_trusted, const uint8_t subject[MT_CERT_KEY_BYTES], uint64_t now,
                   uint64_t skew, mt_cert *out, mt_error *err) {
    mt_cert c;
    if (net_sodium_init(err) || cert_parse(bytes, len, &c, err)) return -1;
    char hex[MT_KEYS_HEX_SIZE], hex2[MT_KEYS_HEX_SIZE];
    if (trusted != MT_CERT_ANY_ISSUER) {
        bool known = false;
        for (size_t i = 0; i < n_trusted && !known; i++)
            known = sodium_memcmp(trusted[i], c.issuer, MT_CERT_KEY_BYTES) == 0;
        if (!known) {
            mt_keys_pk_to_hex(c.issuer, hex);
            return mt_error_set(err,
                                "certificate was issued by an unknown authority %s; to trust it, "
                                "add 'authority %s NAME' to the authorized-keys file (or "
                                "--authority)",
                                hex, hex);
        }
    }
    if (cert_check_signature(bytes, &c, err)) return -1;
    if (sodium_memcmp(c.subject, subject, MT_CERT_KEY_BYTES) != 0) {
        mt_keys_pk_to_hex(c.subject, hex);
        mt_keys_pk_to_hex(subject, hex2);
        return mt_error_set(err,
                            "certificate is for another key: it vouches for %s, but the key "
                            "presenting it is %s",
                            hex, hex2);
    }
    if (mt_cert_check_time(&c, now, skew, err)) return -1;
    if (out) *out = c;
    return 0;
}

/* ---- files ------------------------------------------------------------------------ */

int mt_cert_save(const uint8_t cert[MT_CERT_BYTES], const char *path, mt_error *err) {
    char text[sizeof CERT_FILE_MAGIC + 2 * MT_CERT_BYTES + 2];
    memcpy(text, CERT_FILE_MAGIC "\n", sizeof CERT_FILE_MAGIC);
    sodium_bin2hex(text + sizeof CERT_FILE_MAGIC, 2 * MT_CERT_BYTES + 1, cert, MT_CERT_BYTES);
    size_t n = sizeof CERT_FILE_MAGIC + 2 * MT_CERT_BYTES;
    text[n++] = '\n';
    return mt_file_write_atomic(path, text, n, 0644, err);
}

int mt_cert_load(const char *path, uint8_t cert[MT_CERT_BYTES], mt_cert *out_fields,
                 mt_error *err) {
    if (net_sodium_init(err)) return -1;
    mt_file_info st;
    size_t len = 0;
    if (err) err->msg[0] = 0;
    char *text = net_read_small_file(path, CERT_FILE_MAX, "certificate file", &st, &len, err);
    if (!text) return -1;
    int rc = 0;
    size_t m = sizeof CERT_FILE_MAGIC - 1;
    if (len == MT_CERT_BYTES && memcmp(text, CERT_MAGIC, 4) == 0) {
        memcpy(cert, text, MT_CERT_BYTES); /* the raw bytes */
    } else if (len > m && memcmp(text, CERT_FILE_MAGIC, m) == 0 &&
               (text[m] == '\n' || (text[m] == '\r' && text[m + 1] == '\n'))) {
        const char *hex = text + m + (text[m] == '\r' ? 2 : 1);
        size_t hl = strcspn(hex, "\r\n");
        const char *rest = hex + hl;
        rest += strspn(rest, "\r\n");
        if (!net_hex_decode(cert, MT_CERT_BYTES, hex, hl) || *rest != 0)
            rc = mt_error_set(err,
                              "%s: line 2 must be the %d hex digits of the certificate and "
                              "nothing may follow it; the file is damaged",
                              path, 2 * MT_CERT_BYTES);
    } else {
        rc = mt_error_set(err,
                          "%s: not a MoonTail certificate file (line 1 must be '" CERT_FILE_MAGIC
                          "'); create one with 'moontail cert issue'",
                          path);
    }
    free(text);
    if (rc == 0 && mt_cert_decode(cert, MT_CERT_BYTES, out_fields, err)) {
        mt_error_prefix(err, "%s", path);
        rc = -1;
    }
    return rc;
}

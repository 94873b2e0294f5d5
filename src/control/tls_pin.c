/* tls_pin.c - the pin of a TLS certificate (tls_cert.h) without a TLS
 * library, so that the node side (setup, which pins the registry it first
 * meets) needs no GnuTLS: the first PEM certificate is decoded from base64
 * and its DER walked down to the SubjectPublicKeyInfo, whose bytes are
 * hashed with SHA-256:
 *
 *   Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL,
 *       serialNumber, signature, issuer, validity, subject,
 *       subjectPublicKeyInfo SEQUENCE, ... }, ... }                (RFC 5280) */
#include "moontail/tls_cert.h"

#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PIN_PEM_MAX (1 << 20) /* a certificate chain is a few KB */

/* One DER element at p[0..n): its tag, and where its contents start and end
 * (*next: the byte after it). false when it does not fit in n bytes. */
static bool der_element(const uint8_t *p, size_t n, uint8_t *tag, const uint8_t **body, size_t *len,
                        const uint8_t **next) {
    if (n < 2) return false;
    *tag = p[0];
    if ((p[0] & 0x1f) == 0x1f) return false; /* multi-byte tags: none in a certificate */
    size_t at = 2, l = p[1];
    if (l & 0x80) {
        size_t k = l & 0x7f;
        if (k == 0 || k > 4 || n < 2 + k) return false; /* no indefinite lengths in DER */
        l = 0;
        for (size_t i = 0; i < k; i++) l = l << 8 | p[2 + i];
        at += k;
    }
    if (l > n - at) return false;
    *body = p + at;
    *len = l;
    *next = p + at + l;
    return true;
}

/* The SubjectPublicKeyInfo element (tag to end) of a DER certificate. */
static bool spki_of(const uint8_t *der, size_t n, const uint8_t **spki, size_t *spki_len) {
    uint8_t tag;
    const uint8_t *body, *next, *tbs, *end;
    size_t len;
    if (!der_element(der, n, &tag, &body, &len, &next) || tag != 0x30) return false;
    if (!der_element(body, len, &tag, &tbs, &len, &next) || tag != 0x30) return false;
    end = tbs + len;
    const uint8_t *p = tbs;
    if (p < end && *p == 0xa0) { /* [0] EXPLICIT version */
        if (!der_element(p, (size_t)(end - p), &tag, &body, &len, &next)) return false;
        p = next;
    }
    /* serialNumber, signature, issuer, validity, subject */
    static const uint8_t want[5] = {0x02, 0x30, 0x30, 0x30, 0x30};
    for (int i = 0; i < 5; i++) {
        if (!der_element(p, (size_t)(end - p), &tag, &body, &len, &next) || tag != want[i])
            return false;
        p = next;
    }
    if (!der_element(p, (size_t)(end - p), &tag, &body, &len, &next) || tag != 0x30) return false;
    *spki = p;
    *spki_len = (size_t)(next - p);
    return true;
}

int mt_tls_pin_of_pem(const char *pem, size_t len, char pin[MT_TLS_PIN_SIZE], mt_error *err) {
    static const char begin[] = "-----BEGIN CERTIFICATE-----", end[] = "-----END CERTIFICATE-----";
    if (!pem || len == 0 || len > PIN_PEM_MAX)
        return mt_error_set(err, "a TLS certificate: no PEM text (or more than 1 MiB)");
    const char *b = NULL, *e = NULL;
    for (size_t i = 0; i + sizeof begin - 1 <= len && !b; i++)
        if (memcmp(pem + i, begin, sizeof begin - 1) == 0) b = pem + i + sizeof begin - 1;
    for (const char *q = b; q && q + sizeof end - 1 <= pem + len && !e; q++)
        if (memcmp(q, end, sizeof end - 1) == 0) e = q;
    if (!b || !e) return mt_error_set(err, "not a PEM certificate: no BEGIN/END CERTIFICATE lines");
    size_t cap = (size_t)(e - b) / 4 * 3 + 3, n = 0;
    uint8_t *der = malloc(cap);
    if (!der) return mt_error_set(err, "out of memory");
    const char *stop = NULL;
    int rc = sodium_base642bin(der, cap, b, (size_t)(e - b), " \t\r\n", &n, &stop,
                               sodium_base64_VARIANT_ORIGINAL);
    const uint8_t *spki;
    size_t spki_len;
    if (rc != 0 || stop != e) {
        rc = mt_error_set(err, "not a PEM certificate: its base64 text is damaged");
    } else if (!spki_of(der, n, &spki, &spki_len)) {
        rc = mt_error_set(err, "not a PEM certificate: its DER structure is not an X.509"
                               " certificate's");
    } else {
        unsigned char h[crypto_hash_sha256_BYTES];
        crypto_hash_sha256(h, spki, spki_len);
        memcpy(pin, "sha256//", 8);
        sodium_bin2base64(pin + 8, MT_TLS_PIN_SIZE - 8, h, sizeof h,
                          sodium_base64_VARIANT_ORIGINAL);
    }
    free(der);
    return rc;
}

bool mt_tls_pin_valid(const char *s) {
    if (!s || strncmp(s, "sha256//", 8) != 0 || strlen(s) != MT_TLS_PIN_SIZE - 1) return false;
    unsigned char h[crypto_hash_sha256_BYTES + 1];
    size_t n = 0;
    const char *end = NULL;
    return sodium_base642bin(h, sizeof h, s + 8, strlen(s + 8), NULL, &n, &end,
                             sodium_base64_VARIANT_ORIGINAL) == 0 &&
           n == crypto_hash_sha256_BYTES && end && *end == 0;
}

/* tls_cert.h - the registry's TLS certificate (GnuTLS): an operator's
 * certificate and key loaded from PEM files, or a self-signed pair made
 * once and kept in files so that a restart presents the same certificate;
 * and the certificate's pin, the form clients compare it with:
 *
 *     "sha256//" + base64(SHA-256(DER SubjectPublicKeyInfo))
 *
 * which is what libcurl's CURLOPT_PINNEDPUBLICKEY accepts (and what
 * `openssl x509 -pubkey | openssl pkey -pubin -outform der | openssl dgst
 * -sha256 -binary | base64` prints after "sha256//"). The pin names the
 * public key, not the certificate: a certificate renewed for the same key
 * keeps its pin. (Not to be confused with cert.h: the data plane's own
 * certificates for node and account keys.) */
#ifndef MOONTAIL_TLS_CERT_H
#define MOONTAIL_TLS_CERT_H

#include "moontail/error.h"

#include <stdbool.h>
#include <stddef.h>

/* "sha256//" and 44 base64 characters, plus the NUL */
#define MT_TLS_PIN_SIZE 53

typedef struct mt_tls_identity {
    char *cert_pem; /* the certificate (with its chain, if the file had one) */
    char *key_pem;  /* its private key, unencrypted */
    char pin[MT_TLS_PIN_SIZE];
    bool generated; /* made by this call (self-signed, first start) */
} mt_tls_identity;

/* Loads a certificate (PEM; a chain starts with the server's own) and its
 * private key (PEM, unencrypted; a key file other users may access, mode &
 * 077, is refused), checks that they belong together, and computes the pin.
 * 0, or -1 with err naming the file and what is wrong. */
int mt_tls_identity_load(mt_tls_identity *id, const char *cert_path, const char *key_path,
                         mt_error *err);

/* The self-signed certificate kept at cert_path / key_path: loaded when both
 * files exist; made when neither does (ECDSA P-256, valid 10 years, its
 * SubjectAltNames `host` - an IP address or a name; for a wildcard address,
 * this machine's host name - and localhost, 127.0.0.1, ::1) and written,
 * the key with mode 0600 (when either cannot be written, neither is left).
 * One file without the other is an error. */
int mt_tls_identity_self_signed(mt_tls_identity *id, const char *cert_path, const char *key_path,
                                const char *host, mt_error *err);

/* Frees the PEM texts (the key's bytes are wiped first). */
void mt_tls_identity_free(mt_tls_identity *id);

/* The pin of the first certificate in PEM text pem[0..len). */
int mt_tls_pin_of_pem(const char *pem, size_t len, char pin[MT_TLS_PIN_SIZE], mt_error *err);

/* Whether s is a well-formed pin ("sha256//" + base64 of 32 bytes). */
bool mt_tls_pin_valid(const char *s);

#endif

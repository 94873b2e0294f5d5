/* tls_cert.c - the registry's TLS certificate (tls_cert.h): loads an
 * operator's certificate and key, or makes and keeps a self-signed pair,
 * with GnuTLS, and computes its pin (SHA-256 of the DER SubjectPublicKeyInfo,
 * base64, after "sha256//"; libsodium). The pin of a PEM text and the pin
 * check, which the node side needs without GnuTLS, are tls_pin.c's. */
#include "moontail/tls_cert.h"
#include "moontail/file_write.h"
#include "moontail/compat.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PEM_MAX    (1 << 20) /* a certificate chain or a key is a few KB */
#define VALID_DAYS 3650

/* The whole file at path, NUL-terminated (heap), or NULL with err. A secret
 * one (a private key) is refused when other users may access it. */
static char *read_pem(const char *path, const char *what, bool secret, size_t *len, mt_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        mt_error_set(err, "TLS %s %s: %s", what, path, strerror(errno));
        return NULL;
    }
    struct stat st = {0};
    if (secret && fstat(fileno(f), &st) != 0) {
        int e = errno;
        fclose(f);
        mt_error_set(err, "TLS %s %s: %s", what, path, strerror(e));
        return NULL;
    }
    if (secret && (st.st_mode & 077)) {
        fclose(f);
        mt_error_set(err,
                     "TLS %s %s: other users may access it (mode %04o); refusing to use it."
                     " Run 'chmod 600 %s' (and consider the key exposed if others could read it)",
                     what, path, (unsigned)(st.st_mode & 07777), path);
        return NULL;
    }
    char *buf = malloc(PEM_MAX + 1);
    size_t n = buf ? fread(buf, 1, PEM_MAX + 1, f) : 0;
    bool bad = ferror(f) != 0;
    fclose(f);
    if (!buf || bad || n > PEM_MAX || n == 0) {
        mt_error_set(err, "TLS %s %s: %s", what, path,
                     !buf  ? "out of memory"
                     : bad ? "cannot read it"
                     : n   ? "larger than 1 MiB: not a PEM file"
                           : "the file is empty");
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static int pin_of_crt(gnutls_x509_crt_t crt, char pin[MT_TLS_PIN_SIZE], mt_error *err) {
    gnutls_pubkey_t pub;
    gnutls_datum_t der = {NULL, 0};
    int rc = gnutls_pubkey_init(&pub);
    if (rc == 0) rc = gnutls_pubkey_import_x509(pub, crt, 0);
    if (rc == 0) rc = gnutls_pubkey_export2(pub, GNUTLS_X509_FMT_DER, &der);
    if (rc == 0) {
        unsigned char h[crypto_hash_sha256_BYTES];
        crypto_hash_sha256(h, der.data, der.size);
        memcpy(pin, "sha256//", 8);
        sodium_bin2base64(pin + 8, MT_TLS_PIN_SIZE - 8, h, sizeof h,
                          sodium_base64_VARIANT_ORIGINAL);
        gnutls_free(der.data);
    }
    gnutls_pubkey_deinit(pub);
    if (rc) return mt_error_set(err, "the certificate's public key: %s", gnutls_strerror(rc));
    return 0;
}

void mt_tls_identity_free(mt_tls_identity *id) {
    if (!id) return;
    if (id->key_pem) sodium_memzero(id->key_pem, strlen(id->key_pem));
    free(id->key_pem);
    free(id->cert_pem);
    memset(id, 0, sizeof *id);
}

/* The key's and the certificate's public keys are the same. */
static bool key_matches(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key) {
    unsigned char a[64], b[64];
    size_t na = sizeof a, nb = sizeof b;
    return gnutls_x509_crt_get_key_id(crt, 0, a, &na) == 0 &&
           gnutls_x509_privkey_get_key_id(key, 0, b, &nb) == 0 && na == nb && memcmp(a, b, na) == 0;
}

/* Checks the PEM texts in id (certificate and key belong together, the
 * certificate is valid now) and computes id->pin. */
static int check_pair(mt_tls_identity *id, const char *cert_path, const char *key_path,
                      mt_error *err) {
    gnutls_x509_crt_t crt = NULL;
    gnutls_x509_privkey_t key = NULL;
    int rc = -1, g;
    if (gnutls_x509_crt_init(&crt) < 0 || gnutls_x509_privkey_init(&key) < 0) {
        mt_error_set(err, "GnuTLS: out of memory");
        goto out;
    }
    gnutls_datum_t cd = {(unsigned char *)id->cert_pem, (unsigned)strlen(id->cert_pem)};
    if ((g = gnutls_x509_crt_import(crt, &cd, GNUTLS_X509_FMT_PEM)) < 0) {
        mt_error_set(err,
                     "TLS certificate %s: not a PEM certificate (%s); give the server's"
                     " certificate, '-----BEGIN CERTIFICATE-----' first",
                     cert_path, gnutls_strerror(g));
        goto out;
    }
    gnutls_datum_t kd = {(unsigned char *)id->key_pem, (unsigned)strlen(id->key_pem)};
    if ((g = gnutls_x509_privkey_import2(key, &kd, GNUTLS_X509_FMT_PEM, NULL, 0)) < 0) {
        mt_error_set(err,
                     "TLS key %s: not an unencrypted PEM private key (%s); an encrypted key"
                     " must be decrypted first (e.g. `openssl pkey -in KEY -out PLAIN.key`)",
                     key_path, gnutls_strerror(g));
        goto out;
    }
    if (!key_matches(crt, key)) {
        mt_error_set(err,
                     "TLS key %s is not the key of certificate %s; give the private key the"
                     " certificate was issued for",
                     key_path, cert_path);
        goto out;
    }
    time_t now = time(NULL), until = gnutls_x509_crt_get_expiration_time(crt),
           from = gnutls_x509_crt_get_activation_time(crt);
    if (until != (time_t)-1 && until < now) {
        char when[32];
        strftime(when, sizeof when, "%Y-%m-%d", gmtime(&until));
        mt_error_set(err,
                     "TLS certificate %s expired on %s; renew it (a self-signed one: delete it"
                     " and its key, and the registry makes a new one with a new pin)",
                     cert_path, when);
        goto out;
    }
    if (from != (time_t)-1 && from > now + 86400) {
        mt_error_set(err, "TLS certificate %s is not valid yet (check this machine's clock)",
                     cert_path);
        goto out;
    }
    rc = pin_of_crt(crt, id->pin, err);
    if (rc) mt_error_prefix(err, "TLS certificate %s", cert_path);
out:
    if (crt) gnutls_x509_crt_deinit(crt);
    if (key) gnutls_x509_privkey_deinit(key);
    return rc;
}

int mt_tls_identity_load(mt_tls_identity *id, const char *cert_path, const char *key_path,
                         mt_error *err) {
    memset(id, 0, sizeof *id);
    if (!cert_path || !key_path || !*cert_path || !*key_path)
        return mt_error_set(err, "TLS needs both a certificate and a key file");
    size_t n;
    if (!(id->cert_pem = read_pem(cert_path, "certificate", false, &n, err)) ||
        !(id->key_pem = read_pem(key_path, "key", true, &n, err)) ||
        check_pair(id, cert_path, key_path, err)) {
        mt_tls_identity_free(id);
        return -1;
    }
    return 0;
}

/* Adds one SubjectAltName: an IP address when name is one, else a DNS name. */
static int add_san(gnutls_x509_crt_t crt, const char *name) {
    unsigned char ip[16];
    if (inet_pton(AF_INET, name, ip) == 1)
        return gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, ip, 4,
                                                    GNUTLS_FSAN_APPEND);
    if (inet_pton(AF_INET6, name, ip) == 1)
        return gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, ip, 16,
                                                    GNUTLS_FSAN_APPEND);
    return gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_DNSNAME, name,
                                                (unsigned)strlen(name), GNUTLS_FSAN_APPEND);
}

/* The names the certificate carries: host (or, for a wildcard address, this
 * machine's name) and the loopback names. */
static int add_names(gnutls_x509_crt_t crt, const char *host) {
    char self[256] = "";
    const char *first = host;
    if (!host || !*host || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0) {
        if (gethostname(self, sizeof self - 1) != 0 || !self[0])
            snprintf(self, sizeof self, "%s", "localhost");
        first = self;
    }
    int rc = add_san(crt, first);
    static const char *const loop[] = {"localhost", "127.0.0.1", "::1"};
    for (size_t i = 0; rc == 0 && i < sizeof loop / sizeof loop[0]; i++)
        if (strcmp(first, loop[i]) != 0) rc = add_san(crt, loop[i]);
    return rc;
}

/* A new self-signed pair in id (PEM texts). */
static int generate(mt_tls_identity *id, const char *host, mt_error *err) {
    gnutls_x509_privkey_t key = NULL;
    gnutls_x509_crt_t crt = NULL;
    gnutls_datum_t kd = {NULL, 0}, cd = {NULL, 0};
    unsigned char serial[16];
    randombytes_buf(serial, sizeof serial);
    serial[0] &= 0x7f; /* a positive number */
    serial[0] |= 0x01; /* without a leading zero byte */
    time_t now = time(NULL);
    static const char cn[] = "moontail registry";
    int g;
    if ((g = gnutls_x509_privkey_init(&key)) < 0 ||
        (g = gnutls_x509_privkey_generate(
             key, GNUTLS_PK_ECDSA, GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0)) < 0 ||
        (g = gnutls_x509_crt_init(&crt)) < 0 || (g = gnutls_x509_crt_set_version(crt, 3)) < 0 ||
        (g = gnutls_x509_crt_set_serial(crt, serial, sizeof serial)) < 0 ||
        (g = gnutls_x509_crt_set_activation_time(crt, now - 3600)) < 0 ||
        (g = gnutls_x509_crt_set_expiration_time(crt, now + (time_t)VALID_DAYS * 86400)) < 0 ||
        (g = gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, cn,
                                           sizeof cn - 1)) < 0 ||
        (g = gnutls_x509_crt_set_key(crt, key)) < 0 || (g = add_names(crt, host)) < 0 ||
        (g = gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE)) < 0 ||
        (g = gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0)) < 0 ||
        (g = gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0)) < 0 ||
        (g = gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &cd)) < 0 ||
        (g = gnutls_x509_privkey_export2_pkcs8(key, GNUTLS_X509_FMT_PEM, NULL, GNUTLS_PKCS_PLAIN,
                                               &kd)) < 0) {
        mt_error_set(err, "cannot make a self-signed TLS certificate: %s", gnutls_strerror(g));
    } else {
        id->cert_pem = mt_strndup((const char *)cd.data, cd.size);
        id->key_pem = mt_strndup((const char *)kd.data, kd.size);
        if (!id->cert_pem || !id->key_pem) mt_error_set(err, "out of memory");
    }
    if (kd.data) {
        sodium_memzero(kd.data, kd.size);
        gnutls_free(kd.data);
    }
    gnutls_free(cd.data);
    if (crt) gnutls_x509_crt_deinit(crt);
    if (key) gnutls_x509_privkey_deinit(key);
    return g < 0 || !id->cert_pem || !id->key_pem ? -1 : 0;
}

int mt_tls_identity_self_signed(mt_tls_identity *id, const char *cert_path, const char *key_path,
                                const char *host, mt_error *err) {
    memset(id, 0, sizeof *id);
    struct stat sb;
    bool have_cert = stat(cert_path, &sb) == 0, have_key = stat(key_path, &sb) == 0;
    if (have_cert && have_key) return mt_tls_identity_load(id, cert_path, key_path, err);
    if (have_cert || have_key)
        return mt_error_set(err,
                            "the self-signed TLS certificate is half there: %s exists but %s does"
                            " not; restore the missing file, or delete %s to make a new pair"
                            " (with a new pin, which every client must then be given)",
                            have_cert ? cert_path : key_path, have_cert ? key_path : cert_path,
                            have_cert ? cert_path : key_path);
    if (generate(id, host, err) ||
        mt_file_write_atomic(key_path, id->key_pem, strlen(id->key_pem), 0600, err)) {
        mt_tls_identity_free(id);
        return -1;
    }
    /* a key without its certificate would make every later start refuse the half pair */
    bool cert_written =
        mt_file_write_atomic(cert_path, id->cert_pem, strlen(id->cert_pem), 0644, err) == 0;
    if (!cert_written || check_pair(id, cert_path, key_path, err)) {
        unlink(key_path);
        if (cert_written) unlink(cert_path);
        mt_tls_identity_free(id);
        return -1;
    }
    id->generated = true;
    return 0;
}

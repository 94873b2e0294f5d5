/* test_tls_pin.c - the pin of a PEM certificate computed without a TLS
 * library (tls_pin.c) against GnuTLS's (the pin mt_tls_identity_self_signed
 * computes when it makes a certificate): equal for certificates made for an
 * IP address, a name and a wildcard address, with CRLF line ends, with text
 * before the PEM block and with a second certificate after it; every
 * truncation of the PEM text, and damaged base64, are refused with a message,
 * never read past their end (ASan). */
#include "check.h"
#include "moontail/tls_cert.h"

#include <stdint.h>

static void check_host(const char *host) {
    char cert[256], key[256];
    snprintf(cert, sizeof cert, "%s", check_tmp(".crt"));
    snprintf(key, sizeof key, "%s", check_tmp(".key"));
    mt_tls_identity id = {0};
    mt_error err = {{0}};
    if (mt_tls_identity_self_signed(&id, cert, key, host, &err) != 0) {
        CHECK(0, "self-signed certificate for %s: %s", host, err.msg);
        return;
    }
    CHECK(id.generated, "a new certificate for %s", host);
    char pin[MT_TLS_PIN_SIZE] = "";
    size_t n = strlen(id.cert_pem);
    CHECK(mt_tls_pin_of_pem(id.cert_pem, n, pin, &err) == 0 && strcmp(pin, id.pin) == 0,
          "%s: pin %s, GnuTLS says %s (%s)", host, pin, id.pin, err.msg);
    CHECK(mt_tls_pin_valid(pin), "%s: the pin %s is not well formed", host, pin);

    /* CRLF line ends, text before, a second certificate after */
    char *crlf = malloc(2 * n + 200), *p = crlf;
    p += sprintf(p, "subject=CN = %s\r\n", host);
    for (size_t i = 0; i < n; i++) {
        if (id.cert_pem[i] == '\n') *p++ = '\r';
        *p++ = id.cert_pem[i];
    }
    memcpy(p, id.cert_pem, n), p += n;
    *p = 0;
    char pin2[MT_TLS_PIN_SIZE] = "";
    CHECK(mt_tls_pin_of_pem(crlf, strlen(crlf), pin2, &err) == 0 && strcmp(pin2, id.pin) == 0,
          "%s with CRLF, a line before and a chain: %s (%s)", host, pin2, err.msg);
    free(crlf);

    /* every truncation: refused (the END line is gone or the DER is cut) */
    int refused = 0;
    for (size_t cut = 0; cut < n - 26; cut++) {
        char *t = malloc(cut ? cut : 1);
        memcpy(t, id.cert_pem, cut);
        mt_error e2 = {{0}};
        refused += mt_tls_pin_of_pem(t, cut, pin2, &e2) != 0 && e2.msg[0];
        free(t);
    }
    CHECK(refused == (int)(n - 26), "%s: %d of %zu truncations refused", host, refused, n - 26);

    /* a base64 character changed to one that is not base64 */
    char *bad = strdup(id.cert_pem);
    bad[40] = '*';
    mt_error e3 = {{0}};
    CHECK(mt_tls_pin_of_pem(bad, n, pin2, &e3) != 0 && strstr(e3.msg, "base64"),
          "%s: damaged base64: %s", host, e3.msg);
    free(bad);
    mt_tls_identity_free(&id);
    remove(cert);
    remove(key);
}

int main(void) {
    check_host("127.0.0.1");
    check_host("registry.lab.example");
    check_host("0.0.0.0");
    mt_error err = {{0}};
    char pin[MT_TLS_PIN_SIZE];
    CHECK(mt_tls_pin_of_pem("hello", 5, pin, &err) != 0 && strstr(err.msg, "BEGIN"), "not PEM: %s",
          err.msg);
    return check_report("test_tls_pin");
}

/* handshake.c - the transport handshake: hellos in clear (ephemeral X25519 key
 * + Ed25519 identity), session keys from crypto_kx, then one encrypted frame
 * per side holding an Ed25519 signature over the hash of both hellos and the
 * signer's role, followed by the signer's certificate if it has one (cert.h).
 * The server admits a client whose key is authorized or whose certificate
 * comes from a trusted authority, and says so in a last frame (with the
 * reason when it refuses); the client may pin the server's identity. The
 * exact bytes are specified in transport.h. */
#include "moontail/clock.h"
#include "moontail/cert.h"
#include "moontail/transport.h"
#include "net_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- hello ----------------------------------------------------------------- */

#define HELLO_MAGIC "MTN1"
enum { H_MAGIC = 0, H_VERSION = 4, H_FLAGS = 6, H_EPH = 8, H_ID = 40, H_RANDOM = 72 };
_Static_assert(H_RANDOM + 32 == MT_CONN_HELLO_BYTES, "hello layout");
_Static_assert(crypto_kx_PUBLICKEYBYTES == 32 && crypto_sign_PUBLICKEYBYTES == 32, "key sizes");

#define SIG_LABEL_BYTES 16
static const char label_client[] = "MTN1 client auth";
static const char label_server[] = "MTN1 server auth";
_Static_assert(sizeof label_client == SIG_LABEL_BYTES + 1 &&
                   sizeof label_server == SIG_LABEL_BYTES + 1,
               "labels");

typedef struct hello {
    uint8_t raw[MT_CONN_HELLO_BYTES];
} hello;

static void hello_build(hello *h, const uint8_t *eph_pk, const uint8_t *id_pk) {
    memcpy(h->raw + H_MAGIC, HELLO_MAGIC, 4);
    h->raw[H_VERSION] = MT_CONN_VERSION & 0xff;
    h->raw[H_VERSION + 1] = MT_CONN_VERSION >> 8;
    h->raw[H_FLAGS] = h->raw[H_FLAGS + 1] = 0;
    memcpy(h->raw + H_EPH, eph_pk, 32);
    memcpy(h->raw + H_ID, id_pk, 32);
    randombytes_buf(h->raw + H_RANDOM, 32);
}

/* "47 45 54 20 ("GET ")": the first 4 bytes of something that is not a hello,
 * with anything unprintable shown as '.'. */
static void describe_magic(const uint8_t p[4], char out[40]) {
    char txt[5];
    for (int i = 0; i < 4; i++)
        txt[i] = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\' ? (char)p[i] : '.';
    txt[4] = 0;
    snprintf(out, 40, "%02x %02x %02x %02x (\"%s\")", p[0], p[1], p[2], p[3], txt);
}

/* Reads and checks the peer's hello. `who` is "client" or "server". */
static int hello_read(struct mt_conn *c, net_wait w, const char *who, const char *eof_hint,
                      hello *h, mt_error *err) {
    size_t got = 0;
    int rc = net_read_full(c->fd, h->raw, 4, w, &got, err);
    if (rc == NET_OK && memcmp(h->raw, HELLO_MAGIC, 4) != 0) {
        char b[40];
        describe_magic(h->raw, b);
        return mt_error_set(err,
                            "the %s did not send a MoonTail hello: it starts with %s instead of "
                            "\"" HELLO_MAGIC "\"; is it a MoonTail node?",
                            who, b);
    }
    if (rc == NET_OK) {
        size_t more = 0;
        rc = net_read_full(c->fd, h->raw + 4, sizeof h->raw - 4, w, &more, err);
        got += more;
    }
    if (rc == NET_EOF && got == 0)
        return mt_error_set(err, "the %s closed the connection without sending a hello%s", who,
                            eof_hint);
    if (rc == NET_EOF)
        return mt_error_set(err,
                            "the %s closed the connection after %zu of the %d bytes of its hello",
                            who, got, MT_CONN_HELLO_BYTES);
    if (rc == NET_TIMEOUT)
        return mt_error_set(err,
                            "timed out after %d ms waiting for the %s's hello (%zu of %d bytes "
                            "came)",
                            c->timeout_ms, who, got, MT_CONN_HELLO_BYTES);
    if (rc != NET_OK) return -1;
    unsigned version = h->raw[H_VERSION] | (unsigned)h->raw[H_VERSION + 1] << 8;
    unsigned flags = h->raw[H_FLAGS] | (unsigned)h->raw[H_FLAGS + 1] << 8;
    if (version != MT_CONN_VERSION)
        return mt_error_set(err,
                            "the %s speaks transport version %u, this node speaks version %d; "
                            "run the same MoonTail release on both",
                            who, version, MT_CONN_VERSION);
    if (flags != 0)
        return mt_error_set(err,
                            "the %s's hello sets flags 0x%04x, which this version does not know "
                            "(all must be 0)",
                            who, flags);
    return 0;
}

/* ---- auth frames: signature [+ certificate] ------------------------------------ */

#define AUTH_CERT_MAX  1024 /* most certificate bytes an auth frame may carry */
#define VERDICT_ADMIT  0
#define VERDICT_REFUSE 1
#define REFUSAL_MAX    480 /* most reason bytes in a refusal */

/* label || BLAKE2b-256(hello_c || hello_s): the 48 bytes each side signs. */
static void auth_message(uint8_t msg[SIG_LABEL_BYTES + 32], const char *label, const hello *hc,
                         const hello *hs) {
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 32);
    crypto_generichash_update(&st, hc->raw, sizeof hc->raw);
    crypto_generichash_update(&st, hs->raw, sizeof hs->raw);
    memcpy(msg, label, SIG_LABEL_BYTES);
    crypto_generichash_final(&st, msg + SIG_LABEL_BYTES, 32);
}

/* Seals payload as the next frame of c->tx and writes it, after `prefix`
 * (the server sends its hello and its auth frame in one write). */
static int send_frame(struct mt_conn *c, net_wait w, const void *payload, size_t len,
                      const hello *prefix, mt_error *err) {
    size_t flen = 0;
    uint8_t *frame = net_frame_seal(&c->tx, payload, len, &flen);
    uint8_t *out = frame;
    size_t olen = flen;
    if (frame && prefix) {
        out = malloc(sizeof prefix->raw + flen);
        if (out) {
            memcpy(out, prefix->raw, sizeof prefix->raw);
            memcpy(out + sizeof prefix->raw, frame, flen);
            olen += sizeof prefix->raw;
        }
    }
    int rc = out ? net_write_full(c->fd, out, olen, w, err)
                 : mt_error_set(err, "out of memory building the handshake");
    if (out != frame) free(out);
    free(frame);
    if (rc == NET_TIMEOUT)
        return mt_error_set(err, "timed out after %d ms sending the handshake", c->timeout_ms);
    return rc ? -1 : 0;
}

static int send_auth(struct mt_conn *c, net_wait w, const mt_keys *me, const char *label,
                     const hello *hc, const hello *hs, const hello *prefix, mt_error *err) {
    uint8_t payload[crypto_sign_BYTES + MT_CERT_BYTES], msg[SIG_LABEL_BYTES + 32];
    auth_message(msg, label, hc, hs);
    crypto_sign_detached(payload, NULL, msg, sizeof msg, me->sk);
    size_t len = crypto_sign_BYTES;
    if (me->has_cert) {
        memcpy(payload + len, me->cert, MT_CERT_BYTES);
        len += MT_CERT_BYTES;
    }
    return send_frame(c, w, payload, len, prefix, err);
}

/* Receives and checks the peer's auth frame; *cert (malloc'd, or NULL when
 * the peer has none) receives its certificate bytes. */
static int recv_auth(struct mt_conn *c, net_wait w, const char *who, const char *eof_hint,
                     const uint8_t *peer_id, const char *label, const hello *hc, const hello *hs,
                     uint8_t **cert, size_t *cert_len, mt_error *err) {
    uint8_t *p = NULL;
    size_t len = 0;
    bool mid = false;
    *cert = NULL;
    *cert_len = 0;
    int rc = net_frame_recv(c->fd, &c->rx, crypto_sign_BYTES, crypto_sign_BYTES + AUTH_CERT_MAX, w,
                            (void **)&p, &len, &mid, err);
    if (rc == NET_EOF)
        return mt_error_set(err, "the %s closed the connection before proving its identity%s", who,
                            eof_hint);
    if (rc == NET_TIMEOUT)
        return mt_error_set(err, "timed out after %d ms waiting for the %s to prove its identity",
                            c->timeout_ms, who);
    if (rc != NET_OK) {
        mt_error_prefix(err, "the %s's identity proof", who);
        return -1;
    }
    uint8_t msg[SIG_LABEL_BYTES + 32];
    auth_message(msg, label, hc, hs);
    if (crypto_sign_verify_detached(p, msg, sizeof msg, peer_id) != 0) {
        free(p);
        char hex[MT_KEYS_HEX_SIZE];
        mt_keys_pk_to_hex(peer_id, hex);
        return mt_error_set(err,
                            "the %s's signature does not verify for key %s: it does not hold "
                            "that key, or a man in the middle altered the handshake",
                            who, hex);
    }
    if (len > crypto_sign_BYTES) { /* the certificate: the payload's bytes after the signature */
        memmove(p, p + crypto_sign_BYTES, len - crypto_sign_BYTES);
        *cert = p;
        *cert_len = len - crypto_sign_BYTES;
    } else {
        free(p);
    }
    return 0;
}

/* The server's last handshake frame: admitted, or refused with a reason. */
static int send_verdict(struct mt_conn *c, net_wait w, const char *refusal, mt_error *err) {
    uint8_t v[1 + REFUSAL_MAX];
    size_t n = 1;
    v[0] = refusal ? VERDICT_REFUSE : VERDICT_ADMIT;
    if (refusal) {
        size_t rl = strlen(refusal);
        if (rl > REFUSAL_MAX) rl = REFUSAL_MAX;
        memcpy(v + 1, refusal, rl);
        n += rl;
    }
    return send_frame(c, w, v, n, NULL, err);
}

static int recv_verdict(struct mt_conn *c, net_wait w, const char *my_hex, mt_error *err) {
    uint8_t *v = NULL;
    size_t len = 0;
    bool mid = false;
    int rc = net_frame_recv(c->fd, &c->rx, 1, 1 + REFUSAL_MAX, w, (void **)&v, &len, &mid, err);
    if (rc == NET_EOF)
        return mt_error_set(err,
                            "the server closed the connection before saying whether it admits "
                            "this node's key %s",
                            my_hex);
    if (rc == NET_TIMEOUT)
        return mt_error_set(err,
                            "timed out after %d ms waiting for the server to admit this node's "
                            "key %s",
                            c->timeout_ms, my_hex);
    if (rc != NET_OK) {
        mt_error_prefix(err, "the server's answer to the handshake");
        return -1;
    }
    if (v[0] == VERDICT_ADMIT && len == 1)
        rc = 0;
    else if (v[0] == VERDICT_REFUSE) {
        /* the reason comes from the wire: anything unprintable is shown as '?' */
        char why[REFUSAL_MAX + 1];
        for (size_t i = 1; i < len; i++)
            why[i - 1] = v[i] >= 0x20 && v[i] < 0x7f ? (char)v[i] : '?';
        why[len - 1] = 0;
        rc = mt_error_set(err, "the server refused this node's key %s: %s", my_hex,
                          len > 1 ? why : "(no reason given)");
    } else {
        rc = mt_error_set(err,
                          "the server's answer to the handshake is malformed (verdict %u in %zu "
                          "bytes; 0 in 1 byte or 1 with a reason expected)",
                          v[0], len);
    }
    free(v);
    return rc;
}

/* ---- the two roles ------------------------------------------------------------- */

static net_wait handshake_wait(const struct mt_conn *c) {
    return (net_wait){.idle_ms = 0,
                      .deadline_ms = c->timeout_ms > 0 ? mt_mono_ms() + c->timeout_ms : -1};
}

int net_handshake_client(struct mt_conn *c, const mt_keys *me, const uint8_t *pinned_pk,
                         mt_error *err) {
    net_wait w = handshake_wait(c);
    uint8_t eph_pk[crypto_kx_PUBLICKEYBYTES], eph_sk[crypto_kx_SECRETKEYBYTES];
    char my_hex[MT_KEYS_HEX_SIZE], hint[300];
    hello hc, hs;
    uint8_t *cert = NULL;
    size_t cert_len = 0;
    int rc = -1;
    crypto_kx_keypair(eph_pk, eph_sk);
    hello_build(&hc, eph_pk, me->pk);
    mt_keys_pk_to_hex(me->pk, my_hex);
    snprintf(hint, sizeof hint,
             "; it probably does not accept this node's key %s (add it to the server's "
             "authorized keys, or have the server trust an authority that certifies it)",
             my_hex);
    int wr = net_write_full(c->fd, hc.raw, sizeof hc.raw, w, err);
    if (wr) {
        if (wr == NET_TIMEOUT) mt_error_set(err, "timed out sending the hello");
        goto out;
    }
    if (hello_read(c, w, "server", hint, &hs, err)) goto out;
    const uint8_t *server_id = hs.raw + H_ID;
    if (pinned_pk && sodium_memcmp(pinned_pk, server_id, MT_KEYS_PUBLIC_BYTES) != 0) {
        char want[MT_KEYS_HEX_SIZE], got[MT_KEYS_HEX_SIZE];
        mt_keys_pk_to_hex(pinned_pk, want);
        mt_keys_pk_to_hex(server_id, got);
        mt_error_set(err,
                     "the server presents key %s but %s was expected; refusing to talk to it "
                     "(wrong address, a replaced node, or a man in the middle)",
                     got, want);
        goto out;
    }
    if (crypto_kx_client_session_keys(c->rx.key, c->tx.key, eph_pk, eph_sk, hs.raw + H_EPH)) {
        mt_error_set(err, "the server's ephemeral key is invalid (a low-order point)");
        goto out;
    }
    sodium_memzero(eph_sk, sizeof eph_sk);
    if (recv_auth(c, w, "server", "", server_id, label_server, &hc, &hs, &cert, &cert_len, err))
        goto out;
    if (send_auth(c, w, me, label_client, &hc, &hs, NULL, err)) goto out;
    if (recv_verdict(c, w, my_hex, err)) goto out;
    memcpy(c->peer_pk, server_id, MT_KEYS_PUBLIC_BYTES);
    mt_keys_pk_to_hex(server_id, c->peer_name);
    if (cert) {
        /* The client trusts the server by its (pinned) key; the certificate is
         * information, checked against the issuer it names (see transport.h). */
        mt_error ce = {{0}};
        c->peer_has_cert =
            mt_cert_verify(cert, cert_len, MT_CERT_ANY_ISSUER, 0, server_id, mt_cert_now(),
                           MT_CERT_DEFAULT_SKEW, &c->peer_cert, &ce) == 0;
        if (!c->peer_has_cert) snprintf(c->peer_cert_note, sizeof c->peer_cert_note, "%s", ce.msg);
    }
    rc = 0;
out:
    free(cert);
    sodium_memzero(eph_sk, sizeof eph_sk);
    return rc;
}

int net_handshake_server(struct mt_conn *c, const mt_keys *me, const mt_keys_authorized *auth,
                         mt_error *err) {
    net_wait w = handshake_wait(c);
    uint8_t eph_pk[crypto_kx_PUBLICKEYBYTES], eph_sk[crypto_kx_SECRETKEYBYTES];
    char hex[MT_KEYS_HEX_SIZE];
    hello hc, hs;
    uint8_t *cert = NULL;
    size_t cert_len = 0;
    int rc = -1;
    if (hello_read(c, w, "client", "", &hc, err)) return -1;
    const uint8_t *client_id = hc.raw + H_ID;
    const char *name = mt_keys_authorized_find(auth, client_id); /* stays valid (keys.h) */
    mt_keys_pk_to_hex(client_id, hex);
    if (!name && mt_keys_authorized_authority_count(auth) == 0) {
        /* No certificate could admit it: refused before this node says
         * anything about itself. */
        return mt_error_set(err,
                            "the client's key %s is not in the authorized keys; add a line "
                            "'%s NAME' to the authorized-keys file to admit it",
                            hex, hex);
    }
    crypto_kx_keypair(eph_pk, eph_sk);
    hello_build(&hs, eph_pk, me->pk);
    if (crypto_kx_server_session_keys(c->rx.key, c->tx.key, eph_pk, eph_sk, hc.raw + H_EPH)) {
        mt_error_set(err, "the client's ephemeral key is invalid (a low-order point)");
        goto out;
    }
    sodium_memzero(eph_sk, sizeof eph_sk);
    if (send_auth(c, w, me, label_server, &hc, &hs, &hs, err)) goto out;
    if (recv_auth(c, w, "client",
                  " (it may have refused this node's key, e.g. a different pinned key)", client_id,
                  label_client, &hc, &hs, &cert, &cert_len, err))
        goto out;
    /* Admitted by its key, or else by its certificate. */
    mt_error ce = {{0}};
    if (cert)
        c->peer_has_cert =
            mt_keys_authorized_check_cert(auth, cert, cert_len, client_id, mt_cert_now(),
                                          MT_CERT_DEFAULT_SKEW, &c->peer_cert, &ce) == 0;
    if (cert && !c->peer_has_cert)
        snprintf(c->peer_cert_note, sizeof c->peer_cert_note, "%s", ce.msg);
    if (!name && !c->peer_has_cert) {
        /* the reason goes to the client (which knows its key) and, with the
         * key, to the server's log */
        char why[sizeof ce.msg];
        if (cert)
            snprintf(why, sizeof why, "not in the authorized keys, and its %.400s", ce.msg);
        else
            snprintf(why, sizeof why,
                     "not in the authorized keys and it presented no certificate; list the key, "
                     "or give it a certificate from a trusted authority");
        mt_error se = {{0}};
        send_verdict(c, w, why, &se); /* best effort: the refusal stands either way */
        mt_error_set(err, "the client's key %s is %s", hex, why);
        goto out;
    }
    if (send_verdict(c, w, NULL, err)) goto out;
    memcpy(c->peer_pk, client_id, MT_KEYS_PUBLIC_BYTES);
    snprintf(c->peer_name, sizeof c->peer_name, "%s", name ? name : hex);
    rc = 0;
out:
    free(cert);
    sodium_memzero(eph_sk, sizeof eph_sk);
    return rc;
}

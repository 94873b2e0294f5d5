/* handshake.c - the transport handshake: hellos in clear (ephemeral X25519 key
 * + Ed25519 identity), session keys from crypto_kx, then one encrypted frame
 * per side holding an Ed25519 signature over the hash of both hellos and the
 * signer's role. The server admits only authorized identities, the client may
 * pin the server's identity. The exact bytes are specified in transport.h. */
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

/* ---- signatures -------------------------------------------------------------- */

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

static int send_auth(struct mt_conn *c, net_wait w, const mt_keys *me, const char *label,
                     const hello *hc, const hello *hs, const hello *prefix, mt_error *err) {
    uint8_t msg[SIG_LABEL_BYTES + 32], sig[crypto_sign_BYTES];
    auth_message(msg, label, hc, hs);
    crypto_sign_detached(sig, NULL, msg, sizeof msg, me->sk);
    size_t flen = 0;
    uint8_t *frame = net_frame_seal(&c->tx, sig, sizeof sig, &flen);
    uint8_t *out = frame;
    size_t olen = flen;
    if (frame && prefix) { /* the server sends hello + auth frame in one write */
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

static int recv_auth(struct mt_conn *c, net_wait w, const char *who, const char *eof_hint,
                     const uint8_t *peer_id, const char *label, const hello *hc, const hello *hs,
                     mt_error *err) {
    void *sig = NULL;
    size_t len = 0;
    bool mid = false;
    int rc = net_frame_recv(c->fd, &c->rx, crypto_sign_BYTES, crypto_sign_BYTES, w, &sig, &len,
                            &mid, err);
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
    rc = crypto_sign_verify_detached(sig, msg, sizeof msg, peer_id);
    free(sig);
    if (rc != 0) {
        char hex[MT_KEYS_HEX_SIZE];
        mt_keys_pk_to_hex(peer_id, hex);
        return mt_error_set(err,
                            "the %s's signature does not verify for key %s: it does not hold "
                            "that key, or a man in the middle altered the handshake",
                            who, hex);
    }
    return 0;
}

/* ---- the two roles ------------------------------------------------------------- */

static net_wait handshake_wait(const struct mt_conn *c) {
    return (net_wait){.idle_ms = 0,
                      .deadline_ms = c->timeout_ms > 0 ? net_now_ms() + c->timeout_ms : -1};
}

int net_handshake_client(struct mt_conn *c, const mt_keys *me, const uint8_t *pinned_pk,
                         mt_error *err) {
    net_wait w = handshake_wait(c);
    uint8_t eph_pk[crypto_kx_PUBLICKEYBYTES], eph_sk[crypto_kx_SECRETKEYBYTES];
    char my_hex[MT_KEYS_HEX_SIZE], hint[200];
    hello hc, hs;
    int rc = -1;
    crypto_kx_keypair(eph_pk, eph_sk);
    hello_build(&hc, eph_pk, me->pk);
    mt_keys_pk_to_hex(me->pk, my_hex);
    snprintf(hint, sizeof hint,
             "; it probably does not accept this node's key %s (add it to the server's "
             "authorized keys)",
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
    if (recv_auth(c, w, "server", "", server_id, label_server, &hc, &hs, err)) goto out;
    if (send_auth(c, w, me, label_client, &hc, &hs, NULL, err)) goto out;
    memcpy(c->peer_pk, server_id, MT_KEYS_PUBLIC_BYTES);
    mt_keys_pk_to_hex(server_id, c->peer_name);
    rc = 0;
out:
    sodium_memzero(eph_sk, sizeof eph_sk);
    return rc;
}

int net_handshake_server(struct mt_conn *c, const mt_keys *me, const mt_keys_authorized *auth,
                         mt_error *err) {
    net_wait w = handshake_wait(c);
    uint8_t eph_pk[crypto_kx_PUBLICKEYBYTES], eph_sk[crypto_kx_SECRETKEYBYTES];
    hello hc, hs;
    int rc = -1;
    if (hello_read(c, w, "client", "", &hc, err)) return -1;
    const uint8_t *client_id = hc.raw + H_ID;
    const char *name = mt_keys_authorized_find(auth, client_id);
    if (!name) {
        /* Refused before this node says anything about itself. */
        char hex[MT_KEYS_HEX_SIZE];
        mt_keys_pk_to_hex(client_id, hex);
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
                  label_client, &hc, &hs, err))
        goto out;
    memcpy(c->peer_pk, client_id, MT_KEYS_PUBLIC_BYTES);
    snprintf(c->peer_name, sizeof c->peer_name, "%s", name);
    rc = 0;
out:
    sodium_memzero(eph_sk, sizeof eph_sk);
    return rc;
}

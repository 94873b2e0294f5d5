/* relay.h - the registry's relay for volunteers behind NAT, and the node's
 * side of it (docs/volunteers.md, "Behind NAT: tunnels and the relay").
 *
 * A node that cannot accept connections from the internet keeps one
 * outbound *control connection* to the relay, authenticated with its node
 * token. The relay gives it a *public port* of its own. When a peer (a
 * requester or another node) connects to that port, the relay asks the node,
 * over the control connection, to open a *data connection* back to the relay,
 * and then copies bytes between the peer and that data connection until
 * either side closes. The node copies the data connection to its own
 * data-plane server on loopback.
 *
 * The relay never decrypts anything: what it copies is the data plane's own
 * transport (transport.h), encrypted and authenticated end to end between the
 * peer and the node, and the peer pins the node's key from its route. The
 * relay sees which public port talks to which node, when, and how many bytes;
 * a relay that misbehaves can delay, cut or drop connections, never read or
 * alter them unnoticed. Nothing here includes the transport's keys.
 *
 * ---- Wire format (version 1; integers little-endian) ------------------------
 *
 * Every connection to the relay port (--relay-listen) gets, at once, the
 * relay hello, 40 bytes:
 *     off size
 *       0    4  magic "MTR1"
 *       4    2  u16 version = 1
 *       6    2  u16 flags = 0
 *       8   32  challenge: random bytes, new for each connection
 * and must answer within 5 s with one of two client hellos. Their first 6
 * bytes are
 *       0    4  magic "MTR1"
 *       4    1  kind: 1 = control, 2 = data
 *       5    1  reserved, 0
 * Control hello (kind 1), 46 bytes in all:
 *       6    8  u64 node id (from joining the registry), 1 .. 2^63-1
 *      14   32  proof = BLAKE2b-256 keyed (crypto_generichash) with
 *                 key     = BLAKE2b-256(node token as ASCII) (what the registry stores),
 *                 message = "MTR1 relay control" (18 ASCII bytes) || challenge || node id (8 bytes)
 * Data hello (kind 2), 22 bytes in all:
 *       6   16  cookie, from an OPEN message of the node's control connection
 * The relay reads exactly the hello, nothing more. After a data hello with a
 * cookie it is waiting for, the connection is spliced to that peer: every
 * later byte, both ways, belongs to the data plane.
 *
 * Control messages, after the control hello: u8 type, u8 length, then length
 * bytes.
 *   relay -> node
 *     0x01 WELCOME   length 1..127: the node's public address, "HOST:PORT" in ASCII
 *     0x02 OPEN      length 16: a cookie; open a data connection with it
 *     0x03 PING      length 0 (every 10 s; answer PONG)
 *     0x05 REFUSED   length 1..255: why, in ASCII; the relay closes after it
 *   node -> relay
 *     0x04 PONG      length 0
 * Any other type, a wrong length, or a byte that does not belong to a message
 * ends that control connection (and with it the node's port and relayed
 * connections). The relay drops a node it has not heard from for 30 s; the
 * node reconnects when it has not heard from the relay for 30 s.
 *
 * Cookies travel in clear (as the node token does on the registry's
 * plain-HTTP API). The token itself never crosses a relay connection, only a
 * proof bound to a fresh challenge, so a recorded proof cannot be replayed.
 * A stolen cookie only lets its thief connect to the peer that waits for it,
 * which then fails the data plane's handshake (the peer pins the node's key).
 *
 * ---- Limits -------------------------------------------------------------------
 * Per node at most max_conns relayed or waiting connections: at the limit a
 * new peer takes the place of the oldest relayed connection whose peer has
 * sent nothing for 1 s (a real peer sends the data plane's hello at once),
 * else it is closed at once. Each direction of a relayed connection buffers
 * at most buffer_bytes; a relayed connection idle for idle_ms is closed; a
 * peer whose node does not open its data connection within 10 s is closed.
 * At most 256 connections may be in their hello at once: a new one closes the
 * oldest, so idle connections cannot keep nodes out for long (a real hello
 * takes one round trip; a flood faster than 256 connections per round trip
 * still can). A node whose control connection ends loses its port and its
 * relayed connections; when it comes back it gets the same port if that port
 * is still free. Floods can slow a relay down; they cannot make it drop a
 * node's control connection or another node's relayed connections. */
#ifndef MOONTAIL_RELAY_H
#define MOONTAIL_RELAY_H

#include "moontail/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MT_RELAY_MAGIC           "MTR1"
#define MT_RELAY_VERSION         1
#define MT_RELAY_HELLO_BYTES     40
#define MT_RELAY_CONTROL_BYTES   46
#define MT_RELAY_DATA_BYTES      22
#define MT_RELAY_CHALLENGE_BYTES 32
#define MT_RELAY_COOKIE_BYTES    16
#define MT_RELAY_KIND_CONTROL    1
#define MT_RELAY_KIND_DATA       2
#define MT_RELAY_MSG_WELCOME     0x01
#define MT_RELAY_MSG_OPEN        0x02
#define MT_RELAY_MSG_PING        0x03
#define MT_RELAY_MSG_PONG        0x04
#define MT_RELAY_MSG_REFUSED     0x05

/* key = BLAKE2b-256(token). */
void mt_relay_token_key(const char *token, uint8_t key[32]);
/* The control hello's proof for node_id answering challenge. */
void mt_relay_proof(const uint8_t key[32], const uint8_t challenge[MT_RELAY_CHALLENGE_BYTES],
                    int64_t node_id, uint8_t proof[32]);

/* ---- the relay (runs inside `moontail registry --relay-listen`) -------------------- */

/* Checks a control hello: 0 when proof is right for node_id, else -1 with why
 * (a sentence for the node's log). Runs on the relay's thread. */
typedef int (*mt_relay_auth_fn)(void *ctx, int64_t node_id,
                                const uint8_t challenge[MT_RELAY_CHALLENGE_BYTES],
                                const uint8_t proof[32], char *why, size_t why_size);

typedef struct mt_relay_config {
    const char *listen;      /* where nodes connect, "HOST:PORT" (port 0 picks one) */
    const char *public_host; /* the name nodes and peers reach this machine at
                                (NULL: the host of listen, which must not be a wildcard) */
    int port_lo, port_hi;    /* public ports handed to nodes (0, 0: any free port) */
    int max_conns;           /* per node (<= 0: 64) */
    size_t buffer_bytes;     /* per direction of a relayed connection (0: 64 KiB) */
    int idle_ms;             /* a relayed connection idle this long is closed (<= 0: 10 min) */
    mt_relay_auth_fn auth;
    void *auth_ctx;
    bool quiet;
} mt_relay_config;

typedef struct mt_relay mt_relay;

/* Listens and starts the relay's thread. */
mt_relay *mt_relay_start(const mt_relay_config *cfg, mt_error *err);
/* Closes every connection and the thread. */
void mt_relay_stop(mt_relay *r);
/* "PUBLIC_HOST:PORT" where nodes connect (the port as bound). */
const char *mt_relay_addr(const mt_relay *r);

typedef struct mt_relay_stats {
    int nodes, waiting, relayed, hellos;
    uint64_t refused; /* connections closed for a bad hello, a timeout or a limit */
} mt_relay_stats;
void mt_relay_get_stats(mt_relay *r, mt_relay_stats *out);

/* ---- the node's side ------------------------------------------------------------------ */

typedef struct mt_relay_client_config {
    const char *relay; /* the relay's "HOST:PORT" (the registry's join answer) */
    const char *local; /* this node's data-plane server, "127.0.0.1:PORT" */
    int64_t node_id;
    const char *token;            /* the node token */
    int max_conns;                /* relayed connections at once (<= 0: 256; the relay has its own
                                     limit) */
    void (*on_change)(void *ctx); /* the public address changed (called without locks) */
    void *ctx;
    const char *log_name; /* prefix of log lines */
    bool quiet;
} mt_relay_client_config;

typedef struct mt_relay_client mt_relay_client;

/* Starts the thread that keeps the control connection (reconnecting with
 * backoff, 1 s doubling to 30 s) and relays connections to `local`. */
mt_relay_client *mt_relay_client_start(const mt_relay_client_config *cfg, mt_error *err);
void mt_relay_client_stop(mt_relay_client *c);
/* New credentials (after the node joined again), used from the next connection. */
void mt_relay_client_set_auth(mt_relay_client *c, int64_t node_id, const char *token);
/* The public address while the control connection is up, else "". */
void mt_relay_client_addr(mt_relay_client *c, char *out, size_t size);
/* Waits up to timeout_ms for a public address. 0, or -1 with err saying why
 * (the relay's refusal or the last connection error). */
int mt_relay_client_wait(mt_relay_client *c, int timeout_ms, char *out, size_t size, mt_error *err);

#endif

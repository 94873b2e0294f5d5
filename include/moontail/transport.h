/* transport.h - the data plane's transport: mutually authenticated, encrypted,
 * length-prefixed frames over one TCP connection (libsodium), plus the TCP
 * helpers to listen, accept and connect with strict address parsing.
 *
 * Every connection proves both identities (Ed25519 keys, see keys.h), is
 * forward secret (a fresh X25519 key pair per connection), and carries frames
 * that cannot be read, altered, replayed, dropped or reordered unnoticed.
 * A client is admitted when its key is in the server's authorized set, or when
 * it presents a valid certificate (cert.h) for that key from an authority the
 * server trusts. Nothing read from the socket is trusted: each field is
 * checked, and any violation ends that connection (only) with an error saying
 * what was wrong.
 *
 * ---- Wire format (version 3; all integers little-endian) -------------------
 *
 * Version 3 changes only the data plane (proto.h: one-way passes); the hello,
 * handshake and frames are version 2's. Peers of different versions refuse
 * each other at the hello.
 *
 * Hello, 104 bytes, sent in clear by each side:
 *     off  size
 *       0     4  magic "MTN1"
 *       4     2  u16 version = 3
 *       6     2  u16 flags = 0 (reserved; non-zero is refused)
 *       8    32  ephemeral X25519 public key (crypto_kx_keypair, new per connection)
 *      40    32  Ed25519 identity public key (keys.h)
 *      72    32  random bytes
 *
 * Frame: u32 L (length of what follows), then L bytes
 *     = crypto_aead_xchacha20poly1305_ietf ciphertext of the payload + 16-byte tag,
 *   so the payload is L - 16 bytes (0 allowed; L < 16 is refused).
 *   key   = this direction's session key:
 *             client: (rx, tx) = crypto_kx_client_session_keys(client eph, server eph pk)
 *             server: (rx, tx) = crypto_kx_server_session_keys(server eph, client eph pk)
 *   nonce = 24 bytes: u64 frame counter of this direction (first frame 0, then +1)
 *           in bytes 0..7, bytes 8..23 zero. The receiver only accepts the next
 *           counter, so a replayed, dropped or reordered frame fails to decrypt.
 *   ad    = the 4 header bytes (so the length cannot be altered either).
 *   The receiver refuses L - 16 > max payload (default 64 MiB) before allocating.
 *
 * Handshake (the initiator of the TCP connection is the client):
 *   1. client -> server  hello_c
 *   2. server: checks hello_c. If the client's identity key is not in the
 *      authorized set and the server trusts no authority, it closes without
 *      sending anything. Otherwise:
 *      server -> client  hello_s, then frame 0 (server->client): auth_s
 *   3. client: checks hello_s, the pinned server key if one was given, and auth_s;
 *      client -> server  frame 0 (client->server): auth_c
 *   4. server: checks auth_c; admits the client if its key is authorized, or
 *      else if its certificate passes mt_keys_authorized_check_cert (issued by
 *      a trusted authority, for exactly that key, valid now give or take
 *      MT_CERT_DEFAULT_SKEW seconds);
 *      server -> client  frame 1 (server->client): verdict
 *   5. client: checks the verdict. Application frames follow, counters starting
 *      at 1 (client->server) and 2 (server->client).
 *   transcript = crypto_generichash (BLAKE2b, 32 bytes, no key) of hello_c || hello_s
 *   sig_x      = crypto_sign_detached (Ed25519, 64 bytes) by x's identity key over
 *                the 16 ASCII bytes "MTN1 client auth" or "MTN1 server auth"
 *                followed by the 32-byte transcript (48 bytes signed).
 *   auth_x     = sig_x, then x's certificate (cert.h, 168 bytes) if x has one:
 *                a 64-byte (L = 80) or 232-byte (L = 248) payload. A receiver
 *                takes any bytes after the signature (at most 1024) as the
 *                certificate and refuses longer payloads.
 *   verdict    = 1 byte 0 (admitted; L = 17), or 1 byte 1 (refused) followed by
 *                at most 480 bytes of ASCII saying why (the server closes after it).
 *   A certificate is not covered by the signature: it is public, names the key
 *   it vouches for, and arrives under session keys only the signer shares.
 * Identity keys travel in clear in the hellos: an observer of the network can
 * tell which nodes talk to each other, though not what they say. A server that
 * trusts an authority completes steps 2-3 with any client before refusing it,
 * so it reveals its own identity key to anyone who connects.
 *
 * ---- Certificates after the handshake ----------------------------------------
 * Each side can read the peer's certificate (mt_conn_peer_cert). The server
 * has checked it against its trusted authorities. The client trusts the
 * server by its pinned key and checks the certificate only against the issuer
 * it names (signature, subject, time): compare ->issuer with the authority
 * you expect before relying on it. A presented certificate that fails its
 * checks does not break the handshake when the key is admitted anyway (an
 * authorized client, any server); mt_conn_peer_cert is then NULL and
 * mt_conn_peer_cert_note says why.
 *
 * ---- Threads -----------------------------------------------------------------
 * One connection may be used by one thread sending and another receiving at the
 * same time; two threads must not send (or receive) on it concurrently. Close it
 * only when no thread is using it. Connections share nothing with each other.
 *
 * ---- Errors --------------------------------------------------------------------
 * A failed handshake closes the socket and returns NULL with the reason in err.
 * After a send or receive error (other than a receive timeout before any byte
 * of a frame) the connection is shut down: every later call fails with the
 * first reason, which mt_conn_reason() also returns for the server's log. */
#ifndef MOONTAIL_TRANSPORT_H
#define MOONTAIL_TRANSPORT_H

#include "moontail/cert.h"
#include "moontail/error.h"
#include "moontail/keys.h"
#include "moontail/sock.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MT_CONN_VERSION             3
#define MT_CONN_HELLO_BYTES         104
#define MT_CONN_DEFAULT_MAX_PAYLOAD ((size_t)64 << 20)
#define MT_CONN_MAX_PAYLOAD_LIMIT   ((size_t)UINT32_MAX - 16) /* what the header can describe */

typedef struct mt_conn mt_conn;

/* ---- connections ---------------------------------------------------------- */

/* Runs the client side of the handshake on a connected socket fd; the
 * connection owns fd from here on (it is closed on failure too). If pinned_pk is
 * not NULL the server must prove that identity. timeout_ms bounds the whole
 * handshake and then each wait of send/recv (<= 0: wait forever). */
mt_conn *mt_conn_client(mt_sock fd, const mt_keys *me, const uint8_t *pinned_pk, int timeout_ms,
                        mt_error *err);

/* The server side: the client must prove an identity that is in `authorized`
 * or present a certificate from one of its authorities (the set may be
 * shared by many threads at once). */
mt_conn *mt_conn_server(mt_sock fd, const mt_keys *me, const mt_keys_authorized *authorized,
                        int timeout_ms, mt_error *err);

/* Sends one frame with a payload of len bytes (0 allowed, at most the max
 * payload). Returns 0 or -1. A payload that is too large is refused without
 * touching the connection; any other failure breaks it. */
int mt_conn_send(mt_conn *c, const void *buf, size_t len, mt_error *err);

/* Receives one frame. Returns 0 with *buf (malloc'd, never NULL, free it) and
 * *len; 1 if the peer closed the connection cleanly between frames (*buf NULL).
 * Note a TCP close is not authenticated: a protocol that must tell "done" from
 * "cut off" says so in its own frames. -1 on error: a timeout with no byte of
 * the next frame received leaves the connection usable (mt_conn_is_open); any
 * malformed, oversized, truncated or unauthentic frame breaks it. */
int mt_conn_recv(mt_conn *c, void **buf, size_t *len, mt_error *err);

/* The peer's identity: its name from the authorized set (server side), else
 * its hex key (a client names servers by key). Valid until mt_conn_close. */
const char *mt_conn_peer_name(const mt_conn *c);
const uint8_t *mt_conn_peer_key(const mt_conn *c);
/* The peer's certificate as checked in the handshake (role, account,
 * not_after, ...; see "Certificates after the handshake" above), or NULL if it
 * presented none or it was not accepted. Valid until mt_conn_close. */
const mt_cert *mt_conn_peer_cert(const mt_conn *c);
/* Why a certificate the peer presented was not accepted, or "". */
const char *mt_conn_peer_cert_note(const mt_conn *c);

/* Changes the idle limit of each later wait in send/recv (<= 0: none). Call
 * these two setters while no other thread is using the connection. */
void mt_conn_set_timeout(mt_conn *c, int timeout_ms);
/* Largest payload accepted from and sent to the peer, in [0, MT_CONN_MAX_PAYLOAD_LIMIT].
 * Both ends should agree on it (the protocol above decides). */
int mt_conn_set_max_payload(mt_conn *c, size_t max_payload, mt_error *err);

/* false once the connection has failed (mt_conn_reason says why). */
bool mt_conn_is_open(mt_conn *c);
const char *mt_conn_reason(mt_conn *c);
/* For a side that only sends (one-way messages, proto.h): true, and c broken,
 * when the peer closed the connection or sent something (a peer that never
 * answers has nothing to say but its end). Does not wait. */
bool mt_conn_peer_closed(mt_conn *c);

/* Shuts the connection down, closes its socket, wipes its keys, frees it. */
void mt_conn_close(mt_conn *c);

/* ---- TCP helpers ------------------------------------------------------------
 * Addresses are "HOST:PORT" with HOST an IPv4 address, an IPv6 address in
 * brackets ("[::1]:7000"), "localhost", a host name (connect only), or empty
 * (":7000" = 127.0.0.1, loopback). Listening on all interfaces must be asked
 * for explicitly with "0.0.0.0:PORT" or "[::]:PORT". PORT is decimal,
 * 1-65535 (0 allowed to listen: the system picks a free port). Sockets are
 * close-on-exec; connected ones have TCP_NODELAY. */

/* A listening socket, or MT_SOCK_NONE with err (and errno set, e.g. EADDRINUSE
 * when another socket holds the port). */
mt_sock mt_listen_tcp(const char *addr, mt_error *err);
/* Whether addr can be listened on now, found by listening on it and closing the
 * socket again (before a long start, so that a port another process holds is
 * reported at once): 0 free (a port 0, any free one, is not tried); 1 another
 * socket holds the port (EADDRINUSE); -1 another failure (a malformed address,
 * one that no interface has). err says why for 1 and -1 and names addr. */
int mt_listen_probe(const char *addr, mt_error *err);
/* Whether a listen address stays on this machine: 127.x.x.x, [::1],
 * localhost or an empty host. (0.0.0.0 and [::] are every interface.) */
bool mt_addr_loopback(const char *addr);
/* The port a socket is bound to (after listening on port 0), or -1. */
int mt_listen_port(mt_sock fd);
/* Waits up to timeout_ms (<= 0: forever) for a connection. Returns its socket
 * and writes the peer's "ip:port" into peer (if not NULL); MT_SOCK_NONE on a
 * timeout (errno ETIMEDOUT) or an error (err set in both cases). */
mt_sock mt_accept_tcp(mt_sock listen_fd, int timeout_ms, char *peer, size_t peer_size,
                      mt_error *err);
/* Connects to "host:port", trying each address the name resolves to, each for
 * up to timeout_ms (<= 0: the system's limit). Returns the fd or -1 with err. */
mt_sock mt_connect_tcp(const char *addr, int timeout_ms, mt_error *err);

#endif

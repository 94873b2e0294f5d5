/* net_internal.h - pieces shared by the files of the transport (src/net):
 * libsodium start-up, blocking socket I/O with timeouts, the encrypted frame
 * codec, the handshake and the connection object itself. Not a public API;
 * include/moontail/transport.h is. */
#ifndef MOONTAIL_NET_INTERNAL_H
#define MOONTAIL_NET_INTERNAL_H

#include "moontail/error.h"
#include "moontail/keys.h"
#include "moontail/file.h"
#include "moontail/sock.h"

#include <pthread.h>
#include <sodium.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- libsodium ----------------------------------------------------------- */

/* sodium_init once (thread-safe, idempotent); -1 with a message on failure. */
int net_sodium_init(mt_error *err);

/* ---- small files and hex (net_common.c) ------------------------------------ */

/* Decodes exactly 2*n hex digits (either case) from s[0..len) into out;
 * false for anything else. */
bool net_hex_decode(uint8_t *out, size_t n, const char *s, size_t len);
/* Reads a whole regular file of at most max bytes into a NUL-terminated heap
 * buffer; NULL with "path: problem" naming it as `what`. *st receives the
 * file's status (permission checks). */
char *net_read_small_file(const char *path, size_t max, const char *what, mt_file_info *st,
                          size_t *len, mt_error *err);

/* ---- socket I/O (net_io.c) -----------------------------------------------
 * All I/O uses MSG_DONTWAIT | MSG_NOSIGNAL and waits in poll(), so the file
 * descriptor's own blocking mode is left alone and a dead peer never raises
 * SIGPIPE. A wait ends at the earlier of `idle_ms` with no progress (<= 0: no
 * idle limit) and the absolute monotonic `deadline_ms` (< 0: none). */
typedef struct net_wait {
    int idle_ms;
    int64_t deadline_ms;
} net_wait;

enum { NET_OK = 0, NET_EOF = 1, NET_TIMEOUT = -2, NET_ERR = -1 };

/* Reads exactly n bytes. NET_OK; NET_EOF if the peer closed first (*got says
 * how many bytes came); NET_TIMEOUT or NET_ERR with err set. */
int net_read_full(mt_sock fd, void *buf, size_t n, net_wait w, size_t *got, mt_error *err);
/* Writes exactly n bytes: NET_OK, NET_TIMEOUT or NET_ERR (err set). */
int net_write_full(mt_sock fd, const void *buf, size_t n, net_wait w, mt_error *err);
/* "64 MiB", "1.5 KiB" or "100 bytes": sizes in messages. */
const char *net_size_str(uint64_t bytes, char *buf, size_t size);

/* ---- frames (frame.c) ------------------------------------------------------
 * One direction of a connection: its XChaCha20-Poly1305 key and the counter
 * of the next frame. See transport.h for the wire format. */
#define NET_FRAME_HEADER 4
#define NET_FRAME_TAG    crypto_aead_xchacha20poly1305_ietf_ABYTES

typedef struct net_dir {
    uint8_t key[crypto_aead_xchacha20poly1305_ietf_KEYBYTES];
    uint64_t counter;
} net_dir;

/* Encrypts payload [len] under d (then d->counter++) into a new buffer holding
 * the whole frame: header + ciphertext + tag. NULL only when out of memory. */
uint8_t *net_frame_seal(net_dir *d, const void *payload, size_t len, size_t *frame_len);

/* Receives one frame from fd under d. The header is checked against
 * [min_payload, max_payload] before anything is allocated. Returns NET_OK with
 * *out (malloc'd, freed by the caller, never NULL) and *len; NET_EOF if the
 * peer closed cleanly before the first header byte; otherwise NET_TIMEOUT /
 * NET_ERR with err set. *midframe tells whether any byte of this frame had
 * arrived when it failed (the stream is then out of step). */
int net_frame_recv(mt_sock fd, net_dir *d, size_t min_payload, size_t max_payload, net_wait w,
                   void **out, size_t *len, bool *midframe, mt_error *err);

/* ---- the connection object ----------------------------------------------- */
#define NET_NAME_SIZE                                                                              \
    (MT_KEYS_HEX_SIZE > MT_KEYS_NAME_MAX + 1 ? MT_KEYS_HEX_SIZE : MT_KEYS_NAME_MAX + 1)

struct mt_conn {
    mt_sock fd;
    int timeout_ms;     /* idle limit per wait; <= 0: none */
    size_t max_payload; /* largest payload accepted or sent */
    bool is_client;
    uint8_t peer_pk[MT_KEYS_PUBLIC_BYTES];
    char peer_name[NET_NAME_SIZE];
    bool peer_has_cert; /* the peer presented a certificate that passed the checks */
    mt_cert peer_cert;  /* its fields, when peer_has_cert */
    char peer_cert_note[sizeof(
        ((mt_error *)0)->msg)]; /* why a presented certificate was not accepted, or "" */
    net_dir tx, rx;             /* tx used only by the sending thread, rx by the receiving one */
    pthread_mutex_t lock;       /* guards broken + reason */
    bool broken;
    char reason[sizeof(((mt_error *)0)->msg)];
};

/* Runs the handshake on a fresh connection (c->fd, c->timeout_ms set) and
 * fills in keys, counters and the peer's identity. handshake.c. */
int net_handshake_client(struct mt_conn *c, const mt_keys *me, const uint8_t *pinned_pk,
                         mt_error *err);
int net_handshake_server(struct mt_conn *c, const mt_keys *me, const mt_keys_authorized *auth,
                         mt_error *err);

#endif

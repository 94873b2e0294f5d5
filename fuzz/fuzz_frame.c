/* fuzz_frame.c - libFuzzer target for the transport's receiving side
 * (net_frame_recv in src/net/frame.c, the handshake's hello reader in
 * src/net/handshake.c): the bytes a peer sends before anything is decrypted,
 * and the payloads that come out of decryption. The input's first byte picks:
 *   0: raw bytes as a stream of frames (mostly fail authentication: this
 *      exercises the length checks and short reads);
 *   1: a script of frames sealed with the connection's real key, each
 *      possibly mutated (a flipped byte in the header or body, a cut, a
 *      replay, a drop). Whatever authenticates must be exactly the payload
 *      sealed under that counter, from a frame that was sent unmodified (a
 *      dropped frame replayed later is a late delivery); each payload then goes
 *      through the data-plane decoder (mt_proto_decode), as a node does;
 *   2: the bytes as the client's side of a handshake against a server.
 * The bytes go through a socketpair, as they would through TCP. */
#include "fuzz_target.h"
#include "../src/net/net_internal.h"
#include "fuzz_util.h"
#include "moontail/keys.h"
#include "moontail/proto.h"
#include "moontail/transport.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FUZZ_MAX_INPUT (64 * 1024) /* below a socketpair's buffer: all of it is written first */
#define MAX_SEALED     64

typedef struct sealed {
    const uint8_t *payload;
    size_t len;
    bool intact; /* its frame was written unmodified at least once */
} sealed;

static mt_keys server_keys;
static mt_keys_authorized *authorized;

static void init_once(void) {
    static bool done;
    if (done) return;
    done = true;
    mt_error err = {0};
    if (net_sodium_init(&err) != 0 || mt_keys_generate(&server_keys, &err) != 0) abort();
    authorized = mt_keys_authorized_new();
}

/* Writes n bytes to fd (the socket buffer holds all of them). */
static void put(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w <= 0) abort();
        b += w, n -= (size_t)w;
    }
}

/* Mode 1: [op u8][len u8] payload ... Sealed frames are written to wfd in order. */
static int write_script(int wfd, const uint8_t *p, size_t n, net_dir *tx, sealed *s) {
    int n_sealed = 0;
    const uint8_t *prev = NULL;
    size_t prev_len = 0;
    bool prev_intact = false; /* prev's bytes are as sealed */
    uint8_t *frames[MAX_SEALED];
    int n_frames = 0;
    while (n >= 2 && n_sealed < MAX_SEALED) {
        uint8_t op = p[0];
        size_t len = p[1] < n - 2 ? p[1] : n - 2;
        const uint8_t *payload = p + 2;
        p += 2 + len, n -= 2 + len;
        size_t flen;
        uint8_t *f = net_frame_seal(tx, payload, len, &flen);
        if (!f) abort();
        frames[n_frames++] = f;
        s[n_sealed] = (sealed){payload, len, false};
        bool cur_intact = true;
        switch (op % 8) {
        case 0:
            put(wfd, f, flen), s[n_sealed].intact = true;
            break; /* as sealed */
        case 1:
            f[op / 8 % 4] ^= 0x80, cur_intact = false;
            put(wfd, f, flen);
            break; /* header */
        case 2:
            f[4 + (op / 8) % (flen - 4)] ^= 1, cur_intact = false;
            put(wfd, f, flen);
            break;
        case 3:
            put(wfd, f, flen - 1 - (op / 8) % (flen - 1));
            n = 0;
            break; /* cut: the end */
        case 4:    /* the previous frame again instead of this one (a replay, or late) */
            if (prev) put(wfd, prev, prev_len);
            if (prev && prev_intact) s[n_sealed - 1].intact = true;
            break;
        case 5:
            break; /* dropped */
        case 6:
            put(wfd, f, flen), put(wfd, f, flen), s[n_sealed].intact = true;
            break; /* twice */
        default:
            put(wfd, f, 4), put(wfd, f, flen), s[n_sealed].intact = true;
            break; /* stray */
        }
        n_sealed++;
        prev = f, prev_len = flen, prev_intact = cur_intact;
    }
    for (int i = 0; i < n_frames; i++) free(frames[i]);
    return n_sealed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > FUZZ_MAX_INPUT) return 0;
    init_once();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
    int mode = data[0] % 3;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    mt_error err = {0};
    net_wait w = {.idle_ms = 1000, .deadline_ms = -1};
    net_dir tx, rx;
    memset(&tx, 0, sizeof tx);
    fuzz_frame_key(tx.key, sizeof tx.key);
    rx = tx;

    if (mode == 0) {
        put(sv[0], p, n);
        shutdown(sv[0], SHUT_WR);
        for (;;) {
            void *out;
            size_t len;
            bool mid;
            if (net_frame_recv(sv[1], &rx, 0, 1 << 16, w, &out, &len, &mid, &err) != NET_OK) break;
            free(out);
        }
    } else if (mode == 1) {
        sealed s[MAX_SEALED];
        int n_sealed = write_script(sv[0], p, n, &tx, s);
        shutdown(sv[0], SHUT_WR);
        for (;;) {
            void *out;
            size_t len;
            bool mid;
            uint64_t k = rx.counter;
            if (net_frame_recv(sv[1], &rx, 0, 1 << 16, w, &out, &len, &mid, &err) != NET_OK) break;
            /* authenticated: must be frame k exactly as sealed */
            if (k >= (uint64_t)n_sealed || !s[k].intact || len != s[k].len ||
                (len && memcmp(out, s[k].payload, len) != 0))
                abort();
            if (len > 0) {
                mt_proto_msg m;
                if (mt_proto_decode(out, len, &m, &err) == 0) mt_proto_msg_free(&m);
            }
            free(out);
        }
    } else {
        put(sv[0], p, n);
        shutdown(sv[0], SHUT_WR);
        mt_conn *c = mt_conn_server(sv[1], &server_keys, authorized, 1000, &err);
        if (c) abort(); /* nobody can finish a handshake without the session keys */
        sv[1] = -1;     /* the failed handshake closed it */
    }
    close(sv[0]);
    if (sv[1] >= 0) close(sv[1]);
    return 0;
}

/* frame.c - the encrypted frame codec: u32 little-endian length, then the
 * XChaCha20-Poly1305 ciphertext + tag of the payload, nonce = the direction's
 * frame counter, additional data = the length header (transport.h has the full
 * wire format). Receiving checks the announced length against the limits
 * before allocating, and decrypts in place. */
#include "net_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 24-byte nonce: the u64 counter little-endian in bytes 0..7, the rest zero. */
static void make_nonce(uint8_t nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES], uint64_t ctr) {
    memset(nonce, 0, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
    for (int i = 0; i < 8; i++) nonce[i] = (uint8_t)(ctr >> (8 * i));
}

static void put_u32le(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint8_t *net_frame_seal(net_dir *d, const void *payload, size_t len, size_t *frame_len) {
    /* Callers keep len <= MT_CONN_MAX_PAYLOAD_LIMIT, so the header cannot overflow. */
    uint8_t *f = malloc(NET_FRAME_HEADER + len + NET_FRAME_TAG);
    if (!f) return NULL;
    static const uint8_t empty[1];
    uint8_t nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES];
    put_u32le(f, (uint32_t)(len + NET_FRAME_TAG));
    make_nonce(nonce, d->counter++);
    crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
        f + NET_FRAME_HEADER, f + NET_FRAME_HEADER + len, NULL, len ? payload : empty, len, f,
        NET_FRAME_HEADER, NULL, nonce, d->key);
    *frame_len = NET_FRAME_HEADER + len + NET_FRAME_TAG;
    return f;
}

int net_frame_recv(mt_sock fd, net_dir *d, size_t min_payload, size_t max_payload, net_wait w,
                   void **out, size_t *len, bool *midframe, mt_error *err) {
    uint8_t hdr[NET_FRAME_HEADER];
    size_t got = 0;
    char lim[32];
    *out = NULL;
    *len = 0;
    *midframe = false;
    int rc = net_read_full(fd, hdr, sizeof hdr, w, &got, err);
    if (got > 0) *midframe = true;
    if (rc == NET_EOF && got == 0) return NET_EOF;
    if (rc == NET_EOF)
        return mt_error_set(err,
                            "the peer closed the connection in the middle of a frame header "
                            "(%zu of 4 bytes)",
                            got);
    if (rc != NET_OK) return rc;

    uint32_t flen = get_u32le(hdr);
    if (flen < NET_FRAME_TAG)
        return mt_error_set(err,
                            "frame of %u bytes is shorter than its 16-byte authentication tag; "
                            "the peer is not speaking this protocol",
                            flen);
    size_t plen = flen - NET_FRAME_TAG;
    if (plen > max_payload)
        return mt_error_set(err, "frame of %u bytes exceeds the %s payload limit", flen,
                            net_size_str(max_payload, lim, sizeof lim));
    if (plen < min_payload)
        return mt_error_set(err, "frame of %u bytes is too short: at least %zu bytes expected",
                            flen, min_payload + NET_FRAME_TAG);

    uint8_t *buf = malloc(flen);
    if (!buf) return mt_error_set(err, "out of memory for a frame of %u bytes", flen);
    rc = net_read_full(fd, buf, flen, w, &got, err);
    if (rc != NET_OK) {
        free(buf);
        if (rc == NET_EOF)
            return mt_error_set(err,
                                "the peer closed the connection in the middle of a frame (%zu of "
                                "%u bytes received)",
                                got, flen);
        return NET_ERR; /* a timeout mid-frame is fatal too: the stream is out of step */
    }
    uint8_t nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES];
    make_nonce(nonce, d->counter);
    if (crypto_aead_xchacha20poly1305_ietf_decrypt_detached(buf, NULL, buf, plen, buf + plen, hdr,
                                                            sizeof hdr, nonce, d->key) != 0) {
        free(buf);
        return mt_error_set(err,
                            "frame %llu (%u bytes) failed authentication: it was tampered with, "
                            "replayed, reordered or corrupted in transit",
                            (unsigned long long)d->counter, flen);
    }
    d->counter++;
    *out = buf;
    *len = plen;
    return NET_OK;
}

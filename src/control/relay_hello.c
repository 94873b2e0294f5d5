/* relay_hello.c - the relay's hellos as bytes (relay_hello.h; the format is
 * in relay.h). A client hello is read as it arrives: the magic is checked
 * once 4 bytes are in, the kind and reserved byte once 6 are, the node id
 * once the whole control hello is; nothing past the hello's length is looked
 * at. The writers are the exact inverse of the readers. */
#include "relay_hello.h"

#include <stdio.h>
#include <string.h>

enum { HEAD_BYTES = 6 }; /* magic, kind, reserved: what every client hello starts with */

relay_hello_status relay_hello_parse(const uint8_t *buf, size_t len, relay_hello *out) {
    memset(out, 0, sizeof *out);
    if (len >= 4 && memcmp(buf, MT_RELAY_MAGIC, 4) != 0) {
        snprintf(out->why, sizeof out->why,
                 "bytes that are not a relay hello (magic is not \"" MT_RELAY_MAGIC "\")");
        return RELAY_HELLO_REFUSED;
    }
    if (len < HEAD_BYTES) {
        out->need = HEAD_BYTES;
        return RELAY_HELLO_MORE;
    }
    uint8_t kind = buf[4], reserved = buf[5];
    if ((kind != MT_RELAY_KIND_CONTROL && kind != MT_RELAY_KIND_DATA) || reserved) {
        snprintf(out->why, sizeof out->why, "a hello of unknown kind %u (reserved byte %u)", kind,
                 reserved);
        return RELAY_HELLO_REFUSED;
    }
    size_t whole = kind == MT_RELAY_KIND_CONTROL ? MT_RELAY_CONTROL_BYTES : MT_RELAY_DATA_BYTES;
    if (len < whole) {
        out->need = whole;
        return RELAY_HELLO_MORE;
    }
    if (kind == MT_RELAY_KIND_DATA) {
        memcpy(out->cookie, buf + HEAD_BYTES, MT_RELAY_COOKIE_BYTES);
        out->used = whole;
        return RELAY_HELLO_DATA;
    }
    uint64_t raw = 0;
    for (int i = 0; i < 8; i++) raw |= (uint64_t)buf[HEAD_BYTES + i] << (8 * i);
    if (raw == 0 || raw > (uint64_t)INT64_MAX) {
        out->reply = true;
        snprintf(out->why, sizeof out->why,
                 "the node id in the control hello is 0 or above 2^63-1");
        return RELAY_HELLO_REFUSED;
    }
    out->node_id = (int64_t)raw;
    memcpy(out->proof, buf + HEAD_BYTES + 8, sizeof out->proof);
    out->used = whole;
    return RELAY_HELLO_CONTROL;
}

static void head_write(uint8_t *out, uint8_t kind) {
    memcpy(out, MT_RELAY_MAGIC, 4);
    out[4] = kind;
    out[5] = 0;
}

void relay_hello_control_write(uint8_t out[MT_RELAY_CONTROL_BYTES], int64_t node_id,
                               const uint8_t proof[32]) {
    head_write(out, MT_RELAY_KIND_CONTROL);
    for (int i = 0; i < 8; i++) out[HEAD_BYTES + i] = (uint8_t)((uint64_t)node_id >> (8 * i));
    memcpy(out + HEAD_BYTES + 8, proof, 32);
}

void relay_hello_data_write(uint8_t out[MT_RELAY_DATA_BYTES],
                            const uint8_t cookie[MT_RELAY_COOKIE_BYTES]) {
    head_write(out, MT_RELAY_KIND_DATA);
    memcpy(out + HEAD_BYTES, cookie, MT_RELAY_COOKIE_BYTES);
}

void relay_hello_server_write(uint8_t out[MT_RELAY_HELLO_BYTES],
                              const uint8_t challenge[MT_RELAY_CHALLENGE_BYTES]) {
    memcpy(out, MT_RELAY_MAGIC, 4);
    out[4] = MT_RELAY_VERSION; /* u16 version, little-endian */
    out[5] = 0;
    out[6] = out[7] = 0; /* u16 flags */
    memcpy(out + 8, challenge, MT_RELAY_CHALLENGE_BYTES);
}

bool relay_hello_server_read(const uint8_t in[MT_RELAY_HELLO_BYTES],
                             uint8_t challenge[MT_RELAY_CHALLENGE_BYTES]) {
    if (memcmp(in, MT_RELAY_MAGIC, 4) != 0 || in[4] != MT_RELAY_VERSION || in[5] || in[6] || in[7])
        return false;
    memcpy(challenge, in + 8, MT_RELAY_CHALLENGE_BYTES);
    return true;
}

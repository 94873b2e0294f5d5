/* relay_hello.h - the relay's hellos as bytes (the wire format is in
 * relay.h): reading a client's control or data hello as its bytes arrive,
 * writing both, and writing and checking the relay's own 40-byte hello. Pure
 * functions of a buffer: no sockets, no relay state, so the relay (relay.c),
 * the node's side (relay_client.c) and the fuzz target
 * (fuzz/fuzz_relay_hello.c) share one reading of the format. Not a public
 * API. */
#ifndef MOONTAIL_RELAY_HELLO_H
#define MOONTAIL_RELAY_HELLO_H

#include "moontail/relay.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    RELAY_HELLO_MORE,    /* a valid start: read up to `need` bytes in all, then parse again */
    RELAY_HELLO_CONTROL, /* a complete control hello: node_id, proof */
    RELAY_HELLO_DATA,    /* a complete data hello: cookie */
    RELAY_HELLO_REFUSED, /* not a hello the relay takes: why names the field */
} relay_hello_status;

typedef struct relay_hello {
    size_t need;       /* MORE: the hello's length as far as known (6, then 22 or 46) */
    size_t used;       /* CONTROL, DATA: the hello's length (22 or 46); later bytes are not its */
    int64_t node_id;   /* CONTROL: 1 .. 2^63-1 */
    uint8_t proof[32]; /* CONTROL */
    uint8_t cookie[MT_RELAY_COOKIE_BYTES]; /* DATA */
    bool reply;    /* REFUSED: the client is told why (a REFUSED message) before the close; else
                      the connection is only closed */
    char why[128]; /* REFUSED: what is wrong. Without reply it names what was sent, e.g. "a
                      hello of unknown kind 7 (reserved byte 0)", and the relay logs "<peer>
                      sent <why>"; with reply it is a sentence for the node's log */
} relay_hello;

/* Reads the first len bytes of buf (at most the hello's length is looked at)
 * as a client hello. The result is the same however the bytes arrived: a
 * prefix of a hello is MORE, and once an answer other than MORE is given,
 * more bytes do not change it. */
relay_hello_status relay_hello_parse(const uint8_t *buf, size_t len, relay_hello *out);

/* The control hello for node_id with its proof (mt_relay_proof). */
void relay_hello_control_write(uint8_t out[MT_RELAY_CONTROL_BYTES], int64_t node_id,
                               const uint8_t proof[32]);
/* The data hello carrying cookie (from an OPEN). */
void relay_hello_data_write(uint8_t out[MT_RELAY_DATA_BYTES],
                            const uint8_t cookie[MT_RELAY_COOKIE_BYTES]);

/* The relay's hello: magic, version 1, flags 0, then the challenge. */
void relay_hello_server_write(uint8_t out[MT_RELAY_HELLO_BYTES],
                              const uint8_t challenge[MT_RELAY_CHALLENGE_BYTES]);
/* True when in is a relay hello of this version with no flags set; its
 * challenge is then copied out. */
bool relay_hello_server_read(const uint8_t in[MT_RELAY_HELLO_BYTES],
                             uint8_t challenge[MT_RELAY_CHALLENGE_BYTES]);

#endif

/* test_relay_hello.c - the relay's hellos as bytes (src/control/relay_hello.c):
 * the written hellos are the bytes relay.h documents, laid out here by hand;
 * a client hello gets the same answer at every length from the one that
 * decides it on (a prefix is MORE); the node id's bounds; each malformed hello refused
 * with the message the relay logs (relay.c prints "<peer> sent <why>", and
 * tests/test_tunnel.sh sends these hellos over the network); the relay's own
 * hello read back, and refused with any header byte changed. */
#include "../src/control/relay_hello.h"
#include "check.h"

#include <stdint.h>

static relay_hello_status parse(const uint8_t *b, size_t len, relay_hello *h) {
    return relay_hello_parse(b, len, h);
}

/* b[0, len) as it may arrive, every prefix of it: MORE below `at` bytes,
 * `want` at `at`, and the same answer for every length after. */
static void arrives(const uint8_t *b, size_t len, size_t at, relay_hello_status want,
                    const char *what) {
    relay_hello first;
    CHECK(parse(b, at, &first) == want, "%s: %zu bytes: status %d, want %d", what, at,
          (int)parse(b, at, &first), (int)want);
    for (size_t k = 0; k < at; k++) {
        relay_hello h;
        relay_hello_status st = parse(b, k, &h);
        CHECK(st == RELAY_HELLO_MORE && h.need > k && h.need <= MT_RELAY_CONTROL_BYTES,
              "%s: the first %zu bytes: status %d need %zu, want MORE", what, k, (int)st, h.need);
    }
    for (size_t k = at; k <= len; k++) {
        relay_hello h;
        CHECK(parse(b, k, &h) == want && h.used == first.used && h.node_id == first.node_id &&
                  h.reply == first.reply && strcmp(h.why, first.why) == 0,
              "%s: %zu bytes answered otherwise than %zu bytes", what, k, at);
    }
}

static void expect_refused(const uint8_t *b, size_t len, size_t at, bool reply, const char *want,
                           const char *what) {
    arrives(b, len, at, RELAY_HELLO_REFUSED, what);
    relay_hello h;
    parse(b, len, &h);
    CHECK(h.reply == reply && strcmp(h.why, want) == 0, "%s: reply %d why '%s', want %d '%s'", what,
          h.reply, h.why, reply, want);
}

static void written(void) {
    uint8_t proof[32], cookie[MT_RELAY_COOKIE_BYTES], challenge[MT_RELAY_CHALLENGE_BYTES];
    for (int i = 0; i < 32; i++) proof[i] = (uint8_t)(0xa0 + i), challenge[i] = (uint8_t)i;
    for (int i = 0; i < MT_RELAY_COOKIE_BYTES; i++) cookie[i] = (uint8_t)(0x50 + i);

    uint8_t ctl[MT_RELAY_CONTROL_BYTES],
        want_ctl[MT_RELAY_CONTROL_BYTES] = {'M',  'T',  'R',  '1',  1,    0,    0x08,
                                            0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
    memcpy(want_ctl + 14, proof, 32);
    relay_hello_control_write(ctl, 0x0102030405060708, proof);
    CHECK(memcmp(ctl, want_ctl, sizeof ctl) == 0, "control hello bytes differ from relay.h's");
    arrives(ctl, sizeof ctl, sizeof ctl, RELAY_HELLO_CONTROL, "control hello");
    relay_hello h;
    CHECK(parse(ctl, sizeof ctl, &h) == RELAY_HELLO_CONTROL && h.used == 46 &&
              h.node_id == 0x0102030405060708 && memcmp(h.proof, proof, 32) == 0,
          "control hello read back: used %zu id %lld", h.used, (long long)h.node_id);

    uint8_t data[MT_RELAY_DATA_BYTES + 5],
        want_data[MT_RELAY_DATA_BYTES] = {'M', 'T', 'R', '1', 2, 0};
    memcpy(want_data + 6, cookie, sizeof cookie);
    relay_hello_data_write(data, cookie);
    CHECK(memcmp(data, want_data, sizeof want_data) == 0, "data hello bytes differ from relay.h's");
    memcpy(data + MT_RELAY_DATA_BYTES, "MTN1x", 5); /* the data plane's bytes follow */
    arrives(data, sizeof data, MT_RELAY_DATA_BYTES, RELAY_HELLO_DATA, "data hello");
    CHECK(parse(data, sizeof data, &h) == RELAY_HELLO_DATA && h.used == 22 &&
              memcmp(h.cookie, cookie, sizeof cookie) == 0,
          "data hello read back: used %zu", h.used);

    uint8_t srv[MT_RELAY_HELLO_BYTES],
        want_srv[MT_RELAY_HELLO_BYTES] = {'M', 'T', 'R', '1', 1, 0, 0, 0};
    memcpy(want_srv + 8, challenge, sizeof challenge);
    relay_hello_server_write(srv, challenge);
    CHECK(memcmp(srv, want_srv, sizeof srv) == 0, "relay hello bytes differ from relay.h's");
    uint8_t got[MT_RELAY_CHALLENGE_BYTES] = {0};
    CHECK(relay_hello_server_read(srv, got) && memcmp(got, challenge, sizeof got) == 0,
          "the relay hello is not read back with its challenge");
    for (int i = 0; i < 8; i++) {
        uint8_t bad[MT_RELAY_HELLO_BYTES];
        memcpy(bad, srv, sizeof bad);
        bad[i] ^= 0x40;
        CHECK(!relay_hello_server_read(bad, got), "relay hello with byte %d changed taken", i);
    }
}

static void node_ids(void) {
    uint8_t proof[32] = {0}, b[MT_RELAY_CONTROL_BYTES];
    relay_hello h;
    relay_hello_control_write(b, 1, proof);
    CHECK(parse(b, sizeof b, &h) == RELAY_HELLO_CONTROL && h.node_id == 1, "node id 1 refused");
    relay_hello_control_write(b, INT64_MAX, proof);
    CHECK(parse(b, sizeof b, &h) == RELAY_HELLO_CONTROL && h.node_id == INT64_MAX,
          "node id 2^63-1 refused");
    const char *why = "the node id in the control hello is 0 or above 2^63-1";
    relay_hello_control_write(b, 0, proof);
    expect_refused(b, sizeof b, sizeof b, true, why, "node id 0");
    relay_hello_control_write(b, INT64_MIN, proof); /* 2^63 on the wire */
    expect_refused(b, sizeof b, sizeof b, true, why, "node id 2^63");
    memset(b + 6, 0xff, 8);
    expect_refused(b, sizeof b, sizeof b, true, why, "node id 2^64-1");
}

static void malformed(void) {
    const char *magic = "bytes that are not a relay hello (magic is not \"MTR1\")";
    const uint8_t http[] = "GET / HTTP/1.1\r\n\r\n";
    expect_refused(http, sizeof http - 1, 4, false, magic, "HTTP request");
    const uint8_t near[] = {'M', 'T', 'R', '2', 1, 0};
    expect_refused(near, sizeof near, 4, false, magic, "magic MTR2");
    const uint8_t mtn[] = {'M', 'T', 'N', '1', 2, 0, 0, 0};
    expect_refused(mtn, sizeof mtn, 4, false, magic, "a data-plane hello sent to the relay");
    const uint8_t kind7[] = {'M', 'T', 'R', '1', 7, 0, 1, 2};
    expect_refused(kind7, sizeof kind7, 6, false, "a hello of unknown kind 7 (reserved byte 0)",
                   "kind 7");
    const uint8_t kind0[] = {'M', 'T', 'R', '1', 0, 0};
    expect_refused(kind0, sizeof kind0, 6, false, "a hello of unknown kind 0 (reserved byte 0)",
                   "kind 0");
    const uint8_t reserved[] = {'M', 'T', 'R', '1', 1, 9};
    expect_refused(reserved, sizeof reserved, 6, false,
                   "a hello of unknown kind 1 (reserved byte 9)", "reserved byte set");
    /* too few bytes to judge: even "X" waits for the magic's 4 bytes, as the relay always did */
    relay_hello h;
    CHECK(parse((const uint8_t *)"XYZ", 3, &h) == RELAY_HELLO_MORE && h.need == 6,
          "3 bytes of a wrong magic are not yet refused");
    CHECK(parse(NULL, 0, &h) == RELAY_HELLO_MORE && h.need == 6, "nothing yet asks for 6 bytes");
    CHECK(parse(mtn, 5, &h) == RELAY_HELLO_REFUSED, "a wrong magic is refused before 6 bytes");
}

int main(void) {
    written();
    node_ids();
    malformed();
    return check_report("test_relay_hello");
}

/* fuzz_relay_hello.c - libFuzzer target for the relay's hellos
 * (src/control/relay_hello.c): the bytes anyone on the internet may send to
 * the registry's relay port (relay_hello_parse), and the 40 bytes a node
 * reads from whatever answers at the relay's address
 * (relay_hello_server_read). The input is given to the parser whole and as
 * each of its prefixes (exact-size copies, so a read past the end is caught)
 * up to one byte past the longest hello, and its first 40 bytes to the
 * server hello's reader. Beyond "no crash" it checks:
 *   - the answer does not depend on how the bytes arrived: the prefixes are
 *     answered MORE until one is answered otherwise, and every longer one
 *     gets that same answer (the same fields, the same message);
 *   - MORE asks for more than it was given, and no more than a hello's
 *     length (6, 22 or 46);
 *   - a complete hello used no more bytes than it was given, exactly its
 *     kind's length, has a node id 1 .. 2^63-1, and written again
 *     (relay_hello_*_write) gives back those bytes;
 *   - a refusal has a message, terminated inside its buffer;
 *   - a server hello that is taken, written again with its challenge, gives
 *     back the 40 bytes. */
#include "../src/control/relay_hello.h"
#include "fuzz_target.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every prefix up to here is tried: past the longest hello nothing changes. */
#define PREFIX_MAX (MT_RELAY_CONTROL_BYTES + 1)

static relay_hello_status parse_copy(const uint8_t *data, size_t len, relay_hello *out) {
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) abort(); /* a fixture's allocation, not a finding */
    memcpy(exact, data, len);
    relay_hello_status st = relay_hello_parse(exact, len, out);
    free(exact);
    return st;
}

static void check_one(const uint8_t *data, size_t len, relay_hello_status st,
                      const relay_hello *h) {
    switch (st) {
    case RELAY_HELLO_MORE:
        if (h->need <= len ||
            (h->need != 6 && h->need != MT_RELAY_DATA_BYTES && h->need != MT_RELAY_CONTROL_BYTES))
            abort();
        return;
    case RELAY_HELLO_CONTROL: {
        if (h->used > len || h->used != MT_RELAY_CONTROL_BYTES || h->node_id <= 0) abort();
        uint8_t again[MT_RELAY_CONTROL_BYTES];
        relay_hello_control_write(again, h->node_id, h->proof);
        if (memcmp(again, data, sizeof again) != 0) abort();
        return;
    }
    case RELAY_HELLO_DATA: {
        if (h->used > len || h->used != MT_RELAY_DATA_BYTES) abort();
        uint8_t again[MT_RELAY_DATA_BYTES];
        relay_hello_data_write(again, h->cookie);
        if (memcmp(again, data, sizeof again) != 0) abort();
        return;
    }
    case RELAY_HELLO_REFUSED:
        if (!h->why[0] || !memchr(h->why, 0, sizeof h->why)) abort();
        return;
    }
    abort(); /* not one of the four answers */
}

static bool same_answer(relay_hello_status st, const relay_hello *a, const relay_hello *b) {
    switch (st) {
    case RELAY_HELLO_CONTROL:
        return a->used == b->used && a->node_id == b->node_id &&
               memcmp(a->proof, b->proof, sizeof a->proof) == 0;
    case RELAY_HELLO_DATA:
        return a->used == b->used && memcmp(a->cookie, b->cookie, sizeof a->cookie) == 0;
    case RELAY_HELLO_REFUSED:
        return a->reply == b->reply && strcmp(a->why, b->why) == 0;
    default:
        return false;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    relay_hello whole;
    relay_hello_status st_whole = parse_copy(data, size, &whole);
    check_one(data, size, st_whole, &whole);

    /* the bytes as they may arrive: one prefix after another */
    bool answered = false;
    relay_hello first;
    relay_hello_status st_first = RELAY_HELLO_MORE;
    size_t last = size < PREFIX_MAX ? size : PREFIX_MAX;
    for (size_t len = 0; len <= last; len++) {
        relay_hello h;
        relay_hello_status st = parse_copy(data, len, &h);
        check_one(data, len, st, &h);
        if (!answered && st != RELAY_HELLO_MORE) {
            answered = true;
            st_first = st;
            first = h;
        } else if (answered && (st != st_first || !same_answer(st, &h, &first))) {
            abort(); /* more bytes changed an answer already given */
        }
    }
    if (answered != (st_whole != RELAY_HELLO_MORE)) abort();
    if (answered && (st_whole != st_first || !same_answer(st_whole, &whole, &first))) abort();

    if (size >= MT_RELAY_HELLO_BYTES) {
        uint8_t in[MT_RELAY_HELLO_BYTES], challenge[MT_RELAY_CHALLENGE_BYTES], again[sizeof in];
        memcpy(in, data, sizeof in);
        if (relay_hello_server_read(in, challenge)) {
            relay_hello_server_write(again, challenge);
            if (memcmp(again, in, sizeof in) != 0) abort();
        }
    }
    return 0;
}

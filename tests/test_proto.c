/* test_proto.c - the data plane messages (proto.h): every type round-trips
 * through encode/decode, bf16 rounds to nearest even, the byte layout is the
 * documented one, and the decoder refuses every malformed payload (each
 * truncation, trailing bytes, bad counts, dtypes, flags, positions, ids,
 * non-finite values) with a message naming the problem, never reading past
 * the buffer (run under ASan); version 3's one-way messages (ONEWAY origin
 * block, STAGE_AWAIT, CHAIN_ABORT) likewise. */
#include "check.h"
#include "moontail/proto.h"
#include "moontail/tensor_type.h"

#include <stdint.h>

enum { E = 8 };

static bool has(const char *s, const char *sub) {
    return s && strstr(s, sub) != NULL;
}

static uint8_t *enc(const mt_proto_msg *m, size_t *len) {
    uint8_t *b = NULL;
    mt_error err = {{0}};
    CHECK(mt_proto_encode(m, &b, len, &err) == 0, "encode %s: %s", mt_proto_type_name(m->type),
          err.msg);
    return b;
}

/* Decoding b must fail with `want` in the message. */
static void expect_bad(const uint8_t *b, size_t len, const char *want, const char *what) {
    mt_proto_msg m;
    mt_error err = {{0}};
    int rc = mt_proto_decode(b, len, &m, &err);
    CHECK(rc < 0 && has(err.msg, want), "%s: rc %d, message '%s' (wanted '%s')", what, rc, err.msg,
          want);
    if (rc == 0) mt_proto_msg_free(&m);
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void test_round_trips(void) {
    float rows[3 * E];
    for (int i = 0; i < 3 * E; i++) rows[i] = (float)i * 0.37f - 3.1f;
    int32_t pos[3] = {4, 5, 6}, ids[3] = {0, 7, 2};
    mt_error err = {{0}};

    /* STAGE_FORWARD, f32: exact */
    mt_proto_msg m = {.type = MT_PROTO_STAGE_FORWARD,
                      .request_id = 0x1122334455667788ull,
                      .session = 42,
                      .dtype = MT_PROTO_F32,
                      .n = 3,
                      .cols = E,
                      .layer_begin = 1,
                      .layer_end = 3,
                      .pos = pos,
                      .rows = rows};
    size_t len;
    uint8_t *b = enc(&m, &len);
    CHECK(len == 12 + 25 + 3 * 4 + 3 * E * 4, "STAGE_FORWARD size %zu", len);
    /* documented layout */
    CHECK(b && b[0] == 2 && b[1] == 0 && b[2] == 0 && b[4] == 0x88 && b[11] == 0x11 &&
              b[12] == 42 && b[20] == 0 && b[21] == 3 && b[25] == E && b[29] == 1 && b[33] == 3 &&
              b[37] == 4,
          "STAGE_FORWARD layout");
    mt_proto_msg d;
    CHECK(b && mt_proto_decode(b, len, &d, &err) == 0, "decode: %s", err.msg);
    CHECK(d.type == m.type && d.request_id == m.request_id && d.session == 42 && d.n == 3 &&
              d.cols == E && d.layer_begin == 1 && d.layer_end == 3 && d.pos && d.pos[2] == 6 &&
              d.rows && memcmp(d.rows, rows, sizeof rows) == 0,
          "STAGE_FORWARD round trip");
    mt_proto_msg_free(&d);
    /* every truncation and one extra byte are refused */
    for (size_t k = 0; b && k < len; k++) {
        char what[64];
        snprintf(what, sizeof what, "STAGE_FORWARD cut to %zu bytes", k);
        expect_bad(b, k, k < 12 ? "header" : "STAGE_FORWARD", what);
    }
    uint8_t *big = malloc(len + 1);
    memcpy(big, b, len);
    big[len] = 0;
    expect_bad(big, len + 1, "means exactly", "trailing byte");
    free(big);
    /* flags, dtype, counts, layers, positions, values */
    uint8_t *t = malloc(len);
    memcpy(t, b, len), t[2] = 16; /* bits 0-3 are HOPS, ONEWAY, SPECULATIVE, PROMPT; 4 is not */
    expect_bad(t, len, "flags", "flags");
    memcpy(t, b, len), t[2] = 1; /* a hop list on a forward that is not one-way */
    expect_bad(t, len, "needs flag bit 1", "HOPS without ONEWAY");
    memcpy(t, b, len), t[2] = 2; /* ONEWAY without its origin block */
    expect_bad(t, len, "means exactly", "ONEWAY without an origin block");
    memcpy(t, b, len), t[20] = 2;
    expect_bad(t, len, "dtype 2", "dtype");
    memcpy(t, b, len), put32(t + 21, 0);
    expect_bad(t, len, "n_tok 0", "n_tok 0");
    memcpy(t, b, len), put32(t + 21, 4);
    expect_bad(t, len, "means exactly", "n_tok 4 with 3 tokens of data");
    memcpy(t, b, len), put32(t + 21, 0xFFFFFFFFu);
    expect_bad(t, len, "outside", "n_tok 2^32-1");
    memcpy(t, b, len), put32(t + 25, 0);
    expect_bad(t, len, "values per row", "0 values per row");
    memcpy(t, b, len), put32(t + 25, MT_PROTO_MAX_COLS + 1);
    expect_bad(t, len, "values per row", "too many values per row");
    memcpy(t, b, len), put32(t + 25, E + 1);
    expect_bad(t, len, "means exactly", "rows wider than the data");
    memcpy(t, b, len), put32(t + 29, 3);
    expect_bad(t, len, "layer range", "empty layer range");
    memcpy(t, b, len), put32(t + 37 + 4, (uint32_t)-1);
    expect_bad(t, len, "negative", "negative position");
    memcpy(t, b, len), put32(t + 37 + 12 + 4 * 5, 0x7FC00000u); /* NaN */
    expect_bad(t, len, "not finite", "NaN value");
    memcpy(t, b, len), put32(t + 37 + 12, 0x7F800000u); /* +inf */
    expect_bad(t, len, "not finite", "inf value");
    /* the decoder still reports type and request id of a bad message */
    memcpy(t, b, len), t[20] = 9;
    CHECK(mt_proto_decode(t, len, &d, &err) < 0 && d.type == MT_PROTO_STAGE_FORWARD &&
              d.request_id == m.request_id,
          "bad message keeps its header");
    free(t);
    free(b);

    /* bf16: round to nearest even on encode, exact decode */
    float v[E] = {1.0f,
                  1.00390625f /* tie: stays 1 */,
                  1.01171875f /* tie: rounds up */,
                  -2.5f,
                  3.14159265f,
                  1e-3f,
                  -65504.f,
                  0.0f};
    mt_proto_msg s = {.type = MT_PROTO_STAGE_REPLY,
                      .request_id = 9,
                      .dtype = MT_PROTO_BF16,
                      .n = 1,
                      .cols = E,
                      .rows = v};
    b = enc(&s, &len);
    CHECK(len == 12 + 9 + 2 * E, "bf16 reply size %zu", len);
    CHECK(b && mt_proto_decode(b, len, &d, &err) == 0, "bf16 decode: %s", err.msg);
    for (int i = 0; d.rows && i < E; i++)
        CHECK(d.rows[i] == mt_bf16_to_f32(mt_f32_to_bf16(v[i])), "bf16 value %d: %g -> %g", i, v[i],
              d.rows[i]);
    CHECK(d.rows && d.rows[1] == 1.0f && d.rows[2] == 1.015625f, "bf16 ties to even: %g %g",
          d.rows ? d.rows[1] : 0, d.rows ? d.rows[2] : 0);
    mt_proto_msg_free(&d);
    free(b);

    /* EXPERT_RUN */
    mt_proto_msg x = {.type = MT_PROTO_EXPERT_RUN,
                      .request_id = 3,
                      .dtype = MT_PROTO_F32,
                      .n = 3,
                      .cols = E,
                      .layer_begin = 2,
                      .ids = ids,
                      .rows = rows};
    b = enc(&x, &len);
    CHECK(len == 12 + 13 + 3 * 4 + 3 * E * 4, "EXPERT_RUN size %zu", len);
    CHECK(b && mt_proto_decode(b, len, &d, &err) == 0 && d.layer_begin == 2 && d.ids &&
              d.ids[1] == 7 && memcmp(d.rows, rows, sizeof rows) == 0,
          "EXPERT_RUN round trip: %s", err.msg);
    mt_proto_msg_free(&d);
    t = malloc(len);
    memcpy(t, b, len), put32(t + 25 + 4, 70000);
    expect_bad(t, len, "expert id 70000", "expert id over the limit");
    memcpy(t, b, len), put32(t + 12, 70000);
    expect_bad(t, len, "layer 70000", "layer over the limit");
    for (size_t k = 12; k < len; k += 7) expect_bad(b, k, "EXPERT_RUN", "EXPERT_RUN truncated");
    free(t);
    free(b);

    /* SESSION_END and its reply */
    mt_proto_msg se = {.type = MT_PROTO_SESSION_END, .request_id = 5, .session = 77};
    b = enc(&se, &len);
    CHECK(len == 20 && b && mt_proto_decode(b, len, &d, &err) == 0 && d.session == 77,
          "SESSION_END: %s", err.msg);
    free(b);
    mt_proto_msg ser = {.type = MT_PROTO_SESSION_END_REPLY, .request_id = 5, .existed = true};
    b = enc(&ser, &len);
    CHECK(len == 13 && b && mt_proto_decode(b, len, &d, &err) == 0 && d.existed,
          "SESSION_END_REPLY: %s", err.msg);
    b[12] = 2;
    expect_bad(b, len, "not 0 or 1", "existed flag 2");
    free(b);

    /* INFO and INFO_REPLY */
    mt_proto_msg in = {.type = MT_PROTO_INFO, .request_id = 1};
    b = enc(&in, &len);
    CHECK(len == 12, "INFO size %zu", len);
    free(b);
    int32_t held[3] = {1, 2, 5};
    mt_proto_msg ir = {.type = MT_PROTO_INFO_REPLY, .request_id = 1};
    snprintf(ir.info.arch, sizeof ir.info.arch, "qwen3moe");
    ir.info.n_embd = E, ir.info.n_layer = 4, ir.info.layer_begin = 1, ir.info.layer_end = 3;
    ir.info.n_expert = 8, ir.info.n_expert_used = 2, ir.info.attention = true,
    ir.info.experts = true;
    ir.info.n_ctx = 128, ir.info.max_sessions = 4, ir.info.n_held = 3, ir.info.held = held;
    ir.info.res_block = 2, ir.info.n_embd_exp = 3;
    memset(ir.info.source_id, 'a', 64);
    b = enc(&ir, &len);
    CHECK(b && mt_proto_decode(b, len, &d, &err) == 0 && !strcmp(d.info.arch, "qwen3moe") &&
              d.info.layer_end == 3 && d.info.attention && !d.info.head && d.info.experts &&
              d.info.n_held == 3 && d.info.held[2] == 5 && d.info.source_id[63] == 'a' &&
              d.info.n_ctx == 128 && d.info.res_block == 2 && d.info.n_embd_exp == 3,
          "INFO_REPLY round trip: %s", err.msg);
    mt_proto_msg_free(&d);
    t = malloc(len);
    size_t held_off = len - 12;
    memcpy(t, b, len), put32(t + held_off + 4, 1);
    expect_bad(t, len, "not ascending", "held ids not ascending");
    memcpy(t, b, len), put32(t + held_off + 8, 8);
    expect_bad(t, len, "out of range", "held id >= n_expert");
    memcpy(t, b, len), t[12 + 24] = 8;
    expect_bad(t, len, "parts", "unknown parts bit");
    memcpy(t, b, len), t[12 + 41] = 'G';
    expect_bad(t, len, "source_id", "source_id not hex");
    memcpy(t, b, len), put32(t + 12 + 37, 0);
    expect_bad(t, len, "n_embd_exp 0", "expert rows of 0 values");
    memcpy(t, b, len), put32(t + 12 + 33, 70000);
    expect_bad(t, len, "res_block 70000", "res_block over the layer limit");
    /* a hidden state of n_embd 65536 with 64 checkpoints is over the width limit */
    memcpy(t, b, len), put32(t + 12, 65536), put32(t + 16, 64), put32(t + 12 + 33, 1);
    expect_bad(t, len, "wider than", "hidden state too wide");
    for (size_t k = 12; k < len; k++) expect_bad(b, k, "INFO_REPLY", "INFO_REPLY truncated");
    free(t);
    free(b);

    /* ERROR */
    size_t el;
    b = mt_proto_error_reply(8, MT_PROTO_ERR_NOT_HELD, &el, "layer %d is not here", 3);
    CHECK(b && mt_proto_decode(b, el, &d, &err) == 0 && d.code == MT_PROTO_ERR_NOT_HELD &&
              !strcmp(d.text, "layer 3 is not here") && d.request_id == 8,
          "ERROR round trip: %s", err.msg);
    if (b) b[20] = 0; /* a NUL inside the text */
    expect_bad(b, el, "NUL", "NUL in error text");
    free(b);
    char longtext[3000];
    memset(longtext, 'x', sizeof longtext - 1);
    longtext[sizeof longtext - 1] = 0;
    b = mt_proto_error_reply(8, 1, &el, "%s", longtext);
    CHECK(b && el == 12 + 8 + MT_PROTO_MAX_TEXT, "long error text cut to the limit: %zu", el);
    free(b);

    /* unknown type; encoder refusals */
    uint8_t unk[12] = {0x42, 0};
    expect_bad(unk, 12, "unknown", "unknown type");
    mt_proto_msg bad = m;
    bad.n = 0;
    CHECK(mt_proto_encode(&bad, &b, &len, &err) < 0 && has(err.msg, "n_tok"),
          "encoder accepted n_tok 0");
    bad = m;
    bad.dtype = (mt_proto_dtype)5;
    CHECK(mt_proto_encode(&bad, &b, &len, &err) < 0 && has(err.msg, "dtype"),
          "encoder accepted dtype 5");
    /* message size limit and the splitting helper */
    /* room is left for the longest hop list: a count, then per hop its address length,
     * address, key and layers */
    const uint64_t hop_room = 1 + MT_PROTO_MAX_HOPS * (1 + MT_PROTO_HOP_ADDR_MAX + 32 + 4 + 4);
    int32_t mr = mt_proto_max_rows(MT_PROTO_STAGE_FORWARD, 7168, MT_PROTO_F32);
    CHECK(mr > 1000 && (uint64_t)mr * (7168 * 4 + 4) + 37 + hop_room <= MT_PROTO_MAX_PAYLOAD &&
              (uint64_t)(mr + 1) * (7168 * 4 + 4) + 37 + hop_room > MT_PROTO_MAX_PAYLOAD,
          "max rows %d", mr);
    CHECK(mt_proto_max_rows(MT_PROTO_EXPERT_RUN, 8, MT_PROTO_BF16) == MT_PROTO_MAX_ROWS,
          "max rows capped by the count limit");
    /* the widest row still fits one message */
    CHECK(mt_proto_max_rows(MT_PROTO_STAGE_FORWARD, MT_PROTO_MAX_COLS, MT_PROTO_F32) >= 1 &&
              mt_proto_rows_msg_bytes(MT_PROTO_STAGE_FORWARD, 1, MT_PROTO_MAX_COLS, MT_PROTO_F32) <=
                  MT_PROTO_MAX_PAYLOAD,
          "a row of MT_PROTO_MAX_COLS values does not fit a message");
    CHECK(mt_proto_rows_msg_bytes(MT_PROTO_STAGE_FORWARD, 3, E, MT_PROTO_F32) ==
                  12 + 25 + 3 * 4 + 3 * E * 4 &&
              mt_proto_rows_msg_bytes(MT_PROTO_STAGE_REPLY, 1, E, MT_PROTO_BF16) ==
                  12 + 9 + 2 * E &&
              mt_proto_rows_msg_bytes(MT_PROTO_EXPERT_RUN, 3, E, MT_PROTO_F32) ==
                  12 + 13 + 3 * 4 + 3 * E * 4,
          "message sizes");
}

/* One-way passes (version 3): a one-way STAGE_FORWARD with and without
 * hops, STAGE_AWAIT, CHAIN_ABORT and the ERROR naming a pass's failed stage
 * round-trip with the documented layout,
 * and every truncation, trailing byte and bad field is refused. */
static void expect_cuts(const uint8_t *b, size_t len, const char *tn) {
    for (size_t k = 0; b && k < len; k++) {
        char what[64];
        snprintf(what, sizeof what, "%s cut to %zu bytes", tn, k);
        expect_bad(b, k, k < 12 ? "header" : tn, what);
    }
    uint8_t *big = malloc(len + 1);
    memcpy(big, b, len);
    big[len] = 0;
    expect_bad(big, len + 1, "exactly", "trailing byte");
    free(big);
}

static void test_oneway(void) {
    float rows[2 * E];
    for (int i = 0; i < 2 * E; i++) rows[i] = (float)i - 4.5f;
    int32_t pos[2] = {7, 8};
    mt_proto_hop hop = {.addr = "10.0.0.2:7001", .layer_begin = 2, .layer_end = 4};
    memset(hop.pk, 0xab, 32);
    mt_proto_msg m = {.type = MT_PROTO_STAGE_FORWARD,
                      .request_id = 3,
                      .session = 42,
                      .n = 2,
                      .cols = E,
                      .layer_begin = 0,
                      .layer_end = 2,
                      .pos = pos,
                      .rows = rows,
                      .oneway = true,
                      .origin = {.pass_id = 0x0102030405060708ull, .pass_end = 12}};
    memset(m.origin.pk, 0xcd, 32);
    mt_error err = {{0}};
    for (int with_hop = 0; with_hop < 2; with_hop++) {
        m.n_hops = with_hop, m.hops = with_hop ? &hop : NULL;
        size_t len;
        uint8_t *b = enc(&m, &len);
        const size_t hops_bytes = with_hop ? 1 + 1 + strlen(hop.addr) + 32 + 8 : 0;
        CHECK(len == 12 + 25 + hops_bytes + 44 + 2 * 4 + 2 * E * 4, "one-way size %zu", len);
        /* flags bit 1 (and bit 0 with the hop); the origin block right before the positions */
        const size_t o = 37 + hops_bytes;
        CHECK(b && b[2] == (with_hop ? 3 : 2) && b[3] == 0 && b[o] == 0xcd && b[o + 31] == 0xcd &&
                  b[o + 32] == 0x08 && b[o + 39] == 0x01 && b[o + 40] == 12 && b[o + 44] == 7,
              "one-way layout (hop %d)", with_hop);
        mt_proto_msg d;
        CHECK(b && mt_proto_decode(b, len, &d, &err) == 0 && d.oneway && d.n_hops == with_hop &&
                  d.origin.pass_id == m.origin.pass_id && d.origin.pass_end == 12 &&
                  memcmp(d.origin.pk, m.origin.pk, 32) == 0 && d.pos[1] == 8 &&
                  memcmp(d.rows, rows, sizeof rows) == 0,
              "one-way round trip (hop %d): %s", with_hop, err.msg);
        if (b) mt_proto_msg_free(&d);
        expect_cuts(b, len, "STAGE_FORWARD");
        uint8_t *t = malloc(len);
        memcpy(t, b, len), put32(t + o + 40, 8); /* pass_end not after position 8 */
        expect_bad(t, len, "pass_end 8", "pass_end at the last position");
        memcpy(t, b, len), put32(t + o + 40, 0x80000000u);
        expect_bad(t, len, "pass_end", "negative pass_end");
        free(t);
        free(b);
    }
    /* the encoder refuses what the decoder would */
    uint8_t *b = NULL;
    size_t len;
    m.n_hops = 1, m.hops = &hop, m.oneway = false;
    CHECK(mt_proto_encode(&m, &b, &len, &err) < 0 && has(err.msg, "one-way"),
          "hops without one-way encoded: %s", err.msg);
    m.oneway = true, m.origin.pass_end = 8;
    CHECK(mt_proto_encode(&m, &b, &len, &err) < 0 && has(err.msg, "pass_end 8"),
          "pass_end at the last position encoded: %s", err.msg);

    /* STAGE_AWAIT */
    mt_proto_msg a = {.type = MT_PROTO_STAGE_AWAIT,
                      .request_id = 4,
                      .session = 42,
                      .origin = {.pass_id = 77, .pass_end = 12},
                      .pass_begin = 7};
    memset(a.prev_pk, 0xef, 32);
    b = enc(&a, &len);
    CHECK(len == 12 + 56 && b && b[0] == 5 && b[2] == 0 && b[12] == 42 && b[20] == 77 &&
              b[28] == 7 && b[32] == 12 && b[36] == 0xef && b[67] == 0xef,
          "STAGE_AWAIT layout (%zu bytes)", len);
    mt_proto_msg d;
    CHECK(b && mt_proto_decode(b, len, &d, &err) == 0 && d.session == 42 &&
              d.origin.pass_id == 77 && d.pass_begin == 7 && d.origin.pass_end == 12 &&
              memcmp(d.prev_pk, a.prev_pk, 32) == 0,
          "STAGE_AWAIT round trip: %s", err.msg);
    expect_cuts(b, len, "STAGE_AWAIT");
    uint8_t *t = malloc(len);
    memcpy(t, b, len), put32(t + 32, 7);
    expect_bad(t, len, "positions [7, 7)", "an empty AWAIT");
    memcpy(t, b, len), put32(t + 28, 0xFFFFFFFFu);
    expect_bad(t, len, "positions [-1, 12)", "a negative AWAIT");
    memcpy(t, b, len), put32(t + 28, 0), put32(t + 32, MT_PROTO_MAX_TOKENS + 1);
    expect_bad(t, len, "more than", "an AWAIT longer than a message's tokens");
    memcpy(t, b, len), t[2] = 2;
    expect_bad(t, len, "flags", "ONEWAY on an AWAIT");
    free(t);
    free(b);

    /* CHAIN_ABORT */
    mt_proto_msg c = {.type = MT_PROTO_CHAIN_ABORT,
                      .request_id = 5,
                      .session = 42,
                      .origin = m.origin,
                      .code = MT_PROTO_ERR_UNKNOWN_SESSION,
                      .back = 2};
    snprintf(c.text, sizeof c.text, "session unknown");
    b = enc(&c, &len);
    CHECK(len == 12 + 64 + 15 && b && b[0] == 6 && b[12] == 0xcd && b[52] == m.origin.pass_end &&
              b[56] == 42 && b[64] == MT_PROTO_ERR_UNKNOWN_SESSION && b[68] == 2 && b[72] == 15 &&
              b[76] == 's',
          "CHAIN_ABORT layout (%zu bytes)", len);
    CHECK(b && mt_proto_decode(b, len, &d, &err) == 0 && d.back == 2 &&
              d.code == MT_PROTO_ERR_UNKNOWN_SESSION && strcmp(d.text, "session unknown") == 0 &&
              d.origin.pass_id == m.origin.pass_id && memcmp(d.origin.pk, m.origin.pk, 32) == 0,
          "CHAIN_ABORT round trip: %s", err.msg);
    expect_cuts(b, len, "CHAIN_ABORT");
    t = malloc(len);
    memcpy(t, b, len), put32(t + 68, MT_PROTO_MAX_HOPS + 1);
    expect_bad(t, len, "back 251", "back beyond the longest chain");
    memcpy(t, b, len), t[80] = 0;
    expect_bad(t, len, "NUL", "a NUL in the abort's text");
    memcpy(t, b, len), put32(t + 72, MT_PROTO_MAX_TEXT + 1);
    expect_bad(t, len, "over the", "an abort's text too long");
    memcpy(t, b, len), put32(t + 52, 0);
    expect_bad(t, len, "pass_end 0", "an abort of an empty pass");
    free(t);
    free(b);
    c.back = MT_PROTO_MAX_HOPS + 1;
    CHECK(mt_proto_encode(&c, &b, &len, &err) < 0 && has(err.msg, "back"),
          "back beyond the chain encoded: %s", err.msg);

    /* the AWAIT's ERROR naming the stage that failed the pass (flag STAGE, bit 3): the code,
     * the stage, then the text; without the flag the ERROR is as before */
    mt_proto_msg e = {.type = MT_PROTO_ERROR,
                      .request_id = 6,
                      .code = MT_PROTO_ERR_COMPUTE,
                      .has_back = true,
                      .back = 3};
    snprintf(e.text, sizeof e.text, "stage 3 gone");
    b = enc(&e, &len);
    CHECK(len == 12 + 12 + 12 && b && b[0] == 0xff && b[1] == 0x80 && b[2] == 8 && b[3] == 0 &&
              b[12] == MT_PROTO_ERR_COMPUTE && b[16] == 3 && b[20] == 12 && b[24] == 's',
          "ERROR with its stage: layout (%zu bytes)", len);
    CHECK(b && mt_proto_decode(b, len, &d, &err) == 0 && d.has_back && d.back == 3 &&
              d.code == MT_PROTO_ERR_COMPUTE && strcmp(d.text, "stage 3 gone") == 0,
          "ERROR with its stage: round trip: %s", err.msg);
    expect_cuts(b, len, "ERROR");
    t = malloc(len);
    memcpy(t, b, len), put32(t + 16, MT_PROTO_MAX_HOPS + 1);
    expect_bad(t, len, "back 251", "an ERROR's stage beyond the longest chain");
    free(t);
    free(b);
    e.has_back = false;
    b = enc(&e, &len);
    CHECK(len == 12 + 8 + 12 && b && b[2] == 0 && mt_proto_decode(b, len, &d, &err) == 0 &&
              !d.has_back && d.back == 0,
          "ERROR without a stage: %zu bytes, flags %u, %s", len, b ? b[2] : 0, err.msg);
    free(b);
    e.has_back = true, e.back = MT_PROTO_MAX_HOPS + 1;
    CHECK(mt_proto_encode(&e, &b, &len, &err) < 0 && has(err.msg, "back"),
          "an ERROR's stage beyond the chain encoded: %s", err.msg);
    /* the flag on another type is reserved */
    c.back = 2;
    b = enc(&c, &len);
    t = malloc(len);
    memcpy(t, b, len), t[2] = 8;
    expect_bad(t, len, "flags", "flag STAGE on a CHAIN_ABORT");
    free(t);
    free(b);
}

/* The longest chain: a one-way STAGE_FORWARD with MT_PROTO_MAX_HOPS next
 * hops, each with the longest address, round-trips and still leaves room for
 * rows. */
static void test_long_chain(void) {
    static mt_proto_hop hops[MT_PROTO_MAX_HOPS];
    for (int i = 0; i < MT_PROTO_MAX_HOPS; i++) {
        memset(hops[i].addr, 'h', MT_PROTO_HOP_ADDR_MAX - 6);
        snprintf(hops[i].addr + MT_PROTO_HOP_ADDR_MAX - 6, 7, ":%05d", 10000 + i);
        hops[i].pk[0] = (uint8_t)i;
        hops[i].layer_begin = 1 + i, hops[i].layer_end = 2 + i;
    }
    float rows[E] = {1};
    int32_t pos[1] = {0};
    mt_proto_msg m = {.type = MT_PROTO_STAGE_FORWARD,
                      .n = 1,
                      .cols = E,
                      .layer_begin = 0,
                      .layer_end = 1,
                      .pos = pos,
                      .rows = rows,
                      .n_hops = MT_PROTO_MAX_HOPS,
                      .hops = hops,
                      .oneway = true,
                      .origin = {.pass_id = 5, .pass_end = 1 << 30}};
    size_t len;
    uint8_t *b = enc(&m, &len);
    mt_proto_msg d;
    mt_error err = {{0}};
    CHECK(b && mt_proto_decode(b, len, &d, &err) == 0 && d.n_hops == MT_PROTO_MAX_HOPS &&
              d.hops[MT_PROTO_MAX_HOPS - 1].layer_end == MT_PROTO_MAX_HOPS + 1 &&
              strcmp(d.hops[7].addr, hops[7].addr) == 0,
          "%d hops: %s", MT_PROTO_MAX_HOPS, err.msg);
    if (b) mt_proto_msg_free(&d);
    free(b);
    /* the most rows a message may carry still fit beside the longest hop list */
    m.n = mt_proto_max_rows(MT_PROTO_STAGE_FORWARD, 7168, MT_PROTO_F32);
    m.cols = 7168;
    float *big = calloc((size_t)m.n * 7168, sizeof *big);
    int32_t *bp = calloc((size_t)m.n, sizeof *bp);
    for (int32_t i = 0; i < m.n; i++) bp[i] = i;
    m.rows = big, m.pos = bp;
    CHECK(big && bp && mt_proto_encode(&m, &b, &len, &err) == 0 && len <= MT_PROTO_MAX_PAYLOAD,
          "%d rows with %d hops: %s", m.n, MT_PROTO_MAX_HOPS, err.msg);
    free(b), free(big), free(bp);
}

/* Hidden states and what crosses a stage boundary (kimi-k3's checkpoints):
 * n_embd 2, 5 layers, a checkpoint every 2 layers (banked by layers 0, 2, 4). */
static void test_hidden_rows(void) {
    mt_proto_info in = {.n_embd = 2, .n_layer = 5, .res_block = 2, .n_embd_exp = 1};
    int32_t want_banked[6] = {0, 1, 1, 2, 2, 3};
    for (int32_t l = 0; l <= 5; l++)
        CHECK(mt_proto_banked(&in, l) == want_banked[l], "banked before layer %d: %d", l,
              mt_proto_banked(&in, l));
    CHECK(mt_proto_hidden_width(&in) == 8 && mt_proto_cols_in(&in, 3) == 6 &&
              mt_proto_cols_in(&in, 0) == 2 && mt_proto_cols_out(&in, 1, 4) == 4 &&
              mt_proto_cols_out(&in, 1, 2) == 2 && mt_proto_cols_out(&in, 0, 4) == 6,
          "row widths");
    /* after the last layer only the head's input (n_embd) goes back */
    CHECK(mt_proto_out_is_head_input(&in, 5) && !mt_proto_out_is_head_input(&in, 4) &&
              mt_proto_cols_out(&in, 1, 5) == 2 && mt_proto_cols_out(&in, 0, 5) == 2,
          "widths of the last layer's reply");
    /* two tokens: stream s, checkpoints c0 c1 c2 */
    const float h[16] = {1, 2, 10, 11, 20, 21, 30, 31, -1, -2, -10, -11, -20, -21, -30, -31};
    float rows[16], back[16];
    mt_proto_pack_in(&in, 3, 2, h, rows); /* the stream, c0, c1 */
    const float want_in[12] = {1, 2, 10, 11, 20, 21, -1, -2, -10, -11, -20, -21};
    CHECK(memcmp(rows, want_in, sizeof want_in) == 0, "pack_in into layer 3");
    for (int i = 0; i < 16; i++) back[i] = 99;
    mt_proto_unpack_in(&in, 3, 2, rows, back);
    CHECK(memcmp(back, h, 6 * sizeof *h) == 0 && back[6] == 99 && back[7] == 99 &&
              memcmp(back + 8, h + 8, 6 * sizeof *h) == 0 && back[15] == 99,
          "unpack_in leaves the later checkpoint slot alone");
    mt_proto_pack_out(&in, 1, 4, 2, h, rows); /* the stream and c1 (banked by layer 2) */
    const float want_out[8] = {1, 2, 20, 21, -1, -2, -20, -21}; /* layer 4 is not in [1, 4) */
    CHECK(memcmp(rows, want_out, sizeof want_out) == 0, "pack_out of layers [1, 4)");
    for (int i = 0; i < 16; i++) back[i] = 99;
    mt_proto_unpack_out(&in, 1, 4, 2, rows, back);
    CHECK(back[0] == 1 && back[2] == 99 && back[4] == 20 && back[5] == 21 && back[6] == 99 &&
              back[8] == -1 && back[10] == 99 && back[12] == -20 && back[15] == 99,
          "unpack_out of layers [1, 4)");
    mt_proto_pack_out(&in, 1, 5, 2, h, rows); /* the last layer: the stream's place alone */
    CHECK(rows[0] == 1 && rows[1] == 2 && rows[2] == -1 && rows[3] == -2,
          "pack_out of layers [1, 5)");
    /* without attention residuals a row is the stream alone */
    mt_proto_info plain = {.n_embd = 2, .n_layer = 5, .n_embd_exp = 2};
    CHECK(mt_proto_hidden_width(&plain) == 2 && mt_proto_cols_in(&plain, 4) == 2 &&
              mt_proto_cols_out(&plain, 1, 5) == 2,
          "widths without residuals");
}

/* Random corruption of valid messages never crashes the decoder. */
static void test_fuzz(void) {
    float rows[4 * E] = {0};
    int32_t pos[4] = {0, 1, 2, 3}, ids[4] = {0, 1, 2, 3};
    mt_proto_msg ms[2] = {
        {.type = MT_PROTO_STAGE_FORWARD,
         .n = 4,
         .cols = E,
         .layer_end = 1,
         .pos = pos,
         .rows = rows},
        {.type = MT_PROTO_EXPERT_RUN,
         .n = 4,
         .cols = E,
         .dtype = MT_PROTO_BF16,
         .ids = ids,
         .rows = rows},
    };
    uint64_t x = 88172645463325252ull;
    int accepted = 0;
    for (int k = 0; k < 2; k++) {
        size_t len;
        uint8_t *b = enc(&ms[k], &len);
        uint8_t *t = malloc(len);
        for (int it = 0; b && it < 3000; it++) {
            memcpy(t, b, len);
            for (int f = 0; f < 3; f++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                t[x % len] = (uint8_t)(x >> 32);
            }
            mt_proto_msg d;
            if (mt_proto_decode(t, len - (x >> 60) % 3, &d, NULL) == 0) {
                accepted++;
                mt_proto_msg_free(&d);
            }
        }
        free(t);
        free(b);
    }
    CHECK(accepted > 0, "no corrupted message of the right size decoded at all");
}

/* MT_PROTO_FLAG_SPECULATIVE: bit 2 of the header's flags, on STAGE_FORWARD only (also with
 * hops); MT_PROTO_FLAG_PROMPT, bit 3, the same but never with bit 2; bit 4 and the flags on
 * other types are refused both ways. */
static void test_speculative(void) {
    float rows[2 * E] = {0};
    int32_t pos[2] = {7, 8};
    mt_proto_hop hop = {.addr = "127.0.0.1:9000", .layer_begin = 2, .layer_end = 3};
    mt_proto_msg m = {.type = MT_PROTO_STAGE_FORWARD,
                      .request_id = 9,
                      .session = 5,
                      .n = 2,
                      .cols = E,
                      .layer_begin = 0,
                      .layer_end = 2,
                      .pos = pos,
                      .rows = rows,
                      .speculative = true};
    mt_error err = {{0}};
    for (int with_hops = 0; with_hops < 2; with_hops++) {
        /* a hop list comes with a one-way forward (its origin block) */
        m.n_hops = with_hops, m.hops = with_hops ? &hop : NULL, m.oneway = with_hops;
        m.origin.pass_id = 5, m.origin.pass_end = 100;
        memset(m.origin.pk, 0x11, sizeof m.origin.pk);
        size_t len;
        uint8_t *b = enc(&m, &len);
        mt_proto_msg d;
        CHECK(b && b[2] == (with_hops ? 7 : 4) && b[3] == 0, "speculative flags byte %d",
              b ? b[2] : -1);
        CHECK(b && mt_proto_decode(b, len, &d, &err) == 0 && d.speculative &&
                  d.n_hops == with_hops && d.pos[1] == 8,
              "speculative round trip (hops %d): %s", with_hops, err.msg);
        mt_proto_msg_free(&d);
        if (b) {
            b[2] = (uint8_t)(b[2] & ~4); /* the same message without the flag */
            CHECK(mt_proto_decode(b, len, &d, &err) == 0 && !d.speculative,
                  "flag cleared: still speculative: %s", err.msg);
            mt_proto_msg_free(&d);
            b[2] |= 8; /* bit 3: a prompt's chunk */
            CHECK(mt_proto_decode(b, len, &d, &err) == 0 && d.prompt && !d.speculative,
                  "prompt flag (hops %d): %s", with_hops, err.msg);
            mt_proto_msg_free(&d);
            b[2] |= 4;
            expect_bad(b, len, "one at most", "STAGE_FORWARD both speculative and a prompt");
            b[2] = (uint8_t)((b[2] & ~12) | 16); /* bit 4 is reserved */
            expect_bad(b, len, "flags", "STAGE_FORWARD with flag bit 4");
        }
        free(b);
    }
    mt_proto_msg end = {.type = MT_PROTO_SESSION_END, .request_id = 1, .session = 5};
    size_t len;
    uint8_t *b = enc(&end, &len);
    if (b) {
        b[2] = 4;
        expect_bad(b, len, "flags", "SESSION_END with the speculative flag");
    }
    free(b);
    end.speculative = true;
    CHECK(mt_proto_encode(&end, &b, &len, &err) < 0 && has(err.msg, "speculative"),
          "encoding a speculative SESSION_END: %s", err.msg);
    end.speculative = false, end.prompt = true;
    CHECK(mt_proto_encode(&end, &b, &len, &err) < 0 && has(err.msg, "prompt"),
          "encoding a SESSION_END marked as a prompt: %s", err.msg);
    m.n_hops = 0, m.hops = NULL, m.oneway = false, m.prompt = true; /* still speculative */
    CHECK(mt_proto_encode(&m, &b, &len, &err) < 0 && has(err.msg, "prompt"),
          "encoding a forward both speculative and a prompt: %s", err.msg);
    m.speculative = false;
    b = enc(&m, &len);
    CHECK(b && b[2] == 8, "prompt flags byte %d", b ? b[2] : -1);
    free(b);
}

int main(void) {
    test_round_trips();
    test_speculative();
    test_hidden_rows();
    test_long_chain();
    test_oneway();
    test_fuzz();
    return check_report("test_proto");
}

/* proto.c - encoding and strict decoding of the data plane's messages
 * (format: include/moontail/proto.h). Every field read from a payload is
 * checked before it is used; sizes are computed in 64 bits and must add up
 * exactly to the payload's length. */
#include "moontail/proto.h"
#include "moontail/tensor_type.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names -------------------------------------------------------------------- */

const char *mt_proto_type_name(uint16_t type) {
    switch (type) {
    case MT_PROTO_INFO:
        return "INFO";
    case MT_PROTO_STAGE_FORWARD:
        return "STAGE_FORWARD";
    case MT_PROTO_EXPERT_RUN:
        return "EXPERT_RUN";
    case MT_PROTO_SESSION_END:
        return "SESSION_END";
    case MT_PROTO_STAGE_AWAIT:
        return "STAGE_AWAIT";
    case MT_PROTO_CHAIN_ABORT:
        return "CHAIN_ABORT";
    case MT_PROTO_INFO_REPLY:
        return "INFO_REPLY";
    case MT_PROTO_STAGE_REPLY:
        return "STAGE_REPLY";
    case MT_PROTO_EXPERT_REPLY:
        return "EXPERT_REPLY";
    case MT_PROTO_SESSION_END_REPLY:
        return "SESSION_END_REPLY";
    case MT_PROTO_ERROR:
        return "ERROR";
    default:
        return "unknown";
    }
}

int mt_proto_dtype_from_name(const char *name) {
    if (strcmp(name, "f32") == 0) return MT_PROTO_F32;
    if (strcmp(name, "bf16") == 0) return MT_PROTO_BF16;
    return -1;
}

const char *mt_proto_dtype_name(mt_proto_dtype d) {
    return d == MT_PROTO_BF16 ? "bf16" : "f32";
}

/* ---- sizes -------------------------------------------------------------------- */

/* Body bytes before the per-row data of STAGE_FORWARD / EXPERT_RUN and of
 * their replies. */
enum {
    STAGE_FIXED = 8 + 1 + 4 + 4 + 4 + 4,
    EXPERT_FIXED = 4 + 1 + 4 + 4,
    ROWS_REPLY_FIXED = 1 + 4 + 4,
    INFO_FIXED = 6 * 4 + 1 + 4 * 4 + 64 + 1, /* + arch + u32 n_held + held */
    HOP_FIXED = 1 + 32 + 4 + 4,              /* + addr bytes */
    HOPS_MAX_BYTES = 1 + MT_PROTO_MAX_HOPS * (HOP_FIXED + MT_PROTO_HOP_ADDR_MAX),
    ORIGIN_BYTES = 32 + 8 + 4,
    AWAIT_BYTES = 8 + 8 + 4 + 4 + 32,
    ABORT_FIXED = ORIGIN_BYTES + 8 + 4 + 4 + 4, /* + text */
};

int32_t mt_proto_max_rows(uint16_t type, int32_t cols, mt_proto_dtype dtype) {
    uint64_t fixed =
        MT_PROTO_HEADER_BYTES +
        (type == MT_PROTO_EXPERT_RUN ? EXPERT_FIXED : STAGE_FIXED + HOPS_MAX_BYTES + ORIGIN_BYTES);
    uint64_t per_row = 4 + (uint64_t)(cols > 0 ? cols : 1) * mt_proto_dtype_size(dtype);
    uint64_t n = (MT_PROTO_MAX_PAYLOAD - fixed) / per_row;
    uint64_t lim = type == MT_PROTO_EXPERT_RUN ? MT_PROTO_MAX_ROWS : MT_PROTO_MAX_TOKENS;
    if (n > lim) n = lim;
    return n < 1 ? 1 : (int32_t)n;
}

uint64_t mt_proto_rows_msg_bytes(uint16_t type, int32_t n, int32_t cols, mt_proto_dtype dtype) {
    uint64_t fixed = type == MT_PROTO_STAGE_FORWARD ? STAGE_FIXED + 4 * (uint64_t)n
                     : type == MT_PROTO_EXPERT_RUN  ? EXPERT_FIXED + 4 * (uint64_t)n
                                                    : ROWS_REPLY_FIXED;
    return MT_PROTO_HEADER_BYTES + fixed +
           (uint64_t)n * (uint64_t)cols * mt_proto_dtype_size(dtype);
}

/* ---- hidden-state rows ----------------------------------------------------------- */

/* Copies, per token, the stream and the checkpoints [c0, c1) between a whole
 * hidden state (W floats) and a wire row (E * (1 + c1 - c0) floats). */
static void move_rows(const mt_proto_info *in, int32_t c0, int32_t c1, int32_t n, bool to_wire,
                      float *hidden, float *rows) {
    const size_t E = (size_t)in->n_embd, W = (size_t)mt_proto_hidden_width(in);
    const size_t C = E * (size_t)(1 + c1 - c0);
    for (size_t t = 0; t < (size_t)n; t++) {
        float *h = hidden + t * W, *w = rows + t * C;
        float *hs[2] = {h, h + E * (size_t)(1 + c0)}, *ws[2] = {w, w + E};
        size_t len[2] = {E, E * (size_t)(c1 - c0)};
        for (int k = 0; k < 2; k++)
            if (len[k])
                memcpy(to_wire ? ws[k] : hs[k], to_wire ? hs[k] : ws[k], len[k] * sizeof(float));
    }
}

void mt_proto_pack_in(const mt_proto_info *in, int32_t a, int32_t n, const float *hidden,
                      float *rows) {
    move_rows(in, 0, mt_proto_banked(in, a), n, true, (float *)hidden, rows);
}
void mt_proto_unpack_in(const mt_proto_info *in, int32_t a, int32_t n, const float *rows,
                        float *hidden) {
    move_rows(in, 0, mt_proto_banked(in, a), n, false, hidden, (float *)rows);
}
/* The checkpoints [c0, c1) a reply to a forward of [a, end) carries. */
static void out_range(const mt_proto_info *in, int32_t a, int32_t end, int32_t *c0, int32_t *c1) {
    *c0 = mt_proto_banked(in, a);
    *c1 = mt_proto_out_is_head_input(in, end) ? *c0 : mt_proto_banked(in, end);
}
void mt_proto_pack_out(const mt_proto_info *in, int32_t a, int32_t end, int32_t n,
                       const float *hidden, float *rows) {
    int32_t c0, c1;
    out_range(in, a, end, &c0, &c1);
    move_rows(in, c0, c1, n, true, (float *)hidden, rows);
}
void mt_proto_unpack_out(const mt_proto_info *in, int32_t a, int32_t end, int32_t n,
                         const float *rows, float *hidden) {
    int32_t c0, c1;
    out_range(in, a, end, &c0, &c1);
    move_rows(in, c0, c1, n, false, hidden, (float *)rows);
}

/* ---- little-endian writer ------------------------------------------------------- */

typedef struct wbuf {
    uint8_t *p;
    size_t off, cap;
} wbuf;

static void put_u8(wbuf *w, uint8_t v) {
    w->p[w->off++] = v;
}
static void put_u16(wbuf *w, uint16_t v) {
    for (int i = 0; i < 2; i++) w->p[w->off++] = (uint8_t)(v >> (8 * i));
}
static void put_u32(wbuf *w, uint32_t v) {
    for (int i = 0; i < 4; i++) w->p[w->off++] = (uint8_t)(v >> (8 * i));
}
static void put_u64(wbuf *w, uint64_t v) {
    for (int i = 0; i < 8; i++) w->p[w->off++] = (uint8_t)(v >> (8 * i));
}
static void put_bytes(wbuf *w, const void *b, size_t n) {
    memcpy(w->p + w->off, b, n);
    w->off += n;
}
static void put_rows(wbuf *w, const float *v, size_t n, mt_proto_dtype dtype) {
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], 4);
        if (dtype == MT_PROTO_BF16)
            put_u16(w, mt_f32_to_bf16(v[i]));
        else
            put_u32(w, bits);
    }
}

/* ---- little-endian reader ------------------------------------------------------- */

typedef struct rbuf {
    const uint8_t *p;
    size_t off, len;
} rbuf;

static uint64_t get_le(rbuf *r, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)r->p[r->off + i] << (8 * i);
    r->off += (size_t)n;
    return v;
}
static uint8_t get_u8(rbuf *r) {
    return (uint8_t)get_le(r, 1);
}
static uint32_t get_u32(rbuf *r) {
    return (uint32_t)get_le(r, 4);
}
static uint64_t get_u64(rbuf *r) {
    return get_le(r, 8);
}
static size_t left(const rbuf *r) {
    return r->len - r->off;
}

/* Checks that `need` more bytes are there before any fixed-size field is read. */
static int need(const rbuf *r, uint64_t need, const char *type, const char *what, mt_error *err) {
    if (left(r) < need)
        return mt_error_set(err, "%s: payload of %zu bytes is too short for its %s", type, r->len,
                            what);
    return 0;
}

/* The exact size check once the counts are known. */
static int exact(const rbuf *r, uint64_t rest, const char *type, const char *what, mt_error *err) {
    if ((uint64_t)left(r) != rest)
        return mt_error_set(err, "%s: payload is %zu bytes; %s means exactly %llu bytes", type,
                            r->len, what, (unsigned long long)(r->off + rest));
    return 0;
}

static int get_dtype(rbuf *r, mt_proto_dtype *d, const char *type, mt_error *err) {
    uint8_t v = get_u8(r);
    if (v != MT_PROTO_F32 && v != MT_PROTO_BF16)
        return mt_error_set(err, "%s: dtype %u is unknown (0 = f32, 1 = bf16)", type, v);
    *d = (mt_proto_dtype)v;
    return 0;
}

/* Reads n rows of cols values as f32 and checks that each is finite. */
static int get_rows(rbuf *r, float *out, int32_t n, int32_t cols, mt_proto_dtype dtype,
                    const char *type, mt_error *err) {
    size_t total = (size_t)n * (size_t)cols;
    for (size_t i = 0; i < total; i++) {
        float f;
        if (dtype == MT_PROTO_BF16) {
            f = mt_bf16_to_f32((uint16_t)get_le(r, 2));
        } else {
            uint32_t bits = get_u32(r);
            memcpy(&f, &bits, 4);
        }
        if (!isfinite(f))
            return mt_error_set(err, "%s: value %zu of row %zu is not finite", type,
                                i % (size_t)cols, i / (size_t)cols);
        out[i] = f;
    }
    return 0;
}

/* ---- encode ----------------------------------------------------------------------- */

static int check_cols(int64_t cols, const char *type, mt_error *err) {
    if (cols <= 0 || cols > MT_PROTO_MAX_COLS)
        return mt_error_set(err, "%s: %lld values per row is outside [1, %d]", type,
                            (long long)cols, MT_PROTO_MAX_COLS);
    return 0;
}

static int check_count(int32_t n, int32_t max, const char *type, const char *what, mt_error *err) {
    if (n < 1 || n > max)
        return mt_error_set(err, "%s: %s %d is outside [1, %d]", type, what, n, max);
    return 0;
}

/* A hop's address ("host:port", printable, port 1..65535) and its layer
 * range, which must begin where the previous range ended. */
static int check_hop(const mt_proto_hop *h, int32_t i, int32_t prev_end, const char *tn,
                     mt_error *err) {
    size_t al = strnlen(h->addr, sizeof h->addr);
    if (al < 1 || al > MT_PROTO_HOP_ADDR_MAX)
        return mt_error_set(err, "%s: hop %d: address must have 1 to %d bytes", tn, i,
                            MT_PROTO_HOP_ADDR_MAX);
    for (size_t k = 0; k < al; k++)
        if (h->addr[k] < 0x21 || h->addr[k] > 0x7e)
            return mt_error_set(err, "%s: hop %d: address has a non-printable byte at %zu", tn, i,
                                k);
    const char *colon = strrchr(h->addr, ':');
    long port = 0;
    bool digits = colon && colon[1] != 0 && colon > h->addr;
    for (const char *p = colon ? colon + 1 : ""; digits && *p; p++) {
        digits = *p >= '0' && *p <= '9' && p - colon <= 5;
        port = port * 10 + (*p - '0');
    }
    if (!digits || port < 1 || port > 65535)
        return mt_error_set(err, "%s: hop %d: address \"%s\" is not host:port (port 1..65535)", tn,
                            i, h->addr);
    if (h->layer_begin != prev_end || h->layer_begin >= h->layer_end ||
        h->layer_end > MT_PROTO_MAX_LAYERS)
        return mt_error_set(err,
                            "%s: hop %d (%s): layers [%d, %d) do not continue at layer %d"
                            " (or are empty or beyond %d)",
                            tn, i, h->addr, h->layer_begin, h->layer_end, prev_end,
                            MT_PROTO_MAX_LAYERS);
    return 0;
}

/* A one-way pass's end: in [1, INT32_MAX] and after the last position sent. */
static int check_pass_end(int64_t pass_end, int64_t last_pos, const char *tn, mt_error *err) {
    if (pass_end < 1 || pass_end > INT32_MAX || pass_end <= last_pos)
        return mt_error_set(err,
                            "%s: pass_end %lld is outside [1, 2^31) or not after position %lld", tn,
                            (long long)pass_end, (long long)last_pos);
    return 0;
}

/* An AWAIT's positions [begin, end): not empty, at most MT_PROTO_MAX_TOKENS. */
static int check_pass(int64_t begin, int64_t end, const char *tn, mt_error *err) {
    if (begin < 0 || end <= begin || end - begin > MT_PROTO_MAX_TOKENS || end > INT32_MAX)
        return mt_error_set(err, "%s: positions [%lld, %lld) are empty, negative or more than %d",
                            tn, (long long)begin, (long long)end, MT_PROTO_MAX_TOKENS);
    return 0;
}

static void put_origin(wbuf *w, const mt_proto_origin *o) {
    put_bytes(w, o->pk, 32);
    put_u64(w, o->pass_id);
    put_u32(w, (uint32_t)o->pass_end);
}

int mt_proto_encode(const mt_proto_msg *m, uint8_t **out, size_t *len, mt_error *err) {
    const char *tn = mt_proto_type_name(m->type);
    uint64_t body = 0, rows_bytes = 0;
    size_t text_len = 0, arch_len = 0;
    *out = NULL;
    *len = 0;
    bool has_rows = m->type == MT_PROTO_STAGE_FORWARD || m->type == MT_PROTO_EXPERT_RUN ||
                    m->type == MT_PROTO_STAGE_REPLY || m->type == MT_PROTO_EXPERT_REPLY;
    if (has_rows) {
        bool expert = m->type == MT_PROTO_EXPERT_RUN || m->type == MT_PROTO_EXPERT_REPLY;
        if (check_cols(m->cols, tn, err) ||
            check_count(m->n, expert ? MT_PROTO_MAX_ROWS : MT_PROTO_MAX_TOKENS, tn,
                        expert ? "n_rows" : "n_tok", err))
            return -1;
        if (m->dtype != MT_PROTO_F32 && m->dtype != MT_PROTO_BF16)
            return mt_error_set(err, "%s: dtype %d is unknown", tn, (int)m->dtype);
        rows_bytes = (uint64_t)m->n * (uint64_t)m->cols * mt_proto_dtype_size(m->dtype);
    }
    if (m->speculative && m->type != MT_PROTO_STAGE_FORWARD)
        return mt_error_set(err, "%s: only a STAGE_FORWARD can be speculative", tn);
    if (m->prompt && (m->type != MT_PROTO_STAGE_FORWARD || m->speculative))
        return mt_error_set(err,
                            "%s: only a STAGE_FORWARD that is not speculative can be marked"
                            " as a prompt's chunk",
                            tn);
    switch (m->type) {
    case MT_PROTO_INFO:
        break;
    case MT_PROTO_STAGE_FORWARD:
        if (m->layer_begin < 0 || m->layer_begin >= m->layer_end ||
            m->layer_end > MT_PROTO_MAX_LAYERS)
            return mt_error_set(err, "%s: layer range [%d, %d) is empty or outside [0, %d)", tn,
                                m->layer_begin, m->layer_end, MT_PROTO_MAX_LAYERS);
        for (int32_t i = 0; i < m->n; i++)
            if (m->pos[i] < 0)
                return mt_error_set(err, "%s: position %d of token %d is negative", tn, m->pos[i],
                                    i);
        body = STAGE_FIXED + 4 * (uint64_t)m->n + rows_bytes;
        if (m->n_hops < 0 || m->n_hops > MT_PROTO_MAX_HOPS)
            return mt_error_set(err, "%s: %d hops is outside [0, %d]", tn, m->n_hops,
                                MT_PROTO_MAX_HOPS);
        if (m->n_hops && !m->oneway)
            return mt_error_set(err, "%s: a hop list needs a one-way forward", tn);
        if (m->n_hops) body += 1;
        for (int32_t i = 0; i < m->n_hops; i++) {
            int32_t prev_end = i ? m->hops[i - 1].layer_end : m->layer_end;
            if (check_hop(&m->hops[i], i, prev_end, tn, err)) return -1;
            body += HOP_FIXED + strlen(m->hops[i].addr);
        }
        if (m->oneway) {
            if (check_pass_end(m->origin.pass_end, m->pos[m->n - 1], tn, err)) return -1;
            body += ORIGIN_BYTES;
        }
        break;
    case MT_PROTO_STAGE_AWAIT:
        if (check_pass(m->pass_begin, m->origin.pass_end, tn, err)) return -1;
        body = AWAIT_BYTES;
        break;
    case MT_PROTO_CHAIN_ABORT:
        if (check_pass_end(m->origin.pass_end, 0, tn, err)) return -1;
        if (m->back < 0 || m->back > MT_PROTO_MAX_HOPS)
            return mt_error_set(err, "%s: back %d is outside [0, %d]", tn, m->back,
                                MT_PROTO_MAX_HOPS);
        text_len = strnlen(m->text, MT_PROTO_MAX_TEXT);
        body = ABORT_FIXED + text_len;
        break;
    case MT_PROTO_EXPERT_RUN:
        if (m->layer_begin < 0 || m->layer_begin >= MT_PROTO_MAX_LAYERS)
            return mt_error_set(err, "%s: layer %d is outside [0, %d)", tn, m->layer_begin,
                                MT_PROTO_MAX_LAYERS);
        for (int32_t i = 0; i < m->n; i++)
            if (m->ids[i] < 0 || m->ids[i] >= MT_PROTO_MAX_EXPERTS)
                return mt_error_set(err, "%s: expert id %d of row %d is outside [0, %d)", tn,
                                    m->ids[i], i, MT_PROTO_MAX_EXPERTS);
        body = EXPERT_FIXED + 4 * (uint64_t)m->n + rows_bytes;
        break;
    case MT_PROTO_SESSION_END:
        body = 8;
        break;
    case MT_PROTO_INFO_REPLY: {
        const mt_proto_info *in = &m->info;
        arch_len = strnlen(in->arch, sizeof in->arch);
        if (arch_len < 1 || arch_len > MT_PROTO_ARCH_MAX)
            return mt_error_set(err, "%s: architecture name must have 1 to %d bytes", tn,
                                MT_PROTO_ARCH_MAX);
        if (strlen(in->source_id) != 64)
            return mt_error_set(err, "%s: source_id must be 64 hex digits", tn);
        if (in->res_block < 0 || in->res_block > MT_PROTO_MAX_LAYERS || in->n_embd_exp < 1 ||
            in->n_embd_exp > MT_PROTO_MAX_EMBD)
            return mt_error_set(err, "%s: res_block %d or n_embd_exp %d is out of range", tn,
                                in->res_block, in->n_embd_exp);
        if (in->n_held < 0 || in->n_held > in->n_expert || (in->n_held && !in->experts))
            return mt_error_set(err, "%s: %d experts held of %d", tn, in->n_held, in->n_expert);
        body = INFO_FIXED + arch_len + 4 + 4 * (uint64_t)in->n_held;
        break;
    }
    case MT_PROTO_STAGE_REPLY:
    case MT_PROTO_EXPERT_REPLY:
        body = ROWS_REPLY_FIXED + rows_bytes;
        break;
    case MT_PROTO_SESSION_END_REPLY:
        body = 1;
        break;
    case MT_PROTO_ERROR:
        if (m->has_back && (m->back < 0 || m->back > MT_PROTO_MAX_HOPS))
            return mt_error_set(err, "%s: back %d is outside [0, %d]", tn, m->back,
                                MT_PROTO_MAX_HOPS);
        text_len = strnlen(m->text, MT_PROTO_MAX_TEXT);
        body = 8 + (m->has_back ? 4 : 0) + text_len;
        break;
    default:
        return mt_error_set(err, "cannot encode message type 0x%04x: unknown", m->type);
    }
    uint64_t total = MT_PROTO_HEADER_BYTES + body;
    if (total > MT_PROTO_MAX_PAYLOAD)
        return mt_error_set(err,
                            "%s: %llu bytes exceed the %zu-byte message limit; send fewer rows"
                            " per message (mt_proto_max_rows)",
                            tn, (unsigned long long)total, (size_t)MT_PROTO_MAX_PAYLOAD);
    wbuf w = {malloc((size_t)total), 0, (size_t)total};
    if (!w.p)
        return mt_error_set(err, "%s: out of memory for %llu bytes", tn, (unsigned long long)total);
    put_u16(&w, m->type);
    uint16_t flags = 0;
    if (m->type == MT_PROTO_STAGE_FORWARD)
        flags = (uint16_t)((m->n_hops ? MT_PROTO_FLAG_HOPS : 0) |
                           (m->oneway ? MT_PROTO_FLAG_ONEWAY : 0) |
                           (m->speculative ? MT_PROTO_FLAG_SPECULATIVE : 0) |
                           (m->prompt ? MT_PROTO_FLAG_PROMPT : 0));
    if (m->type == MT_PROTO_ERROR && m->has_back) flags = MT_PROTO_FLAG_STAGE;
    put_u16(&w, flags);
    put_u64(&w, m->request_id);
    size_t nv = has_rows ? (size_t)m->n * (size_t)m->cols : 0;
    switch (m->type) {
    case MT_PROTO_STAGE_FORWARD:
        put_u64(&w, m->session);
        put_u8(&w, (uint8_t)m->dtype);
        put_u32(&w, (uint32_t)m->n);
        put_u32(&w, (uint32_t)m->cols);
        put_u32(&w, (uint32_t)m->layer_begin);
        put_u32(&w, (uint32_t)m->layer_end);
        if (m->n_hops) put_u8(&w, (uint8_t)m->n_hops);
        for (int32_t i = 0; i < m->n_hops; i++) {
            size_t al = strlen(m->hops[i].addr);
            put_u8(&w, (uint8_t)al);
            put_bytes(&w, m->hops[i].addr, al);
            put_bytes(&w, m->hops[i].pk, 32);
            put_u32(&w, (uint32_t)m->hops[i].layer_begin);
            put_u32(&w, (uint32_t)m->hops[i].layer_end);
        }
        if (m->oneway) put_origin(&w, &m->origin);
        for (int32_t i = 0; i < m->n; i++) put_u32(&w, (uint32_t)m->pos[i]);
        put_rows(&w, m->rows, nv, m->dtype);
        break;
    case MT_PROTO_EXPERT_RUN:
        put_u32(&w, (uint32_t)m->layer_begin);
        put_u8(&w, (uint8_t)m->dtype);
        put_u32(&w, (uint32_t)m->n);
        put_u32(&w, (uint32_t)m->cols);
        for (int32_t i = 0; i < m->n; i++) put_u32(&w, (uint32_t)m->ids[i]);
        put_rows(&w, m->rows, nv, m->dtype);
        break;
    case MT_PROTO_SESSION_END:
        put_u64(&w, m->session);
        break;
    case MT_PROTO_STAGE_AWAIT:
        put_u64(&w, m->session);
        put_u64(&w, m->origin.pass_id);
        put_u32(&w, (uint32_t)m->pass_begin);
        put_u32(&w, (uint32_t)m->origin.pass_end);
        put_bytes(&w, m->prev_pk, 32);
        break;
    case MT_PROTO_CHAIN_ABORT:
        put_origin(&w, &m->origin);
        put_u64(&w, m->session);
        put_u32(&w, m->code);
        put_u32(&w, (uint32_t)m->back);
        put_u32(&w, (uint32_t)text_len);
        put_bytes(&w, m->text, text_len);
        break;
    case MT_PROTO_INFO_REPLY: {
        const mt_proto_info *in = &m->info;
        put_u32(&w, (uint32_t)in->n_embd);
        put_u32(&w, (uint32_t)in->n_layer);
        put_u32(&w, (uint32_t)in->layer_begin);
        put_u32(&w, (uint32_t)in->layer_end);
        put_u32(&w, (uint32_t)in->n_expert);
        put_u32(&w, (uint32_t)in->n_expert_used);
        put_u8(&w, (uint8_t)((in->attention ? 1 : 0) | (in->head ? 2 : 0) | (in->experts ? 4 : 0)));
        put_u32(&w, (uint32_t)in->n_ctx);
        put_u32(&w, (uint32_t)in->max_sessions);
        put_u32(&w, (uint32_t)in->res_block);
        put_u32(&w, (uint32_t)in->n_embd_exp);
        put_bytes(&w, in->source_id, 64);
        put_u8(&w, (uint8_t)arch_len);
        put_bytes(&w, in->arch, arch_len);
        put_u32(&w, (uint32_t)in->n_held);
        for (int32_t i = 0; i < in->n_held; i++) put_u32(&w, (uint32_t)in->held[i]);
        break;
    }
    case MT_PROTO_STAGE_REPLY:
    case MT_PROTO_EXPERT_REPLY:
        put_u8(&w, (uint8_t)m->dtype);
        put_u32(&w, (uint32_t)m->n);
        put_u32(&w, (uint32_t)m->cols);
        put_rows(&w, m->rows, nv, m->dtype);
        break;
    case MT_PROTO_SESSION_END_REPLY:
        put_u8(&w, m->existed ? 1 : 0);
        break;
    case MT_PROTO_ERROR:
        put_u32(&w, m->code);
        if (m->has_back) put_u32(&w, (uint32_t)m->back);
        put_u32(&w, (uint32_t)text_len);
        put_bytes(&w, m->text, text_len);
        break;
    default:
        break;
    }
    *out = w.p;
    *len = w.off;
    return 0;
}

uint8_t *mt_proto_error_reply(uint64_t request_id, uint32_t code, size_t *len, const char *fmt,
                              ...) {
    mt_proto_msg m = {.type = MT_PROTO_ERROR, .request_id = request_id, .code = code};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m.text, sizeof m.text, fmt, ap);
    va_end(ap);
    uint8_t *out;
    return mt_proto_encode(&m, &out, len, NULL) == 0 ? out : NULL;
}

/* ---- decode ----------------------------------------------------------------------- */

void mt_proto_msg_free(mt_proto_msg *m) {
    free(m->pos), free(m->ids), free(m->rows), free(m->info.held), free(m->hops);
    m->pos = m->ids = m->info.held = NULL;
    m->hops = NULL;
    m->n_hops = 0;
    m->rows = NULL;
}

/* Count, width, dtype and exact size of a message carrying n rows of cols
 * values (+ an i32 per row when per_row_i32), then the i32s (into *ints) and
 * the rows. */
static int decode_rows(rbuf *r, mt_proto_msg *m, uint32_t n, uint32_t cols, int32_t max,
                       bool per_row_i32, int32_t **ints, const char *tn, const char *what,
                       mt_error *err) {
    if (check_cols(cols, tn, err)) return -1;
    if (n < 1 || n > (uint32_t)max)
        return mt_error_set(err, "%s: %s %u is outside [1, %d]", tn, what, n, max);
    m->n = (int32_t)n;
    m->cols = (int32_t)cols;
    uint64_t rows_bytes = (uint64_t)n * (uint64_t)cols * mt_proto_dtype_size(m->dtype);
    char counts[96];
    snprintf(counts, sizeof counts, "%s %u of %u values in %s", what, n, cols,
             mt_proto_dtype_name(m->dtype));
    if (exact(r, (per_row_i32 ? 4 * (uint64_t)n : 0) + rows_bytes, tn, counts, err)) return -1;
    if (per_row_i32) {
        if (!(*ints = malloc((size_t)n * sizeof(int32_t))))
            return mt_error_set(err, "%s: out of memory", tn);
        for (uint32_t i = 0; i < n; i++) (*ints)[i] = (int32_t)get_u32(r);
    }
    if (!(m->rows = malloc((size_t)n * (size_t)cols * sizeof(float))))
        return mt_error_set(err, "%s: out of memory for %u rows", tn, n);
    return get_rows(r, m->rows, m->n, m->cols, m->dtype, tn, err);
}

static int decode_info(rbuf *r, mt_proto_msg *m, const char *tn, mt_error *err) {
    mt_proto_info *in = &m->info;
    if (need(r, INFO_FIXED, tn, "fixed fields", err)) return -1;
    uint32_t v[6];
    for (int i = 0; i < 6; i++) v[i] = get_u32(r);
    uint8_t parts = get_u8(r);
    uint32_t n_ctx = get_u32(r), max_sessions = get_u32(r);
    uint32_t res_block = get_u32(r), n_embd_exp = get_u32(r);
    if (v[0] < 1 || v[0] > MT_PROTO_MAX_EMBD)
        return mt_error_set(err, "%s: n_embd %u is outside [1, %d]", tn, v[0], MT_PROTO_MAX_EMBD);
    if (v[1] < 1 || v[1] > MT_PROTO_MAX_LAYERS || v[2] > v[3] || v[3] > v[1])
        return mt_error_set(err, "%s: layers [%u, %u) do not fit a model of %u layers", tn, v[2],
                            v[3], v[1]);
    if (v[4] > MT_PROTO_MAX_EXPERTS || v[5] > v[4])
        return mt_error_set(err, "%s: %u experts used of %u (at most %d)", tn, v[5], v[4],
                            MT_PROTO_MAX_EXPERTS);
    if (parts & ~7u) return mt_error_set(err, "%s: unknown parts bits 0x%02x", tn, parts);
    if (n_ctx > (1u << 24) || max_sessions > (1u << 24))
        return mt_error_set(err, "%s: n_ctx %u or max_sessions %u is over 2^24", tn, n_ctx,
                            max_sessions);
    if (res_block > MT_PROTO_MAX_LAYERS || n_embd_exp < 1 || n_embd_exp > MT_PROTO_MAX_EMBD)
        return mt_error_set(err, "%s: res_block %u or n_embd_exp %u is out of range", tn, res_block,
                            n_embd_exp);
    in->res_block = (int32_t)res_block, in->n_embd_exp = (int32_t)n_embd_exp;
    in->n_embd = (int32_t)v[0], in->n_layer = (int32_t)v[1];
    uint64_t banks = res_block ? (v[1] + res_block - 1) / res_block : 0;
    if ((uint64_t)v[0] * (1 + banks) > MT_PROTO_MAX_COLS)
        return mt_error_set(err,
                            "%s: a hidden state of n_embd %u and %llu checkpoints is wider than"
                            " %d values",
                            tn, v[0], (unsigned long long)banks, MT_PROTO_MAX_COLS);
    in->layer_begin = (int32_t)v[2], in->layer_end = (int32_t)v[3];
    in->n_expert = (int32_t)v[4], in->n_expert_used = (int32_t)v[5];
    in->attention = parts & 1, in->head = (parts >> 1) & 1, in->experts = (parts >> 2) & 1;
    in->n_ctx = (int32_t)n_ctx, in->max_sessions = (int32_t)max_sessions;
    for (int i = 0; i < 64; i++) {
        char c = (char)get_u8(r);
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return mt_error_set(err, "%s: source_id is not 64 lowercase hex digits", tn);
        in->source_id[i] = c;
    }
    in->source_id[64] = 0;
    uint8_t arch_len = get_u8(r);
    if (arch_len < 1 || arch_len > MT_PROTO_ARCH_MAX)
        return mt_error_set(err, "%s: architecture name length %u is outside [1, %d]", tn, arch_len,
                            MT_PROTO_ARCH_MAX);
    if (need(r, (uint64_t)arch_len + 4, tn, "architecture name and expert count", err)) return -1;
    for (int i = 0; i < arch_len; i++) {
        char c = (char)get_u8(r);
        if (c < 0x21 || c > 0x7e)
            return mt_error_set(err, "%s: architecture name has a non-printable byte", tn);
        in->arch[i] = c;
    }
    in->arch[arch_len] = 0;
    uint32_t n_held = get_u32(r);
    if (n_held > (uint32_t)in->n_expert || (n_held && !in->experts))
        return mt_error_set(err, "%s: %u experts held of %d%s", tn, n_held, in->n_expert,
                            in->experts ? "" : " although no routed experts are held");
    if (exact(r, 4 * (uint64_t)n_held, tn, "n_held", err)) return -1;
    if (n_held && !(in->held = malloc(n_held * sizeof(int32_t))))
        return mt_error_set(err, "%s: out of memory", tn);
    for (uint32_t i = 0; i < n_held; i++) {
        uint32_t e = get_u32(r);
        if (e >= (uint32_t)in->n_expert || (i > 0 && (int32_t)e <= in->held[i - 1]))
            return mt_error_set(err,
                                "%s: held expert id %u (entry %u) is out of range or not"
                                " ascending",
                                tn, e, i);
        in->held[i] = (int32_t)e;
    }
    in->n_held = (int32_t)n_held;
    return 0;
}

/* n bytes of text (ERROR, CHAIN_ABORT): the rest of the payload, no NUL. */
static int get_text(rbuf *r, mt_proto_msg *m, uint32_t n, const char *tn, mt_error *err) {
    if (n > MT_PROTO_MAX_TEXT)
        return mt_error_set(err, "%s: text of %u bytes is over the %d-byte limit", tn, n,
                            MT_PROTO_MAX_TEXT);
    if (exact(r, n, tn, "its text length", err)) return -1;
    if (memchr(r->p + r->off, 0, n)) return mt_error_set(err, "%s: text contains a NUL byte", tn);
    memcpy(m->text, r->p + r->off, n);
    m->text[n] = 0;
    r->off += n;
    return 0;
}

static void get_origin(rbuf *r, mt_proto_origin *o) {
    memcpy(o->pk, r->p + r->off, 32);
    r->off += 32;
    o->pass_id = get_u64(r);
    o->pass_end = (int32_t)get_u32(r);
}

/* The hop list of a STAGE_FORWARD with MT_PROTO_FLAG_HOPS. */
static int decode_hops(rbuf *r, mt_proto_msg *m, const char *tn, mt_error *err) {
    if (need(r, 1, tn, "hop count", err)) return -1;
    uint8_t nh = get_u8(r);
    if (nh < 1 || nh > MT_PROTO_MAX_HOPS)
        return mt_error_set(err, "%s: %u hops is outside [1, %d]", tn, nh, MT_PROTO_MAX_HOPS);
    if (!(m->hops = calloc(nh, sizeof *m->hops))) return mt_error_set(err, "%s: out of memory", tn);
    m->n_hops = nh;
    for (int32_t i = 0; i < nh; i++) {
        mt_proto_hop *h = &m->hops[i];
        char what[48];
        snprintf(what, sizeof what, "hop %d", i);
        if (need(r, 1, tn, what, err)) return -1;
        uint8_t al = get_u8(r);
        if (al < 1 || al > MT_PROTO_HOP_ADDR_MAX)
            return mt_error_set(err, "%s: hop %d: address length %u is outside [1, %d]", tn, i, al,
                                MT_PROTO_HOP_ADDR_MAX);
        if (need(r, (uint64_t)al + HOP_FIXED - 1, tn, what, err)) return -1;
        memcpy(h->addr, r->p + r->off, al);
        r->off += al;
        h->addr[al] = 0;
        if (memchr(h->addr, 0, al))
            return mt_error_set(err, "%s: hop %d: address contains a NUL byte", tn, i);
        memcpy(h->pk, r->p + r->off, 32);
        r->off += 32;
        uint32_t a = get_u32(r), b = get_u32(r);
        if (a > MT_PROTO_MAX_LAYERS || b > MT_PROTO_MAX_LAYERS)
            return mt_error_set(err, "%s: hop %d: layer range [%u, %u) is outside [0, %d)", tn, i,
                                a, b, MT_PROTO_MAX_LAYERS);
        h->layer_begin = (int32_t)a, h->layer_end = (int32_t)b;
        if (check_hop(h, i, i ? m->hops[i - 1].layer_end : m->layer_end, tn, err)) return -1;
    }
    return 0;
}

static int decode_body(rbuf *r, mt_proto_msg *m, uint16_t flags, mt_error *err) {
    const char *tn = mt_proto_type_name(m->type);
    switch (m->type) {
    case MT_PROTO_INFO:
        return exact(r, 0, tn, "an empty body", err);
    case MT_PROTO_STAGE_FORWARD: {
        if (need(r, STAGE_FIXED, tn, "fixed fields", err)) return -1;
        m->session = get_u64(r);
        if (get_dtype(r, &m->dtype, tn, err)) return -1;
        uint32_t n = get_u32(r), cols = get_u32(r), a = get_u32(r), b = get_u32(r);
        if (a >= b || b > MT_PROTO_MAX_LAYERS)
            return mt_error_set(err, "%s: layer range [%u, %u) is empty or outside [0, %d)", tn, a,
                                b, MT_PROTO_MAX_LAYERS);
        m->layer_begin = (int32_t)a, m->layer_end = (int32_t)b;
        if ((flags & MT_PROTO_FLAG_HOPS) && !(flags & MT_PROTO_FLAG_ONEWAY))
            return mt_error_set(err, "%s: a hop list (flag bit 0) needs flag bit 1 (one-way)", tn);
        if ((flags & MT_PROTO_FLAG_HOPS) && decode_hops(r, m, tn, err)) return -1;
        if ((m->oneway = flags & MT_PROTO_FLAG_ONEWAY)) {
            if (need(r, ORIGIN_BYTES, tn, "origin block", err)) return -1;
            get_origin(r, &m->origin);
        }
        if (decode_rows(r, m, n, cols, MT_PROTO_MAX_TOKENS, true, &m->pos, tn, "n_tok", err))
            return -1;
        for (int32_t i = 0; i < m->n; i++)
            if (m->pos[i] < 0)
                return mt_error_set(err, "%s: position %d of token %d is negative", tn, m->pos[i],
                                    i);
        if (m->oneway && check_pass_end(m->origin.pass_end, m->pos[m->n - 1], tn, err)) return -1;
        return 0;
    }
    case MT_PROTO_STAGE_AWAIT: {
        if (exact(r, AWAIT_BYTES, tn, "its fixed fields", err)) return -1;
        m->session = get_u64(r);
        m->origin.pass_id = get_u64(r);
        int64_t begin = (int32_t)get_u32(r), end = (int32_t)get_u32(r);
        if (check_pass(begin, end, tn, err)) return -1;
        m->pass_begin = (int32_t)begin, m->origin.pass_end = (int32_t)end;
        memcpy(m->prev_pk, r->p + r->off, 32);
        r->off += 32;
        return 0;
    }
    case MT_PROTO_CHAIN_ABORT: {
        if (need(r, ABORT_FIXED, tn, "fixed fields", err)) return -1;
        get_origin(r, &m->origin);
        m->session = get_u64(r);
        m->code = get_u32(r);
        uint32_t back = get_u32(r), n = get_u32(r);
        if (check_pass_end(m->origin.pass_end, 0, tn, err)) return -1;
        if (back > MT_PROTO_MAX_HOPS)
            return mt_error_set(err, "%s: back %u is outside [0, %d]", tn, back, MT_PROTO_MAX_HOPS);
        m->back = (int32_t)back;
        return get_text(r, m, n, tn, err);
    }
    case MT_PROTO_EXPERT_RUN: {
        if (need(r, EXPERT_FIXED, tn, "fixed fields", err)) return -1;
        uint32_t layer = get_u32(r);
        if (layer >= MT_PROTO_MAX_LAYERS)
            return mt_error_set(err, "%s: layer %u is outside [0, %d)", tn, layer,
                                MT_PROTO_MAX_LAYERS);
        m->layer_begin = (int32_t)layer, m->layer_end = (int32_t)layer + 1;
        if (get_dtype(r, &m->dtype, tn, err)) return -1;
        uint32_t n = get_u32(r), cols = get_u32(r);
        if (decode_rows(r, m, n, cols, MT_PROTO_MAX_ROWS, true, &m->ids, tn, "n_rows", err))
            return -1;
        for (int32_t i = 0; i < m->n; i++)
            if (m->ids[i] < 0 || m->ids[i] >= MT_PROTO_MAX_EXPERTS)
                return mt_error_set(err, "%s: expert id %d of row %d is outside [0, %d)", tn,
                                    m->ids[i], i, MT_PROTO_MAX_EXPERTS);
        return 0;
    }
    case MT_PROTO_SESSION_END:
        if (exact(r, 8, tn, "a session id", err)) return -1;
        m->session = get_u64(r);
        return 0;
    case MT_PROTO_INFO_REPLY:
        return decode_info(r, m, tn, err);
    case MT_PROTO_STAGE_REPLY:
    case MT_PROTO_EXPERT_REPLY: {
        if (need(r, ROWS_REPLY_FIXED, tn, "fixed fields", err)) return -1;
        if (get_dtype(r, &m->dtype, tn, err)) return -1;
        uint32_t n = get_u32(r), cols = get_u32(r);
        bool ex = m->type == MT_PROTO_EXPERT_REPLY;
        return decode_rows(r, m, n, cols, ex ? MT_PROTO_MAX_ROWS : MT_PROTO_MAX_TOKENS, false, NULL,
                           tn, ex ? "n_rows" : "n_tok", err);
    }
    case MT_PROTO_SESSION_END_REPLY: {
        if (exact(r, 1, tn, "one flag byte", err)) return -1;
        uint8_t v = get_u8(r);
        if (v > 1) return mt_error_set(err, "%s: existed flag %u is not 0 or 1", tn, v);
        m->existed = v;
        return 0;
    }
    case MT_PROTO_ERROR: {
        m->has_back = (flags & MT_PROTO_FLAG_STAGE) != 0;
        if (need(r, m->has_back ? 12 : 8, tn, "code, stage and text length", err)) return -1;
        m->code = get_u32(r);
        if (m->has_back) {
            uint32_t back = get_u32(r);
            if (back > MT_PROTO_MAX_HOPS)
                return mt_error_set(err, "%s: back %u is outside [0, %d]", tn, back,
                                    MT_PROTO_MAX_HOPS);
            m->back = (int32_t)back;
        }
        return get_text(r, m, get_u32(r), tn, err);
    }
    default:
        return mt_error_set(err, "message type 0x%04x is unknown", m->type);
    }
}

int mt_proto_decode(const void *payload, size_t len, mt_proto_msg *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    rbuf r = {payload, 0, len};
    if (len < MT_PROTO_HEADER_BYTES)
        return mt_error_set(err, "message of %zu bytes is shorter than the %d-byte header", len,
                            MT_PROTO_HEADER_BYTES);
    if (len > MT_PROTO_MAX_PAYLOAD)
        return mt_error_set(err, "message of %zu bytes is over the %zu-byte limit", len,
                            (size_t)MT_PROTO_MAX_PAYLOAD);
    out->type = (uint16_t)get_le(&r, 2);
    uint16_t flags = (uint16_t)get_le(&r, 2);
    out->request_id = get_u64(&r);
    uint16_t allowed = out->type == MT_PROTO_STAGE_FORWARD
                           ? MT_PROTO_FLAG_HOPS | MT_PROTO_FLAG_ONEWAY | MT_PROTO_FLAG_SPECULATIVE |
                                 MT_PROTO_FLAG_PROMPT
                       : out->type == MT_PROTO_ERROR ? MT_PROTO_FLAG_STAGE
                                                     : 0;
    if (flags & ~allowed)
        return mt_error_set(err, "%s: header flags 0x%04x are reserved and must be 0",
                            mt_proto_type_name(out->type), flags & ~allowed);
    if (decode_body(&r, out, flags, err) == 0) {
        out->speculative = (flags & MT_PROTO_FLAG_SPECULATIVE) != 0;
        /* bit 3 is PROMPT on a STAGE_FORWARD, STAGE on an ERROR (decode_body) */
        out->prompt = out->type == MT_PROTO_STAGE_FORWARD && (flags & MT_PROTO_FLAG_PROMPT);
        if (!(out->speculative && out->prompt)) return 0;
        mt_error_set(err, "STAGE_FORWARD: header flags mark it both speculative and a prompt's"
                          " chunk; one at most");
    }
    uint16_t type = out->type;
    uint64_t id = out->request_id;
    mt_proto_msg_free(out);
    memset(out, 0, sizeof *out);
    out->type = type;
    out->request_id = id;
    return -1;
}

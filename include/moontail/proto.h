/* proto.h - the data plane's messages: what a requester and the nodes say to
 * each other, one message per transport frame payload (transport.h).
 *
 * A requester asks a node to describe itself (INFO), to run its layers on a
 * session's hidden states (STAGE_FORWARD), to run routed experts on rows
 * (EXPERT_RUN), and to forget a session (SESSION_END). Every such request
 * gets exactly one reply carrying the same request_id: the matching *_REPLY,
 * or ERROR. Nodes see hidden states and expert rows only, never token ids.
 *
 * One-way passes (version 3): the requester sends a pass to the first stage
 * as a one-way STAGE_FORWARD (flag ONEWAY) listing the later stages as hops,
 * and asks the last stage for the result (STAGE_AWAIT). Each stage sends its
 * output, chunk by chunk, straight to the next one as a one-way STAGE_FORWARD
 * carrying the remaining hops; the last stage keeps the chunks of a pass and
 * answers the AWAIT once the pass is whole. One-way messages (a ONEWAY
 * STAGE_FORWARD, CHAIN_ABORT) get no reply: a stage that fails a chunk,
 * refuses it (e.g. an unknown session) or cannot reach its next hop sends a
 * CHAIN_ABORT to the last stage, which answers the AWAIT with an ERROR of the
 * abort's code carrying the failed stage as a field (flag STAGE: `back`, the
 * abort's), so the requester can name the stage that failed; its text begins
 * "stage B before the last: " for people. The
 * sessions of a one-way pass belong, on every stage, to the origin's key: a
 * node takes a one-way STAGE_FORWARD or a CHAIN_ABORT whose origin key is
 * not the sending connection's own only from another stage (node.h), and
 * answers anyone else with ERROR BAD_REQUEST.
 *
 * Decoding is strict: every count is checked against its limit, the payload
 * must have exactly the size its counts imply (no trailing bytes), dtype and
 * flags must be known values, positions must be >= 0, expert ids and layers
 * inside the model, and every value finite. A decoder error names the field
 * and the problem.
 *
 * ---- Wire format (version 3; all integers little-endian) -----------------
 *
 * Version 3 (transport.h MT_CONN_VERSION) adds one-way passes to version 2:
 * the ONEWAY flag and its origin block, STAGE_AWAIT and CHAIN_ABORT, and the
 * ERROR's STAGE flag (added to version 3 before any release); a hop list is
 * only allowed on a one-way STAGE_FORWARD.
 *
 * Header, 12 bytes, at the start of every message:
 *     off size
 *       0    2  u16 type (below)
 *       2    2  u16 flags, on STAGE_FORWARD only: bit 0 (MT_PROTO_FLAG_HOPS)
 *                  a hop list follows; bit 1 (MT_PROTO_FLAG_ONEWAY) a
 *                  one-way forward, the origin block follows (bit 0
 *                  needs bit 1); bit 2 (MT_PROTO_FLAG_SPECULATIVE) a
 *                  speculative pass, whose tokens the requester may take
 *                  back (the node keeps its KDA layers' state after each
 *                  token, and a later pass may start at any position after
 *                  this one's first; one-way stages pass the flag on with
 *                  the pass); bit 3 (MT_PROTO_FLAG_PROMPT) a chunk of a
 *                  prompt, however few its tokens: the node schedules it
 *                  as a prompt, not a decode (node.h, "Step order"; a stage
 *                  that cuts a prompt into chunks sets it on each chunk it
 *                  passes on; not with bit 2). On ERROR only: bit 3
 *                  (MT_PROTO_FLAG_STAGE) the failed stage of a one-way pass
 *                  follows the code. Every other bit, and any bit on
 *                  another type, is reserved and refused
 *       4    8  u64 request_id (chosen by the requester; echoed by the reply)
 *
 * Values ("rows") are n x cols numbers, row-major, in the message's dtype:
 *     0 = f32 (4 bytes, IEEE binary32 bits: exact),
 *     1 = bf16 (2 bytes, the top half of the f32; encoding rounds to nearest
 *         even, mt_f32_to_bf16).
 * cols (1..MT_PROTO_MAX_COLS) is sent with the rows; the decoder only checks
 * sizes, the receiver checks that cols is the width it expects:
 *   - expert rows (EXPERT_RUN, EXPERT_REPLY): n_embd_exp (INFO), the width
 *     the routed experts read and write (a latent width for kimi-k3);
 *   - hidden states: a token's state between layers is the stream (n_embd)
 *     followed by the attention-residual checkpoints banked so far (kimi-k3:
 *     one per res_block layers, mt_proto_banked). STAGE_FORWARD into layer a
 *     carries the stream and the checkpoints banked before a
 *     (mt_proto_cols_in); its STAGE_REPLY the stream and the checkpoints
 *     banked in [a, end) only (mt_proto_cols_out), end being the last layer
 *     computed on the way (the last hop's layer_end when chained). When end
 *     is the model's last layer the reply carries the head's input instead
 *     (n_embd: the stream mixed with every checkpoint, mt_model_head_input),
 *     so that no checkpoint travels back. Without attention residuals both
 *     are n_embd.
 *
 * Requests (type, body after the header):
 *   0x0001 INFO           (empty)
 *   0x0002 STAGE_FORWARD  u64 session, u8 dtype, u32 n_tok, u32 cols,
 *                         u32 layer_begin, u32 layer_end, i32 pos[n_tok], rows[n_tok]
 *                         1 <= n_tok <= MT_PROTO_MAX_TOKENS,
 *                         layer_begin < layer_end <= MT_PROTO_MAX_LAYERS, pos >= 0
 *                         With flag bit 0, the hop list comes between layer_end
 *                         and pos: u8 n_hops (1..MT_PROTO_MAX_HOPS), then per
 *                         hop u8 addr_len (1..MT_PROTO_HOP_ADDR_MAX), addr bytes
 *                         ("host:port", printable ASCII, port 1..65535), u8
 *                         pk[32] (the hop's Ed25519 key), u32 layer_begin, u32
 *                         layer_end; the ranges chain on without gap or overlap
 *                         (hop 0 begins at the request's layer_end).
 *                         With flag bit 1 (ONEWAY), the origin block comes after
 *                         the hop list (or after layer_end without one): u8
 *                         origin_pk[32] (the requester's key), u64 pass_id, i32
 *                         pass_end (1..2^31-1; every pos < pass_end). No reply:
 *                         the node runs its layers and sends each finished
 *                         chunk of the rows to hop 0 as a one-way STAGE_FORWARD
 *                         with hops 1.. and the same origin block; without
 *                         hops it is the last stage and keeps the rows
 *                         (stream-only: cols_out) for the pass's AWAIT.
 *   0x0003 EXPERT_RUN     u32 layer, u8 dtype, u32 n_rows, u32 cols, i32 ids[n_rows],
 *                         rows[n_rows]
 *                         1 <= n_rows <= MT_PROTO_MAX_ROWS, 0 <= id < MT_PROTO_MAX_EXPERTS
 *   0x0004 SESSION_END    u64 session
 *   0x0005 STAGE_AWAIT    u64 session, u64 pass_id, i32 pass_begin, i32 pass_end,
 *                         u8 prev_pk[32]
 *                         (requester -> last stage) 0 <= pass_begin < pass_end,
 *                         pass_end - pass_begin <= MT_PROTO_MAX_TOKENS. Answered
 *                         with one STAGE_REPLY holding the rows of positions
 *                         [pass_begin, pass_end) once they arrived (only from
 *                         the stage whose key is prev_pk), or with an ERROR
 *                         (a CHAIN_ABORT of this pass, the last stage's own
 *                         failure, or rows that do not fit the pass: with
 *                         flag STAGE naming the stage that failed it; an
 *                         ERROR without it is about the AWAIT itself, or a
 *                         pass that did not arrive whole in time).
 *   0x0006 CHAIN_ABORT    origin block (as above), u64 session, u32 code
 *                         (mt_proto_errcode), u32 back (0..MT_PROTO_MAX_HOPS:
 *                         the failed stage is that many stages before the
 *                         last), u32 text_len (<= MT_PROTO_MAX_TEXT), text (no
 *                         NUL bytes). Stage -> last stage, one-way.
 *
 * Replies:
 *   0x8001 INFO_REPLY     u32 n_embd, u32 n_layer, u32 layer_begin, u32 layer_end,
 *                         u32 n_expert, u32 n_expert_used,
 *                         u8 parts (bit 0 attention, bit 1 head, bit 2 routed
 *                         experts; other bits 0), u32 n_ctx, u32 max_sessions,
 *                         u32 res_block (attention-residual block size, 0: none),
 *                         u32 n_embd_exp (expert row width, 1..MT_PROTO_MAX_EMBD),
 *                         u8 source_id[64] (lowercase hex, shard.h),
 *                         u8 arch_len (1..31), arch_len bytes of the architecture
 *                         name (printable ASCII), u32 n_held, u32 held[n_held]
 *                         (expert ids, strictly ascending, < n_expert; n_held
 *                         is 0 unless bit 2 is set)
 *   0x8002 STAGE_REPLY    u8 dtype, u32 n_tok, u32 cols, rows[n_tok]  (the hidden
 *                         states after the last layer, in the request's dtype)
 *   0x8003 EXPERT_REPLY   u8 dtype, u32 n_rows, u32 cols, rows[n_rows]  (each
 *                         row's unweighted expert output, see mt_expert_backend)
 *   0x8004 SESSION_END_REPLY  u8 existed (0 or 1)
 *   0x80ff ERROR          u32 code (mt_proto_errcode), [u32 back, with flag
 *                         bit 3 only: 0..MT_PROTO_MAX_HOPS, the stage of a
 *                         one-way pass that failed it, that many stages
 *                         before the last (the answer to a STAGE_AWAIT)],
 *                         u32 text_len (<= MT_PROTO_MAX_TEXT), text_len
 *                         bytes of text (no NUL bytes)
 *
 * A message never exceeds MT_PROTO_MAX_PAYLOAD bytes (the transport's default
 * frame limit); senders split larger work into several messages
 * (mt_proto_max_rows). */
#ifndef MOONTAIL_PROTO_H
#define MOONTAIL_PROTO_H

#include "moontail/error.h"
#include "moontail/shard.h"
#include "moontail/transport.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MT_PROTO_HEADER_BYTES 12
#define MT_PROTO_MAX_PAYLOAD  MT_CONN_DEFAULT_MAX_PAYLOAD
#define MT_PROTO_MAX_TOKENS   65536     /* tokens in one STAGE_FORWARD */
#define MT_PROTO_MAX_ROWS     (1 << 20) /* rows in one EXPERT_RUN */
#define MT_PROTO_MAX_LAYERS   65536     /* layer numbers are below this */
#define MT_PROTO_MAX_EXPERTS  65536     /* expert ids are below this */
#define MT_PROTO_MAX_EMBD     65536     /* widest n_embd (and expert row) of a model */
#define MT_PROTO_MAX_COLS     (1 << 21) /* widest row: a stream and its checkpoints */
#define MT_PROTO_MAX_TEXT     1024      /* bytes of an ERROR text */
#define MT_PROTO_ARCH_MAX     31        /* bytes of an architecture name */
#define MT_PROTO_MAX_HOPS     250       /* next hops in one STAGE_FORWARD (a chain of 251 stages) */
#define MT_PROTO_HOP_ADDR_MAX 127       /* bytes of a hop's "host:port" */
#define MT_PROTO_FLAG_HOPS    0x0001    /* header flag: STAGE_FORWARD carries hops */
#define MT_PROTO_FLAG_ONEWAY  0x0002    /* header flag: a one-way STAGE_FORWARD (origin block) */
#define MT_PROTO_FLAG_STAGE   0x0008    /* header flag: an ERROR naming a pass's failed stage */
#define MT_PROTO_FLAG_SPECULATIVE                                                                  \
    0x0004                          /* header flag: a STAGE_FORWARD whose tokens may be            \
                                       taken back (speculative decoding) */
#define MT_PROTO_FLAG_PROMPT 0x0008 /* header flag: a STAGE_FORWARD scheduled as a prompt */

typedef enum mt_proto_type {
    MT_PROTO_INFO = 0x0001,
    MT_PROTO_STAGE_FORWARD = 0x0002,
    MT_PROTO_EXPERT_RUN = 0x0003,
    MT_PROTO_SESSION_END = 0x0004,
    MT_PROTO_STAGE_AWAIT = 0x0005,
    MT_PROTO_CHAIN_ABORT = 0x0006,
    MT_PROTO_INFO_REPLY = 0x8001,
    MT_PROTO_STAGE_REPLY = 0x8002,
    MT_PROTO_EXPERT_REPLY = 0x8003,
    MT_PROTO_SESSION_END_REPLY = 0x8004,
    MT_PROTO_ERROR = 0x80ff,
} mt_proto_type;

typedef enum mt_proto_dtype { MT_PROTO_F32 = 0, MT_PROTO_BF16 = 1 } mt_proto_dtype;

/* ERROR codes. */
typedef enum mt_proto_errcode {
    MT_PROTO_ERR_BAD_REQUEST = 1,     /* malformed message (sizes, counts, values) */
    MT_PROTO_ERR_UNKNOWN_TYPE = 2,    /* a type this node does not serve */
    MT_PROTO_ERR_NOT_HELD = 3,        /* layers or experts this node does not hold */
    MT_PROTO_ERR_UNKNOWN_SESSION = 4, /* evicted or never started: replay from position 0 */
    MT_PROTO_ERR_POSITION = 5,        /* positions do not continue the session / context full */
    MT_PROTO_ERR_COMPUTE = 6,         /* the node failed to compute (e.g. a partner is down) */
    MT_PROTO_ERR_BUSY = 7,            /* shutting down or out of resources; retry elsewhere */
} mt_proto_errcode;

/* What a node holds (INFO_REPLY). */
typedef struct mt_proto_info {
    char arch[MT_PROTO_ARCH_MAX + 1];
    int32_t n_embd, n_layer, n_expert, n_expert_used;
    int32_t res_block;              /* attention-residual block size (0: none) */
    int32_t n_embd_exp;             /* values per expert row */
    int32_t layer_begin, layer_end; /* layers [begin, end) */
    bool attention, head, experts;  /* parts held */
    int32_t n_ctx;                  /* positions per session */
    int32_t max_sessions;
    char source_id[MT_SHARD_HASH_HEX]; /* the model's weights (shard.h) */
    int32_t n_held;                    /* routed experts held (each MoE layer in range) */
    int32_t *held;                     /* (n_held) ascending ids */
} mt_proto_info;

/* A next hop of a chained STAGE_FORWARD. */
typedef struct mt_proto_hop {
    char addr[MT_PROTO_HOP_ADDR_MAX + 1]; /* "host:port" */
    uint8_t pk[32];                       /* the hop's public key (pinned) */
    int32_t layer_begin, layer_end;       /* the layers it runs */
} mt_proto_hop;

/* Who a one-way pass is for (STAGE_FORWARD with MT_PROTO_FLAG_ONEWAY,
 * CHAIN_ABORT; STAGE_AWAIT uses pass_id and pass_end). */
typedef struct mt_proto_origin {
    uint8_t pk[32];   /* the requester's public key: the sessions' owner on every stage */
    uint64_t pass_id; /* the requester's name for this pass (random) */
    int32_t pass_end; /* the position after the pass's last token */
} mt_proto_origin;

/* One message, decoded or to encode. Fields used per type are listed in the
 * format above; `layer_begin` is also EXPERT_RUN's layer. A decoded message
 * owns its arrays (free them with mt_proto_msg_free); a message built for
 * mt_proto_encode points at the caller's arrays and is not freed. */
typedef struct mt_proto_msg {
    uint16_t type;
    uint64_t request_id;
    uint64_t session;               /* STAGE_FORWARD, SESSION_END, STAGE_AWAIT, CHAIN_ABORT */
    mt_proto_dtype dtype;           /* STAGE_*, EXPERT_* */
    int32_t n;                      /* tokens (STAGE_*) or rows (EXPERT_*) */
    int32_t cols;                   /* values per row (STAGE_*, EXPERT_*) */
    int32_t layer_begin, layer_end; /* STAGE_FORWARD; EXPERT_RUN: layer_begin = layer */
    int32_t *pos;                   /* (n) STAGE_FORWARD */
    int32_t n_hops;                 /* STAGE_FORWARD: 0 (no hop list) .. MT_PROTO_MAX_HOPS */
    mt_proto_hop *hops;             /* (n_hops) STAGE_FORWARD */
    bool speculative;               /* STAGE_FORWARD: MT_PROTO_FLAG_SPECULATIVE */
    bool prompt;                    /* STAGE_FORWARD: MT_PROTO_FLAG_PROMPT */
    bool oneway;                    /* STAGE_FORWARD: one-way (origin set; n_hops may be 0) */
    mt_proto_origin origin;         /* one-way STAGE_FORWARD, CHAIN_ABORT; STAGE_AWAIT: pass_id
                                       and pass_end */
    int32_t pass_begin;             /* STAGE_AWAIT: the pass's first position */
    uint8_t prev_pk[32];            /* STAGE_AWAIT: the key of the stage before the last */
    int32_t back;                   /* CHAIN_ABORT, ERROR with has_back: the failed stage is this
                                       many stages before the last one (0: the last itself) */
    bool has_back;                  /* ERROR: MT_PROTO_FLAG_STAGE (back is set) */
    int32_t *ids;                   /* (n) EXPERT_RUN */
    float *rows;                    /* (n, cols) STAGE_*, EXPERT_*, as f32 */
    uint32_t code;                  /* ERROR, CHAIN_ABORT */
    char text[MT_PROTO_MAX_TEXT + 1];
    bool existed;       /* SESSION_END_REPLY */
    mt_proto_info info; /* INFO_REPLY */
} mt_proto_msg;

/* "INFO", "STAGE_FORWARD", ... or "unknown". */
const char *mt_proto_type_name(uint16_t type);
/* "f32" / "bf16" -> dtype; -1 if neither. */
int mt_proto_dtype_from_name(const char *name);
const char *mt_proto_dtype_name(mt_proto_dtype d);

/* Bytes of one value on the wire (4 or 2). */
static inline size_t mt_proto_dtype_size(mt_proto_dtype d) {
    return d == MT_PROTO_BF16 ? 2 : 4;
}

/* The most tokens (STAGE_FORWARD) or rows (EXPERT_RUN) of `cols` values one
 * message can carry within MT_PROTO_MAX_PAYLOAD and the count limits (>= 1
 * for any cols <= MT_PROTO_MAX_COLS). */
int32_t mt_proto_max_rows(uint16_t type, int32_t cols, mt_proto_dtype dtype);

/* Bytes of a whole message (header included) carrying n rows of cols values:
 * STAGE_FORWARD without hops, EXPERT_RUN, or their replies. */
uint64_t mt_proto_rows_msg_bytes(uint16_t type, int32_t n, int32_t cols, mt_proto_dtype dtype);

/* Encodes m into a new buffer (*out, malloc'd; *len bytes). The message is
 * checked as strictly as the decoder would (counts, dtype, ids, text); rows
 * are n x cols floats, rounded to bf16 when dtype is bf16. -1 with err. */
int mt_proto_encode(const mt_proto_msg *m, uint8_t **out, size_t *len, mt_error *err);

/* Decodes one payload. Returns 0, or -1 with err naming the problem; even
 * then out->type and out->request_id are set when the 12-byte header could be
 * read (0 otherwise), so a server can address its ERROR reply. out needs no
 * freeing after a failure. Row widths (cols) are checked by the receiver. */
int mt_proto_decode(const void *payload, size_t len, mt_proto_msg *out, mt_error *err);

/* ---- hidden-state rows ------------------------------------------------------------- */

/* Checkpoints banked by the layers before `layer`: ceil(layer / res_block),
 * 0 without attention residuals. */
static inline int32_t mt_proto_banked(const mt_proto_info *in, int32_t layer) {
    return in->res_block > 0 ? (layer + in->res_block - 1) / in->res_block : 0;
}
/* Floats of a token's whole hidden state (the model's hp.n_hidden). */
static inline int32_t mt_proto_hidden_width(const mt_proto_info *in) {
    return in->n_embd * (1 + mt_proto_banked(in, in->n_layer));
}
/* Values per token of a STAGE_FORWARD into layer a. */
static inline int32_t mt_proto_cols_in(const mt_proto_info *in, int32_t a) {
    return in->n_embd * (1 + mt_proto_banked(in, a));
}
/* Whether the reply to a forward ending at `end` is the head's input. */
static inline bool mt_proto_out_is_head_input(const mt_proto_info *in, int32_t end) {
    return in->res_block > 0 && end == in->n_layer;
}
/* Values per token of the STAGE_REPLY to a forward of layers [a, end). */
static inline int32_t mt_proto_cols_out(const mt_proto_info *in, int32_t a, int32_t end) {
    if (mt_proto_out_is_head_input(in, end)) return in->n_embd;
    return in->n_embd * (1 + mt_proto_banked(in, end) - mt_proto_banked(in, a));
}
/* Whole hidden states (n, mt_proto_hidden_width) <-> wire rows: `pack_in`
 * copies what a forward into layer a carries, `unpack_in` puts it back (the
 * later checkpoint slots are left as they are); `pack_out` / `unpack_out`
 * do the same for the reply to a forward of [a, end) (when that is the
 * head's input, it is in the stream's place). */
void mt_proto_pack_in(const mt_proto_info *in, int32_t a, int32_t n, const float *hidden,
                      float *rows);
void mt_proto_unpack_in(const mt_proto_info *in, int32_t a, int32_t n, const float *rows,
                        float *hidden);
void mt_proto_pack_out(const mt_proto_info *in, int32_t a, int32_t end, int32_t n,
                       const float *hidden, float *rows);
void mt_proto_unpack_out(const mt_proto_info *in, int32_t a, int32_t end, int32_t n,
                         const float *rows, float *hidden);

/* Frees a decoded message's arrays (keeps type and request_id). */
void mt_proto_msg_free(mt_proto_msg *m);

/* Builds and encodes an ERROR reply in one go (text printf-style; longer
 * text is cut at MT_PROTO_MAX_TEXT bytes). NULL only when out of memory. */
uint8_t *mt_proto_error_reply(uint64_t request_id, uint32_t code, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif

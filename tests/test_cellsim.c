/* test_cellsim.c - bench/cellsim's simulation against answers worked out by
 * hand from the model it documents (cellsim.h, docs/cellsim.md), never
 * against its own earlier output:
 *   - a layer's bytes equal the bytes `moontail mkmodel` writes (read back
 *     from the file), and its multiply-adds per token are the textbook count;
 *   - kimi-k3 layers (KDA and MLA, dense and MoE, latent MXFP4 experts,
 *     residual scores) likewise, against files mkmodel writes, with MACs and
 *     session state counted by hand (and K3's state as docs/kimi-k3.md gives it);
 *   - messages carry the bytes proto.c encodes (57,446 per f32 round trip of a
 *     7168-wide state: bench_dataplane's 57,438 and the 4-byte cols field each
 *     way); with attention residuals a stage is sent the stream and the
 *     checkpoints banked before it and sends back those banked in its layers,
 *     at a few stage positions of the K3 shape worked out by hand (and checked
 *     against proto.c's own sizes); a pass wider than one message holds goes
 *     as several requests;
 *   - one request through one pipeline: time per token = the stages' compute
 *     + two messages per stage + the head;
 *   - saturation: many requesters on a pipeline whose slowest stage costs the
 *     same whatever its batch: tokens/s = batch limit / that stage's time;
 *   - CPUs shared by processor sharing: two jobs on one core take twice as long;
 *   - failure: no token lost; a killed stage -> the failure's time to the next
 *     token = the registry call + a connection per stage + the replay; a
 *     silent one adds the call timeout; with no backup pipeline the requester
 *     retries every 250 ms + the registry call until the spare serves after
 *     dead-after + 2 heartbeats + the load;
 *   - evictions (max_sessions) turn into replays;
 *   - the fit recovers known coefficients; the event queue keeps time order. */
#include "cellsim.h"
#include "check.h"
#include "moontail/model.h"
#include "moontail/proto.h"
#include "moontail/shard.h"
#include "moontail/synth_model.h"
#include "moontail/tensor_type.h"

/* ---- shapes, bytes and MACs ------------------------------------------------------------- */

/* deepseek2, n_embd 64, MLA 2 heads (q_lora 32, kv_lora 32, nope 16, rope 16, v 16),
 * 4 experts of 32, 2 used, no shared expert, F32. */
static cs_shape tiny_shape(void) {
    return (cs_shape){.n_layer = 4,
                      .n_dense = 0,
                      .n_embd = 64,
                      .n_vocab = 100,
                      .n_head = 2,
                      .q_lora = 32,
                      .kv_lora = 32,
                      .qk_nope = 16,
                      .qk_rope = 16,
                      .v_dim = 16,
                      .n_ff = 64,
                      .n_expert = 4,
                      .n_expert_used = 2,
                      .n_expert_shared = 0,
                      .n_ff_exp = 32,
                      .type = MT_TYPE_F32};
}

static void test_macs(void) {
    cs_shape s = tiny_shape();
    cs_layer_cost c = cs_layer_cost_of(&s, 1);
    /* q_a 64x32 + q_b 32x(2x32) + kv_a 64x48 + k_b 2x16x32 + v_b 2x32x16 + o 32x64
     * + router 64x4 = 2048 + 2048 + 3072 + 1024 + 1024 + 2048 + 256 = 11520;
     * one expert: gate + up 64x32 each, down 32x64 = 6144 */
    CHECK(c.attn_macs == 11520, "attention MACs %.0f, want 11520", c.attn_macs);
    CHECK(c.expert_macs == 6144, "expert MACs %.0f, want 6144", c.expert_macs);
    CHECK(cs_head_macs(&s) == 6400, "head MACs %.0f, want 64 x 100", cs_head_macs(&s));
}

/* mkmodel's parameters for the widths of shape s (arch: deepseek2 or kimi-k3). */
static mt_synth_params synth_of(const cs_shape *s, const char *arch) {
    mt_synth_params p = mt_synth_default_params(arch);
    p.type = (mt_type)s->type;
    p.n_layer = s->n_layer;
    p.n_leading_dense = s->n_dense;
    p.n_embd = s->n_embd;
    p.n_head = s->n_head;
    p.q_lora = s->q_lora;
    p.kv_lora = s->kv_lora;
    p.qk_nope = s->qk_nope;
    p.qk_rope = s->qk_rope;
    p.v_dim = s->v_dim;
    p.n_ff = s->n_ff;
    p.n_expert = s->n_expert;
    p.n_expert_used = s->n_expert_used;
    p.n_expert_shared = s->n_expert_shared;
    p.n_ff_exp = s->n_ff_exp;
    return p;
}

/* Writes p (mkmodel's writer), checks every layer's attention and expert
 * bytes against the shape's formula and returns the open file with its
 * layout in *l (NULL when it could not be written or read; then *l is empty).
 * The caller frees both and unlinks *path. */
static gguf_file *write_and_check_layers(const cs_shape *s, const mt_synth_params *p,
                                         const char *what, mt_shard_layout *l, const char **path) {
    mt_error err = {{0}};
    memset(l, 0, sizeof *l);
    *path = check_tmp(".gguf");
    CHECK(mt_synth_write(p, *path, &err) == 0, "%s: mkmodel: %s", what, err.msg);
    gguf_file *f = gguf_open(*path, &err);
    CHECK(f != NULL, "%s: %s", what, err.msg);
    if (!f || mt_shard_layout_read(f, l, &err) != 0) {
        CHECK(0, "%s: layout: %s", what, err.msg);
        gguf_close(f);
        return NULL;
    }
    for (int32_t il = 0; il < s->n_layer; il++) {
        cs_layer_cost c = cs_layer_cost_of(s, il);
        CHECK(c.attn_bytes == (double)l->attn_bytes[il],
              "%s layer %d (%s): attention %.0f bytes, the file %llu", what, il,
              c.kda ? "KDA" : "MLA/GQA", c.attn_bytes, (unsigned long long)l->attn_bytes[il]);
        CHECK(c.expert_bytes == (double)l->expert_bytes[il],
              "%s layer %d: expert %.0f bytes, the file %llu", what, il, c.expert_bytes,
              (unsigned long long)l->expert_bytes[il]);
    }
    return f;
}

/* The layout formula against the bytes of a file mkmodel writes. */
static void check_bytes_against_file(const cs_shape *s, const char *what) {
    mt_synth_params p = synth_of(s, "deepseek2");
    p.n_head_kv = 1;
    p.n_group = p.n_group_used = 1;
    mt_shard_layout l;
    const char *path;
    gguf_file *f = write_and_check_layers(s, &p, what, &l, &path);
    mt_shard_layout_free(&l);
    gguf_close(f);
    unlink(path);
}

/* ---- kimi-k3 -------------------------------------------------------------------------------- */

/* kimi-k3, n_embd 64, 2 heads: KDA heads of 16 (D = 32, 4 taps), MLA q_lora 32, kv_lora 32,
 * nope 16, rope 16, v 16 with its gate; 4 experts of 32 at a latent width of 32, 2 used, 1
 * shared; residual block 2; 4 layers, MLA at 1 and 3; F32. */
static cs_shape tiny_k3(void) {
    cs_shape s = tiny_shape();
    s.arch = CS_ARCH_KIMI_K3;
    s.n_expert_shared = 1;
    s.expert_type = -1;
    s.kda_head_dim = 16;
    s.conv_kernel = 4;
    s.res_block = 2;
    s.latent = 32;
    s.mla_gate = true;
    s.mla[1] = s.mla[3] = 1;
    return s;
}

static void test_k3_macs(void) {
    cs_shape s = tiny_k3();
    cs_layer_cost kda = cs_layer_cost_of(&s, 2), mla = cs_layer_cost_of(&s, 3);
    /* MoE's non-expert part: router 64x4 + latent down 64x32 and up 32x64 + shared expert
     * 3 x 64x32 = 256 + 4096 + 6144 = 10496; KDA: q, k, v, gate 64x32 each, output 32x64,
     * f_a 64x16, f_b 16x32, beta 64x2 = 10240 + 1024 + 512 + 128 = 11904; MLA: q_a 64x32,
     * q_b 32x64, kv_a 64x48, k_b 2x16x32, v_b 2x32x16, gate 64x32, output 32x64 = 2048 +
     * 2048 + 3072 + 1024 + 1024 + 2048 + 2048 = 13312 */
    CHECK(kda.kda && !mla.kda, "layer 2 is KDA, layer 3 MLA");
    CHECK(kda.attn_macs == 11904 + 10496, "KDA layer MACs %.0f, want 22400", kda.attn_macs);
    CHECK(mla.attn_macs == 13312 + 10496, "MLA layer MACs %.0f, want 23808", mla.attn_macs);
    /* a latent expert: gate and up 32x32, down 32x32 */
    CHECK(kda.expert_macs == 3072 && mla.expert_macs == 3072, "expert MACs %.0f, want 3072",
          kda.expert_macs);
    /* the recurrence: 4 passes over 2 heads' 16x16 states, and 3 convolutions of 4 taps over
     * 32 channels: 2048 + 384; the state: 3 x 3 x 32 conv inputs + 2 x 16 x 16 = 800 floats */
    CHECK(kda.state_macs == 2432 && kda.state_bytes == 3200, "KDA state: %.0f MACs, %.0f bytes",
          kda.state_macs, kda.state_bytes);
    CHECK(mla.state_macs == 0 && mla.state_bytes == 0, "MLA has no fixed state");
    /* MLA over its cache: per head scores over 32 + 16 and the sum of 32, per position;
     * a position holds 48 values, 2 bytes each in the default f16 cache */
    CHECK(mla.ctx_macs == 2 * (32 + 16 + 32) && mla.bytes_per_position == 96,
          "MLA per position: %.0f MACs, %.0f bytes", mla.ctx_macs, mla.bytes_per_position);
    CHECK(kda.ctx_macs == 0 && kda.bytes_per_position == 0, "KDA does not grow with the context");
    /* a step of 3 sessions decoding at position 10 on layer 3, the whole layer, experts as
     * uniform choices: 3 tokens x (23808 + 2 x 3072) MACs + 3 x 11 positions x 160;
     * bytes: the non-expert part, 3 x 11 cache rows of 96 bytes, the experts 3 tokens touch
     * (1 - (1/2)^3 of 4) */
    cs_step st = cs_step_of(3, 3, 10);
    CHECK(st.n_tok == 3 && st.n_seq == 3 && st.attended == 33 && st.ctx_rows == 33,
          "decode step: %g tokens, %g sessions, %g attended, %g rows", st.n_tok, st.n_seq,
          st.attended, st.ctx_rows);
    cs_compute c = {0};
    cs_work w = cs_layer_work(&c, &s, 3, &st, 4, true);
    CHECK(w.macs == 3 * (23808 + 2 * 3072) + 33 * 160 && w.state_macs == 0, "MLA step MACs %.0f",
          w.macs);
    CHECK(fabs(w.bytes - (mla.attn_bytes + 33 * 96 + 4 * 0.875 * mla.expert_bytes)) < 1e-6,
          "MLA step bytes %.0f", w.bytes);
    /* a prompt of 5 tokens on layer 2 (KDA): the state read and written once, the recurrence
     * for every token; attends 1 + 2 + ... + 5 positions */
    st = cs_step_of(5, 1, 0);
    CHECK(st.attended == 15 && st.ctx_rows == 5, "prompt step: %g attended", st.attended);
    w = cs_layer_work(&c, &s, 2, &st, 0, true);
    CHECK(w.macs == 5 * 22400 && w.state_macs == 5 * 2432 && w.bytes == kda.attn_bytes + 2 * 3200,
          "KDA prompt: %.0f + %.0f MACs, %.0f bytes", w.macs, w.state_macs, w.bytes);

    /* K3's real shape: KDA state 288 KiB of convolution inputs + 4 MiB of delta rule per
     * layer; 69 KDA layers of 93 hold 309,755,904 bytes per session, the 24 MLA layers
     * 24 x 576 values x 2 bytes (f16) = 27,648 bytes per position (docs/kimi-k3.md) */
    cs_shape k3 = tiny_k3();
    k3.n_layer = 93, k3.n_embd = 7168, k3.n_head = 64, k3.kda_head_dim = 128;
    k3.kv_lora = 512, k3.qk_rope = 64;
    for (int32_t l = 0; l < 93; l++) k3.mla[l] = l % 4 == 3 || l == 92;
    double fixed, per_pos;
    cs_session_bytes(&k3, 0, 93, &fixed, &per_pos);
    CHECK(fixed == 309755904.0 && per_pos == 27648.0, "K3 session: %.0f fixed, %.0f per position",
          fixed, per_pos);
    cs_session_bytes(&k3, 0, 1, &fixed, &per_pos);
    CHECK(fixed == 4.0 * (3 * 3 * 8192 + 64 * 128 * 128), "one KDA layer %.0f bytes", fixed);
}

/* The kimi-k3 layout formula against a file mkmodel writes: every layer's attention and
 * expert bytes, and the whole model's tensor bytes. */
static void check_k3_against_file(const cs_shape *s, const char *mla_layers, const char *what) {
    mt_synth_params p = synth_of(s, "kimi-k3");
    p.expert_type = s->expert_type;
    p.kda_head_dim = s->kda_head_dim;
    p.conv_kernel = s->conv_kernel;
    p.res_block = s->res_block;
    p.latent = s->latent;
    p.mla_gate = s->mla_gate;
    p.mla_layers = mla_layers;
    mt_shard_layout l;
    const char *path;
    mt_error err = {{0}};
    gguf_file *f = write_and_check_layers(s, &p, what, &l, &path);
    if (f) {
        /* a session's state per layer as the KV cache sizes it (from the file's metadata) */
        uint64_t fixed[256], per_pos[256];
        CHECK(s->n_layer <= 256 && mt_kv_session_bytes(f, s->n_layer, MT_KV_DEFAULT, fixed, per_pos,
                                                       NULL, &err) == 0,
              "%s: session bytes: %s", what, err.msg);
        for (int32_t il = 0; il < s->n_layer && il < 256; il++) {
            cs_layer_cost c = cs_layer_cost_of(s, il);
            CHECK(c.state_bytes == (double)fixed[il] && c.bytes_per_position == (double)per_pos[il],
                  "%s layer %d: session %.0f + %.0f per position, the KV cache %llu + %llu", what,
                  il, c.state_bytes, c.bytes_per_position, (unsigned long long)fixed[il],
                  (unsigned long long)per_pos[il]);
        }
        double total = 0;
        for (uint64_t t = 0; t < f->n_tensors; t++) total += (double)f->tensors[t].nbytes;
        cs_shape v = *s; /* with the file's vocabulary (bytes) */
        for (uint64_t t = 0; t < f->n_tensors; t++)
            if (!strcmp(f->tensors[t].name, "token_embd.weight"))
                v.n_vocab = (int32_t)f->tensors[t].ne[1];
        CHECK(cs_model_bytes(&v) == total, "%s: model %.0f bytes, the file's tensors %.0f", what,
              cs_model_bytes(&v), total);
    }
    mt_shard_layout_free(&l);
    gguf_close(f);
    unlink(path);
}

static void test_k3_bytes(void) {
    cs_shape s = tiny_k3();
    s.n_dense = 1; /* layer 0: KDA with a dense FFN */
    check_k3_against_file(&s, "1,3", "F32");
    /* Q4_K matrices where rows are whole blocks of 256 (else Q8_0, else F32), MXFP4 experts
     * (32-element blocks of 17 bytes), residual block 3, no MLA gate, plain attn_q */
    s = tiny_k3();
    s.n_layer = 5, s.n_dense = 1;
    s.n_embd = 256, s.n_head = 4, s.kda_head_dim = 64; /* D = 256 */
    s.q_lora = 0, s.kv_lora = 256, s.qk_nope = 32, s.qk_rope = 32, s.v_dim = 64;
    s.n_ff = 512, s.n_ff_exp = 64, s.n_expert = 8, s.latent = 96;
    s.res_block = 3, s.mla_gate = false;
    s.type = MT_TYPE_Q4_K, s.expert_type = MT_TYPE_MXFP4;
    memset(s.mla, 0, sizeof s.mla);
    s.mla[2] = s.mla[4] = 1;
    check_k3_against_file(&s, "2,4", "Q4_K + MXFP4");
    /* experts at full width (no latent), no residual attention, all layers KDA */
    s.latent = 0, s.res_block = 0, s.mla_gate = true;
    memset(s.mla, 0, sizeof s.mla);
    check_k3_against_file(&s, "none", "no latent, all KDA");
    /* hand-worked: one MXFP4 expert of 64 x 96 (gate, up: 64 rows of 96 = 3 blocks; down: 96
     * rows of 64 = 2 blocks) = (2 x 64 x 3 + 96 x 2) x 17 bytes */
    s.latent = 96;
    CHECK(cs_layer_cost_of(&s, 1).expert_bytes == (2 * 64 * 3 + 96 * 2) * 17.0,
          "MXFP4 expert %.0f bytes", cs_layer_cost_of(&s, 1).expert_bytes);
}

/* ---- the wire
 * ------------------------------------------------------------------------------------ */

static void test_wire(void) {
    /* K3: n_embd 7168, a checkpoint every 6 layers (0, 6, 12, ..., 90): 16 of 93 layers */
    cs_shape s = tiny_k3();
    s.n_layer = 93, s.n_embd = 7168, s.res_block = 6, s.latent = 3584;
    CHECK(cs_banked(&s, 0) == 0 && cs_banked(&s, 1) == 1 && cs_banked(&s, 6) == 1 &&
              cs_banked(&s, 7) == 2 && cs_banked(&s, 90) == 15 && cs_banked(&s, 91) == 16 &&
              cs_banked(&s, 93) == 16,
          "checkpoints banked before 0, 1, 6, 7, 90, 91, 93: %d %d %d %d %d %d %d",
          cs_banked(&s, 0), cs_banked(&s, 1), cs_banked(&s, 6), cs_banked(&s, 7), cs_banked(&s, 90),
          cs_banked(&s, 91), cs_banked(&s, 93));
    /* a stage of layers [0, 4): the stream in; the stream and layer 0's checkpoint back */
    CHECK(cs_cols_in(&s, 0) == 7168 && cs_cols_out(&s, 0, 4) == 14336, "first stage %lld/%lld",
          (long long)cs_cols_in(&s, 0), (long long)cs_cols_out(&s, 0, 4));
    /* [7, 14): in, the stream and the checkpoints of layers 0 and 6; back, the stream and
     * layer 12's. One token in f32: 12 header + 25 fixed + 4 position + 21504 x 4 + 20
     * framing = 86,077 bytes; back 12 + 9 + 14336 x 4 + 20 = 57,385 */
    CHECK(cs_cols_in(&s, 7) == 21504 && cs_cols_out(&s, 7, 14) == 14336, "[7, 14)");
    CHECK(cs_wire_bytes(CS_WIRE_STAGE_FORWARD, 1, 21504, 4) == 86077, "forward into 7: %.0f",
          cs_wire_bytes(CS_WIRE_STAGE_FORWARD, 1, 21504, 4));
    CHECK(cs_wire_bytes(CS_WIRE_STAGE_REPLY, 1, 14336, 4) == 57385, "reply from [7, 14): %.0f",
          cs_wire_bytes(CS_WIRE_STAGE_REPLY, 1, 14336, 4));
    /* [8, 11) banks nothing: only the stream comes back */
    CHECK(cs_cols_out(&s, 8, 11) == 7168, "[8, 11) back %lld", (long long)cs_cols_out(&s, 8, 11));
    /* the last stage [86, 93): the stream and 15 checkpoints in, 458,813 bytes in f32 and
     * 12 + 25 + 4 + 114688 x 2 + 20 = 229,437 in bf16; back the head's input (the stream mixed
     * with all 16 checkpoints), 7168 values, though layer 90 banks one */
    CHECK(cs_cols_in(&s, 86) == 16 * 7168 && cs_cols_out(&s, 86, 93) == 7168, "[86, 93)");
    CHECK(cs_cols_out(&s, 86, 92) == 14336, "[86, 92) back: the stream and layer 90's");
    CHECK(cs_wire_bytes(CS_WIRE_STAGE_FORWARD, 1, 114688, 4) == 458813 &&
              cs_wire_bytes(CS_WIRE_STAGE_FORWARD, 1, 114688, 2) == 229437,
          "forward into 86: %.0f / %.0f", cs_wire_bytes(CS_WIRE_STAGE_FORWARD, 1, 114688, 4),
          cs_wire_bytes(CS_WIRE_STAGE_FORWARD, 1, 114688, 2));
    /* one stage of every layer: the stream in, the head's input back */
    CHECK(cs_cols_out(&s, 0, 93) == 7168, "whole model back %lld",
          (long long)cs_cols_out(&s, 0, 93));
    /* without residual attention every hop carries the stream: 28,729 + 4 out, 28,709 + 4
     * back (the cols field each way) */
    cs_shape d = tiny_shape();
    d.n_embd = 7168;
    CHECK(cs_cols_in(&d, 50) == 7168 && cs_cols_out(&d, 50, 60) == 7168, "deepseek2 widths");
    CHECK(cs_wire_bytes(CS_WIRE_STAGE_FORWARD, 1, 7168, 4) == 28733 &&
              cs_wire_bytes(CS_WIRE_STAGE_REPLY, 1, 7168, 4) == 28713,
          "deepseek2 one token: %.0f / %.0f", cs_wire_bytes(CS_WIRE_STAGE_FORWARD, 1, 7168, 4),
          cs_wire_bytes(CS_WIRE_STAGE_REPLY, 1, 7168, 4));
    /* 16 latent rows to a partner: 12 + 13 + 16 x 4 ids + 16 x 3584 x 4 + 20; back 12 + 9 +
     * the rows + 20 */
    CHECK(cs_expert_width(&s) == 3584 && cs_expert_width(&d) == 7168, "expert widths");
    CHECK(cs_wire_bytes(CS_WIRE_EXPERT_RUN, 16, 3584, 4) == 229485 &&
              cs_wire_bytes(CS_WIRE_EXPERT_REPLY, 16, 3584, 4) == 229417,
          "expert rows: %.0f / %.0f", cs_wire_bytes(CS_WIRE_EXPERT_RUN, 16, 3584, 4),
          cs_wire_bytes(CS_WIRE_EXPERT_REPLY, 16, 3584, 4));
    /* a 64 MiB message of 114688 f32 values per token: (67108864 - 12 - 25 - 42001 bytes of
     * room for 250 hops) / (4 + 458752) = 146 tokens */
    CHECK(cs_wire_max_rows(CS_WIRE_STAGE_FORWARD, 114688, 4) == 146, "%d tokens per message",
          cs_wire_max_rows(CS_WIRE_STAGE_FORWARD, 114688, 4));
    CHECK(cs_wire_max_rows(CS_WIRE_STAGE_FORWARD, 64, 2) == 65536, "at most 65536 tokens");
    /* proto.c's own sizes agree (it leaves out the transport's 20 bytes) */
    const int64_t cols[] = {7168, 21504, 114688, 3584};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 2; k++) {
            const mt_proto_dtype dt = k ? MT_PROTO_BF16 : MT_PROTO_F32;
            const int w = k ? 2 : 4;
            CHECK(cs_wire_bytes(CS_WIRE_STAGE_FORWARD, 3, (double)cols[i], w) - 20 ==
                      (double)mt_proto_rows_msg_bytes(MT_PROTO_STAGE_FORWARD, 3, (int32_t)cols[i],
                                                      dt),
                  "STAGE_FORWARD of %lld cols differs from proto.c", (long long)cols[i]);
            CHECK(
                cs_wire_bytes(CS_WIRE_STAGE_REPLY, 3, (double)cols[i], w) - 20 ==
                    (double)mt_proto_rows_msg_bytes(MT_PROTO_STAGE_REPLY, 3, (int32_t)cols[i], dt),
                "STAGE_REPLY of %lld cols differs from proto.c", (long long)cols[i]);
            CHECK(cs_wire_bytes(CS_WIRE_EXPERT_RUN, 3, (double)cols[i], w) - 20 ==
                      (double)mt_proto_rows_msg_bytes(MT_PROTO_EXPERT_RUN, 3, (int32_t)cols[i], dt),
                  "EXPERT_RUN of %lld cols differs from proto.c", (long long)cols[i]);
            CHECK(cs_wire_max_rows(CS_WIRE_STAGE_FORWARD, cols[i], w) ==
                          mt_proto_max_rows(MT_PROTO_STAGE_FORWARD, (int32_t)cols[i], dt) &&
                      cs_wire_max_rows(CS_WIRE_EXPERT_RUN, cols[i], w) ==
                          mt_proto_max_rows(MT_PROTO_EXPERT_RUN, (int32_t)cols[i], dt),
                  "max rows of %lld cols differ from proto.c", (long long)cols[i]);
        }
}

static void test_bytes(void) {
    cs_shape s = tiny_shape();
    s.n_dense = 1;
    check_bytes_against_file(&s, "F32");
    /* Q4_K where rows are whole blocks of 256, Q8_0 or F32 elsewhere, a shared expert */
    s = (cs_shape){.n_layer = 2,
                   .n_dense = 1,
                   .n_embd = 256,
                   .n_vocab = 100,
                   .n_head = 2,
                   .q_lora = 256,
                   .kv_lora = 256,
                   .qk_nope = 32,
                   .qk_rope = 16,
                   .v_dim = 32,
                   .n_ff = 512,
                   .n_expert = 8,
                   .n_expert_used = 2,
                   .n_expert_shared = 1,
                   .n_ff_exp = 256,
                   .type = MT_TYPE_Q4_K};
    check_bytes_against_file(&s, "Q4_K");
}

/* ---- the compute model ---------------------------------------------------------------------- */

static void test_touched(void) {
    cs_shape s = tiny_shape(); /* 2 of 4 experts per token */
    cs_compute c = {0};
    CHECK(fabs(cs_touched_fraction(&c, &s, 1) - 0.5) < 1e-12, "1 token touches half");
    CHECK(fabs(cs_touched_fraction(&c, &s, 2) - 0.75) < 1e-12, "2 tokens: 1 - 1/4");
    CHECK(fabs(cs_touched_fraction(&c, &s, 3) - 0.875) < 1e-12, "3 tokens: 1 - 1/8");
    c.touch_measured = true;
    c.n_touch = 2;
    c.touch_n[0] = 2, c.touch_frac[0] = 0.6;
    c.touch_n[1] = 4, c.touch_frac[1] = 0.9;
    CHECK(fabs(cs_touched_fraction(&c, &s, 1) - 0.5) < 1e-12, "measured: 1 token is still k/E");
    CHECK(fabs(cs_touched_fraction(&c, &s, 2) - 0.6) < 1e-12, "measured point");
    CHECK(fabs(cs_touched_fraction(&c, &s, sqrt(8)) - 0.75) < 1e-12, "log-midway");
    CHECK(fabs(cs_touched_fraction(&c, &s, 6) - (1 - 0.1 * 0.25)) < 1e-12,
          "beyond: the rest shrinks as (1 - k/E)^(n - 4)");
}

static void test_fit(void) {
    cs_calibration cal = {0};
    cal.threads = 1;
    const double c0 = 2, a = 3, b = 4, r = 50; /* ms, ms/GMAC, ms/GB, ms/GMAC of recurrences */
    for (int i = 0; i < 6; i++) {
        double macs = (i + 1) * 0.4e9, bytes = (i % 3 + 1) * 0.3e9, rec = (i % 2) * (i + 1) * 1e7;
        cal.points[cal.n_points++] = (cs_point){
            1, macs, bytes, c0 + a * macs / 1e9 + b * bytes / 1e9 + r * rec / 1e9, false, rec};
    }
    cs_compute c;
    mt_error err = {{0}};
    CHECK(cs_compute_fit(&cal, 1, &c, &err) == 0, "fit: %s", err.msg);
    CHECK(fabs(c.c0_ms - c0) < 1e-9 && fabs(c.ms_per_gmac - a) < 1e-9 &&
              fabs(c.ms_per_gb - b) < 1e-9 && fabs(c.ms_per_gstate - r) < 1e-6,
          "fit gave %g %g %g %g, want 2 3 4 50", c.c0_ms, c.ms_per_gmac, c.ms_per_gb,
          c.ms_per_gstate);
    CHECK(c.fit_max_rel < 1e-9, "exact points fit exactly (%g)", c.fit_max_rel);
    /* without recurrences (deepseek2) that term stays 0 */
    for (int i = 0; i < cal.n_points; i++) {
        cs_point *p = &cal.points[i];
        p->ms -= r * p->state_macs / 1e9, p->state_macs = 0;
    }
    CHECK(cs_compute_fit(&cal, 1, &c, &err) == 0, "fit: %s", err.msg);
    CHECK(fabs(c.c0_ms - c0) < 1e-9 && fabs(c.ms_per_gmac - a) < 1e-9 &&
              fabs(c.ms_per_gb - b) < 1e-9 && c.ms_per_gstate == 0,
          "fit gave %g %g %g %g, want 2 3 4 0", c.c0_ms, c.ms_per_gmac, c.ms_per_gb,
          c.ms_per_gstate);
    /* a negative coefficient is not allowed: points that would want one */
    cal.n_points = 0;
    for (int i = 0; i < 4; i++)
        cal.points[cal.n_points++] = (cs_point){1, (i + 1) * 1e9, 1e9, 10.0 - i, false, 0};
    CHECK(cs_compute_fit(&cal, 1, &c, &err) == 0, "fit: %s", err.msg);
    CHECK(c.c0_ms >= 0 && c.ms_per_gmac >= 0 && c.ms_per_gb >= 0 && c.ms_per_gstate >= 0,
          "coefficients stay >= 0");
}

static void test_queue(void) {
    cs_queue q = {0};
    uint64_t s = 12345;
    for (int i = 0; i < 2000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        CHECK(cs_queue_push(&q, (double)(s >> 54), 0, i, 0) == 0, "push");
    }
    cs_event prev = {-1, 0, 0, -1, 0}, e;
    int n = 0;
    while (cs_queue_pop(&q, &e)) {
        CHECK(e.t > prev.t || (e.t == prev.t && e.a > prev.a), "order at %d: %g/%d after %g/%d", n,
              e.t, e.a, prev.t, prev.a);
        prev = e;
        n++;
    }
    CHECK(n == 2000, "popped %d of 2000", n);
    cs_queue_free(&q);
}

/* ---- simulations ----------------------------------------------------------------------------- */

/* Every layer costs c0 = 1 ms whatever its tokens; the head 0.25 ms; a message 70 us of
 * overhead and 30 us of latency, the links so fast that bytes take no time. */
static cs_config base(void) {
    cs_config c;
    cs_config_defaults(&c);
    c.shape = tiny_shape();
    c.compute = (cs_compute){.c0_ms = 1.0, .threads = 1, .head_ms = 0.25};
    c.lan = (cs_lan){.latency_us = 30,
                     .gbps = 1e6,
                     .overhead_us = 70,
                     .connect_ms = 2,
                     .registry_ms = 5,
                     .wire_bytes = 4};
    c.work.burst = true;
    c.work.prompt = 1;
    c.work.gen = 5;
    return c;
}

static bool run(const cs_config *c, cs_result *r, const char *what) {
    mt_error err = {{0}};
    int rc = cs_simulate(c, r, &err);
    CHECK(rc == 0, "%s: %s", what, err.msg);
    return rc == 0;
}

static void test_one_request(void) {
    cs_config c = base();
    c.n_stages = 3;
    c.stage_layers[0] = 1, c.stage_layers[1] = 2, c.stage_layers[2] = 1;
    cs_result r;
    if (!run(&c, &r, "one request")) return;
    /* per token: 3 stages x 2 messages x (70 + 30) us + (1 + 2 + 1) layers x 1 ms + 0.25 ms */
    const double period = 3 * 2 * 0.1 + 4 * 1.0 + 0.25;
    CHECK(fabs(r.ttft_ms - period) < 1e-3, "first token after %.6f ms, want %.6f", r.ttft_ms,
          period);
    CHECK(fabs(r.user_tps - 1e3 / period) < 1e-3, "%.6f tok/s, want %.6f", r.user_tps,
          1e3 / period);
    CHECK(r.requests_done == 1 && r.requests_short == 0, "the request finished");
    cs_result_free(&r);

    /* bytes: a 7168-wide f32 state over 1 Gb/s. STAGE_FORWARD of one token: 12 header + 25
     * fixed + 4 position + 28672 rows + 20 framing = 28733; STAGE_REPLY: 12 + 9 + 28672 + 20
     * = 28713 (together 57,446 bytes: bench_dataplane's measured round trip of 57,438 before
     * the wire carried cols, 4 bytes each way) */
    c = base();
    c.shape.n_embd = 7168;
    c.lan.gbps = 1.0;
    c.n_stages = 1;
    c.stage_layers[0] = 4;
    if (!run(&c, &r, "bytes")) return;
    const double wire = (28733.0 + 28713.0) * 8 / 1e9 * 1e3;
    const double p2 = 2 * 0.1 + wire + 4 * 1.0 + 0.25;
    CHECK(fabs(r.user_tps - 1e3 / p2) < 1e-6 * (1e3 / p2), "%.6f tok/s, want %.6f", r.user_tps,
          1e3 / p2);
    cs_result_free(&r);
}

/* kimi-k3 through a pipeline: the hidden states widen with the checkpoints. */
static void test_k3_request(void) {
    /* 4 layers, a checkpoint every 2 (layers 0 and 2), n_embd 7168, 2 stages [0, 2), [2, 4),
     * every layer 1 ms, bytes at 1 Gb/s. Per token: into [0, 2) the stream (12 + 25 + 4 +
     * 28672 + 20 = 28,733 bytes), back the stream and layer 0's checkpoint (12 + 9 + 57344 +
     * 20 = 57,385); into [2, 4) the stream and that checkpoint (57,405), back the head's
     * input, the stream mixed with both checkpoints (28,713): 172,236 bytes, 4 messages of 100
     * us, 4 layers, the head */
    cs_config c = base();
    c.shape = tiny_k3();
    c.shape.n_embd = 7168;
    c.lan.gbps = 1.0;
    c.n_stages = 2;
    c.stage_layers[0] = 2, c.stage_layers[1] = 2;
    cs_result r;
    if (!run(&c, &r, "kimi-k3 pipeline")) return;
    const double wire = (28733.0 + 57385 + 57405 + 28713) * 8 / 1e9 * 1e3;
    const double period = 4 * 0.1 + wire + 4 * 1.0 + 0.25;
    CHECK(fabs(r.user_tps - 1e3 / period) < 1e-6 * (1e3 / period), "%.6f tok/s, want %.6f",
          r.user_tps, 1e3 / period);
    cs_result_free(&r);

    /* A prompt wider than one message: n_embd 65536, 16 layers, a checkpoint every layer;
     * stages [0, 8) and [8, 16). Into the second go the stream and 8 checkpoints, 589,824
     * f32 values per token: (67108864 - 2726) / (4 + 2359296) = 28 tokens per message, so a
     * prompt of 64 tokens goes as 28 + 28 + 8, each computed as a step of its own (8 ms,
     * the layers' c0 whatever the tokens); the first stage takes all 64 (255 per message).
     * First token: 4 round trips of 2 x 100 us, 8 + 3 x 8 ms of layers, the head. */
    c = base();
    c.shape = tiny_k3();
    c.shape.n_layer = 16, c.shape.n_embd = 65536, c.shape.res_block = 1;
    c.n_stages = 2;
    c.stage_layers[0] = 8, c.stage_layers[1] = 8;
    c.work.prompt = 64;
    c.work.gen = 2;
    c.prefill_chunk = 0; /* the old node: each request whole (chunks: test_chunked_steps) */
    CHECK(cs_wire_max_rows(CS_WIRE_STAGE_FORWARD, 65536 * 9, 4) == 28 &&
              cs_wire_max_rows(CS_WIRE_STAGE_FORWARD, 65536, 4) == 255,
          "tokens per message: %d, %d", cs_wire_max_rows(CS_WIRE_STAGE_FORWARD, 65536 * 9, 4),
          cs_wire_max_rows(CS_WIRE_STAGE_FORWARD, 65536, 4));
    if (!run(&c, &r, "a wide prompt")) return;
    /* (the bytes take 2.5 us at 1e6 Gb/s: 64 tokens of 65536 values into the first stage,
     * 589,824 back and into the second, the head's 65536 back from it) */
    const double E = 65536, W = 9 * E;
    double bytes = cs_wire_bytes(CS_WIRE_STAGE_FORWARD, 64, E, 4) +
                   cs_wire_bytes(CS_WIRE_STAGE_REPLY, 64, W, 4);
    for (int k = 0; k < 3; k++) {
        const double n = k < 2 ? 28 : 8;
        bytes += cs_wire_bytes(CS_WIRE_STAGE_FORWARD, n, W, 4) +
                 cs_wire_bytes(CS_WIRE_STAGE_REPLY, n, E, 4);
    }
    const double ttft = 4 * 2 * 0.1 + 8 + 3 * 8 + 0.25 + bytes * 8 / 1e15 * 1e3;
    CHECK(fabs(r.ttft_ms - ttft) < 1e-6, "first token after %.6f ms, want %.6f", r.ttft_ms, ttft);
    cs_result_free(&r);
}

/* The stage groups of a placed kimi-k3 cell and the widths each is sent and sends back. */
static void test_hops(void) {
    /* 4 layers (checkpoints at 0 and 2), one layer per machine: 2 pipelines of 4 stages */
    cs_config c = base();
    c.shape = tiny_k3();
    /* room for the largest layer (MLA + MoE) and a KDA layer's sessions (64 x 3200 bytes),
     * not for two layers */
    cs_layer_cost big = cs_layer_cost_of(&c.shape, 3);
    c.capacity_bytes = 1.2 * (big.attn_bytes + c.shape.n_expert * big.expert_bytes) + 64 * 3200;
    c.machines = 9;
    c.max_group = 1;
    cs_hop *h = NULL;
    int32_t n = 0;
    mt_error err = {{0}};
    CHECK(cs_plan_hops(&c, &h, &n, NULL, &err) == 0, "hops: %s", err.msg);
    CHECK(n == 8, "%d stage groups, want 2 x 4", n);
    /* [0,1): E in, E + 1 back; [1,2): 2E in (the checkpoint of 0), E back; [2,3): 2E in,
     * 2E back (layer 2 banks); [3,4): 3E in, E back */
    static const int64_t in[4] = {64, 128, 128, 192}, out[4] = {128, 64, 128, 64};
    for (int32_t i = 0; i < n && i < 8; i++) {
        const int k = h[i].layer_begin;
        CHECK(h[i].layer_end == k + 1 && h[i].pipeline == i / 4 && h[i].partners == 0,
              "group %d: pipeline %d layers [%d, %d)", i, h[i].pipeline, k, h[i].layer_end);
        if (k >= 0 && k < 4)
            CHECK(h[i].cols_in == in[k] && h[i].cols_out == out[k],
                  "layer %d: %lld in, %lld out; want %lld, %lld", k, (long long)h[i].cols_in,
                  (long long)h[i].cols_out, (long long)in[k], (long long)out[k]);
    }
    free(h);
    /* a stage's sessions count against its machine (placement's working memory): 64 sessions
     * of 6 positions need 64 x 3200 bytes on a KDA layer's stage, 64 x 6 x 192 on an MLA
     * layer's: the largest 204,800 */
    cs_result r;
    c.work.burst = true;
    if (run(&c, &r, "sessions")) {
        CHECK(r.session_mem_max == 64 * 3200.0, "sessions on a stage: %.0f bytes",
              r.session_mem_max);
        cs_result_free(&r);
    }
}

static void test_saturation(void) {
    cs_config c = base();
    c.n_stages = 2;
    c.stage_layers[0] = 1, c.stage_layers[1] = 3; /* the slow one: 3 ms per step */
    c.max_batch_tokens = 4;
    c.work.burst = false;
    c.work.users = 16;
    c.work.gen = 1000000; /* no request ends in the run */
    c.work.duration_ms = 10000;
    c.work.warmup_ms = 1000;
    c.lan.overhead_us = c.lan.latency_us = 0;
    c.compute.head_ms = 1e-9;
    cs_result r;
    if (!run(&c, &r, "saturation")) return;
    const double want = 4 / 3e-3; /* 4 tokens per 3 ms */
    CHECK(fabs(r.agg_tps - want) < 0.005 * want, "%.2f tok/s, want %.2f", r.agg_tps, want);
    cs_result_free(&r);
}

static void test_shared_cpu(void) {
    /* one stage (1 ms), heads of 1 ms, 2 requesters on one machine. With 2 cores a node step
     * and a head run side by side: a token every 2 ms per requester. With 1 core both run at
     * half speed: every 4 ms (a node step with the other's head). */
    cs_config c = base();
    c.n_stages = 1;
    c.shape.n_layer = 1;
    c.stage_layers[0] = 1;
    c.compute.head_ms = 1.0;
    c.lan.overhead_us = c.lan.latency_us = 0;
    c.shared_host = true;
    c.work.users = 2;
    c.work.gen = 11;
    cs_result r;
    c.cores = 2;
    if (run(&c, &r, "2 cores")) {
        CHECK(fabs(r.user_tps - 500) < 1e-6 * 500, "2 cores: %.6f tok/s per requester, want 500",
              r.user_tps);
        cs_result_free(&r);
    }
    c.cores = 1;
    if (run(&c, &r, "1 core")) {
        /* the first requester's tokens at 3, 7, ..., 43 ms; the second's at 5, 9, ..., 41 ms and
         * its last at 44 ms: once the first is done its head runs alone (1 ms) */
        CHECK(fabs(r.user_tps_min - 250) < 1e-6, "1 core: %.6f tok/s, want 250", r.user_tps_min);
        CHECK(fabs(r.user_tps_max - 1e4 / 39) < 1e-6, "1 core, the second: %.6f tok/s, want %.6f",
              r.user_tps_max, 1e4 / 39);
        cs_result_free(&r);
    }
    /* other programs leave half a CPU to one thread of ours, one CPU to two: every job runs at
     * half speed, a token every 4 ms for each requester, to the end */
    c.cores = 2;
    c.n_share = 2;
    c.share[0] = 0.5, c.share[1] = 1.0;
    if (run(&c, &r, "a measured share")) {
        CHECK(fabs(r.user_tps_min - 250) < 1e-6 && fabs(r.user_tps_max - 250) < 1e-6,
              "half speed: %.6f-%.6f tok/s, want 250", r.user_tps_min, r.user_tps_max);
        cs_result_free(&r);
    }
}

/* Every user a slot of one requester process: the heads share its CPUs, the messages its
 * link. */
static void test_one_requester(void) {
    /* one stage that costs nothing, heads of 1 ms, 2 users at once, links so fast that bytes
     * take no time (within 1e-6): on machines of their own a token every 1 ms each; on one
     * machine of 1 CPU the two heads run side by side at half speed, a token every 2 ms each */
    cs_config c = base();
    c.n_stages = 1;
    c.stage_layers[0] = 4;
    c.compute.c0_ms = 0;
    c.compute.head_ms = 1.0;
    c.lan.overhead_us = c.lan.latency_us = 0;
    c.work.users = 2;
    c.work.gen = 11;
    cs_result r;
    if (run(&c, &r, "two requesters")) {
        CHECK(fabs(r.user_tps_min - 1000) < 1e-3 && fabs(r.user_tps_max - 1000) < 1e-3,
              "requesters of their own: %.6f-%.6f tok/s, want 1000", r.user_tps_min,
              r.user_tps_max);
        cs_result_free(&r);
    }
    c.one_requester = true;
    c.requester_cores = 1;
    if (run(&c, &r, "one requester")) {
        CHECK(fabs(r.user_tps_min - 500) < 1e-3 && fabs(r.user_tps_max - 500) < 1e-3,
              "one requester of 1 CPU: %.6f-%.6f tok/s, want 500", r.user_tps_min, r.user_tps_max);
        cs_result_free(&r);
    }
    /* with 2 CPUs the two heads run at full speed again */
    c.requester_cores = 2;
    if (run(&c, &r, "one requester, 2 CPUs")) {
        CHECK(fabs(r.user_tps_min - 1000) < 1e-3, "one requester of 2 CPUs: %.6f tok/s, want 1000",
              r.user_tps_min);
        cs_result_free(&r);
    }
    /* its link: 4 users through 2 stages, each token a 7168-wide f32 state out (28,733 bytes)
     * and back (28,713) per stage over 1 Gb/s (0.2299 ms each), nothing else costing time.
     * One requester's link sends 2 forwards per token of any user: at most 1 / (2 x 0.22986)
     * = 2175 tokens/s in all. Requesters of their own are bound by the stages' links, each of
     * which carries 1 forward and 1 reply per token: 4350 tokens/s */
    c = base();
    c.n_stages = 2;
    c.stage_layers[0] = c.stage_layers[1] = 2;
    c.shape.n_embd = 7168;
    c.compute.c0_ms = 0;
    c.compute.head_ms = 1e-9;
    c.lan = (cs_lan){.gbps = 1.0, .wire_bytes = 4};
    c.work.users = 4;
    c.work.gen = 41;
    const double bound = 1e3 / (2 * 28733.0 * 8 / 1e9 * 1e3);
    if (run(&c, &r, "4 requesters' links")) {
        CHECK(r.agg_tps > 1.8 * bound, "requesters' own links: %.0f tok/s, want about %.0f",
              r.agg_tps, 2 * bound);
        cs_result_free(&r);
    }
    c.one_requester = true;
    if (run(&c, &r, "one requester's link")) {
        CHECK(r.agg_tps <= bound * 1.0001 && r.agg_tps > 0.9 * bound,
              "one requester's link: %.0f tok/s, want at most %.0f", r.agg_tps, bound);
        cs_result_free(&r);
    }
}

/* Two layers, each machine holding one: pipelines of 2 stages (max_group 1: no partners). */
static cs_config cell_config(int replicas) {
    cs_config c = base();
    c.shape.n_layer = 2;
    cs_layer_cost lc = cs_layer_cost_of(&c.shape, 0);
    c.capacity_bytes = 1.5 * (lc.attn_bytes + c.shape.n_expert * lc.expert_bytes);
    c.session_ctx = 1; /* sessions of one position: room for one layer's, not two layers */
    c.machines = 2 * replicas + 1;
    c.replicas = replicas;
    c.spares = 1;
    c.max_group = 1;
    c.lan.overhead_us = c.lan.latency_us = 0;
    c.compute.head_ms = 1e-9;
    c.work.gen = 20;
    c.failure.at_ms = 11.5; /* the requester is in its 6th pass, at its second stage */
    c.failure.node = -1;    /* the stage of its route that holds layer 1 */
    c.failure.dead_after_ms = 1000;
    c.failure.heartbeat_ms = 100;
    c.failure.load_ms = 300;
    c.failure.fetch_gbps = 1e6;
    c.failure.call_timeout_ms = 3000;
    return c;
}

static void test_failover(void) {
    cs_config c = cell_config(2);
    cs_result r;
    if (!run(&c, &r, "failover")) return;
    CHECK(r.pipelines == 2 && r.stages_min == 2 && r.stages_max == 2 && r.spares == 1,
          "the placement: %s", r.topology);
    /* a token every 2 ms; at 11.5 ms the second stage dies mid-step: the reset is seen at once.
     * Then: the session ended on the first stage (no wait), the registry (5 ms), two connects
     * (2 x 2 ms), the 6 tokens of the history through both stages, each in chunks of 4 and 2
     * (the node's prefill_chunk 4): 2 steps of 1 ms on each, 4 ms */
    CHECK(r.affected == 1, "%d requesters affected, want 1", r.affected);
    CHECK(fabs(r.detect_ms_max) < 1e-6, "detected after %.6f ms, want 0", r.detect_ms_max);
    CHECK(fabs(r.recovery_ms_max - (5 + 2 * 2 + 2 * 2)) < 1e-6, "recovery %.6f ms, want 13",
          r.recovery_ms_max);
    CHECK(r.requests_done == 1 && r.requests_short == 0 && r.requests_failed == 0,
          "no token lost: %d done, %d short, %d failed", r.requests_done, r.requests_short,
          r.requests_failed);
    CHECK(r.failovers == 1, "%lld failovers", (long long)r.failovers);
    /* the spare serves after dead-after + 2 heartbeats + fetch (nothing at 1e6 Gb/s) + load */
    CHECK(fabs(r.restored_ms - 1500) < 1e-3, "spare serving %.6f ms after, want 1500",
          r.restored_ms);
    cs_result_free(&r);

    /* silent: the call to the dead stage began at 11 ms and times out at 3011 ms */
    c.failure.silent = true;
    if (!run(&c, &r, "silent")) return;
    CHECK(fabs(r.detect_ms_max - 2999.5) < 1e-6, "detected after %.6f ms, want 2999.5",
          r.detect_ms_max);
    CHECK(fabs(r.recovery_ms_max - (2999.5 + 13)) < 1e-6, "recovery %.6f ms, want 3012.5",
          r.recovery_ms_max);
    CHECK(r.requests_short == 0 && r.requests_failed == 0, "no token lost");
    cs_result_free(&r);

    /* no backup pipeline: attempts at 11.5 + k x (250 + 5) ms until the spare serves at
     * 1511.5 ms: k = 6 (1541.5 ms), then 5 + 4 + 4 ms */
    c = cell_config(1);
    if (!run(&c, &r, "spare")) return;
    double attempt = 11.5;
    while (attempt < 11.5 + 1500) attempt += 250 + 5;
    const double want = attempt + 5 + 4 + 4 - 11.5;
    CHECK(fabs(r.recovery_ms_max - want) < 1e-6, "recovery %.6f ms, want %.6f", r.recovery_ms_max,
          want);
    CHECK(r.requests_short == 0 && r.requests_failed == 0, "no token lost with a single pipeline");
    cs_result_free(&r);
}

static void test_evictions(void) {
    cs_config c = base();
    c.n_stages = 1;
    c.stage_layers[0] = 4;
    c.work.users = 2;
    c.work.gen = 4;
    cs_result r;
    c.max_sessions = 2;
    if (run(&c, &r, "2 sessions")) {
        CHECK(r.evictions == 0 && r.replays == 0, "room for both: %lld evictions",
              (long long)r.evictions);
        cs_result_free(&r);
    }
    c.max_sessions = 1; /* each new session evicts the other: replays */
    if (run(&c, &r, "1 session")) {
        CHECK(r.evictions > 0 && r.replays > 0, "one slot: %lld evictions, %lld replays",
              (long long)r.evictions, (long long)r.replays);
        cs_result_free(&r);
    }
}

/* ---- issue 18: chunked steps, sessions by memory, one-way hops ------------------------------ */

/* ms of one step of a one-stage pipeline holding the whole tiny model (no partners). */
static double stage_ms(const cs_config *c, double n_tok, double n_seq, double p0) {
    const cs_step st = cs_step_of(n_tok, n_seq, p0);
    double ms = 0;
    for (int32_t l = 0; l < c->shape.n_layer; l++)
        ms += cs_layer_ms(&c->compute, &c->shape, l, &st, c->shape.n_expert, true);
    return ms;
}

/* A prompt arriving while another user decodes, on one node (node_worker.c's step order).
 * One stage of the 4 layers; a layer costs 1 ms plus about 0.5 ms per token (its
 * multiply-adds); messages 0.1 ms, the head 0.25 ms. User 0 starts at 0 (a prompt of 32,
 * then 24 tokens), user 1 at 100 ms with the same request, when user 0 decodes.
 *   Chunked (step_tokens 8, prefill_chunk 8): each step holds user 0's decode and at most 7
 *   of user 1's prompt tokens (the budget, 8 - 1), or at most 8 prompt tokens. A decode
 *   arriving during a step waits for it, then runs in the next: between two of user 0's
 *   tokens at most 0.1 + 0.1 + 0.25 ms of messages and head and two steps of at most 8
 *   tokens. It did share a step with a chunk: at least one step of 8 tokens (a decode at
 *   position >= 32 and 7 prompt tokens attend more than 8 tokens from position 0).
 *   The old node (prefill_chunk 0): user 1's prompt is one step of 32 tokens; user 0's
 *   decode arriving during it (or just before it starts) waits for all of it, then its own
 *   step: a gap of at least S(32 from 0) + S(1) > 2 x S(8) + 0.45. */
static void test_chunked_steps(void) {
    cs_config c = base();
    c.n_stages = 1;
    c.stage_layers[0] = 4;
    const cs_layer_cost lc = cs_layer_cost_of(&c.shape, 0);
    c.compute.ms_per_gmac = 0.5 / ((lc.attn_macs + c.shape.n_expert_used * lc.expert_macs) / 1e9);
    c.work.users = 2;
    c.work.prompt = 32;
    c.work.gen = 24;
    c.work.stagger_ms = 100;
    c.step_tokens = 8;
    c.prefill_chunk = 8;
    const double P = 32, G = 24, msgs = 0.45;
    const double most = msgs + 2 * stage_ms(&c, 8, 2, P + G), least = msgs + stage_ms(&c, 8, 1, 0);
    const double old_least = stage_ms(&c, 32, 1, 0) + stage_ms(&c, 1, 1, 0);
    CHECK(old_least > most, "the case separates the models: %.3f > %.3f ms", old_least, most);
    cs_result r;
    c.no_pacing = true; /* the chunk rule alone; pacing below */
    if (run(&c, &r, "chunked steps")) {
        CHECK(r.itl_max_ms <= most && r.itl_max_ms >= least,
              "chunked: longest gap %.3f ms, want within [%.3f, %.3f]", r.itl_max_ms, least, most);
        CHECK(r.requests_done == 2 && r.requests_short == 0, "both requests finished");
        cs_result_free(&r);
    }
    /* decode pacing, on 4 stages of 1 layer: each stage learns user 0's rhythm and runs
     * user 1's chunks only in the gaps between its decodes (a stage is busy with user 0 a
     * quarter of the time, and a chunk of 2 takes less than the rest), and not with them:
     * user 0's gaps (longest, p95) are shorter than without pacing, and user 1's prompt
     * still finishes (when written: longest 8.33 ms paced, 9.12 unpaced, 7.79 alone) */
    c.no_pacing = false;
    c.n_stages = 4;
    for (int i = 0; i < 4; i++) c.stage_layers[i] = 1;
    c.prefill_chunk = 2;
    cs_config alone = c, unpaced = c;
    alone.work.users = 1;
    unpaced.no_pacing = true;
    cs_result r1, r2;
    if (run(&alone, &r1, "one user alone") && run(&unpaced, &r2, "unpaced") &&
        run(&c, &r, "paced")) {
        CHECK(r.itl_max_ms < r2.itl_max_ms && r.gap0_p95_ms < r2.gap0_p95_ms &&
                  r.gap0_p95_ms >= r1.gap0_p95_ms,
              "user 0's gaps, longest and p95: paced %.3f, %.3f ms; unpaced %.3f, %.3f; alone"
              " %.3f, %.3f",
              r.itl_max_ms, r.gap0_p95_ms, r2.itl_max_ms, r2.gap0_p95_ms, r1.itl_max_ms,
              r1.gap0_p95_ms);
        CHECK(r.requests_done == 2 && r.requests_short == 0 && r.paced_holds > 0,
              "paced: %d requests done, %lld holds", r.requests_done, (long long)r.paced_holds);
        cs_result_free(&r);
        cs_result_free(&r1);
        cs_result_free(&r2);
    }
    c.n_stages = 1;
    c.stage_layers[0] = 4;
    c.prefill_chunk = 0; /* the old node */
    if (run(&c, &r, "whole prompts")) {
        CHECK(r.itl_max_ms >= old_least, "old node: longest gap %.3f ms, want >= %.3f",
              r.itl_max_ms, old_least);
        cs_result_free(&r);
    }
}

/* Sessions limited by bytes (kv_make_room): one stage of the 4 MLA layers, B bytes per
 * position (no fixed state), a budget of 14 positions' bytes. Requests of a 4-token prompt
 * and 4 tokens (a session ends holding 7 positions: the last token is not computed; a
 * request at p0 of n reserves p0 + n), users starting 12 ms apart (a token every 4.45 ms):
 * when user 2 starts (24 ms) user 0 is done (its session idle, 7 positions) and user 1 has
 * had 2 tokens (6 positions). User 2's 4: 7 + 6 + 4 = 17 > 14, so the least recently used
 * session, user 0's, is evicted (1 eviction), and users 1 and 2 then fit (7 + 7) to the
 * end: no replay (evicting user 1's would have cost one). With 21 positions (three whole
 * sessions) nothing is evicted: only bytes evict; the old model's count of 64 sessions never
 * evicts here, and a count cap of 2 evicts by count. */
static void test_session_bytes(void) {
    cs_config c = base();
    c.n_stages = 1;
    c.stage_layers[0] = 4;
    c.work.users = 3;
    c.work.prompt = 4;
    c.work.gen = 4;
    c.work.stagger_ms = 12;
    double fixed = 0, pos = 0;
    cs_session_bytes(&c.shape, 0, 4, &fixed, &pos);
    CHECK(fixed == 0 && pos > 0, "tiny sessions: %.0f fixed, %.0f per position", fixed, pos);
    c.capacity_bytes = 14 * pos;
    cs_result r;
    if (run(&c, &r, "14 positions")) {
        CHECK(r.evictions == 1 && r.replays == 0 && r.requests_done == 3,
              "14 positions: %lld evictions, %lld replays, %d done; want 1, 0, 3",
              (long long)r.evictions, (long long)r.replays, r.requests_done);
        cs_result_free(&r);
    }
    c.capacity_bytes = 21 * pos;
    if (run(&c, &r, "21 positions")) {
        CHECK(r.evictions == 0 && r.replays == 0, "21 positions: %lld evictions",
              (long long)r.evictions);
        cs_result_free(&r);
    }
    c.capacity_bytes = 0; /* no memory limit, a count of 2 */
    c.max_sessions = 2;
    if (run(&c, &r, "2 sessions")) {
        CHECK(r.evictions == 1 && r.replays == 0, "a cap of 2: %lld evictions, %lld replays",
              (long long)r.evictions, (long long)r.replays);
        cs_result_free(&r);
    }
}

/* One-way hops on 2 stages of 2 layers (1 ms a layer whatever its tokens, messages 0.1 ms,
 * the head 0.25 ms, bytes free).
 *   A decode token: turn = requester -> stage 0 -> requester -> stage 1 -> requester, 4
 *   messages; oneway = requester -> stage 0 -> stage 1 -> requester, 3: 4.65 against 4.55 ms.
 *   A prompt of 16 tokens in chunks of 8 (steps of 2 ms per stage): turn runs both chunks on
 *   stage 0 (4 ms), replies, then both on stage 1: 4 x 0.1 + 8 + 0.25 = 8.65 ms to the first
 *   token. Oneway: stage 0's first chunk is done at 2.1 and reaches stage 1 at 2.2, its
 *   second at 4.2, when stage 1 ends the first; stage 1 ends the second at 6.2, the last row
 *   reaches the requester at 6.3: first token at 6.55 ms. */
static void test_oneway(void) {
    cs_config c = base();
    c.n_stages = 2;
    c.stage_layers[0] = 2, c.stage_layers[1] = 2;
    c.work.prompt = 1;
    c.work.gen = 5;
    cs_result r;
    const double want[2] = {1e3 / 4.65, 1e3 / 4.55};
    for (int mode = 0; mode < 2; mode++) {
        c.oneway = mode == 1;
        if (!run(&c, &r, mode ? "oneway decode" : "turn decode")) return;
        CHECK(fabs(r.user_tps - want[mode]) < 1e-3, "%s: %.6f tok/s, want %.6f",
              mode ? "oneway" : "turn", r.user_tps, want[mode]);
        cs_result_free(&r);
    }
    c.work.prompt = 16;
    c.work.gen = 2;
    c.step_tokens = 8;
    c.prefill_chunk = 8;
    const double ttft[2] = {8.65, 6.55};
    for (int mode = 0; mode < 2; mode++) {
        c.oneway = mode == 1;
        if (!run(&c, &r, mode ? "oneway prompt" : "turn prompt")) return;
        CHECK(fabs(r.ttft_ms - ttft[mode]) < 1e-3, "%s: first token after %.6f ms, want %.6f",
              mode ? "oneway" : "turn", r.ttft_ms, ttft[mode]);
        cs_result_free(&r);
    }
}

/* Speculative passes (--spec-k 3) on one stage of 4 layers (1 ms a layer whatever its tokens,
 * messages 0.1 ms, the head 0.25 ms a row, no KDA state to copy): a pass is the token and 3
 * guesses, 0.2 + 4 + 4 x 0.25 = 5.2 ms. With every guess taken, 9 tokens are the prompt's
 * first and 2 passes of 4: 8 decode tokens in 10.4 ms, 769.23 tok/s. With none taken, 8
 * passes of 1 token, the last three with 2, 1 and 0 guesses (none past the request's end:
 * 4.95, 4.7 and 4.45 ms): 8 tokens in 5 x 5.2 + 14.1 = 40.1 ms, 199.50 tok/s, below plain
 * decoding's 1000 / 4.45 = 224.72. */
static void test_speculative(void) {
    cs_config c = base();
    c.n_stages = 1;
    c.stage_layers[0] = 4;
    c.work.gen = 9;
    c.spec_k = 3;
    const double accept[2] = {1, 0}, want[2] = {8 / 10.4e-3, 8 / 40.1e-3};
    cs_result r;
    for (int i = 0; i < 2; i++) {
        c.spec_accept = accept[i];
        if (!run(&c, &r, "speculative")) return;
        CHECK(fabs(r.user_tps - want[i]) < 1e-6 * want[i] && r.requests_short == 0,
              "accept %.0f: %.6f tok/s, want %.6f", accept[i], r.user_tps, want[i]);
        cs_result_free(&r);
    }
    c.spec_k = 0;
    if (run(&c, &r, "plain")) {
        CHECK(fabs(r.user_tps - 1e3 / 4.45) < 1e-6 * (1e3 / 4.45), "plain: %.6f tok/s", r.user_tps);
        cs_result_free(&r);
    }
}

static void test_refusals(void) {
    cs_config c = base();
    cs_result r;
    mt_error err = {{0}};
    c.n_stages = 2;
    c.stage_layers[0] = 1, c.stage_layers[1] = 1; /* 2 of 4 layers */
    CHECK(cs_simulate(&c, &r, &err) != 0 && strstr(err.msg, "layers"), "stages short: %s", err.msg);
    c = base();
    c.machines = 3;
    c.capacity_bytes = 1000; /* nothing fits */
    CHECK(cs_simulate(&c, &r, &err) != 0 && strstr(err.msg, "cannot hold"), "too small: %s",
          err.msg);
    c = base();
    c.n_stages = 1;
    c.stage_layers[0] = 4;
    c.failure.at_ms = 5;
    CHECK(cs_simulate(&c, &r, &err) != 0 && strstr(err.msg, "fail over"), "no backup: %s", err.msg);
}

int main(void) {
    test_macs();
    test_bytes();
    test_k3_macs();
    test_k3_bytes();
    test_wire();
    test_touched();
    test_fit();
    test_queue();
    test_one_request();
    test_k3_request();
    test_hops();
    test_saturation();
    test_shared_cpu();
    test_one_requester();
    test_failover();
    test_evictions();
    test_chunked_steps();
    test_session_bytes();
    test_oneway();
    test_speculative();
    test_refusals();
    return check_report("test_cellsim");
}

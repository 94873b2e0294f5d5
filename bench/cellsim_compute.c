/* cellsim_compute.c - what a layer costs: the bytes a deepseek2 or kimi-k3
 * layer (KDA or MLA, dense or MoE) holds and reads and its multiply-adds per
 * token (from the shape, as `moontail mkmodel` lays the tensors out), what a
 * session holds (KDA states, MLA caches), the bytes of the data plane's
 * messages (proto.h), and the time of a compute call
 *     ms = c0 + ms_per_gmac * MACs + ms_per_gstate * KDA recurrence MACs
 *          + ms_per_gb * bytes read
 * fitted to `moontail bench --layer-times` measurements.
 *
 * Why this form: a decode step streams every weight row it touches once
 * (bytes: the non-expert part plus each distinct expert any token of the
 * batch chose), and multiplies each token by the rows it uses (MACs grow
 * with the tokens). Measuring models with the real layer widths but fewer
 * experts than the target (896 experts do not fit in this machine's RAM) and
 * fitting both terms lets the target's time follow from its own bytes
 * touched and MACs: with B tokens a layer of E experts, k per token, touches
 * E * (1 - (1 - k/E)^B) experts on average. Beside the weights a step reads
 * each session's state: a KDA layer reads and writes its fixed recurrent
 * state once per session (and its recurrence costs MACs per token that do
 * not grow with the context); an MLA layer reads each session's cache rows,
 * and its attention costs MACs per token and attended position. */
#include "cellsim.h"
#include "moontail/proto.h"
#include "moontail/tensor_type.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- bytes and MACs of a shape ------------------------------------------------------- */

/* The type a matrix with rows of n elements gets (synth_model.c's fit_type). */
static mt_type row_type(int type, int64_t n) {
    const mt_type_traits *t = mt_type_traits_get((uint32_t)type);
    if (t && n % t->blck == 0) return (mt_type)type;
    return n % 32 == 0 ? MT_TYPE_Q8_0 : MT_TYPE_F32;
}

/* Bytes of a matrix of n_out rows of n_in elements (times n_mat). */
static double matrix_bytes(int type, int64_t n_in, int64_t n_out, int64_t n_mat) {
    return (double)mt_type_row_size(row_type(type, n_in), n_in) * (double)n_out * (double)n_mat;
}

/* MLA attention (deepseek2, kimi-k3's MLA layers): q (low rank when q_lora > 0), the
 * compressed kv, the absorbed per-head k_b and v_b, kimi-k3's output gate, the output. */
static void mla_cost(const cs_shape *s, cs_layer_cost *c, double *b, double *m) {
    const int64_t E = s->n_embd, H = s->n_head, qk = s->qk_nope + s->qk_rope;
    if (s->q_lora > 0) {
        *b += matrix_bytes(s->type, E, s->q_lora, 1) + 4.0 * s->q_lora +
              matrix_bytes(s->type, s->q_lora, H * qk, 1);
        *m += (double)E * s->q_lora + (double)s->q_lora * H * qk;
    } else {
        *b += matrix_bytes(s->type, E, H * qk, 1);
        *m += (double)E * H * qk;
    }
    *b += matrix_bytes(s->type, E, s->kv_lora + s->qk_rope, 1) + 4.0 * s->kv_lora;
    *m += (double)E * (s->kv_lora + s->qk_rope);
    /* absorbed MLA: per head k_b (kv_lora rows of nope) and v_b (v_dim rows of kv_lora) */
    *b += matrix_bytes(s->type, s->qk_nope, s->kv_lora, H) +
          matrix_bytes(s->type, s->kv_lora, s->v_dim, H);
    *m += (double)H * s->qk_nope * s->kv_lora + (double)H * s->kv_lora * s->v_dim;
    if (s->arch == CS_ARCH_KIMI_K3 && s->mla_gate) {
        *b += matrix_bytes(s->type, E, H * s->v_dim, 1);
        *m += (double)E * H * s->v_dim;
    }
    *b += matrix_bytes(s->type, H * s->v_dim, E, 1);
    *m += (double)H * s->v_dim * E;
    /* over the cache: scores against [c_kv ; k_pe] and the sum of c_kv, per head */
    c->ctx_macs = (double)H * (2.0 * s->kv_lora + s->qk_rope);
    c->bytes_per_position = 2.0 * (s->kv_lora + s->qk_rope); /* the default f16 cache */
}

/* Kimi Delta Attention (kimi-k3): q, k, v projections through causal convolutions (F32
 * taps), the decay gate (f_a, f_b, dt bias, A), beta, the full-rank output gate, the
 * per-head output norm and the output. The recurrence per token and head: decay, S k, the
 * rank-1 update and S q, each hd x hd (attn_kda.c). */
static void kda_cost(const cs_shape *s, cs_layer_cost *c, double *b, double *m) {
    const int64_t E = s->n_embd, H = s->n_head, hd = s->kda_head_dim, D = H * hd,
                  K = s->conv_kernel;
    *b += 3 * 4.0 * K * D;                    /* ssm_conv1d_{q,k,v} */
    *b += 3 * matrix_bytes(s->type, E, D, 1); /* attn_{q,k,v} */
    *b += matrix_bytes(s->type, E, hd, 1) + matrix_bytes(s->type, hd, D, 1); /* f_a, f_b */
    *b += matrix_bytes(s->type, E, H, 1) + 4.0 * H + 4.0 * D;                /* beta, A, dt bias */
    *b += matrix_bytes(s->type, E, D, 1) + 4.0 * hd;                         /* ssm_g, ssm_norm */
    *b += matrix_bytes(s->type, D, E, 1);                                    /* attn_output */
    *m += 5.0 * E * D + (double)E * hd + (double)hd * D + (double)E * H;
    c->kda = true;
    c->state_macs = 4.0 * H * hd * hd + 3.0 * K * D;
    c->state_bytes = 4.0 * (3.0 * (K - 1) * D + (double)H * hd * hd);
}

/* A dense FFN of width F at n_embd: gate, up, down. */
static void ffn_cost(const cs_shape *s, int64_t F, double *b, double *m) {
    const int64_t E = s->n_embd;
    *b += 2 * matrix_bytes(s->type, E, F, 1) + matrix_bytes(s->type, F, E, 1);
    *m += 3.0 * E * F;
}

cs_layer_cost cs_layer_cost_of(const cs_shape *s, int32_t layer) {
    const int64_t E = s->n_embd;
    const bool k3 = s->arch == CS_ARCH_KIMI_K3;
    cs_layer_cost c = {0};
    double b = 4.0 * 2 * E, m = 0;                /* attn_norm, ffn_norm */
    if (k3 && s->res_block > 0) b += 4.0 * 2 * E; /* attn_res_score, ffn_res_score */
    if (k3 && layer >= 0 && layer < CS_MAX_KIMI_LAYERS && !s->mla[layer])
        kda_cost(s, &c, &b, &m);
    else
        mla_cost(s, &c, &b, &m);
    if (layer < s->n_dense || s->n_expert == 0) {
        ffn_cost(s, s->n_ff, &b, &m);
    } else {
        const int64_t X = s->n_expert, F = s->n_ff_exp, L = cs_expert_width(s),
                      FS = (int64_t)s->n_ff_exp * s->n_expert_shared;
        const int et = k3 && s->expert_type >= 0 ? s->expert_type : s->type;
        b += 4.0 * E * X + 4.0 * X; /* router and selection bias, F32 */
        m += (double)E * X;
        if (k3 && s->latent > 0) { /* ffn_routed_down, ffn_routed_up, ffn_routed_norm */
            b += matrix_bytes(s->type, E, L, 1) + matrix_bytes(s->type, L, E, 1) + 4.0 * L;
            m += 2.0 * E * L;
        }
        if (FS > 0) ffn_cost(s, FS, &b, &m);
        c.expert_bytes = 2 * matrix_bytes(et, L, F, 1) + matrix_bytes(et, F, L, 1);
        c.expert_macs = 3.0 * L * F;
    }
    c.attn_bytes = b;
    c.attn_macs = m;
    return c;
}

int32_t cs_expert_width(const cs_shape *s) {
    return s->arch == CS_ARCH_KIMI_K3 && s->latent > 0 ? s->latent : s->n_embd;
}

double cs_head_bytes(const cs_shape *s) {
    double b = matrix_bytes(s->type, s->n_embd, s->n_vocab, 1) + 4.0 * s->n_embd;
    if (s->arch == CS_ARCH_KIMI_K3 && s->res_block > 0) b += 4.0 * s->n_embd; /* res score */
    return b;
}

double cs_head_macs(const cs_shape *s) {
    return (double)s->n_embd * s->n_vocab;
}

double cs_model_bytes(const cs_shape *s) {
    double total = cs_head_bytes(s) + matrix_bytes(s->type, s->n_embd, s->n_vocab, 1);
    for (int32_t l = 0; l < s->n_layer; l++) {
        cs_layer_cost c = cs_layer_cost_of(s, l);
        total += c.attn_bytes + c.expert_bytes * s->n_expert;
    }
    return total;
}

void cs_session_bytes(const cs_shape *s, int32_t a, int32_t b, double *fixed,
                      double *per_position) {
    *fixed = *per_position = 0;
    for (int32_t l = a; l < b; l++) {
        cs_layer_cost c = cs_layer_cost_of(s, l);
        *fixed += c.state_bytes;
        *per_position += c.bytes_per_position;
    }
}

cs_step cs_step_of(double n_tok, double n_seq, double p0) {
    /* each session: k tokens at p0 .. p0 + k - 1, attending p0 + 1 .. p0 + k positions */
    const double k = n_seq > 0 ? n_tok / n_seq : 0;
    return (cs_step){n_tok, n_seq, n_seq * (k * p0 + k * (k + 1) / 2), n_seq * (p0 + k)};
}

/* ---- the wire ----------------------------------------------------------------------------- */

int32_t cs_banked(const cs_shape *s, int32_t layer) {
    const int32_t B = s->arch == CS_ARCH_KIMI_K3 ? s->res_block : 0;
    return B > 0 && layer > 0 ? (layer + B - 1) / B : 0;
}

int64_t cs_cols_in(const cs_shape *s, int32_t a) {
    return (int64_t)s->n_embd * (1 + cs_banked(s, a));
}

int64_t cs_cols_out(const cs_shape *s, int32_t a, int32_t end) {
    /* the last stage mixes every checkpoint into the head's input (output_res_score) */
    if (cs_banked(s, s->n_layer) > 0 && end == s->n_layer) return s->n_embd;
    return (int64_t)s->n_embd * (1 + cs_banked(s, end) - cs_banked(s, a));
}

/* proto.c's sizes: the header, each type's fixed fields, the hop list's most bytes (what
 * mt_proto_max_rows keeps room for), the payload limit; the transport's framing */
enum {
    WIRE_HEADER = 12,
    WIRE_FRAMING = 4 + 16,
    WIRE_STAGE_FIXED = 8 + 1 + 4 + 4 + 4 + 4,
    WIRE_EXPERT_FIXED = 4 + 1 + 4 + 4,
    WIRE_REPLY_FIXED = 1 + 4 + 4,
    WIRE_HOPS_MAX = 1 + MT_PROTO_MAX_HOPS * (1 + 32 + 4 + 4 + 127),
};
static const double WIRE_MAX_PAYLOAD = 64.0 * 1024 * 1024;

double cs_wire_bytes(cs_wire_kind kind, double n, double cols, int value_bytes) {
    const double rows = n * cols * value_bytes;
    switch (kind) {
    case CS_WIRE_STAGE_FORWARD:
        return WIRE_HEADER + WIRE_STAGE_FIXED + 4 * n + rows + WIRE_FRAMING;
    case CS_WIRE_EXPERT_RUN:
        return WIRE_HEADER + WIRE_EXPERT_FIXED + 4 * n + rows + WIRE_FRAMING;
    case CS_WIRE_STAGE_REPLY:
    case CS_WIRE_EXPERT_REPLY:
        return WIRE_HEADER + WIRE_REPLY_FIXED + rows + WIRE_FRAMING;
    case CS_WIRE_SESSION_END:
        return WIRE_HEADER + 8 + WIRE_FRAMING;
    case CS_WIRE_SESSION_END_REPLY:
        return WIRE_HEADER + 1 + WIRE_FRAMING;
    }
    return 0;
}

int32_t cs_wire_max_rows(cs_wire_kind kind, int64_t cols, int value_bytes) {
    const bool run = kind == CS_WIRE_EXPERT_RUN;
    const double fixed = WIRE_HEADER + (run ? WIRE_EXPERT_FIXED : WIRE_STAGE_FIXED + WIRE_HOPS_MAX);
    const double n =
        floor((WIRE_MAX_PAYLOAD - fixed) / (4 + (double)(cols > 0 ? cols : 1) * value_bytes));
    const double lim = run ? 1 << 20 : 65536;
    return n < 1 ? 1 : (int32_t)fmin(n, lim);
}

/* ---- compute time ---------------------------------------------------------------------- */

double cs_touched_fraction(const cs_compute *c, const cs_shape *s, double n) {
    if (s->n_expert <= 0 || n <= 0) return 0;
    const double p = (double)s->n_expert_used / s->n_expert;
    if (!c->touch_measured || c->n_touch == 0) return 1.0 - pow(1.0 - p, n);
    /* measured points, linear in log(n) between them; one token touches exactly k */
    double n0 = 1, f0 = p;
    for (int i = 0; i < c->n_touch; i++) {
        double n1 = c->touch_n[i], f1 = c->touch_frac[i];
        if (n <= n1) {
            if (n1 <= n0) return f1;
            double w = (log(n) - log(n0)) / (log(n1) - log(n0));
            return f0 + w * (f1 - f0);
        }
        n0 = n1, f0 = f1;
    }
    /* beyond the last point: what is still untouched shrinks as the uniform rate says */
    return 1.0 - (1.0 - f0) * pow(1.0 - p, n - n0);
}

double cs_work_ms(const cs_compute *c, const cs_work *w) {
    return c->c0_ms + c->ms_per_gmac * w->macs * 1e-9 + c->ms_per_gstate * w->state_macs * 1e-9 +
           c->ms_per_gb * w->bytes * 1e-9;
}

double cs_compute_ms(const cs_compute *c, double macs, double bytes) {
    return cs_work_ms(c, &(cs_work){macs, 0, bytes});
}

cs_work cs_layer_work(const cs_compute *c, const cs_shape *s, int32_t l, const cs_step *st,
                      int32_t held, bool attention) {
    cs_layer_cost lc = cs_layer_cost_of(s, l);
    cs_work w = {0};
    if (attention) {
        w.macs = lc.attn_macs * st->n_tok + lc.ctx_macs * st->attended;
        w.state_macs = lc.state_macs * st->n_tok;
        w.bytes = lc.attn_bytes + 2 * lc.state_bytes * st->n_seq + /* state read, written */
                  lc.bytes_per_position * st->ctx_rows;
    }
    if (lc.expert_bytes > 0 && held > 0) {
        double share = (double)held / s->n_expert;
        w.macs += st->n_tok * s->n_expert_used * share * lc.expert_macs;
        w.bytes += held * cs_touched_fraction(c, s, st->n_tok) * lc.expert_bytes;
    }
    return w;
}

double cs_layer_ms(const cs_compute *c, const cs_shape *s, int32_t l, const cs_step *st,
                   int32_t held, bool attention) {
    cs_work w = cs_layer_work(c, s, l, st, held, attention);
    return cs_work_ms(c, &w);
}

/* ---- calibration files ------------------------------------------------------------------ */

static int get_int(json_t *o, const char *key, int32_t *out, const char *path, mt_error *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 24))
        return mt_error_set(err,
                            "%s: \"%s\" is missing or not a whole number in [0, 16M]; is this"
                            " `moontail bench --layer-times --json` output?",
                            path, key);
    *out = (int32_t)json_integer_value(v);
    return 0;
}

static int get_num(json_t *o, const char *key, double *out, const char *path, mt_error *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0)
        return mt_error_set(err, "%s: \"%s\" is missing or not a number >= 0", path, key);
    *out = json_number_value(v);
    return 0;
}

/* The points of one array ("decode" or "prefill"). */
static int load_points(json_t *root, const char *key, bool prefill, cs_time_kind which,
                       cs_calibration *c, const char *path, mt_error *err) {
    json_t *a = json_object_get(root, key);
    if (!json_is_array(a)) return mt_error_set(err, "%s: \"%s\" is not a list", path, key);
    const cs_shape *s = &c->shape;
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *p = json_array_get(a, i);
        double n = 0, ms = 0, bytes = 0, experts = 0;
        static const char *time_key[] = {"ms_per_layer", "ms_min", "cpu_ms_per_layer"};
        if (get_num(p, "batch", &n, path, err) || get_num(p, time_key[which], &ms, path, err) ||
            get_num(p, "bytes_per_layer", &bytes, path, err) ||
            get_num(p, "experts", &experts, path, err))
            return -1;
        if (n < 1 || ms <= 0 || c->n_points == CS_MAX_POINTS)
            return mt_error_set(err,
                                "%s: %s[%zu]: batch >= 1 and ms > 0 expected, at most %d"
                                " points",
                                path, key, i, CS_MAX_POINTS);
        /* MACs per layer: the average over the model's layers, as the time is. Bytes: the
         * weights the products read (measured), plus what the shape says the step reads
         * beside them: KDA states, MLA caches. Decode: n sessions of one token each at
         * about the context's position; prefill: one session's n tokens from 0. */
        const cs_step st = prefill ? cs_step_of(n, 1, 0) : cs_step_of(n, n, c->context);
        const cs_compute none = {0};
        double macs = 0, state_macs = 0, extra = 0;
        for (int32_t l = 0; l < s->n_layer; l++) {
            cs_layer_cost lc = cs_layer_cost_of(s, l);
            cs_work w = cs_layer_work(&none, s, l, &st, 0, true);
            macs += w.macs + (lc.expert_bytes > 0 ? n * s->n_expert_used * lc.expert_macs : 0);
            state_macs += w.state_macs;
            extra += w.bytes - lc.attn_bytes;
        }
        /* CPU time over the threads: the step's time on a machine of its own if it keeps
         * every thread busy (exact for one thread) */
        if (which == CS_TIME_CPU) ms /= c->threads;
        const int32_t L = s->n_layer;
        c->points[c->n_points++] =
            (cs_point){n, macs / L, bytes + extra / L, ms, prefill, state_macs / L};
        if (!prefill && s->n_expert > 0 && c->n_touch < CS_MAX_POINTS && n > 1) {
            int k = c->n_touch++;
            c->touch_n[k] = n;
            c->touch_frac[k] = fmin(1.0, experts / s->n_expert);
        }
    }
    return 0;
}

/* kimi-k3's fields of a calibration (`moontail bench --layer-times --json` names the
 * matrices' and the experts' types, the KDA sizes, the residual block, the latent width,
 * the MLA gate and which layers are MLA). */
static int kimi_fields(json_t *root, cs_shape *s, const char *path, mt_error *err) {
    const char *mt = json_string_value(json_object_get(root, "matrix_type"));
    const char *et = json_string_value(json_object_get(root, "expert_type"));
    json_t *mla = json_object_get(root, "mla_layers"), *gate = json_object_get(root, "mla_gate");
    if (!mt || mt_type_from_name(mt) < 0 || !et || mt_type_from_name(et) < 0 ||
        !json_is_array(mla) || !json_is_boolean(gate))
        return mt_error_set(err,
                            "%s: a kimi-k3 calibration needs \"matrix_type\","
                            " \"expert_type\", \"mla_layers\" and \"mla_gate\" (from a"
                            " moontail bench that knows kimi-k3)",
                            path);
    s->arch = CS_ARCH_KIMI_K3;
    s->type = mt_type_from_name(mt);
    s->expert_type = mt_type_from_name(et);
    s->mla_gate = json_is_true(gate);
    if (get_int(root, "kda_head_dim", &s->kda_head_dim, path, err) ||
        get_int(root, "conv_kernel", &s->conv_kernel, path, err) ||
        get_int(root, "res_block", &s->res_block, path, err) ||
        get_int(root, "latent", &s->latent, path, err))
        return -1;
    if (s->n_layer > CS_MAX_KIMI_LAYERS)
        return mt_error_set(err, "%s: %d layers; cellsim models kimi-k3 up to %d", path, s->n_layer,
                            CS_MAX_KIMI_LAYERS);
    for (size_t i = 0; i < json_array_size(mla); i++) {
        json_t *v = json_array_get(mla, i);
        json_int_t l = json_is_integer(v) ? json_integer_value(v) : -1;
        if (l < 0 || l >= s->n_layer)
            return mt_error_set(err, "%s: mla_layers[%zu] is not a layer of the model", path, i);
        s->mla[l] = 1;
    }
    return 0;
}

int cs_calibration_load(const char *path, cs_time_kind which, cs_calibration *c, mt_error *err) {
    memset(c, 0, sizeof *c);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return mt_error_set(err, "%s:%d: not JSON: %s", path, je.line, je.text);
    int rc = -1;
    cs_shape *s = &c->shape;
    int32_t n_moe = 0, threads = 0;
    const char *arch = json_string_value(json_object_get(root, "arch"));
    const char *type = json_string_value(json_object_get(root, "type"));
    if (!arch || (strcmp(arch, "deepseek2") != 0 && strcmp(arch, "kimi-k3") != 0)) {
        mt_error_set(err,
                     "%s: the calibration model's arch is %s; cellsim models deepseek2 (MLA)"
                     " and kimi-k3 (KDA + MLA) layers: make it with `moontail mkmodel --arch"
                     " deepseek2` or `--arch kimi-k3`",
                     path, arch ? arch : "missing");
        goto done;
    }
    if (!type || mt_type_from_name(type) < 0) {
        mt_error_set(err, "%s: \"type\" (the matrices' type) is missing or unknown", path);
        goto done;
    }
    s->type = mt_type_from_name(type);
    s->expert_type = -1;
    if (get_int(root, "n_layer", &s->n_layer, path, err) ||
        get_int(root, "n_moe_layer", &n_moe, path, err) ||
        get_int(root, "n_embd", &s->n_embd, path, err) ||
        get_int(root, "n_vocab", &s->n_vocab, path, err) ||
        get_int(root, "n_head", &s->n_head, path, err) ||
        get_int(root, "q_lora", &s->q_lora, path, err) ||
        get_int(root, "kv_lora", &s->kv_lora, path, err) ||
        get_int(root, "qk_nope", &s->qk_nope, path, err) ||
        get_int(root, "qk_rope", &s->qk_rope, path, err) ||
        get_int(root, "v_dim", &s->v_dim, path, err) ||
        get_int(root, "n_ff", &s->n_ff, path, err) ||
        get_int(root, "n_expert", &s->n_expert, path, err) ||
        get_int(root, "n_expert_used", &s->n_expert_used, path, err) ||
        get_int(root, "n_expert_shared", &s->n_expert_shared, path, err) ||
        get_int(root, "n_ff_exp", &s->n_ff_exp, path, err) ||
        get_int(root, "threads", &threads, path, err) ||
        get_int(root, "context", &c->context, path, err) ||
        get_num(root, "attn_bytes", &c->attn_bytes, path, err) ||
        get_num(root, "expert_bytes", &c->expert_bytes, path, err) ||
        get_num(root, "head_ms", &c->head_ms, path, err))
        goto done;
    if (strcmp(arch, "kimi-k3") == 0 && kimi_fields(root, s, path, err)) goto done;
    if (s->n_layer < 1 || n_moe > s->n_layer || s->n_embd < 1 || s->n_head < 1 ||
        s->n_expert_used > s->n_expert) {
        mt_error_set(err,
                     "%s: inconsistent shape (layers %d, MoE layers %d, experts %d used of"
                     " %d)",
                     path, s->n_layer, n_moe, s->n_expert_used, s->n_expert);
        goto done;
    }
    s->n_dense = s->n_layer - n_moe;
    c->threads = threads;
    if (which == CS_TIME_CPU && threads < 1) {
        mt_error_set(err, "%s: \"threads\" must be at least 1", path);
        goto done;
    }
    if (load_points(root, "decode", false, which, c, path, err) ||
        load_points(root, "prefill", true, which, c, path, err))
        goto done;
    if (c->n_points < 3) {
        mt_error_set(err, "%s: %d points; the fit needs at least 3 (several --batches)", path,
                     c->n_points);
        goto done;
    }
    rc = 0;
done:
    json_decref(root);
    return rc;
}

/* ---- the fit ------------------------------------------------------------------------------ */

/* Solves the n x n system a x = b (n <= 4) by Gaussian elimination with
 * partial pivoting; false when singular. */
static bool solve(double a[4][4], double b[4], int n, double x[4]) {
    for (int i = 0; i < n; i++) {
        int p = i;
        for (int r = i + 1; r < n; r++)
            if (fabs(a[r][i]) > fabs(a[p][i])) p = r;
        if (fabs(a[p][i]) < 1e-300) return false;
        for (int k = 0; k < n; k++) {
            double t = a[i][k];
            a[i][k] = a[p][k], a[p][k] = t;
        }
        double t = b[i];
        b[i] = b[p], b[p] = t;
        for (int r = i + 1; r < n; r++) {
            double f = a[r][i] / a[i][i];
            for (int k = i; k < n; k++) a[r][k] -= f * a[i][k];
            b[r] -= f * b[i];
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        double s = b[i];
        for (int k = i + 1; k < n; k++) s -= a[i][k] * x[k];
        x[i] = s / a[i][i];
    }
    return true;
}

/* A point's features: 1, GMACs, GMACs of KDA recurrences, GB. */
static void features(const cs_point *p, double f[4]) {
    f[0] = 1, f[1] = p->macs * 1e-9, f[2] = p->state_macs * 1e-9, f[3] = p->bytes * 1e-9;
}

int cs_compute_fit(const cs_calibration *cal, int n_cal, cs_compute *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    /* weights 1/ms^2. Every subset of the four terms is fitted; the best one with no
     * negative coefficient wins (non-negative least squares for four unknowns). A term no
     * point has (KDA recurrences in a deepseek2 calibration) stays 0. */
    double best_err = INFINITY, best[4] = {0};
    for (int mask = 1; mask < 16; mask++) {
        int idx[4], n = 0;
        for (int j = 0; j < 4; j++)
            if (mask & (1 << j)) idx[n++] = j;
        double a[4][4] = {{0}}, b[4] = {0}, x[4] = {0};
        for (int k = 0; k < n_cal; k++)
            for (int i = 0; i < cal[k].n_points; i++) {
                const cs_point *p = &cal[k].points[i];
                double f[4], w = 1 / (p->ms * p->ms);
                features(p, f);
                for (int r = 0; r < n; r++) {
                    for (int q = 0; q < n; q++) a[r][q] += w * f[idx[r]] * f[idx[q]];
                    b[r] += w * f[idx[r]] * p->ms;
                }
            }
        if (!solve(a, b, n, x)) continue;
        double coef[4] = {0};
        bool ok = true;
        for (int r = 0; r < n; r++) ok &= x[r] >= 0, coef[idx[r]] = x[r];
        if (!ok) continue;
        double e = 0;
        for (int k = 0; k < n_cal; k++)
            for (int i = 0; i < cal[k].n_points; i++) {
                const cs_point *p = &cal[k].points[i];
                double f[4], t = 0;
                features(p, f);
                for (int j = 0; j < 4; j++) t += coef[j] * f[j];
                e += (t - p->ms) * (t - p->ms) / (p->ms * p->ms);
            }
        if (e < best_err * (1 - 1e-12)) best_err = e, memcpy(best, coef, sizeof best);
    }
    if (!isfinite(best_err))
        return mt_error_set(err, "the calibration points do not determine a compute model"
                                 " (give several batch sizes)");
    out->c0_ms = best[0], out->ms_per_gmac = best[1], out->ms_per_gstate = best[2];
    out->ms_per_gb = best[3];
    out->threads = cal[0].threads;
    int np = 0;
    double sum = 0, worst = 0;
    for (int k = 0; k < n_cal; k++)
        for (int i = 0; i < cal[k].n_points; i++) {
            const cs_point *p = &cal[k].points[i];
            double rel = cs_work_ms(out, &(cs_work){p->macs, p->state_macs, p->bytes}) / p->ms - 1;
            sum += rel * rel, np++;
            if (fabs(rel) > worst) worst = fabs(rel);
        }
    out->fit_rms_rel = sqrt(sum / np);
    out->fit_max_rel = worst;
    out->n_fit_points = np;
    return 0;
}

/* synth_model.c - writes deterministic synthetic GGUF models (`moontail
 * mkmodel`, the test models and the built-in default).
 *
 * Every tensor gets its own splitmix64 stream seeded from (seed, tensor
 * name), so a file does not depend on the order tensors are written in.
 * Weights are uniform in [-s, s] with s = gain * sqrt(3 / n_in): each matmul
 * output then has a standard deviation near `gain`, which keeps the residual
 * stream stable, the router's choice clear and the head's logits peaked.
 *
 * kimi-linear and kimi-k3 follow llama.cpp's converters: head_count_kv is a
 * per-layer array (0 marks a KDA layer, 1 an MLA layer), A is stored as
 * -exp(A_log), the MLA key/value lengths describe the compressed cache. */
#include "moontail/synth_model.h"
#include "moontail/gguf.h"
#include "moontail/gguf_stream.h"
#include "moontail/mathf.h"
#include "moontail/quant.h"
#include "moontail/tokenizer.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- params */

static bool is_kimi(const char *arch) {
    return strcmp(arch, "kimi-linear") == 0 || strcmp(arch, "kimi-k3") == 0;
}

/* Kimi-Linear-48B's and Kimi-K3's layer and expert counts at tiny widths. */
static void kimi_defaults(mt_synth_params *p, bool k3) {
    p->n_layer = k3 ? 93 : 27;
    p->n_embd = 64;
    p->n_head = 4;
    p->n_head_kv = 1;
    p->n_ff = 128;
    p->n_expert = k3 ? 896 : 256;
    p->n_expert_used = k3 ? 16 : 8;
    p->n_ff_exp = 32;
    p->n_expert_shared = 1;
    p->n_leading_dense = 1;
    p->q_lora = k3 ? 32 : 0; /* kimi-linear's graph reads attn_q only */
    p->kv_lora = 32;
    p->qk_nope = 16;
    p->qk_rope = 16;
    p->v_dim = 16;
    p->kda_head_dim = 16;
    p->conv_kernel = 4;
    if (!k3) return;
    p->expert_type = MT_TYPE_MXFP4;
    p->res_block = 2; /* banks every other layer, so 2-3 layer test models use it too */
    p->latent = 32;
    p->situ_beta = 2.0f;
    p->situ_linear_beta = 3.0f;
    p->gate_lower_bound = -5.0f;
    p->mla_gate = true;
}

mt_synth_params mt_synth_default_params(const char *arch) {
    mt_synth_params p = {0};
    p.arch = arch;
    p.type = MT_TYPE_F32;
    p.expert_type = -1;
    p.seed = 1;
    p.vocab = "bytes";
    p.n_layer = 2;
    p.n_embd = 256;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.head_dim = 64;
    p.n_ff = 512;
    p.n_ctx_train = 4096;
    p.n_expert = 8;
    p.n_expert_used = 2;
    p.n_ff_exp = 256;
    p.logit_gain = 5.0f;
    if (strcmp(arch, "qwen2moe") == 0) {
        p.n_expert_used = 2;
        p.n_expert_shared = 1;
    } else if (strcmp(arch, "deepseek2") == 0) {
        p.n_layer = 3;
        p.n_head = 4;
        p.n_head_kv = 1;
        p.n_expert = 16;
        p.n_expert_used = 4;
        p.n_expert_shared = 1;
        p.n_leading_dense = 1;
        p.n_group = 4;
        p.n_group_used = 2;
        p.q_lora = 256;
        p.kv_lora = 256;
        p.qk_nope = 64;
        p.qk_rope = 32;
        p.v_dim = 64;
        p.yarn_factor = 4.0f;
        p.yarn_orig_ctx = 64;
    } else if (is_kimi(arch)) {
        kimi_defaults(&p, strcmp(arch, "kimi-k3") == 0);
    }
    return p;
}

/* ------------------------------------------------------------------- rng */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t stream_seed(uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull ^ seed;
    for (const char *c = name; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ull;
    return h;
}

/* Uniform in [-1, 1) from the top 24 bits: exact in f32 on every machine. */
static float uniform(uint64_t *s) {
    return (float)(splitmix64(s) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* ---------------------------------------------------------------- writer */

typedef struct synth {
    const mt_synth_params *p;
    gguf_writer *w;
    mt_error *err;
    int failed;
    char arch_key[64];
    bool kimi, k3;
    bool mla[256]; /* kimi: layer il is an MLA (full attention) layer, else KDA */
    /* planning: list the tensors (name, shape, type) instead of making them */
    bool listing;
    mt_synth_tensor *list;
    size_t n_list, cap_list;
    /* with a quantization mix: the type of each tensor, in the order they are added */
    const mt_type *types;
    size_t next;
} synth;

static const char *akey(synth *s, const char *suffix) {
    snprintf(s->arch_key, sizeof s->arch_key, "%s.%s", s->p->arch, suffix);
    return s->arch_key;
}

/* The type a matrix of row length n gets: the requested type if its block
 * divides n, else Q8_0, else F32 (what llama.cpp's quantizer falls back to). */
static mt_type fit_type(mt_type want, int64_t n) {
    if (n % mt_type_traits_get(want)->blck == 0) return want;
    return n % 32 == 0 ? MT_TYPE_Q8_0 : MT_TYPE_F32;
}

static mt_type expert_type(const mt_synth_params *p) {
    return p->expert_type < 0 ? p->type : (mt_type)p->expert_type;
}

/* Planning: notes a tensor. Returns true when the tensor is only to be listed. */
static bool listed(synth *s, const char *name, mt_type type, int n_dims, const int64_t ne[3]) {
    if (!s->listing) return false;
    if (s->n_list == s->cap_list) {
        size_t cap = s->cap_list ? 2 * s->cap_list : 256;
        mt_synth_tensor *l = realloc(s->list, cap * sizeof *l);
        if (!l) {
            s->failed = mt_error_set(s->err, "mkmodel: out of memory for the tensor list");
            return true;
        }
        s->list = l;
        s->cap_list = cap;
    }
    mt_synth_tensor *t = &s->list[s->n_list++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    memcpy(t->ne, ne, sizeof t->ne);
    t->type = type;
    return true;
}

/* The type tensor `name` is written in: the mix's choice (planned in the same
 * order as the tensors are added), else the requested type if it fits. */
static mt_type written_type(synth *s, mt_type want, int64_t ne0) {
    return s->types ? s->types[s->next++] : fit_type(want, ne0);
}

/* Adds a tensor of shape ne (n_dims <= 3) filled with offset + U(-scale, scale),
 * row r further multiplied by row_scale[r] when row_scale is given. */
static void add_scaled(synth *s, const char *name, mt_type type, int n_dims, int64_t ne0,
                       int64_t ne1, int64_t ne2, float scale, float offset,
                       const float *row_scale) {
    if (s->failed) return;
    int64_t ne[3] = {ne0, ne1, ne2};
    if (listed(s, name, fit_type(type, ne0), n_dims, ne)) return;
    type = written_type(s, type, ne0);
    int64_t rows = ne1 * ne2;
    size_t row_bytes = mt_type_row_size(type, ne0);
    float *row = malloc((size_t)ne0 * sizeof(float));
    uint8_t *data = malloc(row_bytes * (size_t)rows);
    if (!row || !data) {
        free(row);
        free(data);
        s->failed = mt_error_set(s->err, "mkmodel: out of memory for tensor '%s'", name);
        return;
    }
    uint64_t st = stream_seed(s->p->seed, name);
    for (int64_t r = 0; r < rows; r++) {
        float rs = row_scale ? row_scale[r] : 1.0f;
        for (int64_t i = 0; i < ne0; i++) row[i] = (offset + scale * uniform(&st)) * rs;
        quant_quantize_row(type, row, data + (size_t)r * row_bytes, ne0);
    }
    if (gguf_writer_add_tensor(s->w, name, type, (uint32_t)n_dims, ne, data, s->err)) s->failed = 1;
    free(row);
    free(data);
}

static void add(synth *s, const char *name, mt_type type, int n_dims, int64_t ne0, int64_t ne1,
                int64_t ne2, float scale, float offset) {
    add_scaled(s, name, type, n_dims, ne0, ne1, ne2, scale, offset, NULL);
}

/* Half-width of U(-s, s) weights whose products with unit-variance inputs
 * of width n_in have std ~ gain. */
static float matrix_scale(float gain, int64_t n_in) {
    return gain * sqrtf(3.0f / (float)n_in);
}

/* A matrix {n_in, n_out(, n_mat)} whose products have std ~ gain. */
static void add_matrix(synth *s, const char *name, int n_dims, int64_t n_in, int64_t n_out,
                       int64_t n_mat, float gain) {
    add(s, name, s->p->type, n_dims, n_in, n_out, n_mat, matrix_scale(gain, n_in), 0.0f);
}

static void add_f32(synth *s, const char *name, int64_t n, float scale, float offset) {
    add(s, name, MT_TYPE_F32, 1, n, 1, 1, scale, offset);
}

static const char *lname(char *buf, int il, const char *suffix) {
    snprintf(buf, 96, "blk.%d.%s", il, suffix);
    return buf;
}

static void add_swiglu(synth *s, int il, const char *kind, mt_type type, int64_t E, int64_t F,
                       int64_t X) {
    char n[96], nm[64];
    int dims = X > 1 ? 3 : 2;
    snprintf(nm, sizeof nm, "ffn_gate%s.weight", kind);
    add(s, lname(n, il, nm), type, dims, E, F, X, matrix_scale(1.0f, E), 0.0f);
    snprintf(nm, sizeof nm, "ffn_up%s.weight", kind);
    add(s, lname(n, il, nm), type, dims, E, F, X, matrix_scale(1.0f, E), 0.0f);
    snprintf(nm, sizeof nm, "ffn_down%s.weight", kind);
    add(s, lname(n, il, nm), type, dims, F, E, X, matrix_scale(0.5f, F), 0.0f);
}

/* Multi-head latent attention (deepseek2, kimi): a plain attn_q when q_lora is 0;
 * attn_k_b/attn_v_b (the absorbed form) unless legacy; kimi-k3's output gate. */
static void add_mla(synth *s, int il) {
    const mt_synth_params *p = s->p;
    const int64_t E = p->n_embd, H = p->n_head, qk = p->qk_nope + p->qk_rope;
    char n[96];
    if (p->q_lora > 0) {
        add_matrix(s, lname(n, il, "attn_q_a.weight"), 2, E, p->q_lora, 1, 1.0f);
        add_f32(s, lname(n, il, "attn_q_a_norm.weight"), p->q_lora, 0.2f, 1.0f);
        add_matrix(s, lname(n, il, "attn_q_b.weight"), 2, p->q_lora, H * qk, 1, 1.0f);
    } else {
        add_matrix(s, lname(n, il, "attn_q.weight"), 2, E, H * qk, 1, 1.0f);
    }
    add_matrix(s, lname(n, il, "attn_kv_a_mqa.weight"), 2, E, p->kv_lora + p->qk_rope, 1, 1.0f);
    add_f32(s, lname(n, il, "attn_kv_a_norm.weight"), p->kv_lora, 0.2f, 1.0f);
    if (p->mla_legacy) {
        add_matrix(s, lname(n, il, "attn_kv_b.weight"), 2, p->kv_lora, H * (p->qk_nope + p->v_dim),
                   1, 1.0f);
    } else {
        add_matrix(s, lname(n, il, "attn_k_b.weight"), 3, p->qk_nope, p->kv_lora, H, 1.0f);
        add_matrix(s, lname(n, il, "attn_v_b.weight"), 3, p->kv_lora, p->v_dim, H, 1.0f);
    }
    if (p->mla_gate) add_matrix(s, lname(n, il, "attn_gate.weight"), 2, E, H * p->v_dim, 1, 1.0f);
    add_matrix(s, lname(n, il, "attn_output.weight"), 2, H * p->v_dim, E, 1, 0.7f);
}

/* A KDA layer's A = -exp(A_log) (folded as the converters do), A_log ~ U(-1, 1):
 * every head decays, at rates between 0.37 and 2.7. Computed in double by
 * mt_math_exp and rounded, so the file is the same on every platform. */
static void add_kda_a(synth *s, const char *name, int n_dims, int64_t ne0, int64_t ne1) {
    if (s->failed) return;
    int64_t ne[3] = {ne0, ne1, 1};
    if (listed(s, name, MT_TYPE_F32, n_dims, ne)) return;
    if (written_type(s, MT_TYPE_F32, ne0) != MT_TYPE_F32) { /* llama.cpp keeps it */
        s->failed = mt_error_set(s->err, "mkmodel: %s must stay F32", name);
        return;
    }
    float *a = malloc((size_t)(ne0 * ne1) * sizeof *a);
    if (!a) {
        s->failed = mt_error_set(s->err, "mkmodel: out of memory for tensor '%s'", name);
        return;
    }
    uint64_t st = stream_seed(s->p->seed, name);
    for (int64_t i = 0; i < ne0 * ne1; i++) a[i] = (float)-mt_math_exp((double)uniform(&st));
    if (gguf_writer_add_tensor(s->w, name, MT_TYPE_F32, (uint32_t)n_dims, ne, a, s->err))
        s->failed = 1;
    free(a);
}

/* Kimi Delta Attention: short causal convolutions over Q, K and V, a per-channel
 * decay gate (f_a, f_b, dt bias, A), a mixing rate (beta) and a gated output norm. */
static void add_kda(synth *s, int il) {
    const mt_synth_params *p = s->p;
    const int64_t E = p->n_embd, H = p->n_head, hd = p->kda_head_dim, D = H * hd;
    char n[96], nm[64];
    for (int i = 0; i < 3; i++) {
        /* {d_conv, 1, d_inner}, F32 like the converters write it */
        snprintf(nm, sizeof nm, "ssm_conv1d_%c.weight", "qkv"[i]);
        add(s, lname(n, il, nm), MT_TYPE_F32, 3, p->conv_kernel, 1, D,
            matrix_scale(1.0f, p->conv_kernel), 0.0f);
    }
    add_matrix(s, lname(n, il, "attn_q.weight"), 2, E, D, 1, 1.0f);
    add_matrix(s, lname(n, il, "attn_k.weight"), 2, E, D, 1, 1.0f);
    add_matrix(s, lname(n, il, "attn_v.weight"), 2, E, D, 1, 1.0f);
    add_matrix(s, lname(n, il, "ssm_f_a.weight"), 2, E, hd, 1, 1.0f);
    add_matrix(s, lname(n, il, "ssm_f_b.weight"), 2, hd, D, 1, 1.0f);
    add_matrix(s, lname(n, il, "ssm_beta.weight"), 2, E, H, 1, 1.0f);
    if (s->k3)
        add_kda_a(s, lname(n, il, "ssm_a"), 1, H, 1);
    else /* kimi-linear keeps the checkpoint's {1, n_head} */
        add_kda_a(s, lname(n, il, "ssm_a"), 2, 1, H);
    add_f32(s, lname(n, il, "ssm_dt.bias"), D, 0.2f, 0.0f);
    if (s->k3) {
        add_matrix(s, lname(n, il, "ssm_g.weight"), 2, E, D, 1, 1.0f);
    } else {
        add_matrix(s, lname(n, il, "ssm_g_a.weight"), 2, E, hd, 1, 1.0f);
        add_matrix(s, lname(n, il, "ssm_g_b.weight"), 2, hd, D, 1, 1.0f);
    }
    add_f32(s, lname(n, il, "ssm_norm.weight"), hd, 0.2f, 1.0f);
    add_matrix(s, lname(n, il, "attn_output.weight"), 2, D, E, 1, 0.7f);
}

/* A kimi-k3 residual-attention score vector (the converter fuses res_norm *
 * res_proj into it). Zero-mean rather than ~1 like a norm: a checkpoint's score
 * then has std ~1, so the softmax over checkpoints mixes them instead of
 * picking one. */
static void add_res_score(synth *s, const char *name) {
    add_f32(s, name, s->p->n_embd, matrix_scale(1.0f, s->p->n_embd), 0.0f);
}

/* Router, routed experts (kimi-k3 with a latent: in the latent space, between
 * ffn_routed_down and ffn_routed_norm/up) and shared experts. */
static void add_kimi_moe(synth *s, int il) {
    const mt_synth_params *p = s->p;
    const int64_t E = p->n_embd, L = p->latent > 0 ? p->latent : E;
    char n[96];
    add(s, lname(n, il, "ffn_gate_inp.weight"), MT_TYPE_F32, 2, E, p->n_expert, 1,
        matrix_scale(2.5f, E), 0.0f);
    add_f32(s, lname(n, il, "exp_probs_b.bias"), p->n_expert, 0.2f, 0.0f);
    add_swiglu(s, il, "_exps", expert_type(p), L, p->n_ff_exp, p->n_expert);
    if (p->latent > 0) {
        add_matrix(s, lname(n, il, "ffn_routed_down.weight"), 2, E, L, 1, 1.0f);
        add_matrix(s, lname(n, il, "ffn_routed_up.weight"), 2, L, E, 1, 0.5f);
        add_f32(s, lname(n, il, "ffn_routed_norm.weight"), L, 0.2f, 1.0f);
    }
    if (p->n_expert_shared > 0)
        add_swiglu(s, il, "_shexp", p->type, E, (int64_t)p->n_ff_exp * p->n_expert_shared, 1);
}

static void add_kimi_layer(synth *s, int il) {
    const mt_synth_params *p = s->p;
    char n[96];
    add_f32(s, lname(n, il, "attn_norm.weight"), p->n_embd, 0.2f, 1.0f);
    add_f32(s, lname(n, il, "ffn_norm.weight"), p->n_embd, 0.2f, 1.0f);
    if (s->k3 && p->res_block > 0) {
        add_res_score(s, lname(n, il, "attn_res_score.weight"));
        add_res_score(s, lname(n, il, "ffn_res_score.weight"));
    }
    if (s->mla[il])
        add_mla(s, il);
    else
        add_kda(s, il);
    if (il < p->n_leading_dense)
        add_swiglu(s, il, "", p->type, p->n_embd, p->n_ff, 1);
    else
        add_kimi_moe(s, il);
}

static void add_layer(synth *s, int il) {
    if (s->kimi) {
        add_kimi_layer(s, il);
        return;
    }
    const mt_synth_params *p = s->p;
    const int64_t E = p->n_embd, H = p->n_head, Hkv = p->n_head_kv, hd = p->head_dim;
    char n[96];
    bool ds = strcmp(p->arch, "deepseek2") == 0, q2 = strcmp(p->arch, "qwen2moe") == 0,
         q3 = strcmp(p->arch, "qwen3moe") == 0;
    add_f32(s, lname(n, il, "attn_norm.weight"), E, 0.2f, 1.0f);
    add_f32(s, lname(n, il, "ffn_norm.weight"), E, 0.2f, 1.0f);
    if (ds) {
        add_mla(s, il);
    } else {
        add_matrix(s, lname(n, il, "attn_q.weight"), 2, E, H * hd, 1, 1.2f);
        add_matrix(s, lname(n, il, "attn_k.weight"), 2, E, Hkv * hd, 1, 1.2f);
        add_matrix(s, lname(n, il, "attn_v.weight"), 2, E, Hkv * hd, 1, 1.0f);
        add_matrix(s, lname(n, il, "attn_output.weight"), 2, H * hd, E, 1, 0.7f);
        if (q2) {
            add_f32(s, lname(n, il, "attn_q.bias"), H * hd, 0.1f, 0.0f);
            add_f32(s, lname(n, il, "attn_k.bias"), Hkv * hd, 0.1f, 0.0f);
            add_f32(s, lname(n, il, "attn_v.bias"), Hkv * hd, 0.1f, 0.0f);
        }
        if (q3) {
            add_f32(s, lname(n, il, "attn_q_norm.weight"), hd, 0.2f, 1.0f);
            add_f32(s, lname(n, il, "attn_k_norm.weight"), hd, 0.2f, 1.0f);
        }
    }
    bool moe = !p->dense && !(ds && il < p->n_leading_dense);
    if (!moe) {
        add_swiglu(s, il, "", p->type, E, p->n_ff, 1);
        return;
    }
    /* routers stay F32, as llama.cpp's quantizer leaves them */
    add(s, lname(n, il, "ffn_gate_inp.weight"), MT_TYPE_F32, 2, E, p->n_expert, 1,
        matrix_scale(2.5f, E), 0.0f);
    if (ds) add_f32(s, lname(n, il, "exp_probs_b.bias"), p->n_expert, 0.2f, 0.0f);
    add_swiglu(s, il, "_exps", expert_type(p), E, p->n_ff_exp, p->n_expert);
    if (q2) {
        add_f32(s, lname(n, il, "ffn_gate_inp_shexp.weight"), E, matrix_scale(2.0f, E), 0.0f);
        add_swiglu(s, il, "_shexp", p->type, E, p->n_ff, 1);
    } else if (ds && p->n_expert_shared > 0) {
        add_swiglu(s, il, "_shexp", p->type, E, (int64_t)p->n_ff_exp * p->n_expert_shared, 1);
    }
}

/* kimi: n_head_kv per layer, 0 marking a KDA (recurrent) layer, as the converters write it */
static void write_head_count_kv(synth *s) {
    const mt_synth_params *p = s->p;
    if (!s->kimi) {
        /* legacy MLA files describe the expanded attention: one K/V head per head */
        gguf_writer_set_u32(s->w, akey(s, "attention.head_count_kv"),
                            (uint32_t)(p->mla_legacy ? p->n_head : p->n_head_kv));
        return;
    }
    int32_t kv[256];
    for (int il = 0; il < p->n_layer; il++) kv[il] = s->mla[il] ? 1 : 0;
    gguf_writer_set_array(s->w, akey(s, "attention.head_count_kv"), GGUF_TYPE_INT32, kv,
                          (uint64_t)p->n_layer);
}

static void write_kimi_hparams(synth *s) {
    const mt_synth_params *p = s->p;
    gguf_writer *w = s->w;
    gguf_writer_set_u32(w, akey(s, "rope.dimension_count"), (uint32_t)p->qk_rope);
    /* MLA runs as MQA over the compressed cache (kv_lora + rope wide keys) */
    gguf_writer_set_u32(w, akey(s, "attention.key_length"), (uint32_t)(p->kv_lora + p->qk_rope));
    gguf_writer_set_u32(w, akey(s, "attention.value_length"), (uint32_t)p->kv_lora);
    gguf_writer_set_u32(w, akey(s, "attention.key_length_mla"),
                        (uint32_t)(p->qk_nope + p->qk_rope));
    gguf_writer_set_u32(w, akey(s, "attention.value_length_mla"), (uint32_t)p->v_dim);
    if (p->q_lora > 0)
        gguf_writer_set_u32(w, akey(s, "attention.q_lora_rank"), (uint32_t)p->q_lora);
    gguf_writer_set_u32(w, akey(s, "attention.kv_lora_rank"), (uint32_t)p->kv_lora);
    gguf_writer_set_u32(w, akey(s, "ssm.conv_kernel"), (uint32_t)p->conv_kernel);
    gguf_writer_set_u32(w, akey(s, "kda.head_dim"), (uint32_t)p->kda_head_dim);
    if (s->k3 && p->gate_lower_bound != 0.0f)
        gguf_writer_set_f32(w, akey(s, "kda.gate_lower_bound"), p->gate_lower_bound);
    gguf_writer_set_u32(w, akey(s, "leading_dense_block_count"), (uint32_t)p->n_leading_dense);
    gguf_writer_set_u32(w, akey(s, "expert_shared_count"), (uint32_t)p->n_expert_shared);
    gguf_writer_set_f32(w, akey(s, "expert_weights_scale"), 2.5f);
    gguf_writer_set_u32(w, akey(s, "expert_gating_func"), 2); /* sigmoid */
    if (!s->k3) return;
    gguf_writer_set_bool(w, akey(s, "expert_weights_norm"), true);
    if (p->latent > 0) gguf_writer_set_u32(w, akey(s, "expert_latent_length"), (uint32_t)p->latent);
    gguf_writer_set_f32(w, akey(s, "activation.situ_beta"), p->situ_beta);
    gguf_writer_set_f32(w, akey(s, "activation.situ_linear_beta"), p->situ_linear_beta);
    gguf_writer_set_u32(w, akey(s, "attn_res.block_size"), (uint32_t)p->res_block);
}

static void write_hparams(synth *s) {
    const mt_synth_params *p = s->p;
    gguf_writer *w = s->w;
    bool ds = strcmp(p->arch, "deepseek2") == 0, q2 = strcmp(p->arch, "qwen2moe") == 0;
    gguf_writer_set_u32(w, akey(s, "context_length"), (uint32_t)p->n_ctx_train);
    gguf_writer_set_u32(w, akey(s, "embedding_length"), (uint32_t)p->n_embd);
    gguf_writer_set_u32(w, akey(s, "block_count"), (uint32_t)p->n_layer);
    /* llama.cpp's llama loader takes the expert width from feed_forward_length */
    bool llama_moe = strcmp(p->arch, "llama") == 0 && !p->dense;
    gguf_writer_set_u32(w, akey(s, "feed_forward_length"),
                        (uint32_t)(llama_moe ? p->n_ff_exp : p->n_ff));
    gguf_writer_set_u32(w, akey(s, "attention.head_count"), (uint32_t)p->n_head);
    write_head_count_kv(s);
    /* Kimi-Linear's checkpoint uses 1e-5; it also caps how much the KDA output
     * norm magnifies a head whose output nearly cancels */
    gguf_writer_set_f32(w, akey(s, "attention.layer_norm_rms_epsilon"), s->kimi ? 1e-5f : 1e-6f);
    gguf_writer_set_f32(w, akey(s, "rope.freq_base"), 10000.0f);
    if (s->kimi) {
        write_kimi_hparams(s);
    } else if (ds) {
        gguf_writer_set_u32(w, akey(s, "rope.dimension_count"), (uint32_t)p->qk_rope);
        if (p->mla_legacy) { /* older converters: true head sizes, no _mla keys */
            gguf_writer_set_u32(w, akey(s, "attention.key_length"),
                                (uint32_t)(p->qk_nope + p->qk_rope));
            gguf_writer_set_u32(w, akey(s, "attention.value_length"), (uint32_t)p->v_dim);
        } else {
            gguf_writer_set_u32(w, akey(s, "attention.key_length"),
                                (uint32_t)(p->kv_lora + p->qk_rope));
            gguf_writer_set_u32(w, akey(s, "attention.value_length"), (uint32_t)p->kv_lora);
            gguf_writer_set_u32(w, akey(s, "attention.key_length_mla"),
                                (uint32_t)(p->qk_nope + p->qk_rope));
            gguf_writer_set_u32(w, akey(s, "attention.value_length_mla"), (uint32_t)p->v_dim);
        }
        gguf_writer_set_u32(w, akey(s, "attention.q_lora_rank"), (uint32_t)p->q_lora);
        gguf_writer_set_u32(w, akey(s, "attention.kv_lora_rank"), (uint32_t)p->kv_lora);
        gguf_writer_set_u32(w, akey(s, "leading_dense_block_count"), (uint32_t)p->n_leading_dense);
        gguf_writer_set_u32(w, akey(s, "expert_shared_count"), (uint32_t)p->n_expert_shared);
        gguf_writer_set_f32(w, akey(s, "expert_weights_scale"), 2.5f);
        gguf_writer_set_bool(w, akey(s, "expert_weights_norm"), true);
        gguf_writer_set_u32(w, akey(s, "expert_gating_func"), 2);
        gguf_writer_set_u32(w, akey(s, "expert_group_count"), (uint32_t)p->n_group);
        gguf_writer_set_u32(w, akey(s, "expert_group_used_count"), (uint32_t)p->n_group_used);
    } else {
        gguf_writer_set_u32(w, akey(s, "rope.dimension_count"), (uint32_t)p->head_dim);
        gguf_writer_set_u32(w, akey(s, "attention.key_length"), (uint32_t)p->head_dim);
        gguf_writer_set_u32(w, akey(s, "attention.value_length"), (uint32_t)p->head_dim);
    }
    if (p->yarn_factor > 1.0f) {
        gguf_writer_set_string(w, akey(s, "rope.scaling.type"), "yarn");
        gguf_writer_set_f32(w, akey(s, "rope.scaling.factor"), p->yarn_factor);
        gguf_writer_set_u32(w, akey(s, "rope.scaling.original_context_length"),
                            (uint32_t)p->yarn_orig_ctx);
        if (ds) gguf_writer_set_f32(w, akey(s, "rope.scaling.yarn_log_multiplier"), 0.1f);
    }
    if (!p->dense) {
        gguf_writer_set_u32(w, akey(s, "expert_count"), (uint32_t)p->n_expert);
        gguf_writer_set_u32(w, akey(s, "expert_used_count"), (uint32_t)p->n_expert_used);
        if (!llama_moe)
            gguf_writer_set_u32(w, akey(s, "expert_feed_forward_length"), (uint32_t)p->n_ff_exp);
        if (q2)
            gguf_writer_set_u32(w, akey(s, "expert_shared_feed_forward_length"), (uint32_t)p->n_ff);
    }
}

/* Marks the MLA layers of a kimi model from p->mla_layers. */
static int parse_mla_layers(synth *s, mt_error *err) {
    const mt_synth_params *p = s->p;
    const char *v = p->mla_layers;
    for (int il = 0; il < p->n_layer; il++)
        s->mla[il] = v ? strcmp(v, "all") == 0 : il % 4 == 3 || il == p->n_layer - 1;
    if (!v || strcmp(v, "all") == 0 || strcmp(v, "none") == 0) return 0;
    for (const char *c = v;;) {
        char *end = (char *)c;
        long il = isdigit((unsigned char)*c) ? strtol(c, &end, 10) : -1;
        if (il < 0 || il >= p->n_layer || (*end != ',' && *end != 0))
            return mt_error_set(err,
                                "mkmodel: --mla-layers expects 'all', 'none' or 0-based layer"
                                " indices below %d separated by commas, got '%s'",
                                p->n_layer, v);
        s->mla[il] = true;
        if (*end == 0) return 0;
        c = end + 1;
    }
}

static int check_type(mt_type t, mt_error *err) {
    const mt_type_traits *tr = mt_type_traits_get(t);
    if (!tr || !tr->supported || t == MT_TYPE_Q8_K || t == MT_TYPE_Q8_1)
        return mt_error_set(err, "mkmodel: type %s cannot be written", tr ? tr->name : "?");
    return 0;
}

/* The options only kimi-k3 has must keep their zero values elsewhere. */
static int check_kimi_params(const mt_synth_params *p, mt_error *err) {
    bool kimi = is_kimi(p->arch), k3 = strcmp(p->arch, "kimi-k3") == 0;
    if (!kimi && (p->kda_head_dim || p->conv_kernel || p->mla_layers))
        return mt_error_set(err, "mkmodel: --kda-head-dim, --conv-kernel and --mla-layers are"
                                 " only meaningful for kimi-linear and kimi-k3");
    if (!k3 && (p->res_block || p->latent || p->situ_beta != 0.0f || p->situ_linear_beta != 0.0f ||
                p->gate_lower_bound != 0.0f || p->mla_gate))
        return mt_error_set(err, "mkmodel: --res-block, --latent, --situ-beta,"
                                 " --situ-linear-beta, --gate-lower-bound and the MLA gate are"
                                 " only meaningful for kimi-k3");
    if (!kimi) return 0;
    if (p->kda_head_dim < 2 || p->kda_head_dim > 1024 || p->conv_kernel < 2 || p->conv_kernel > 16)
        return mt_error_set(err, "mkmodel: bad KDA sizes (head dim 2-1024, conv kernel 2-16)");
    if (p->tied_output || p->mla_legacy)
        return mt_error_set(err,
                            "mkmodel: %s needs output.weight and attn_k_b/attn_v_b"
                            " (no --tied, no --mla-legacy)",
                            p->arch);
    if (!k3 && p->q_lora)
        return mt_error_set(err, "mkmodel: kimi-linear needs --q-lora 0 (its graph reads attn_q,"
                                 " never attn_q_a/attn_q_b)");
    if (!k3 && p->n_expert_shared < 1)
        return mt_error_set(err, "mkmodel: kimi-linear needs --shared-experts 1 or more (its"
                                 " graph always adds a shared expert)");
    if (k3 && (p->res_block < 0 || p->latent < 0 || p->latent % 32 || p->situ_beta <= 0.0f ||
               p->situ_linear_beta < 0.0f || p->gate_lower_bound > 0.0f))
        return mt_error_set(err, "mkmodel: bad kimi-k3 settings (res block >= 0, latent a"
                                 " multiple of 32, situ beta > 0, situ linear beta >= 0, gate"
                                 " lower bound <= 0)");
    return 0;
}

/* The extra tokens of a byte vocabulary: non-empty, distinct, not a byte or a default
 * special token. */
static int check_added_tokens(const mt_synth_params *p, mt_error *err) {
    if (!p->n_added && !p->chat_template) return 0;
    if (strcmp(p->vocab, "bytes") != 0)
        return mt_error_set(err, "mkmodel: added tokens and a chat template go with the byte"
                                 " vocabulary only (a tokenizer.json brings its own)");
    if (p->n_added < 0 || p->n_added > 32)
        return mt_error_set(err, "mkmodel: at most 32 added tokens, got %d", p->n_added);
    static const char *const defaults[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (int i = 0; i < p->n_added; i++) {
        const char *t = p->added_tokens[i];
        const size_t n = strlen(t);
        if (n < 2 || n > 128)
            return mt_error_set(err, "mkmodel: added token '%.40s' must have 2 to 128 bytes", t);
        for (int k = 0; k < 3; k++)
            if (strcmp(t, defaults[k]) == 0)
                return mt_error_set(err, "mkmodel: %s is already in the byte vocabulary", t);
        for (int k = 0; k < i; k++)
            if (strcmp(t, p->added_tokens[k]) == 0)
                return mt_error_set(err, "mkmodel: token %.40s is added twice", t);
    }
    return 0;
}

static int check_params(const mt_synth_params *p, mt_error *err) {
    const char *archs[] = {"llama", "qwen2moe", "qwen3moe", "deepseek2", "kimi-linear", "kimi-k3"};
    bool known = false;
    for (int i = 0; i < 6; i++) known |= strcmp(p->arch, archs[i]) == 0;
    if (!known)
        return mt_error_set(err,
                            "mkmodel: unknown architecture '%s' (llama, qwen2moe, qwen3moe,"
                            " deepseek2, kimi-linear, kimi-k3)",
                            p->arch);
    if (p->ftype && !mt_quant_mix_name(p->ftype))
        return mt_error_set(err, "mkmodel: quantization mix %d is not one of llama.cpp's",
                            (int)p->ftype);
    if (!p->ftype &&
        (check_type(p->type, err) || (p->expert_type >= 0 && check_type(expert_type(p), err))))
        return -1;
    if (p->n_layer < 1 || p->n_layer > 256 || p->n_embd < 32 || p->n_embd > 16384 ||
        p->n_embd % 32 || p->n_head < 1 || p->n_head_kv < 1 || p->n_head % p->n_head_kv ||
        p->head_dim < 2 || p->head_dim % 2 || p->n_ff < 32 || p->n_ff % 32)
        return mt_error_set(err, "mkmodel: bad sizes (layers 1-256, embd and ff multiples of 32,"
                                 " heads a multiple of kv heads, even head size)");
    bool ds = strcmp(p->arch, "deepseek2") == 0, mla = ds || is_kimi(p->arch);
    if (!p->dense && (p->n_expert < 1 || p->n_expert_used < 1 || p->n_expert_used > p->n_expert ||
                      p->n_expert > 1024 || p->n_ff_exp < 32 || p->n_ff_exp % 32))
        return mt_error_set(err, "mkmodel: bad expert sizes (1 <= used <= experts <= 1024, ff_exp"
                                 " a multiple of 32)");
    if (p->dense && strcmp(p->arch, "llama") != 0)
        return mt_error_set(err, "mkmodel: --dense is only meaningful for llama");
    if (p->rope_freqs && strcmp(p->arch, "llama") != 0)
        return mt_error_set(err, "mkmodel: --rope-freqs is only meaningful for llama");
    if (mla &&
        (p->q_lora % 32 || p->kv_lora % 32 || p->kv_lora < 32 || p->qk_nope < 2 || p->qk_rope < 2 ||
         p->qk_rope % 2 || p->v_dim < 2 || p->n_head_kv != 1 || p->n_leading_dense >= p->n_layer))
        return mt_error_set(err,
                            "mkmodel: bad %s sizes (lora ranks multiples of 32, even"
                            " rope dim, 1 kv head, fewer dense layers than layers)",
                            ds ? "deepseek2" : "MLA");
    if (ds && p->n_group > 1 &&
        (p->n_expert % p->n_group || p->n_group_used < 1 || p->n_group_used > p->n_group ||
         p->n_group_used * (p->n_expert / p->n_group) < p->n_expert_used))
        return mt_error_set(err, "mkmodel: bad expert groups");
    if (check_added_tokens(p, err)) return -1;
    return check_kimi_params(p, err);
}

/* The writer's progress, passed on as the writing step's. */
static void written(void *ctx, uint64_t done, uint64_t total) {
    const mt_synth_params *p = ctx;
    p->progress(p->progress_ctx, true, done, total);
}

/* Makes the model's keys and tensors in a new writer (s->w), or only lists the
 * tensors when s->listing. Returns 0 or -1 with s->err filled. */
static int build(synth *s) {
    const mt_synth_params *p = s->p;
    if (!(s->w = gguf_writer_new())) return mt_error_set(s->err, "mkmodel: out of memory");
    bool llama = strcmp(p->arch, "llama") == 0;
    gguf_writer_set_string(s->w, "general.architecture", p->arch_name ? p->arch_name : p->arch);
    char name[96];
    snprintf(name, sizeof name, "moontail-synthetic-%s-%s", p->arch,
             p->ftype ? mt_quant_mix_name(p->ftype) : mt_type_traits_get(p->type)->name);
    gguf_writer_set_string(s->w, "general.name", name);
    gguf_writer_set_u32(s->w, "general.quantization_version", 2);
    if (p->ftype) /* as llama.cpp's quantizer marks its files */
        gguf_writer_set_u32(s->w, "general.file_type",
                            (uint32_t)mt_quant_mix_llama_ftype(p->ftype));
    write_hparams(s);

    int32_t n_vocab;
    if (strcmp(p->vocab, "bytes") == 0) {
        const char *pre = p->pre ? p->pre : llama ? "llama-bpe" : "qwen2";
        if (p->n_added > 0) {
            const char *toks[3 + 32] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
            bool control[3 + 32] = {true, true, true};
            for (int i = 0; i < p->n_added; i++) {
                toks[3 + i] = p->added_tokens[i];
                control[3 + i] = p->added_control[i];
            }
            n_vocab = mt_vocab_write_bytes_typed(s->w, pre, llama, toks, control, 3 + p->n_added);
        } else {
            n_vocab = mt_vocab_write_bytes(s->w, pre, llama);
        }
        if (p->chat_template)
            gguf_writer_set_string(s->w, "tokenizer.chat_template", p->chat_template);
    } else {
        n_vocab = mt_vocab_write_hf_json(s->w, p->vocab, p->pre ? p->pre : "qwen2", s->err);
        if (n_vocab < 0) return -1;
    }

    add(s, "token_embd.weight", p->type, 2, p->n_embd, n_vocab, 1, 1.0f, 0.0f);
    add_f32(s, "output_norm.weight", p->n_embd, 0.2f, 1.0f);
    if (!p->tied_output) {
        float *rs = NULL;
        if (p->readable && strcmp(p->vocab, "bytes") == 0 &&
            (rs = malloc((size_t)n_vocab * sizeof *rs))) {
            for (int32_t i = 0; i < n_vocab; i++)
                rs[i] = i < 256 && (isalnum(i) || strchr(" .,'!?", i)) && i != 0 ? 1.0f : 0.05f;
        }
        add_scaled(s, "output.weight", p->type, 2, p->n_embd, n_vocab, 1,
                   matrix_scale(p->logit_gain, p->n_embd), 0.0f, rs);
        free(rs);
    }
    if (p->rope_freqs && llama) add_f32(s, "rope_freqs.weight", p->head_dim / 2, 3.5f, 4.5f);
    if (s->k3 && p->res_block > 0) add_res_score(s, "output_res_score.weight");
    for (int il = 0; il < p->n_layer && !s->failed; il++) {
        add_layer(s, il);
        if (p->progress && !s->listing)
            p->progress(p->progress_ctx, false, (uint64_t)il + 1, (uint64_t)p->n_layer);
    }
    if (p->extra_tensor) add_f32(s, p->extra_tensor, p->n_embd, -1.0f, 1.0f);
    return s->failed ? -1 : 0;
}

/* What the quantization rules read of the model, as llama.cpp loads it. */
static mt_quant_mix_model mix_model(const synth *s) {
    const mt_synth_params *p = s->p;
    mt_quant_mix_model m = {.arch = p->arch, .n_layer = p->n_layer, .n_head = p->n_head};
    if (s->kimi)
        m.n_head_kv = s->mla[0] ? 1 : 0;
    else
        m.n_head_kv = p->mla_legacy ? p->n_head : p->n_head_kv;
    m.n_expert = p->dense ? 0 : p->n_expert;
    return m;
}

/* Lists the tensors of p (types as --type gives them), and with a mix plans
 * their types. On success s->list holds them; the caller frees it. */
static int list_tensors(synth *s, const mt_synth_params *p, mt_error *err) {
    *s = (synth){.p = p, .err = err, .listing = true};
    s->kimi = is_kimi(p->arch);
    s->k3 = strcmp(p->arch, "kimi-k3") == 0;
    if (s->kimi && parse_mla_layers(s, err)) return -1;
    int rc = build(s);
    gguf_writer_free(s->w);
    s->w = NULL;
    if (rc || !p->ftype) return rc;
    mt_quant_mix_tensor *t = calloc(s->n_list ? s->n_list : 1, sizeof *t);
    mt_type *types = malloc((s->n_list ? s->n_list : 1) * sizeof *types);
    if (!t || !types) {
        free(t);
        free(types);
        return mt_error_set(err, "mkmodel: out of memory");
    }
    for (size_t i = 0; i < s->n_list; i++) {
        t[i].name = s->list[i].name;
        for (int d = 0; d < 4; d++) t[i].ne[d] = d < 3 ? s->list[i].ne[d] : 1;
        t[i].type = MT_TYPE_F32; /* mkmodel makes every weight in F32 first */
    }
    mt_quant_mix_model m = mix_model(s);
    rc = mt_quant_mix_plan(p->ftype, &m, t, s->n_list, types, err);
    for (size_t i = 0; i < s->n_list && !rc; i++) s->list[i].type = types[i];
    free(t);
    free(types);
    return rc;
}

/* The parameters a mix writes with: every weight made in F32, then quantized. */
static mt_synth_params mix_params(const mt_synth_params *p) {
    mt_synth_params q = *p;
    if (q.ftype) {
        q.type = MT_TYPE_F32;
        q.expert_type = -1;
    }
    return q;
}

int mt_synth_plan(const mt_synth_params *p, mt_synth_tensor **tensors, size_t *n, mt_error *err) {
    *tensors = NULL;
    *n = 0;
    if (check_params(p, err)) return -1;
    mt_synth_params q = mix_params(p);
    synth s;
    if (list_tensors(&s, &q, err)) {
        free(s.list);
        return -1;
    }
    *tensors = s.list;
    *n = s.n_list;
    return 0;
}

int mt_synth_write(const mt_synth_params *p, const char *path, mt_error *err) {
    if (check_params(p, err)) return -1;
    mt_synth_params q = mix_params(p);
    mt_type *types = NULL;
    if (q.ftype) {
        synth l;
        int rc = list_tensors(&l, &q, err);
        for (size_t i = 0; i < l.n_list && !rc; i++) {
            const mt_type_traits *tr = mt_type_traits_get(l.list[i].type);
            if (!tr->supported)
                rc = mt_error_set(err,
                                  "mkmodel: --ftype %s: the engine cannot quantize to %s yet"
                                  " (%s is one); --dry-run lists every tensor's type",
                                  mt_quant_mix_name(q.ftype), tr->name, l.list[i].name);
        }
        if (!rc && !(types = malloc((l.n_list ? l.n_list : 1) * sizeof *types)))
            rc = mt_error_set(err, "mkmodel: out of memory");
        for (size_t i = 0; i < l.n_list && !rc; i++) types[i] = l.list[i].type;
        free(l.list);
        if (rc) return -1;
    }
    synth s = {.p = &q, .err = err, .types = types};
    s.kimi = is_kimi(q.arch);
    s.k3 = strcmp(q.arch, "kimi-k3") == 0;
    int rc = s.kimi ? parse_mla_layers(&s, err) : 0;
    if (!rc) rc = build(&s);
    gguf_write_opts o = {.progress = written, .progress_ctx = (void *)p};
    if (!rc) rc = gguf_writer_write_opts(s.w, path, p->progress ? &o : NULL, err);
    gguf_writer_free(s.w);
    free(types);
    return rc;
}

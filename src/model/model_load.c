/* model_load.c - binds a GGUF file's tensors to an mt_model.
 *
 * Every tensor the architecture needs is looked up by its llama.cpp name and
 * checked for shape and type before use: a missing, misshapen or
 * unsupported tensor is reported by name with what was expected, and so is
 * a tensor the file holds but the architecture does not use (computing
 * without it would silently give other results than the model's), and so
 * is a vocabulary whose token count is not the embedding's row count.
 * Matrices stay zero-copy views into the mapping; 1-D vectors (norms,
 * biases) are decoded to f32 copies owned by the model. */
#include "model_internal.h"
#include "moontail/quant.h"
#include "moontail/shard.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- binder */

typedef struct binder {
    mt_model *m;
    const gguf_file *f;
    mt_error *err;
    int failed;
    float **owned; /* decoded vectors, freed with the model */
    size_t n_owned, cap_owned;
    uint8_t *used; /* (n_tensors) 1 = bound */
} binder;

typedef struct model_priv {
    mt_model pub;
    float **owned;
    size_t n_owned;
} model_priv;

static void fail(binder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(binder *b, const char *fmt, ...) {
    if (b->failed) return;
    va_list ap;
    va_start(ap, fmt);
    mt_error_vset(b->err, fmt, ap);
    va_end(ap);
    mt_error_prefix(b->err, "%s", b->f->path);
    b->failed = 1;
}

static void tname(char *buf, size_t cap, const char *pattern, int il) {
    if (il >= 0)
        snprintf(buf, cap, "blk.%d.%s", il, pattern);
    else
        snprintf(buf, cap, "%s", pattern);
}

/* Finds a tensor and checks its shape; ne[i] < 0 means "any". */
static const gguf_tensor *find(binder *b, const char *pattern, int il, bool required, int n_dims,
                               int64_t ne0, int64_t ne1, int64_t ne2) {
    char name[96];
    tname(name, sizeof name, pattern, il);
    const gguf_tensor *t = gguf_find_tensor(b->f, name);
    if (!t) {
        if (required)
            fail(b, "tensor '%s' is missing; the %s loader needs it", name, b->m->hp.arch_name);
        return NULL;
    }
    b->used[t - b->f->tensors] = 1;
    int64_t want[3] = {ne0, ne1, ne2};
    bool ok = true;
    for (int d = 0; d < 3; d++) {
        int64_t w = d < n_dims ? want[d] : 1;
        if (w >= 0 && t->ne[d] != w) ok = false;
    }
    if (t->ne[3] != 1) ok = false;
    if (!ok) {
        fail(b, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]", name,
             (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
             (long long)ne0, (long long)(n_dims > 1 ? ne1 : 1), (long long)(n_dims > 2 ? ne2 : 1));
        return NULL;
    }
    const mt_type_traits *tr = mt_type_traits_get(t->type);
    if (!tr->supported || t->type == MT_TYPE_Q8_K || t->type == MT_TYPE_Q8_1) {
        /* the list from the type table, so it follows the kernels */
        char list[320];
        size_t len = 0;
        list[0] = 0;
        for (uint32_t k = 0; k < MT_TYPE_COUNT && len < sizeof list; k++) {
            const mt_type_traits *s = mt_type_traits_get(k);
            if (!s || !s->supported || k == MT_TYPE_Q8_K || k == MT_TYPE_Q8_1) continue;
            len +=
                (size_t)snprintf(list + len, sizeof list - len, "%s%s", len ? ", " : "", s->name);
        }
        fail(b, "tensor '%s' has type %s, which the engine cannot compute with yet (supported: %s)",
             name, tr->name, list);
        return NULL;
    }
    return t;
}

static mt_matrix matrix_of(const gguf_tensor *t) {
    mt_matrix mm = {t->type, t->ne[0], t->ne[1], t->nb[1], t->data};
    return mm;
}

static void bind_matrix(binder *b, mt_matrix *out, const char *pattern, int il, bool required,
                        int64_t ne0, int64_t ne1) {
    memset(out, 0, sizeof *out);
    const gguf_tensor *t = find(b, pattern, il, required, 2, ne0, ne1, 1);
    if (t) *out = matrix_of(t);
}

static void bind_experts(binder *b, mt_experts *out, const char *pattern, int il, int64_t ne0,
                         int64_t ne1, int64_t n_expert) {
    memset(out, 0, sizeof *out);
    const gguf_tensor *t = find(b, pattern, il, true, 3, ne0, ne1, n_expert);
    if (!t) return;
    out->m = matrix_of(t);
    out->expert_bytes = t->nb[2];
    out->n_expert = (int32_t)t->ne[2];
}

/* An f32 copy of a small tensor of shape {ne0, ne1, ne2} (rows of ne0). */
static float *bind_floats(binder *b, const char *pattern, int il, bool required, int n_dims,
                          int64_t ne0, int64_t ne1, int64_t ne2) {
    const gguf_tensor *t = find(b, pattern, il, required, n_dims, ne0, ne1, ne2);
    if (!t) return NULL;
    const int64_t rows = ne1 * ne2, n = ne0 * rows;
    float *v = malloc((size_t)n * sizeof *v);
    if (!v || (b->n_owned == b->cap_owned &&
               !(b->owned = realloc(b->owned,
                                    (b->cap_owned = 2 * b->cap_owned + 16) * sizeof(float *))))) {
        free(v);
        fail(b, "out of memory");
        return NULL;
    }
    for (int64_t r = 0; r < rows; r++)
        quant_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)r * t->nb[1], v + r * ne0,
                             ne0);
    b->owned[b->n_owned++] = v;
    return v;
}

static float *bind_vector(binder *b, const char *pattern, int il, bool required, int64_t n) {
    return bind_floats(b, pattern, il, required, 1, n, 1, 1);
}

/* ---------------------------------------------------------------- layers */

static void bind_gqa(binder *b, mt_layer *l, int il) {
    const mt_hparams *hp = &b->m->hp;
    int64_t E = hp->n_embd, nq = (int64_t)hp->n_head * hp->head_dim_k,
            nk = (int64_t)hp->n_head_kv * hp->head_dim_k,
            nv = (int64_t)hp->n_head_kv * hp->head_dim_v;
    char name[96];
    tname(name, sizeof name, "attn_qkv.weight", il);
    if (gguf_find_tensor(b->f, name))
        fail(b, "tensor '%s': fused QKV projections are not supported yet", name);
    bind_matrix(b, &l->wq, "attn_q.weight", il, true, E, nq);
    bind_matrix(b, &l->wk, "attn_k.weight", il, true, E, nk);
    bind_matrix(b, &l->wv, "attn_v.weight", il, true, E, nv);
    bind_matrix(b, &l->wo, "attn_output.weight", il, true, (int64_t)hp->n_head * hp->head_dim_v, E);
    l->bq = bind_vector(b, "attn_q.bias", il, false, nq);
    l->bk = bind_vector(b, "attn_k.bias", il, false, nk);
    l->bv = bind_vector(b, "attn_v.bias", il, false, nv);
    if (hp->arch == MT_ARCH_QWEN3MOE) {
        l->q_norm = bind_vector(b, "attn_q_norm.weight", il, true, hp->head_dim_k);
        l->k_norm = bind_vector(b, "attn_k_norm.weight", il, true, hp->head_dim_k);
    }
}

static void bind_mla(binder *b, mt_layer *l, int il) {
    const mt_hparams *hp = &b->m->hp;
    int64_t E = hp->n_embd, H = hp->n_head, kv = hp->kv_lora_rank, qk = hp->qk_nope + hp->qk_rope;
    if (hp->q_lora_rank > 0) {
        bind_matrix(b, &l->wq_a, "attn_q_a.weight", il, true, E, hp->q_lora_rank);
        l->q_a_norm = bind_vector(b, "attn_q_a_norm.weight", il, true, hp->q_lora_rank);
        bind_matrix(b, &l->wq_b, "attn_q_b.weight", il, true, hp->q_lora_rank, H * qk);
    } else {
        bind_matrix(b, &l->wq, "attn_q.weight", il, true, E, H * qk);
    }
    bind_matrix(b, &l->wkv_a, "attn_kv_a_mqa.weight", il, true, E, kv + hp->qk_rope);
    l->kv_a_norm = bind_vector(b, "attn_kv_a_norm.weight", il, true, kv);
    char name[96];
    tname(name, sizeof name, "attn_k_b.weight", il);
    l->mla_absorbed = gguf_find_tensor(b->f, name) != NULL;
    if (l->mla_absorbed) {
        bind_experts(b, &l->wk_b, "attn_k_b.weight", il, hp->qk_nope, kv, H);
        bind_experts(b, &l->wv_b, "attn_v_b.weight", il, kv, hp->v_head_dim, H);
    } else {
        bind_matrix(b, &l->wkv_b, "attn_kv_b.weight", il, true, kv,
                    H * (hp->qk_nope + hp->v_head_dim));
    }
    bind_matrix(b, &l->wo, "attn_output.weight", il, true, H * hp->v_head_dim, E);
    if (hp->arch == MT_ARCH_KIMI_K3)
        bind_matrix(b, &l->attn_gate, "attn_gate.weight", il, false, E, H * hp->v_head_dim);
}

/* KDA (kimi delta attention): projections, short convolutions, decay and
 * output gates, per-head output norm. */
static void bind_kda(binder *b, mt_layer *l, int il) {
    const mt_hparams *hp = &b->m->hp;
    const int64_t E = hp->n_embd, H = hp->n_head, hd = hp->kda_head_dim, D = H * hd,
                  K = hp->ssm_conv;
    bind_matrix(b, &l->wq, "attn_q.weight", il, true, E, D);
    bind_matrix(b, &l->wk, "attn_k.weight", il, true, E, D);
    bind_matrix(b, &l->wv, "attn_v.weight", il, true, E, D);
    /* {K, 1, D} (converters may also write a trailing 1, which find() accepts) */
    l->conv_q = bind_floats(b, "ssm_conv1d_q.weight", il, true, 3, K, 1, D);
    l->conv_k = bind_floats(b, "ssm_conv1d_k.weight", il, true, 3, K, 1, D);
    l->conv_v = bind_floats(b, "ssm_conv1d_v.weight", il, true, 3, K, 1, D);
    bind_matrix(b, &l->ssm_f_a, "ssm_f_a.weight", il, true, E, hd);
    bind_matrix(b, &l->ssm_f_b, "ssm_f_b.weight", il, true, hd, D);
    bind_matrix(b, &l->ssm_beta, "ssm_beta.weight", il, true, E, H);
    if (hp->arch == MT_ARCH_KIMI_K3) {
        l->ssm_a = bind_vector(b, "ssm_a", il, true, H);
        bind_matrix(b, &l->ssm_g, "ssm_g.weight", il, true, E, D);
    } else { /* kimi-linear pads A to {1, n_head} */
        l->ssm_a = bind_floats(b, "ssm_a", il, true, 2, 1, H, 1);
        bind_matrix(b, &l->ssm_g_a, "ssm_g_a.weight", il, true, E, hd);
        bind_matrix(b, &l->ssm_g_b, "ssm_g_b.weight", il, true, hd, D);
    }
    l->ssm_dt_b = bind_vector(b, "ssm_dt.bias", il, true, D);
    l->ssm_norm = bind_vector(b, "ssm_norm.weight", il, true, hd);
    bind_matrix(b, &l->wo, "attn_output.weight", il, true, D, E);
}

/* Expert width: from the metadata, or (llama, deepseek2 without the key)
 * from an expert or router-side tensor of the layer. */
static int64_t expert_width(binder *b, int il) {
    if (b->m->layers[il].n_ff_exp > 0) return b->m->layers[il].n_ff_exp;
    if (b->m->hp.n_ff_exp > 0) return b->m->hp.n_ff_exp;
    char name[96];
    tname(name, sizeof name, "ffn_down_exps.weight", il);
    const gguf_tensor *t = gguf_find_tensor(b->f, name);
    if (t) return t->ne[0];
    return b->m->hp.arch == MT_ARCH_LLAMA ? b->m->hp.n_ff : -1;
}

/* kimi: required selection bias, optional shared experts of width
 * F * max(1, n_shared) at n_embd, and (k3) the latent projections. */
static void bind_kimi_moe(binder *b, mt_layer *l, int il, int64_t F) {
    const mt_hparams *hp = &b->m->hp;
    const int64_t E = hp->n_embd, L = hp->n_expert_latent,
                  S = F * (hp->n_expert_shared > 0 ? hp->n_expert_shared : 1);
    l->exp_probs_b = bind_vector(b, "exp_probs_b.bias", il, true, hp->n_expert);
    char name[96];
    tname(name, sizeof name, "ffn_gate_shexp.weight", il);
    if ((l->has_shexp = gguf_find_tensor(b->f, name) != NULL)) {
        bind_matrix(b, &l->gate_shexp, "ffn_gate_shexp.weight", il, true, E, S);
        bind_matrix(b, &l->up_shexp, "ffn_up_shexp.weight", il, true, E, S);
        bind_matrix(b, &l->down_shexp, "ffn_down_shexp.weight", il, true, S, E);
    }
    if (L > 0) {
        bind_matrix(b, &l->routed_down, "ffn_routed_down.weight", il, true, E, L);
        bind_matrix(b, &l->routed_up, "ffn_routed_up.weight", il, true, L, E);
        l->routed_norm = bind_vector(b, "ffn_routed_norm.weight", il, false, L);
    }
}

/* Router, selection bias and shared expert: the part of an MoE layer that
 * stays with the attention holder. */
static void bind_moe_router(binder *b, mt_layer *l, int il) {
    const mt_hparams *hp = &b->m->hp;
    int64_t E = hp->n_embd, X = hp->n_expert, F = expert_width(b, il);
    bind_matrix(b, &l->router, "ffn_gate_inp.weight", il, true, E, X);
    l->exp_probs_b = bind_vector(b, "exp_probs_b.bias", il, false, X);
    if (mt_arch_is_kimi(hp->arch)) {
        bind_kimi_moe(b, l, il, F);
        return;
    }
    int64_t S = hp->arch == MT_ARCH_DEEPSEEK2 ? F * hp->n_expert_shared : hp->n_ff_shexp;
    if (hp->arch == MT_ARCH_QWEN2MOE || (hp->arch == MT_ARCH_DEEPSEEK2 && S > 0)) {
        l->has_shexp = true;
        bind_matrix(b, &l->gate_shexp, "ffn_gate_shexp.weight", il, true, E, S);
        bind_matrix(b, &l->up_shexp, "ffn_up_shexp.weight", il, true, E, S);
        bind_matrix(b, &l->down_shexp, "ffn_down_shexp.weight", il, true, S, E);
        if (hp->arch == MT_ARCH_QWEN2MOE) {
            const gguf_tensor *t = find(b, "ffn_gate_inp_shexp.weight", il, true, 1, E, 1, 1);
            if (t) l->shexp_gate_inp = (mt_matrix){t->type, E, 1, t->nb[1], t->data};
        }
    }
}

/* The routed experts this file holds (all, or a shard's subset). */
static void bind_moe_experts(binder *b, mt_layer *l, int il) {
    const mt_hparams *hp = &b->m->hp;
    int64_t E = hp->n_embd_exp, X = b->m->n_local_experts, F = expert_width(b, il);
    char name[96];
    tname(name, sizeof name, "ffn_gate_up_exps.weight", il);
    if (gguf_find_tensor(b->f, name)) {
        /* fused: rows [0, F) of each expert are gate, [F, 2F) are up */
        bind_experts(b, &l->gate_exps, "ffn_gate_up_exps.weight", il, E, 2 * F, X);
        l->up_exps = l->gate_exps;
        l->gate_exps.m.n_rows = F;
        l->up_exps.m.n_rows = F;
        l->up_exps.m.data = (const char *)l->up_exps.m.data + (size_t)F * l->up_exps.m.row_bytes;
    } else {
        bind_experts(b, &l->gate_exps, "ffn_gate_exps.weight", il, E, F, X);
        bind_experts(b, &l->up_exps, "ffn_up_exps.weight", il, E, F, X);
    }
    bind_experts(b, &l->down_exps, "ffn_down_exps.weight", il, F, E, X);
}

static void bind_layer(binder *b, int il) {
    mt_model *m = b->m;
    const mt_hparams *hp = &m->hp;
    mt_layer *l = &m->layers[il];
    int64_t E = hp->n_embd;
    switch (hp->arch) {
    case MT_ARCH_LLAMA:
        l->is_moe = hp->n_expert > 0;
        break; /* as llama.cpp: all or none */
    case MT_ARCH_DEEPSEEK2:
    case MT_ARCH_KIMI_LINEAR:
    case MT_ARCH_KIMI_K3:
        l->is_moe = il >= hp->n_leading_dense;
        break;
    default:
        l->is_moe = true;
    }
    if (l->is_moe && (hp->n_expert <= 0 || hp->n_expert_used <= 0)) {
        fail(b, "layer %d is MoE but expert_count/expert_used_count are not set", il);
        return;
    }
    if (m->has_attention) {
        l->attn_norm = bind_vector(b, "attn_norm.weight", il, true, E);
        l->ffn_norm = bind_vector(b, "ffn_norm.weight", il, true, E);
        if (l->is_kda)
            bind_kda(b, l, il);
        else if (mt_arch_has_mla(hp->arch))
            bind_mla(b, l, il);
        else
            bind_gqa(b, l, il);
        if (hp->attn_res_block > 0) {
            l->attn_res_score = bind_vector(b, "attn_res_score.weight", il, true, E);
            l->ffn_res_score = bind_vector(b, "ffn_res_score.weight", il, true, E);
        }
        if (l->is_moe) {
            bind_moe_router(b, l, il);
        } else {
            int64_t F = hp->n_ff;
            if (F <= 0) fail(b, "layer %d is dense but feed_forward_length is not set", il);
            bind_matrix(b, &l->ffn_gate, "ffn_gate.weight", il, true, E, F);
            bind_matrix(b, &l->ffn_up, "ffn_up.weight", il, true, E, F);
            bind_matrix(b, &l->ffn_down, "ffn_down.weight", il, true, F, E);
        }
    }
    if (l->is_moe && m->has_experts) bind_moe_experts(b, l, il);
}

/* kimi: which layers are KDA (per-layer head_count_kv: 0 = KDA, 1 = MLA with
 * one latent head) and each layer's expert width, which llama.cpp's kimi
 * loaders read per layer; the model-wide expert width is the first MoE
 * layer's. */
static int kimi_layer_kinds(binder *b) {
    mt_model *m = b->m;
    mt_hparams *hp = &m->hp;
    const char *path = b->f->path;
    if (!mt_arch_is_kimi(hp->arch)) return 0;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.head_count_kv", hp->arch_name);
    if (!gguf_find_kv(b->f, key))
        return mt_error_set(b->err,
                            "%s: required key '%s' is missing; kimi models list it per layer (0"
                            " marks a KDA layer)",
                            path, key);
    int32_t *v = malloc((size_t)hp->n_layer * sizeof *v);
    if (!v) return mt_error_set(b->err, "out of memory for %d layers", hp->n_layer);
    int rc = mt_hparams_read_per_layer(b->f, hp, "attention.head_count_kv", 0, v, b->err);
    for (int32_t il = 0; rc == 0 && il < hp->n_layer; il++) {
        if (v[il] != 0 && v[il] != 1)
            rc = mt_error_set(b->err,
                              "%s: layer %d has head_count_kv %d; kimi layers have 0 (KDA) or 1"
                              " (MLA, one latent head)",
                              path, il, v[il]);
        m->layers[il].is_kda = v[il] == 0;
        hp->n_kda_layers += v[il] == 0;
    }
    if (rc == 0)
        rc = mt_hparams_read_per_layer(b->f, hp, "expert_feed_forward_length", 0, v, b->err);
    for (int32_t il = 0; rc == 0 && il < hp->n_layer; il++) {
        m->layers[il].n_ff_exp = v[il];
        if (il < hp->n_leading_dense || hp->n_expert <= 0) continue;
        if (v[il] <= 0)
            rc =
                mt_error_set(b->err, "%s: layer %d is MoE but its expert_feed_forward_length is %d",
                             path, il, v[il]);
        if (hp->n_ff_exp == 0) hp->n_ff_exp = v[il];
    }
    free(v);
    return rc;
}

/* Reads the moontail.shard.* keys (absent: a whole model). */
static int read_shard_keys(binder *b) {
    mt_model *m = b->m;
    const gguf_file *f = b->f;
    const mt_hparams *hp = &m->hp;
    mt_error e = {{0}};
    uint32_t version = 0, lb = 0, le = 0;
    m->layer_begin = 0;
    m->layer_end = hp->n_layer;
    m->has_head = m->has_attention = m->has_experts = true;
    m->n_local_experts = hp->n_expert;
    if (!gguf_get_u32(f, "moontail.shard.version", &version, &e)) {
        if (e.msg[0]) return mt_error_set(b->err, "%s", e.msg);
    } else {
        if (version != 1)
            return mt_error_set(b->err, "%s: shard format version %u is not supported (1 is)",
                                f->path, version);
        if (!gguf_get_u32(f, "moontail.shard.layer_begin", &lb, &e) ||
            !gguf_get_u32(f, "moontail.shard.layer_end", &le, &e) ||
            !gguf_get_bool(f, "moontail.shard.attention", &m->has_attention, &e) ||
            !gguf_get_bool(f, "moontail.shard.head", &m->has_head, &e))
            return mt_error_set(b->err, "%s: %s", f->path,
                                e.msg[0] ? e.msg : "a moontail.shard.* key is missing");
        if (lb > le || le > (uint32_t)hp->n_layer)
            return mt_error_set(b->err, "%s: shard layers [%u, %u) are outside the model's [0, %d)",
                                f->path, lb, le, hp->n_layer);
        m->layer_begin = (int32_t)lb;
        m->layer_end = (int32_t)le;
    }
    m->expert_slot = malloc((size_t)(hp->n_expert > 0 ? hp->n_expert : 1) * sizeof(int32_t));
    if (!m->expert_slot) return mt_error_set(b->err, "out of memory");
    for (int32_t x = 0; x < hp->n_expert; x++) m->expert_slot[x] = x;
    const gguf_kv *kv = gguf_find_kv(f, "moontail.shard.experts");
    if (version && kv) {
        const gguf_value *v = &kv->value;
        if (v->type != GGUF_TYPE_ARRAY || v->arr.type != GGUF_TYPE_UINT32)
            return mt_error_set(b->err, "%s: moontail.shard.experts must be an array of uint32",
                                f->path);
        for (int32_t x = 0; x < hp->n_expert; x++) m->expert_slot[x] = -1;
        for (uint64_t i = 0; i < v->arr.n; i++) {
            uint32_t id;
            memcpy(&id, v->arr.data + 4 * i, 4);
            if (id >= (uint32_t)hp->n_expert || m->expert_slot[id] >= 0)
                return mt_error_set(b->err,
                                    "%s: moontail.shard.experts entry %llu (%u) is out of"
                                    " range or repeated",
                                    f->path, (unsigned long long)i, id);
            m->expert_slot[id] = (int32_t)i;
        }
        m->n_local_experts = (int32_t)v->arr.n;
    }
    if (version) {
        /* a shard holds routed experts when its first MoE layer has an expert tensor */
        m->has_experts = false;
        for (int32_t il = m->layer_begin; il < m->layer_end && !m->has_experts; il++) {
            char name[96];
            tname(name, sizeof name, "ffn_down_exps.weight", il);
            m->has_experts = gguf_find_tensor(f, name) != NULL;
        }
        if (m->n_local_experts == 0) m->has_experts = false;
    }
    return 0;
}

/* Vocabulary size: from the embedding if the file has it, else from the
 * tokenizer (a shard without the head). */
static int64_t vocab_size(const gguf_file *f) {
    const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if (emb) return emb->n_dims == 2 ? emb->ne[1] : -1;
    const gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.tokens");
    return kv && kv->value.type == GGUF_TYPE_ARRAY ? (int64_t)kv->value.arr.n : -1;
}

/* llama.cpp gives token_embd.weight and output.weight one row per token of
 * tokenizer.ggml.tokens and refuses a file where the counts differ ("wrong
 * shape"); so does this. Sampling from such a file would give ids that have
 * no text, or text whose ids have no embedding. A shard without the head has
 * neither matrix and is not checked. */
static void check_vocab_rows(binder *b) {
    const gguf_kv *kv = gguf_find_kv(b->f, "tokenizer.ggml.tokens");
    if (!kv || kv->value.type != GGUF_TYPE_ARRAY) return;
    unsigned long long n = (unsigned long long)kv->value.arr.n;
    const char *names[2] = {"token_embd.weight", "output.weight"};
    for (int i = 0; i < 2; i++) {
        const gguf_tensor *t = gguf_find_tensor(b->f, names[i]);
        if (!t || t->n_dims != 2 || (unsigned long long)t->ne[1] == n) continue;
        fail(b,
             "the vocabulary has %llu tokens (tokenizer.ggml.tokens) but %s has %lld rows, one"
             " per token; the two counts must be equal (llama.cpp refuses the file too). The"
             " vocabulary and the weights come from different models or the conversion went"
             " wrong: convert the model again with its own tokenizer",
             n, names[i], (long long)t->ne[1]);
        return;
    }
}

/* The first tensor nothing bound: a tensor of another architecture, of a
 * layer past block_count, or of a part the engine does not compute. */
static void check_unused(binder *b) {
    const gguf_file *f = b->f;
    const mt_hparams *hp = &b->m->hp;
    uint64_t n_used = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) n_used += b->used[i];
    for (uint64_t i = 0; i < f->n_tensors && !b->failed; i++) {
        if (b->used[i]) continue;
        const char *name = f->tensors[i].name;
        int il = -1;
        char why[160] = "";
        if (strstr(name, ".nextn."))
            snprintf(why, sizeof why,
                     "; multi-token-prediction (nextn) layers are not supported: convert the"
                     " model without them");
        else if (sscanf(name, "blk.%d.", &il) == 1 && il >= hp->n_layer)
            snprintf(why, sizeof why, "; its layer %d is past the %d layers of %s.block_count", il,
                     hp->n_layer, hp->arch_name);
        fail(b,
             "tensor '%s' is not used by the %s loader (it uses %llu of the file's %llu"
             " tensors)%s; the file is not a plain %s model, and computing without the tensor"
             " would not give the model's results",
             name, hp->arch_name, (unsigned long long)n_used, (unsigned long long)f->n_tensors, why,
             hp->arch_name);
    }
}

/* ------------------------------------------------------------------ load */

/* Binds f to a new model, which refers to f but does not own it yet. */
static mt_model *bind_model(gguf_file *f, mt_error *err) {
    model_priv *mp = calloc(1, sizeof *mp);
    uint8_t *used = calloc(f->n_tensors ? f->n_tensors : 1, 1);
    if (!mp || !used) {
        free(mp);
        free(used);
        mt_error_set(err, "out of memory");
        return NULL;
    }
    mt_model *m = &mp->pub;
    m->gguf = f;
    binder b = {m, f, err, 0, NULL, 0, 0, used};

    int64_t n_vocab = vocab_size(f);
    if (n_vocab <= 0 || n_vocab > INT32_MAX) {
        fail(&b, "cannot tell the vocabulary size: 'token_embd.weight' is missing or not 2-D and"
                 " there is no tokenizer.ggml.tokens");
        goto fail;
    }
    if (mt_hparams_read(f, n_vocab, &m->hp, err)) goto fail;
    const mt_hparams *hp = &m->hp;
    if (read_shard_keys(&b)) goto fail;
    check_vocab_rows(&b);
    if (b.failed) goto fail;
    if (m->has_head) {
        const gguf_tensor *te =
            find(&b, "token_embd.weight", -1, true, 2, hp->n_embd, hp->n_vocab, 1);
        if (!te) goto fail;
        m->tok_embd = matrix_of(te);
        m->output_norm = bind_vector(&b, "output_norm.weight", -1, true, hp->n_embd);
        bind_matrix(&b, &m->output, "output.weight", -1, hp->arch == MT_ARCH_QWEN2MOE, hp->n_embd,
                    hp->n_vocab);
        if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    }
    /* the head's residual mix: with the head, and with the last layer (shard.h: FINAL) */
    if (hp->attn_res_block > 0 &&
        mt_shard_spec_has_final(hp->n_layer, m->has_head, m->has_attention, m->layer_begin,
                                m->layer_end))
        m->output_res_score = bind_vector(&b, "output_res_score.weight", -1, true, hp->n_embd);
    if (hp->arch == MT_ARCH_KIMI_K3 && hp->attn_res_block == 0 &&
        (gguf_find_tensor(f, "output_res_score.weight") ||
         gguf_find_tensor(f, "blk.0.attn_res_score.weight")))
        fail(&b, "kimi-k3.attn_res.block_size is 0 (no attention residuals) but the file has"
                 " attention residual scores; the block size is wrong");
    if (hp->arch == MT_ARCH_LLAMA && (m->has_head || m->has_attention))
        m->rope_freqs = bind_vector(&b, "rope_freqs.weight", -1, false, hp->n_rot / 2);
    if (b.failed) goto fail;

    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) {
        fail(&b, "out of memory for %d layers", hp->n_layer);
        goto fail;
    }
    if (kimi_layer_kinds(&b)) goto fail;
    for (int il = m->layer_begin; il < m->layer_end && !b.failed; il++) bind_layer(&b, il);
    check_unused(&b);
    if (b.failed) goto fail;
    mp->owned = b.owned;
    mp->n_owned = b.n_owned;
    free(used);
    return m;
fail:
    mp->owned = b.owned;
    mp->n_owned = b.n_owned;
    m->gguf = NULL; /* the caller's */
    mt_model_free(m);
    free(used);
    return NULL;
}

mt_model *mt_model_from_gguf(gguf_file *f, mt_error *err) {
    mt_model *m = bind_model(f, err);
    if (!m) gguf_close(f);
    return m;
}

int mt_model_check_file(const gguf_file *f, mt_error *err) {
    /* binding only reads f; the model is dropped without closing it */
    mt_model *m = bind_model((gguf_file *)f, err);
    if (!m) return -1;
    m->gguf = NULL;
    mt_model_free(m);
    return 0;
}

mt_model *mt_model_load(const char *path, mt_error *err) {
    gguf_file *f = gguf_open(path, err);
    return f ? mt_model_from_gguf(f, err) : NULL;
}

void mt_model_free(mt_model *m) {
    if (!m) return;
    model_priv *mp = (model_priv *)m;
    for (size_t i = 0; i < mp->n_owned; i++) free(mp->owned[i]);
    free(mp->owned);
    free(m->layers);
    free(m->expert_slot);
    gguf_close(m->gguf);
    free(mp);
}

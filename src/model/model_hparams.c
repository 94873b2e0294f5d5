/* model_hparams.c - reads an architecture's hyperparameters from GGUF
 * metadata (`<arch>.*` keys), applying llama.cpp's defaults, and derives the
 * RoPE/YaRN and attention scales the forward pass needs. */
#include "model_internal.h"
#include "moontail/mathf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct hp_reader {
    const gguf_file *f;
    const char *arch;
    mt_error *err;
    int failed;
} hp_reader;

static const char *key_of(hp_reader *r, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", r->arch, suffix);
    return buf;
}

/* Reads an integer key that may also be stored as a per-layer array whose
 * entries are all equal (what llama.cpp calls get_key_or_arr). */
static bool get_int(hp_reader *r, const char *suffix, int32_t *out, bool required) {
    char key[128];
    key_of(r, suffix, key, sizeof key);
    const gguf_kv *kv = gguf_find_kv(r->f, key);
    if (!kv) {
        if (required && !r->failed) {
            mt_error_set(r->err, "%s: required key '%s' is missing", r->f->path, key);
            r->failed = 1;
        }
        return false;
    }
    uint64_t v = 0;
    if (kv->value.type == GGUF_TYPE_ARRAY) {
        const gguf_value *a = &kv->value;
        size_t es = a->arr.type == GGUF_TYPE_UINT32 || a->arr.type == GGUF_TYPE_INT32 ? 4 : 0;
        if (es == 0 || a->arr.n == 0) {
            if (!r->failed)
                mt_error_set(r->err, "%s: key '%s' is an array of %s; expected int32/uint32",
                             r->f->path, key, gguf_type_name(a->arr.type));
            r->failed = 1;
            return false;
        }
        uint32_t first, x;
        memcpy(&first, a->arr.data, 4);
        for (uint64_t i = 1; i < a->arr.n; i++) {
            memcpy(&x, a->arr.data + 4 * i, 4);
            if (x != first) {
                if (!r->failed)
                    mt_error_set(r->err,
                                 "%s: key '%s' differs between layers (%u vs %u); per-layer"
                                 " values are not supported yet",
                                 r->f->path, key, first, x);
                r->failed = 1;
                return false;
            }
        }
        v = first;
    } else {
        mt_error e = {{0}};
        if (!gguf_get_u64(r->f, key, &v, &e)) {
            if (!r->failed) *r->err = e;
            r->failed = 1;
            return false;
        }
    }
    if (v > (1u << 30)) {
        if (!r->failed)
            mt_error_set(r->err, "%s: key '%s' = %llu is implausibly large", r->f->path, key,
                         (unsigned long long)v);
        r->failed = 1;
        return false;
    }
    *out = (int32_t)v;
    return true;
}

int mt_hparams_read_per_layer(const gguf_file *f, const mt_hparams *hp, const char *suffix,
                              int32_t dflt, int32_t *out, mt_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", hp->arch_name, suffix);
    const gguf_kv *kv = gguf_find_kv(f, key);
    uint64_t v = (uint64_t)dflt;
    if (kv && kv->value.type == GGUF_TYPE_ARRAY) {
        const gguf_value *a = &kv->value;
        if (a->arr.type != GGUF_TYPE_UINT32 && a->arr.type != GGUF_TYPE_INT32)
            return mt_error_set(err, "%s: key '%s' is an array of %s; expected int32/uint32",
                                f->path, key, gguf_type_name(a->arr.type));
        if (a->arr.n != (uint64_t)hp->n_layer)
            return mt_error_set(err,
                                "%s: key '%s' has %llu entries; block_count says %d layers, one"
                                " entry per layer",
                                f->path, key, (unsigned long long)a->arr.n, hp->n_layer);
        for (int32_t il = 0; il < hp->n_layer; il++) {
            uint32_t x;
            memcpy(&x, a->arr.data + 4 * (size_t)il, 4);
            if (x > (1u << 30))
                return mt_error_set(err, "%s: key '%s' entry %d (%u) is implausibly large", f->path,
                                    key, il, x);
            out[il] = (int32_t)x;
        }
        return 0;
    }
    if (kv) {
        mt_error e = {{0}};
        if (!gguf_get_u64(f, key, &v, &e)) return mt_error_set(err, "%s", e.msg);
        if (v > (1u << 30))
            return mt_error_set(err, "%s: key '%s' = %llu is implausibly large", f->path, key,
                                (unsigned long long)v);
    }
    for (int32_t il = 0; il < hp->n_layer; il++) out[il] = (int32_t)v;
    return 0;
}

static bool get_float(hp_reader *r, const char *suffix, float *out, bool required) {
    char key[128];
    key_of(r, suffix, key, sizeof key);
    mt_error e = {{0}};
    if (gguf_get_f32(r->f, key, out, &e)) return true;
    if (e.msg[0] || required) {
        if (!r->failed) {
            if (e.msg[0])
                *r->err = e;
            else
                mt_error_set(r->err, "%s: required key '%s' is missing", r->f->path, key);
        }
        r->failed = 1;
    }
    return false;
}

static bool get_bool(hp_reader *r, const char *suffix, bool *out) {
    char key[128];
    key_of(r, suffix, key, sizeof key);
    mt_error e = {{0}};
    if (gguf_get_bool(r->f, key, out, &e)) return true;
    if (e.msg[0]) {
        if (!r->failed) *r->err = e;
        r->failed = 1;
    }
    return false;
}

/* YaRN ramp/mscale conventions as llama.cpp applies them (see
 * docs/engine-reference.md, RoPE): get_mscale(s, m) = 1 + 0.1*m*ln s for s > 1. */
static float get_mscale(float s, float m) {
    return s <= 1.0f ? 1.0f : 0.1f * m * mt_math_logf(s) + 1.0f;
}

/* kimi-linear and kimi-k3: KDA sizes, nope MLA, deepseek2-style routing and
 * (k3) attention residuals, latent experts and the situ activation. */
static int kimi_hparams(hp_reader *r, mt_hparams *hp, int32_t gating) {
    const char *path = r->f->path;
    const bool k3 = hp->arch == MT_ARCH_KIMI_K3;
    int32_t k_mla = 0, v_mla = 0;
    get_int(r, "attention.key_length_mla", &k_mla, true);
    get_int(r, "attention.value_length_mla", &v_mla, true);
    get_int(r, "attention.kv_lora_rank", &hp->kv_lora_rank, true);
    if (k3) get_int(r, "attention.q_lora_rank", &hp->q_lora_rank, false);
    get_int(r, "ssm.conv_kernel", &hp->ssm_conv, true);
    get_int(r, "kda.head_dim", &hp->kda_head_dim, true);
    get_int(r, "expert_shared_count", &hp->n_expert_shared, true);
    get_int(r, "expert_gating_func", &gating, true); /* required here, unlike deepseek2 */
    hp->kda_gate_lower_bound = -INFINITY;
    hp->situ_beta = 1.0f;
    if (k3) {
        get_float(r, "kda.gate_lower_bound", &hp->kda_gate_lower_bound, false);
        get_int(r, "expert_latent_length", &hp->n_expert_latent, false);
        get_int(r, "attn_res.block_size", &hp->attn_res_block, true);
        get_float(r, "activation.situ_beta", &hp->situ_beta, true);
        get_float(r, "activation.situ_linear_beta", &hp->situ_linear_beta, true);
        hp->act_situ = true;
    } else {
        hp->expert_weights_norm = true; /* llama.cpp's kimi-linear graph always renormalises */
    }
    if (r->failed) return -1;
    if (gating != 1 && gating != 2)
        return mt_error_set(r->err,
                            "%s: expert_gating_func %d is not supported (1 softmax, 2 sigmoid)",
                            path, gating);
    hp->gating = gating == 2 ? MT_GATING_SIGMOID : MT_GATING_SOFTMAX;
    hp->rope_neox = false;
    hp->mla_nope = true;
    hp->qk_rope = hp->n_rot;
    hp->qk_nope = k_mla - hp->n_rot;
    hp->v_head_dim = v_mla;
    hp->head_dim_k = k_mla;
    hp->head_dim_v = v_mla;
    hp->n_head_kv = 1; /* MLA layers: one latent head; the per-layer pattern is the loader's */
    if (hp->qk_nope < 1 || hp->v_head_dim < 1 || hp->kv_lora_rank < 1)
        return mt_error_set(r->err, "%s: bad MLA sizes: nope %d, rope %d, v %d, kv_lora %d", path,
                            hp->qk_nope, hp->qk_rope, hp->v_head_dim, hp->kv_lora_rank);
    if (hp->kda_head_dim < 1 || hp->kda_head_dim > 1024 || hp->ssm_conv < 1 || hp->ssm_conv > 64)
        return mt_error_set(
            r->err, "%s: bad KDA sizes: kda.head_dim %d (1-1024), ssm.conv_kernel %d (1-64)", path,
            hp->kda_head_dim, hp->ssm_conv);
    if (k3 && (hp->attn_res_block < 0 || hp->attn_res_block > hp->n_layer))
        return mt_error_set(r->err,
                            "%s: attn_res.block_size %d must be 0 (off) or at most the %d layers",
                            path, hp->attn_res_block, hp->n_layer);
    if (hp->attn_res_block > 0)
        hp->n_res_bank = (hp->n_layer + hp->attn_res_block - 1) / hp->attn_res_block;
    if (hp->n_expert_latent < 0 || hp->n_expert_latent > (1 << 20))
        return mt_error_set(r->err, "%s: expert_latent_length %d is out of range", path,
                            hp->n_expert_latent);
    if (hp->act_situ &&
        !(hp->situ_beta > 0.0f && isfinite(hp->situ_beta) && isfinite(hp->situ_linear_beta)))
        return mt_error_set(r->err,
                            "%s: activation.situ_beta %g must be > 0 and situ_linear_beta %g"
                            " finite",
                            path, hp->situ_beta, hp->situ_linear_beta);
    return 0;
}

/* A float hyperparameter the forward pass computes with: NaN or infinity there gives
 * garbage tokens, never an error, so the file is refused (0 if v is usable). */
static int check_float(const gguf_file *f, const mt_hparams *hp, const char *suffix, float v,
                       bool positive, mt_error *err) {
    if (isfinite(v) && (!positive || v > 0.0f)) return 0;
    return mt_error_set(err,
                        "%s: key '%s.%s' is %g; it must be a finite number%s. The file is"
                        " damaged or was converted wrongly: convert the model again",
                        f->path, hp->arch_name, suffix, v, positive ? " above 0" : "");
}

/* The float keys (and what they turn into) that reach the forward pass. */
static int check_floats(const gguf_file *f, const mt_hparams *hp, float factor, float attn_factor,
                        float log_mul, mt_error *err) {
    if (check_float(f, hp, "rope.freq_base", hp->rope_base, true, err) ||
        check_float(f, hp, "attention.layer_norm_rms_epsilon", hp->eps, true, err) ||
        check_float(f, hp, "rope.scaling.factor", factor, false, err) ||
        check_float(f, hp, "rope.scaling.attn_factor", attn_factor, false, err) ||
        check_float(f, hp, "rope.scaling.yarn_log_multiplier", log_mul, false, err) ||
        check_float(f, hp, "rope.scaling.yarn_beta_fast", hp->yarn_beta_fast, false, err) ||
        check_float(f, hp, "rope.scaling.yarn_beta_slow", hp->yarn_beta_slow, false, err) ||
        check_float(f, hp, "expert_weights_scale", hp->expert_weights_scale, false, err))
        return -1;
    if (!isfinite(hp->rope_freq_scale) || !(hp->rope_freq_scale > 0.0f) ||
        !isfinite(hp->rope_mscale) || !isfinite(hp->attn_scale) || !(hp->attn_scale > 0.0f))
        return mt_error_set(err,
                            "%s: the RoPE scaling keys give unusable factors (frequency scale %g,"
                            " magnitude scale %g, attention scale %g); check %s.rope.scaling.*"
                            " and convert the model again",
                            f->path, hp->rope_freq_scale, hp->rope_mscale, hp->attn_scale,
                            hp->arch_name);
    return 0;
}

/* An MLA file in the older layout: attn_kv_b tensors and no attn_k_b ones
 * (a shard without attention has neither, and keeps no cache). */
static bool mla_file_is_expanded(const gguf_file *f) {
    bool kv_b = false;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const char *n = f->tensors[i].name, *dot = strstr(n, ".attn_");
        if (!dot) continue;
        if (strcmp(dot, ".attn_k_b.weight") == 0) return false;
        if (strcmp(dot, ".attn_kv_b.weight") == 0) kv_b = true;
    }
    return kv_b;
}

int mt_hparams_read(const gguf_file *f, int64_t n_vocab, mt_hparams *hp, mt_error *err) {
    memset(hp, 0, sizeof *hp);
    mt_error e = {{0}};
    char *arch = gguf_get_string(f, "general.architecture", &e);
    if (!arch)
        return mt_error_set(err, "%s: %s", f->path,
                            e.msg[0] ? e.msg : "key 'general.architecture' is missing");
    static const struct {
        const char *name;
        mt_arch arch;
    } archs[] = {{"llama", MT_ARCH_LLAMA},
                 {"qwen2moe", MT_ARCH_QWEN2MOE},
                 {"qwen3moe", MT_ARCH_QWEN3MOE},
                 {"deepseek2", MT_ARCH_DEEPSEEK2},
                 {"kimi-linear", MT_ARCH_KIMI_LINEAR},
                 {"kimi-k3", MT_ARCH_KIMI_K3}};
    int found = -1;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strcmp(arch, archs[i].name) == 0) found = (int)i;
    if (found < 0) {
        mt_error_set(err,
                     "%s: architecture '%s' is not supported (supported: llama, qwen2moe,"
                     " qwen3moe, deepseek2, kimi-linear, kimi-k3)",
                     f->path, arch);
        free(arch);
        return -1;
    }
    free(arch);
    hp->arch = archs[found].arch;
    hp->arch_name = archs[found].name;
    hp->n_vocab = (int32_t)n_vocab;

    hp_reader r = {f, hp->arch_name, err, 0};
    const bool kimi = mt_arch_is_kimi(hp->arch);
    get_int(&r, "embedding_length", &hp->n_embd, true);
    get_int(&r, "block_count", &hp->n_layer, true);
    hp->n_ctx_train = 4096;
    get_int(&r, "context_length", &hp->n_ctx_train, false);
    get_int(&r, "attention.head_count", &hp->n_head, true);
    hp->n_head_kv = hp->n_head;
    if (!kimi) /* kimi: per layer, 0 marks a KDA layer (the loader reads it) */
        get_int(&r, "attention.head_count_kv", &hp->n_head_kv, false);
    get_float(&r, "attention.layer_norm_rms_epsilon", &hp->eps, true);
    if (r.failed) return -1;
    /* layers are allocated per model before any tensor is bound: bound the count
     * (as shards do) so that a hostile block_count cannot ask for gigabytes */
    if (hp->n_layer > MT_MAX_LAYERS)
        return mt_error_set(err, "%s: block_count %d is more than %d layers; the file is damaged",
                            f->path, hp->n_layer, MT_MAX_LAYERS);
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0 ||
        hp->n_head % hp->n_head_kv != 0)
        return mt_error_set(err,
                            "%s: bad shape: n_embd %d, n_layer %d, n_head %d, n_head_kv %d"
                            " (all must be > 0 and n_head a multiple of n_head_kv)",
                            f->path, hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv);
    hp->head_dim_k = hp->n_embd / hp->n_head;
    hp->head_dim_v = hp->head_dim_k;
    get_int(&r, "attention.key_length", &hp->head_dim_k, false);
    get_int(&r, "attention.value_length", &hp->head_dim_v, false);
    hp->n_rot = hp->head_dim_k;
    get_int(&r, "rope.dimension_count", &hp->n_rot, false);
    hp->rope_base = 10000.0f;
    get_float(&r, "rope.freq_base", &hp->rope_base, false);

    /* RoPE scaling */
    float factor = 0.0f, rope_attn_factor = 1.0f;
    char scaling[32] = "linear";
    {
        char key[128];
        char *s = gguf_get_string(f, key_of(&r, "rope.scaling.type", key, sizeof key), &e);
        if (s) {
            snprintf(scaling, sizeof scaling, "%s", s);
            free(s);
        } else if (e.msg[0]) {
            *err = e;
            return -1;
        }
    }
    if (strcmp(scaling, "none") && strcmp(scaling, "linear") && strcmp(scaling, "yarn"))
        return mt_error_set(err, "%s: rope scaling type '%s' is not supported (none, linear, yarn)",
                            f->path, scaling);
    if (!get_float(&r, "rope.scaling.factor", &factor, false))
        get_float(&r, "rope.scale_linear", &factor, false);
    get_float(&r, "rope.scaling.attn_factor", &rope_attn_factor, false);
    hp->rope_freq_scale = (factor == 0.0f || strcmp(scaling, "none") == 0) ? 1.0f : 1.0f / factor;
    hp->rope_yarn = strcmp(scaling, "yarn") == 0;
    hp->yarn_orig_ctx = hp->n_ctx_train;
    get_int(&r, "rope.scaling.original_context_length", &hp->yarn_orig_ctx, false);
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    if (hp->arch != MT_ARCH_DEEPSEEK2) { /* llama.cpp's deepseek2 ignores these keys */
        get_float(&r, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast, false);
        get_float(&r, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow, false);
    }
    float log_mul = 0.0f;
    if (get_float(&r, "rope.scaling.yarn_log_multiplier", &log_mul, false) &&
        hp->arch == MT_ARCH_DEEPSEEK2)
        log_mul /= 0.1f; /* stored as 0.1 * mscale_all_dim */

    /* attn_factor as llama.cpp hands it to ggml's rope, which multiplies it
     * again by (1 + 0.1 ln s) when YaRN is on. */
    float s = 1.0f / hp->rope_freq_scale;
    float attn_factor = 1.0f;
    if (hp->rope_yarn) {
        if (log_mul != 0.0f) {
            float m = (hp->arch == MT_ARCH_DEEPSEEK2 && log_mul != 1.0f) ? log_mul : 1.0f;
            attn_factor = get_mscale(s, m) / get_mscale(s, log_mul);
        } else {
            attn_factor = get_mscale(s, 1.0f);
        }
        attn_factor *= 1.0f / (1.0f + 0.1f * mt_math_logf(s));
    }
    attn_factor *= rope_attn_factor;
    hp->rope_mscale = hp->rope_yarn ? attn_factor * (1.0f + 0.1f * mt_math_logf(s)) : attn_factor;

    /* FFN and routing */
    get_int(&r, "feed_forward_length", &hp->n_ff, false);
    get_int(&r, "expert_count", &hp->n_expert, false);
    get_int(&r, "expert_used_count", &hp->n_expert_used, false);
    if (!kimi) /* kimi: may differ per layer (the loader reads it) */
        get_int(&r, "expert_feed_forward_length", &hp->n_ff_exp, false);
    get_int(&r, "expert_shared_feed_forward_length", &hp->n_ff_shexp, false);
    get_int(&r, "expert_shared_count", &hp->n_expert_shared, false);
    get_int(&r, "leading_dense_block_count", &hp->n_leading_dense, false);
    get_float(&r, "expert_weights_scale", &hp->expert_weights_scale, false);
    get_bool(&r, "expert_weights_norm", &hp->expert_weights_norm);
    int32_t gating = 0;
    get_int(&r, "expert_gating_func", &gating, false);
    get_int(&r, "expert_group_count", &hp->n_group, false);
    get_int(&r, "expert_group_used_count", &hp->n_group_used, false);
    if (r.failed) return -1;
    if (gating < 0 || gating > 2) /* 0 = not set (the architecture's own), 1, 2 */
        return mt_error_set(err,
                            "%s: key '%s.expert_gating_func' is %d, a gating function the engine"
                            " does not know (1 softmax, 2 sigmoid); the file is damaged or newer"
                            " than this moontail",
                            f->path, hp->arch_name, gating);

    switch (hp->arch) {
    case MT_ARCH_LLAMA:
        hp->rope_neox = false;
        hp->gating = MT_GATING_SOFTMAX;
        hp->expert_weights_norm = true;
        hp->expert_weights_scale = 0.0f;
        break;
    case MT_ARCH_QWEN2MOE:
        hp->rope_neox = true;
        hp->gating = MT_GATING_SOFTMAX;
        hp->expert_weights_norm = false;
        hp->expert_weights_scale = 0.0f;
        if (hp->n_ff_shexp == 0) hp->n_ff_shexp = hp->n_ff;
        break;
    case MT_ARCH_QWEN3MOE:
        hp->rope_neox = true;
        hp->gating = MT_GATING_SOFTMAX;
        hp->expert_weights_norm = true;
        hp->expert_weights_scale = 0.0f; /* llama.cpp's qwen3moe does not read the key */
        break;
    case MT_ARCH_DEEPSEEK2: {
        hp->rope_neox = false;
        hp->gating = gating == 2 ? MT_GATING_SIGMOID : MT_GATING_SOFTMAX;
        if (gating != 0 && gating != 1 && gating != 2)
            return mt_error_set(err,
                                "%s: expert_gating_func %d is not supported (1 softmax, 2 sigmoid)",
                                f->path, gating);
        get_int(&r, "attention.q_lora_rank", &hp->q_lora_rank, false);
        get_int(&r, "attention.kv_lora_rank", &hp->kv_lora_rank, true);
        int32_t k_mla = 0, v_mla = 0;
        bool has_k = get_int(&r, "attention.key_length_mla", &k_mla, false);
        bool has_v = get_int(&r, "attention.value_length_mla", &v_mla, false);
        if (r.failed) return -1;
        if (!has_k) k_mla = hp->head_dim_k; /* legacy files store the true sizes */
        if (!has_v) v_mla = hp->head_dim_v;
        hp->qk_rope = hp->n_rot;
        hp->qk_nope = k_mla - hp->n_rot;
        hp->v_head_dim = v_mla;
        hp->head_dim_k = k_mla;
        hp->head_dim_v = v_mla;
        hp->n_ff_shexp = hp->n_ff_exp * hp->n_expert_shared;
        if (hp->qk_nope < 1 || hp->v_head_dim < 1 || hp->kv_lora_rank < 1)
            return mt_error_set(err, "%s: bad MLA sizes: nope %d, rope %d, v %d, kv_lora %d",
                                f->path, hp->qk_nope, hp->qk_rope, hp->v_head_dim,
                                hp->kv_lora_rank);
        break;
    }
    case MT_ARCH_KIMI_LINEAR:
    case MT_ARCH_KIMI_K3:
        if (kimi_hparams(&r, hp, gating)) return -1;
        break;
    }
    if (hp->expert_weights_scale == 1.0f) hp->expert_weights_scale = 0.0f;
    if ((hp->arch == MT_ARCH_QWEN2MOE || hp->arch == MT_ARCH_QWEN3MOE) && hp->n_ff_exp == 0 &&
        hp->n_expert_used > 0)
        hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    if (hp->n_expert < 0 || hp->n_expert_used > hp->n_expert || hp->n_expert > 4096 ||
        (hp->n_expert > 0 && hp->n_expert_used < 1))
        return mt_error_set(err, "%s: bad expert counts: %d used of %d", f->path, hp->n_expert_used,
                            hp->n_expert);
    if (hp->n_group > 1) {
        if (hp->n_expert % hp->n_group != 0 || hp->n_group_used < 1 ||
            hp->n_group_used > hp->n_group ||
            hp->n_group_used * (hp->n_expert / hp->n_group) < hp->n_expert_used)
            return mt_error_set(
                err, "%s: bad expert groups: %d groups, %d used, %d experts, %d per token", f->path,
                hp->n_group, hp->n_group_used, hp->n_expert, hp->n_expert_used);
    }
    if ((hp->n_rot <= 0 && !(hp->mla_nope && hp->n_rot == 0)) || hp->n_rot % 2 ||
        hp->n_rot > hp->head_dim_k)
        return mt_error_set(err, "%s: rope dimension %d must be even and at most the head size %d",
                            f->path, hp->n_rot, hp->head_dim_k);
    if (hp->n_rot > 1024)
        return mt_error_set(err, "%s: rope dimension %d is larger than 1024", f->path, hp->n_rot);
    if (hp->head_dim_k <= 0 || hp->head_dim_v <= 0)
        return mt_error_set(err, "%s: bad head sizes k %d v %d", f->path, hp->head_dim_k,
                            hp->head_dim_v);

    hp->n_embd_exp = hp->n_expert_latent > 0 ? hp->n_expert_latent : hp->n_embd;
    hp->n_hidden = hp->n_embd * (1 + hp->n_res_bank);

    /* softmax scale */
    if (kimi) {
        hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim_k);
    } else if (hp->arch == MT_ARCH_DEEPSEEK2) {
        float attn_factor_org = attn_factor * (1.0f + 0.1f * mt_math_logf(s));
        float mscale = attn_factor_org * (1.0f + 0.1f * log_mul * mt_math_logf(s));
        hp->attn_scale = mscale * mscale / sqrtf((float)hp->head_dim_k);
    } else {
        hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim_k);
    }
    if (check_floats(f, hp, factor, rope_attn_factor, log_mul, err)) return -1;
    if (mt_arch_has_mla(hp->arch)) hp->mla_expanded = mla_file_is_expanded(f);
    return 0;
}

/* kv_cache.c - per-sequence attention cache for a range of layers.
 *
 * GQA layers store each position's K and V rows; MLA layers store the
 * compressed latent [c_kv ; k_pe] only (kv_lora + rope floats), which is
 * what makes DeepSeek-V3 contexts cheap. Values are f32 so that a cache
 * built anywhere gives the same numbers. */
#include "model_internal.h"

#include <string.h>

mt_kv_cache *mt_kv_cache_new(const mt_model *m, int32_t layer_begin, int32_t layer_end,
                             int32_t n_ctx, mt_error *err) {
    const mt_hparams *hp = &m->hp;
    if (layer_begin < 0 || layer_end > hp->n_layer || layer_begin >= layer_end) {
        mt_error_set(err, "KV cache: layer range [%d, %d) is not inside [0, %d)", layer_begin,
                     layer_end, hp->n_layer);
        return NULL;
    }
    if (n_ctx <= 0 || n_ctx > (1 << 24)) {
        mt_error_set(err, "KV cache: context size %d must be in [1, 16M]", n_ctx);
        return NULL;
    }
    mt_kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) goto oom;
    kv->layer_begin = layer_begin;
    kv->layer_end = layer_end;
    kv->n_ctx = n_ctx;
    if (hp->arch == MT_ARCH_DEEPSEEK2) {
        kv->k_width = hp->kv_lora_rank + hp->qk_rope;
        kv->v_width = 0;
    } else {
        kv->k_width = hp->n_head_kv * hp->head_dim_k;
        kv->v_width = hp->n_head_kv * hp->head_dim_v;
    }
    size_t rows = (size_t)(layer_end - layer_begin) * (size_t)n_ctx;
    kv->k = calloc(rows * (size_t)kv->k_width, sizeof(float));
    if (!kv->k) goto oom;
    if (kv->v_width) {
        kv->v = calloc(rows * (size_t)kv->v_width, sizeof(float));
        if (!kv->v) goto oom;
    }
    return kv;
oom:
    mt_kv_cache_free(kv);
    mt_error_set(err, "KV cache: out of memory for %d positions x %d layers", n_ctx,
                 layer_end - layer_begin);
    return NULL;
}

void mt_kv_cache_free(mt_kv_cache *kv) {
    if (!kv) return;
    free(kv->k);
    free(kv->v);
    free(kv);
}

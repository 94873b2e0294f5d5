/* kv_cache.c - per-sequence attention cache for a range of layers.
 *
 * GQA layers store each position's K and V rows; MLA layers store the
 * compressed latent [c_kv ; k_pe] only (kv_lora + rope floats), which is
 * what makes DeepSeek-V3 contexts cheap. Values are f32 so that a cache
 * built anywhere gives the same numbers.
 *
 * The arrays are anonymous memory maps, not calloc: a cache is sized for
 * the whole context but a session usually fills a fraction of it, and the
 * kernel only backs the pages that are written. calloc from glibc's heap
 * clears (touches) the whole block whenever it reuses freed memory, and
 * keeps freed blocks of a few MB in the worker's arena: a node that served
 * 16 sessions at once held all 16 full-context caches as resident memory
 * after every session had ended (measured by tests/test_soak.sh). munmap
 * gives a cache's memory back the moment its session ends. Sanitizer
 * builds keep calloc, so that AddressSanitizer still checks every access. */
#include "model_internal.h"

#include <string.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#define KV_USE_MMAP 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KV_USE_MMAP 0
#endif
#endif
#ifndef KV_USE_MMAP
#define KV_USE_MMAP 1
#endif

/* n floats, zeroed; NULL when out of memory. */
static float *kv_array_new(size_t n) {
#if KV_USE_MMAP
    void *p =
        mmap(NULL, n * sizeof(float), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
#else
    return calloc(n, sizeof(float));
#endif
}

static void kv_array_free(float *a, size_t n) {
    if (!a) return;
#if KV_USE_MMAP
    munmap(a, n * sizeof(float));
#else
    (void)n;
    free(a);
#endif
}

/* Floats in each of the cache's arrays. */
static size_t kv_k_floats(const mt_kv_cache *kv) {
    return (size_t)(kv->layer_end - kv->layer_begin) * (size_t)kv->n_ctx * (size_t)kv->k_width;
}
static size_t kv_v_floats(const mt_kv_cache *kv) {
    return (size_t)(kv->layer_end - kv->layer_begin) * (size_t)kv->n_ctx * (size_t)kv->v_width;
}

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
    if (!(kv->k = kv_array_new(kv_k_floats(kv)))) goto oom;
    if (kv->v_width && !(kv->v = kv_array_new(kv_v_floats(kv)))) goto oom;
    return kv;
oom:
    mt_kv_cache_free(kv);
    mt_error_set(err, "KV cache: out of memory for %d positions x %d layers", n_ctx,
                 layer_end - layer_begin);
    return NULL;
}

void mt_kv_cache_free(mt_kv_cache *kv) {
    if (!kv) return;
    kv_array_free(kv->k, kv_k_floats(kv));
    kv_array_free(kv->v, kv_v_floats(kv));
    free(kv);
}

size_t mt_kv_cache_bytes(const mt_kv_cache *kv) {
    return kv ? (kv_k_floats(kv) + (kv->v ? kv_v_floats(kv) : 0)) * sizeof(float) : 0;
}

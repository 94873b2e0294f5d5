/* kv_cache.c - per-sequence attention cache for a range of layers.
 *
 * GQA layers store each position's K and V rows; MLA layers store the
 * compressed latent [c_kv ; k_pe] only (kv_lora + rope floats), which is
 * what makes DeepSeek-V3 contexts cheap (files in the older layout keep
 * every head's K and V, as llama.cpp does). Rows are stored as the cache's
 * type (mt_kv_type: f32, f16, bf16 or q8_0). KDA layers (kimi) keep a
 * recurrent state of fixed size per session instead, in f32: the
 * convolutions' last K-1 inputs and one delta-rule matrix per head.
 *
 * The arrays are anonymous memory maps, not calloc: a cache is sized for
 * the whole context but a session usually fills a fraction of it, and the
 * kernel only backs the pages that are written. calloc from glibc's heap
 * clears (touches) the whole block whenever it reuses freed memory, and
 * keeps freed blocks of a few MB in the worker's arena: a node that served
 * 16 sessions at once held all 16 full-context caches as resident memory
 * after every session had ended (measured by tests/test_soak.sh). munmap
 * gives a cache's memory back the moment its session ends. MAP_NORESERVE
 * lets a node offer a 128k context to many sessions without the kernel
 * counting all of it as committed up front. Sanitizer builds keep calloc,
 * so that AddressSanitizer still checks every access. */
#include "model_internal.h"
#include "moontail/file.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

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

/* n bytes, zeroed; NULL when out of memory. */
static void *kv_array_new(size_t n) {
#if KV_USE_MMAP
    return mt_mem_zeroed(n);
#else
    return calloc(n, 1);
#endif
}

static void kv_array_free(void *a, size_t n) {
    if (!a) return;
#if KV_USE_MMAP
    mt_mem_release(a, n);
#else
    (void)n;
    free(a);
#endif
}

/* ------------------------------------------------------------ types */

static const char *const kv_type_names[MT_KV_TYPE_COUNT] = {
    [MT_KV_F32] = "f32", [MT_KV_F16] = "f16", [MT_KV_BF16] = "bf16", [MT_KV_Q8_0] = "q8_0"};

const char *mt_kv_type_name(mt_kv_type t) {
    return (unsigned)t < MT_KV_TYPE_COUNT ? kv_type_names[t] : "?";
}

int mt_kv_type_parse(const char *s, mt_kv_type *t, mt_error *err) {
    for (int i = 0; s && i < MT_KV_TYPE_COUNT; i++)
        if (strcasecmp(s, kv_type_names[i]) == 0) {
            *t = (mt_kv_type)i;
            return 0;
        }
    return mt_error_set(err, "KV cache type '%s' is not one of f32, f16, bf16, q8_0",
                        s ? s : "(none)");
}

mt_type mt_kv_row_type(mt_kv_type t) {
    switch (t) {
    case MT_KV_F16:
        return MT_TYPE_F16;
    case MT_KV_BF16:
        return MT_TYPE_BF16;
    case MT_KV_Q8_0:
        return MT_TYPE_Q8_0;
    default:
        return MT_TYPE_F32;
    }
}

/* Layers of the cache's range that keep a per-position cache (KDA layers
 * keep a fixed recurrent state instead). */
static int32_t kv_n_rec(const mt_kv_cache *kv) {
    return kv->n_rec;
}
static int32_t kv_n_attn(const mt_kv_cache *kv) {
    return kv->layer_end - kv->layer_begin - kv_n_rec(kv);
}

/* Bytes of each of the cache's arrays. */
static size_t kv_k_bytes(const mt_kv_cache *kv) {
    return (size_t)kv_n_attn(kv) * (size_t)kv->n_ctx * kv->k_row;
}
static size_t kv_v_bytes(const mt_kv_cache *kv) {
    return (size_t)kv_n_attn(kv) * (size_t)kv->n_ctx * kv->v_row;
}
static size_t kv_rec_bytes(const mt_kv_cache *kv) {
    return (size_t)kv_n_rec(kv) * kv->rec_floats * sizeof(float);
}

/* ------------------------------------------------------------ sizes */

/* Recurrent state of one KDA layer: the last K-1 inputs of the q, k and v
 * convolutions (3 x D x (K-1)) and the delta-rule matrices (H x hd x hd). */
static size_t kda_state_floats(const mt_hparams *hp) {
    const size_t D = (size_t)hp->n_head * (size_t)hp->kda_head_dim;
    return 3 * D * (size_t)(hp->ssm_conv - 1) +
           (size_t)hp->n_head * (size_t)hp->kda_head_dim * (size_t)hp->kda_head_dim;
}

/* Elements one attention layer keeps per position: a K row and a V row
 * (GQA, and MLA files in the older layout: every head's expanded K and V),
 * or the latent [c_kv ; k_pe] as K and no V (MLA). */
static void kv_widths(const mt_hparams *hp, int32_t *k_width, int32_t *v_width) {
    if (mt_arch_has_mla(hp->arch) && hp->mla_expanded) {
        *k_width = hp->n_head * (hp->qk_nope + hp->qk_rope);
        *v_width = hp->n_head * hp->v_head_dim;
    } else if (mt_arch_has_mla(hp->arch)) {
        *k_width = hp->kv_lora_rank + hp->qk_rope;
        *v_width = 0;
    } else {
        *k_width = hp->n_head_kv * hp->head_dim_k;
        *v_width = hp->n_head_kv * hp->head_dim_v;
    }
}

/* Bytes of a row of n elements of type t (n a multiple of t's block). */
static size_t kv_row_bytes(mt_kv_type t, int32_t n) {
    return n ? mt_type_row_size(mt_kv_row_type(t), n) : 0;
}

int mt_kv_type_check(const mt_hparams *hp, mt_kv_type t, mt_error *err) {
    if ((unsigned)t >= MT_KV_TYPE_COUNT) return mt_error_set(err, "KV cache type %d is unknown", t);
    const int64_t blk = mt_type_traits_get(mt_kv_row_type(t))->blck;
    /* every slice the attention reads must start on a block: a head's K and
     * V (GQA), the latent and the latent's c_kv part (MLA) */
    int32_t k_width, v_width, k_unit, v_unit;
    kv_widths(hp, &k_width, &v_width);
    if (mt_arch_has_mla(hp->arch) && !hp->mla_expanded) {
        k_unit = k_width;
        v_unit = hp->kv_lora_rank;
    } else if (mt_arch_has_mla(hp->arch)) {
        k_unit = hp->qk_nope + hp->qk_rope;
        v_unit = hp->v_head_dim;
    } else {
        k_unit = hp->head_dim_k;
        v_unit = hp->head_dim_v;
    }
    if (k_unit % blk || v_unit % blk)
        return mt_error_set(err,
                            "a %s KV cache stores blocks of %lld values, but this model's"
                            " attention rows are cut in pieces of %d (K) and %d (V) values;"
                            " use --kv-type f16 (or f32, bf16)",
                            mt_kv_type_name(t), (long long)blk, k_unit, v_unit);
    return 0;
}

void mt_kv_layer_bytes(const mt_hparams *hp, bool is_kda, mt_kv_type t, uint64_t *fixed,
                       uint64_t *per_position) {
    *fixed = *per_position = 0;
    if (is_kda) {
        *fixed = (uint64_t)kda_state_floats(hp) * sizeof(float);
    } else {
        int32_t k_width, v_width;
        kv_widths(hp, &k_width, &v_width);
        *per_position = kv_row_bytes(t, k_width) + kv_row_bytes(t, v_width);
    }
}

int mt_kv_session_bytes(const gguf_file *f, int32_t n_layer, mt_kv_type t, uint64_t *fixed,
                        uint64_t *per_position, int32_t *n_ctx_train, mt_error *err) {
    mt_hparams hp;
    if (mt_hparams_read(f, 0, &hp, err)) return -1;
    if (hp.n_layer != n_layer)
        return mt_error_set(err, "%s: block_count says %d layers, %d were expected", f->path,
                            hp.n_layer, n_layer);
    int32_t *kv = calloc((size_t)n_layer, sizeof *kv);
    if (!kv) return mt_error_set(err, "out of memory for %d layers", n_layer);
    /* kimi: the per-layer head_count_kv marks KDA layers with 0, as the loader
     * reads it (model_load.c); other architectures have no KDA layers */
    int rc = 0;
    if (mt_arch_is_kimi(hp.arch)) {
        char key[128];
        snprintf(key, sizeof key, "%s.attention.head_count_kv", hp.arch_name);
        if (!gguf_find_kv(f, key))
            rc = mt_error_set(err,
                              "%s: required key '%s' is missing; kimi models list it per"
                              " layer (0 marks a KDA layer)",
                              f->path, key);
        else
            rc = mt_hparams_read_per_layer(f, &hp, "attention.head_count_kv", 0, kv, err);
    } else {
        for (int32_t il = 0; il < n_layer; il++) kv[il] = 1;
    }
    bool attention = false;
    for (int32_t il = 0; rc == 0 && il < n_layer; il++) {
        mt_kv_layer_bytes(&hp, kv[il] == 0, t, &fixed[il], &per_position[il]);
        attention |= kv[il] != 0;
    }
    if (rc == 0 && attention && mt_kv_type_check(&hp, t, err)) rc = -1;
    free(kv);
    if (rc == 0 && n_ctx_train) *n_ctx_train = hp.n_ctx_train;
    return rc;
}

/* ------------------------------------------------------------ cache */

mt_kv_cache *mt_kv_cache_new(const mt_model *m, int32_t layer_begin, int32_t layer_end,
                             int32_t n_ctx, mt_kv_type t, mt_error *err) {
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
    if (mt_kv_type_check(hp, t, err)) return NULL;
    mt_kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) goto oom;
    kv->layer_begin = layer_begin;
    kv->layer_end = layer_end;
    kv->n_ctx = n_ctx;
    kv->type = t;
    kv_widths(hp, &kv->k_width, &kv->v_width);
    kv->k_row = kv_row_bytes(t, kv->k_width);
    kv->v_row = kv_row_bytes(t, kv->v_width);
    const int32_t n = layer_end - layer_begin;
    if (!(kv->slot = malloc((size_t)n * sizeof *kv->slot))) goto oom;
    int32_t n_attn = 0, n_rec = 0;
    for (int32_t i = 0; i < n; i++)
        kv->slot[i] = m->layers && m->layers[layer_begin + i].is_kda ? n_rec++ : n_attn++;
    kv->rec_floats = n_rec ? kda_state_floats(hp) : 0;
    kv->n_rec = n_rec;
    if (n_attn && !(kv->k = kv_array_new(kv_k_bytes(kv)))) goto oom;
    if (n_attn && kv->v_width && !(kv->v = kv_array_new(kv_v_bytes(kv)))) goto oom;
    if (n_rec && (!(kv->rec = kv_array_new(kv_rec_bytes(kv))) ||
                  !(kv->rec_next = calloc((size_t)n_rec, sizeof *kv->rec_next))))
        goto oom;
    return kv;
oom:
    mt_kv_cache_free(kv);
    mt_error_set(err, "KV cache: out of memory for %d positions x %d layers", n_ctx,
                 layer_end - layer_begin);
    return NULL;
}

void mt_kv_cache_free(mt_kv_cache *kv) {
    if (!kv) return;
    kv_array_free(kv->k, kv_k_bytes(kv));
    kv_array_free(kv->v, kv_v_bytes(kv));
    kv_array_free(kv->rec, kv_rec_bytes(kv));
    free(kv->rec_next);
    free(kv->snap);
    free(kv->slot);
    free(kv);
}

size_t mt_kv_cache_bytes(const mt_kv_cache *kv) {
    return kv ? kv_k_bytes(kv) + (kv->v ? kv_v_bytes(kv) : 0) + kv_rec_bytes(kv) : 0;
}

void mt_kv_cache_copy(mt_kv_cache *dst, const mt_kv_cache *src) {
    if (dst->layer_begin != src->layer_begin || dst->layer_end != src->layer_end ||
        dst->n_ctx != src->n_ctx || dst->type != src->type || dst->k_width != src->k_width ||
        dst->v_width != src->v_width || dst->rec_floats != src->rec_floats)
        abort(); /* a caller's bug: caches of different models or shapes */
    if (src->k) memcpy(dst->k, src->k, kv_k_bytes(src));
    if (src->v) memcpy(dst->v, src->v, kv_v_bytes(src));
    if (src->rec) {
        memcpy(dst->rec, src->rec, kv_rec_bytes(src));
        memcpy(dst->rec_next, src->rec_next, (size_t)src->n_rec * sizeof *src->rec_next);
    }
}

size_t mt_kv_cache_rec_bytes(const mt_kv_cache *kv) {
    return kv ? kv_rec_bytes(kv) : 0;
}

/* ------------------------------------------------------------ rewind */

size_t mt_kv_cache_snap_bytes(const mt_kv_cache *kv) {
    return kv && kv->snap
               ? (size_t)kv->n_rec * (size_t)kv->snap_alloc * kv->rec_floats * sizeof(float)
               : 0;
}

int mt_kv_snap_begin(mt_kv_cache *kv, int32_t p0, int32_t n, mt_error *err) {
    kv->snap_cap = kv->snap_n = 0;
    kv->snap_p0 = p0;
    if (n <= 0 || kv->n_rec == 0) return 0; /* attention rows need no snapshots */
    if (n > kv->snap_alloc) {
        free(kv->snap);
        kv->snap_alloc = 0;
        kv->snap = malloc((size_t)kv->n_rec * (size_t)n * kv->rec_floats * sizeof(float));
        if (!kv->snap)
            return mt_error_set(err,
                                "KV cache: out of memory for %d snapshots of %d KDA layers'"
                                " state (%zu bytes each)",
                                n, kv->n_rec, kv->rec_floats * sizeof(float));
        kv->snap_alloc = n;
    }
    kv->snap_cap = n;
    return 0;
}

int mt_kv_rewind(mt_kv_cache *kv, int32_t n_past, mt_error *err) {
    const int32_t i = n_past - kv->snap_p0 - 1; /* the snapshot after position n_past - 1 */
    const bool have = kv->snap_cap > 0 && i >= 0 && i < kv->snap_n;
    for (int32_t r = 0; r < kv->n_rec; r++)
        if (kv->rec_next[r] != n_past && n_past != 0 && !have)
            return mt_error_set(err,
                                "KV cache: a KDA state is at position %d and cannot go back to"
                                " %d: snapshots cover positions (%d, %d] only; replay from"
                                " position 0",
                                kv->rec_next[r], n_past, kv->snap_p0,
                                kv->snap_p0 + (kv->snap_cap ? kv->snap_n : 0));
    for (int32_t r = 0; r < kv->n_rec; r++) {
        if (kv->rec_next[r] == n_past) continue;
        if (n_past > 0)
            memcpy(kv->rec + (size_t)r * kv->rec_floats,
                   kv->snap + ((size_t)r * kv->snap_alloc + (size_t)i) * kv->rec_floats,
                   kv->rec_floats * sizeof(float));
        kv->rec_next[r] = n_past; /* at 0 the next token restarts the state */
    }
    if (kv->snap_n > i + 1) kv->snap_n = i + 1 > 0 ? i + 1 : 0;
    return 0;
}

/* quant.c - the public quant_* entry points.
 *
 * Every call goes through one kernel table (quant_kernels.h). The table is
 * built once: the portable reference kernels, then any SIMD kernels this CPU
 * can run laid over them: "avx2" (AVX2, FMA, F16C) and, on top of it,
 * "avx512" (AVX-512 F/BW/VL with VNNI). MT_KERNELS=reference (avx2, avx512)
 * in the environment forces a set; tests switch sets with
 * quant_kernels_select to check that every set gives bit-identical results. */
#include "quant_kernels.h"
#include "vec_kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------ kernel sets */

static quant_kernel_set set_reference;
static quant_kernel_set set_avx2;
static quant_kernel_set set_avx512;
static bool have_avx2, have_avx512;
static _Atomic(const quant_kernel_set *) active;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

void quant_ref_kernels(quant_kernel_set *ks) {
    memset(ks, 0, sizeof *ks);
    ks->name = "reference";
    ks->vec = &vec_ref_kernels;
    for (int t = 0; t < MT_TYPE_COUNT; t++) ks->vec_dot_type[t] = MT_TYPE_COUNT;

#define SET(T, deq, q, conv, vdt, dot)                                                             \
    do {                                                                                           \
        ks->dequantize[T] = deq;                                                                   \
        ks->quantize[T] = q;                                                                       \
        ks->convert[T] = conv;                                                                     \
        ks->vec_dot_type[T] = vdt;                                                                 \
        ks->vec_dot[T] = dot;                                                                      \
    } while (0)
    /* type           dequantize              quantize              convert (activations) */
    SET(MT_TYPE_F32, quant_f32_dequantize, quant_f32_quantize, quant_f32_quantize, MT_TYPE_F32,
        quant_f32_vec_dot);
    SET(MT_TYPE_F16, quant_f16_dequantize, quant_f16_quantize, quant_f16_quantize, MT_TYPE_F16,
        quant_f16_vec_dot);
    SET(MT_TYPE_BF16, quant_bf16_dequantize, quant_bf16_quantize, quant_bf16_quantize, MT_TYPE_BF16,
        quant_bf16_vec_dot);
    SET(MT_TYPE_Q8_0, quant_q8_0_dequantize, quant_q8_0_quantize, quant_q8_0_convert, MT_TYPE_Q8_0,
        quant_q8_0_vec_dot);
    SET(MT_TYPE_Q4_0, quant_q4_0_dequantize, quant_q4_0_quantize, NULL, MT_TYPE_Q8_0,
        quant_q4_0_vec_dot);
    SET(MT_TYPE_MXFP4, quant_mxfp4_dequantize, quant_mxfp4_quantize, NULL, MT_TYPE_Q8_0,
        quant_mxfp4_vec_dot);
    SET(MT_TYPE_Q4_K, quant_q4_k_dequantize, quant_q4_k_quantize, NULL, MT_TYPE_Q8_K,
        quant_q4_k_vec_dot);
    SET(MT_TYPE_Q6_K, quant_q6_k_dequantize, quant_q6_k_quantize, NULL, MT_TYPE_Q8_K,
        quant_q6_k_vec_dot);
    SET(MT_TYPE_Q4_1, quant_q4_1_dequantize, quant_q4_1_quantize, NULL, MT_TYPE_Q8_1,
        quant_q4_1_vec_dot);
    SET(MT_TYPE_Q5_0, quant_q5_0_dequantize, quant_q5_0_quantize, NULL, MT_TYPE_Q8_0,
        quant_q5_0_vec_dot);
    SET(MT_TYPE_Q5_1, quant_q5_1_dequantize, quant_q5_1_quantize, NULL, MT_TYPE_Q8_1,
        quant_q5_1_vec_dot);
    /* Q8_1, like Q8_K, only ever holds activations */
    SET(MT_TYPE_Q8_1, quant_q8_1_dequantize, quant_q8_1_convert, quant_q8_1_convert, MT_TYPE_COUNT,
        NULL);
    SET(MT_TYPE_Q2_K, quant_q2_k_dequantize, quant_q2_k_quantize, NULL, MT_TYPE_Q8_K,
        quant_q2_k_vec_dot);
    SET(MT_TYPE_Q3_K, quant_q3_k_dequantize, quant_q3_k_quantize, NULL, MT_TYPE_Q8_K,
        quant_q3_k_vec_dot);
    SET(MT_TYPE_Q5_K, quant_q5_k_dequantize, quant_q5_k_quantize, NULL, MT_TYPE_Q8_K,
        quant_q5_k_vec_dot);
    SET(MT_TYPE_IQ4_NL, quant_iq4_nl_dequantize, quant_iq4_nl_quantize, NULL, MT_TYPE_Q8_0,
        quant_iq4_nl_vec_dot);
    SET(MT_TYPE_IQ4_XS, quant_iq4_xs_dequantize, quant_iq4_xs_quantize, NULL, MT_TYPE_Q8_K,
        quant_iq4_xs_vec_dot);
    SET(MT_TYPE_TQ1_0, quant_tq1_0_dequantize, quant_tq1_0_quantize, NULL, MT_TYPE_Q8_K,
        quant_tq1_0_vec_dot);
    SET(MT_TYPE_TQ2_0, quant_tq2_0_dequantize, quant_tq2_0_quantize, NULL, MT_TYPE_Q8_K,
        quant_tq2_0_vec_dot);
    SET(MT_TYPE_IQ3_XXS, quant_iq3_xxs_dequantize, quant_iq3_xxs_quantize, NULL, MT_TYPE_Q8_K,
        quant_iq3_xxs_vec_dot);
    SET(MT_TYPE_IQ3_S, quant_iq3_s_dequantize, quant_iq3_s_quantize, NULL, MT_TYPE_Q8_K,
        quant_iq3_s_vec_dot);
    SET(MT_TYPE_IQ1_S, quant_iq1_s_dequantize, quant_iq1_s_quantize, NULL, MT_TYPE_Q8_K,
        quant_iq1_s_vec_dot);
    SET(MT_TYPE_IQ1_M, quant_iq1_m_dequantize, quant_iq1_m_quantize, NULL, MT_TYPE_Q8_K,
        quant_iq1_m_vec_dot);
    quant_iq2_tables_init();
    SET(MT_TYPE_IQ2_XXS, quant_iq2_xxs_dequantize, quant_iq2_xxs_quantize, NULL, MT_TYPE_Q8_K,
        quant_iq2_xxs_vec_dot);
    SET(MT_TYPE_IQ2_XS, quant_iq2_xs_dequantize, quant_iq2_xs_quantize, NULL, MT_TYPE_Q8_K,
        quant_iq2_xs_vec_dot);
    SET(MT_TYPE_IQ2_S, quant_iq2_s_dequantize, quant_iq2_s_quantize, NULL, MT_TYPE_Q8_K,
        quant_iq2_s_vec_dot);
    /* Q8_K only ever holds activations: "quantizing" to it is the conversion. */
    SET(MT_TYPE_Q8_K, quant_q8_k_dequantize, quant_q8_k_convert, quant_q8_k_convert, MT_TYPE_COUNT,
        NULL);
#undef SET
}

static bool select_by_name(const char *name) {
    if (strcmp(name, "reference") == 0) {
        atomic_store(&active, &set_reference);
        return true;
    }
    if (strcmp(name, "avx2") == 0 && have_avx2) {
        atomic_store(&active, &set_avx2);
        return true;
    }
    if (strcmp(name, "avx512") == 0 && have_avx512) {
        atomic_store(&active, &set_avx512);
        return true;
    }
    return false;
}

static void init_sets(void) {
    quant_ref_kernels(&set_reference);
    quant_ref_kernels(&set_avx2);
    have_avx2 = quant_avx2_install(&set_avx2);
    if (have_avx2) {
        set_avx512 = set_avx2;
        have_avx512 = quant_avx512_install(&set_avx512);
    }
    atomic_store(&active, have_avx512 ? &set_avx512 : have_avx2 ? &set_avx2 : &set_reference);
    const char *env = getenv("MT_KERNELS");
    if (env && *env && !select_by_name(env))
        fprintf(stderr, "moontail: MT_KERNELS=%s is not available here; using %s kernels\n", env,
                atomic_load(&active)->name);
}

static inline const quant_kernel_set *kernels(void) {
    pthread_once(&init_once, init_sets);
    return atomic_load_explicit(&active, memory_order_acquire);
}

const vec_kernel_set *vec_kernels_active(void) {
    return kernels()->vec;
}

const char *quant_kernel_name(void) {
    return kernels()->name;
}

int quant_kernels_select(const char *name) {
    kernels();
    return select_by_name(name) ? 0 : -1;
}

/* ------------------------------------------------------- entry points */

/* Misuse (an unsupported type, a partial block) is a bug in the caller, which
 * must validate types and shapes when it loads a model. */
static _Noreturn void misuse(const char *fn, mt_type t, int64_t n) {
    const mt_type_traits *tr = mt_type_traits_get((uint32_t)t);
    fprintf(stderr, "moontail: %s: type %d (%s) with n=%lld is not supported\n", fn, (int)t,
            tr ? tr->name : "unknown", (long long)n);
    abort();
}

static inline void check_n(const char *fn, mt_type t, int64_t n) {
    const mt_type_traits *tr = mt_type_traits_get((uint32_t)t);
    if (!tr || n < 0 || n % tr->blck != 0) misuse(fn, t, n);
}

void quant_dequantize_row(mt_type t, const void *src, float *dst, int64_t n) {
    const quant_kernel_set *ks = kernels();
    if ((unsigned)t >= MT_TYPE_COUNT || !ks->dequantize[t]) misuse(__func__, t, n);
    check_n(__func__, t, n);
    ks->dequantize[t](src, dst, n);
}

size_t quant_quantize_row(mt_type t, const float *src, void *dst, int64_t n) {
    const quant_kernel_set *ks = kernels();
    if ((unsigned)t >= MT_TYPE_COUNT || !ks->quantize[t]) misuse(__func__, t, n);
    check_n(__func__, t, n);
    return ks->quantize[t](src, dst, n);
}

mt_type quant_vec_dot_type(mt_type t) {
    if ((unsigned)t >= MT_TYPE_COUNT) return MT_TYPE_COUNT;
    return kernels()->vec_dot_type[t];
}

size_t quant_convert_activations(mt_type vt, const float *x, void *dst, int64_t n) {
    const quant_kernel_set *ks = kernels();
    if ((unsigned)vt >= MT_TYPE_COUNT || !ks->convert[vt]) misuse(__func__, vt, n);
    check_n(__func__, vt, n);
    return ks->convert[vt](x, dst, n);
}

quant_vec_dot_fn quant_vec_dot_get(mt_type t) {
    const quant_kernel_set *ks = kernels();
    if ((unsigned)t >= MT_TYPE_COUNT || !ks->vec_dot[t]) misuse(__func__, t, 0);
    return ks->vec_dot[t];
}

void quant_tile(mt_type t, int64_t n, const uint8_t *w, size_t w_stride, int64_t nr,
                const uint8_t *x, size_t x_stride, int64_t nt, float *y, size_t y_stride) {
    const quant_kernel_set *ks = kernels();
    if ((unsigned)t >= MT_TYPE_COUNT || !ks->vec_dot[t]) misuse(__func__, t, n);
    check_n(__func__, t, n);
    if (ks->tile[t]) {
        ks->tile[t](n, w, w_stride, nr, x, x_stride, nt, y, y_stride);
        return;
    }
    const quant_vec_dot_fn dot = ks->vec_dot[t];
    for (int64_t r = 0; r < nr; r++)
        for (int64_t k = 0; k < nt; k++)
            y[(size_t)k * y_stride + (size_t)r] =
                dot(n, w + (size_t)r * w_stride, x + (size_t)k * x_stride);
}

float quant_vec_dot(mt_type t, int64_t n, const void *w_row, const void *x_conv) {
    const quant_kernel_set *ks = kernels();
    if ((unsigned)t >= MT_TYPE_COUNT || !ks->vec_dot[t]) misuse(__func__, t, n);
    check_n(__func__, t, n);
    return ks->vec_dot[t](n, w_row, x_conv);
}

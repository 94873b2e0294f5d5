/* quant_avx2.c - AVX2 vec_dot kernels for Q8_0, Q4_0, MXFP4, Q4_K, Q6_K, BF16
 * and (with F16C) F16, laid over the reference set when the CPU has AVX2.
 *
 * They must return bit-identical results to the reference kernels, so they
 * only speed up the parts where order cannot matter: the integer sums. Every
 * float operation (the per-block scale products and the running sums) is the
 * same operation, on the same values, in the same order as in the reference
 * kernel: a vector lane does exactly what one scalar iteration does, and
 * running sums stay scalar and sequential. No FMA is enabled (only "avx2"),
 * so the compiler cannot fuse a multiply into an add.
 *
 * Integer tricks used (all exact):
 *  - 8-bit products are widened to 16 bits and paired with madd_epi16
 *    (never maddubs with sign tricks, which break on -128);
 *  - the K-quants need ggml's 8 lanes (element index mod 8): bytes are
 *    shuffled so that maddubs pairs element e with e + 8 (the same lane),
 *    and two sub-blocks are interleaved so that madd_epi16 pairs each lane's
 *    sums with their own sub-block scales. */
#include "quant_kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <cpuid.h>
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

/* ------------------------------------------------------------ helpers */

AVX2 static inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* Exact sum over 32 elements of w[j] * x[j], w and x int8 (16 bytes each
 * half as given), as 8 int32 partial sums. */
AVX2 static inline __m256i dot32_i8(__m128i w_lo, __m128i w_hi, const int8_t *x) {
    const __m256i x_lo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x));
    const __m256i x_hi = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(x + 16)));
    return _mm256_add_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(w_lo), x_lo),
                            _mm256_madd_epi16(_mm256_cvtepi8_epi16(w_hi), x_hi));
}

/* ------------------------------------------------------------ Q8_0, Q4_0, MXFP4 */

AVX2 static float q8_0_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_32; i++, wb += Q8_0_BYTES, xb += Q8_0_BYTES) {
        const __m128i w_lo = _mm_loadu_si128((const __m128i *)(wb + Q8_0_QS));
        const __m128i w_hi = _mm_loadu_si128((const __m128i *)(wb + Q8_0_QS + 16));
        const int sumi = hsum_i32(dot32_i8(w_lo, w_hi, (const int8_t *)(xb + Q8_0_QS)));
        sum += (float)sumi * (quant_load_f16(wb) * quant_load_f16(xb));
    }
    return sum;
}

AVX2 static float q4_0_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    const __m128i low4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_32; i++, wb += Q4_0_BYTES, xb += Q8_0_BYTES) {
        const __m128i q = _mm_loadu_si128((const __m128i *)(wb + Q4_0_QS));
        const __m128i w_lo = _mm_sub_epi8(_mm_and_si128(q, low4), eight);
        const __m128i w_hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low4), eight);
        const int sumi = hsum_i32(dot32_i8(w_lo, w_hi, (const int8_t *)(xb + Q8_0_QS)));
        sum += (float)sumi * quant_load_f16(wb) * quant_load_f16(xb);
    }
    return sum;
}

AVX2 static float mxfp4_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m128i table = _mm_loadu_si128((const __m128i *)quant_mxfp4_values);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_32; i++, wb += MXFP4_BYTES, xb += Q8_0_BYTES) {
        const __m128i q = _mm_loadu_si128((const __m128i *)(wb + MXFP4_QS));
        const __m128i w_lo = _mm_shuffle_epi8(table, _mm_and_si128(q, low4));
        const __m128i w_hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), low4));
        const float d = quant_load_f16(xb) * quant_e8m0_half(wb[0]);
        const int sumi = hsum_i32(dot32_i8(w_lo, w_hi, (const int8_t *)(xb + Q8_0_QS)));
        sum += d * (float)sumi;
    }
    return sum;
}

/* ------------------------------------------------------------ K-quants */

/* Per 128-bit half: bytes 0..15 reordered as 0,8,1,9,...,7,15, so that
 * maddubs adds the products of elements e and e + 8 (lane e mod 8). */
AVX2 static inline __m256i lane_pairs(__m256i v) {
    const __m256i mask = _mm256_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15, 0,
                                          8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    return _mm256_shuffle_epi8(v, mask);
}

/* Lane sums of two 16-element groups A (in p) and B (in q), each register
 * holding int16 lane sums 0..7 per 128-bit half, times the scales of their
 * group: half h of p is scaled by sp[h], half h of q by sq[h]. Adds
 * lanes 0..3 (of both halves) to *lo and lanes 4..7 to *hi as int32. */
AVX2 static inline void scale_pairs(__m256i p, __m256i q, int sp0, int sq0, int sp1, int sq1,
                                    __m256i *lo, __m256i *hi) {
    const __m256i sc = _mm256_set_m128i(
        _mm_set1_epi32((int)((uint32_t)(uint16_t)sp1 | (uint32_t)(uint16_t)sq1 << 16)),
        _mm_set1_epi32((int)((uint32_t)(uint16_t)sp0 | (uint32_t)(uint16_t)sq0 << 16)));
    *lo = _mm256_add_epi32(*lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(p, q), sc));
    *hi = _mm256_add_epi32(*hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(p, q), sc));
}

/* Lanes 0..7 as int32 from the two accumulators of scale_pairs. */
AVX2 static inline __m256i lanes_of(__m256i lo, __m256i hi) {
    const __m128i l = _mm_add_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
    const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
    return _mm256_set_m128i(h, l);
}

AVX2 static float q4_k_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 lanes = _mm256_setzero_ps();
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, wb += Q4_K_BYTES, xb += Q8_K_BYTES) {
        int sc[8], m[8];
        int32_t summ = quant_q4_k_scales_and_min_sum(wb, xb, sc, m);
        __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) { /* sub-blocks 2c (low nibbles) and 2c+1 (high) */
            const __m256i q = _mm256_loadu_si256((const __m256i *)(wb + Q4_K_QS + 32 * c));
            const __m256i a0 = lane_pairs(_mm256_and_si256(q, low4));
            const __m256i a1 = lane_pairs(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
            const __m256i x0 =
                lane_pairs(_mm256_loadu_si256((const __m256i *)(xb + Q8_K_QS + 64 * c)));
            const __m256i x1 =
                lane_pairs(_mm256_loadu_si256((const __m256i *)(xb + Q8_K_QS + 64 * c + 32)));
            /* (0..15) * 128 * 2 fits int16: maddubs is exact here */
            const __m256i p0 = _mm256_maddubs_epi16(a0, x0), p1 = _mm256_maddubs_epi16(a1, x1);
            scale_pairs(p0, p1, sc[2 * c], sc[2 * c + 1], sc[2 * c], sc[2 * c + 1], &lo, &hi);
        }
        const float dx = quant_load_f32(xb);
        const float d = quant_load_f16(wb) * dx;
        lanes = _mm256_add_ps(
            lanes, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes_of(lo, hi))));
        const float dmin = quant_load_f16(wb + Q4_K_DMIN) * dx;
        sum -= dmin * (float)summ;
    }
    float l8[8];
    _mm256_storeu_ps(l8, lanes);
    for (int l = 0; l < 8; l++) sum += l8[l];
    return sum;
}

AVX2 static float q6_k_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    const __m256i low4 = _mm256_set1_epi8(0x0F), m03 = _mm256_set1_epi8(0x03);
    const __m256i m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    __m256 lanes = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++, wb += Q6_K_BYTES, xb += Q8_K_BYTES) {
        const int8_t *sc = (const int8_t *)(wb + Q6_K_SCALES);
        __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) { /* elements 128h .. 128h+127 */
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(wb + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(wb + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(wb + Q6_K_QH + 32 * h));
            __m256i q[4]; /* raw 6-bit quants (0..63) of elements 128h + 32k + l */
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4),
                                   _mm256_slli_epi16(_mm256_and_si256(qh, m03), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4),
                                   _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                                   _mm256_and_si256(qh, m30));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
            __m256i p[4]; /* int16 lane sums of (q - 32) * x, per 16-element group */
            for (int k = 0; k < 4; k++) {
                const __m256i xv = lane_pairs(
                    _mm256_loadu_si256((const __m256i *)(xb + Q8_K_QS + 128 * h + 32 * k)));
                /* q * x - 32 * x, pairwise: |.| <= 2*63*128 and 2*32*128, exact */
                p[k] = _mm256_sub_epi16(_mm256_maddubs_epi16(lane_pairs(q[k]), xv),
                                        _mm256_maddubs_epi16(k32, xv));
            }
            /* register k holds groups 8h+2k (low half) and 8h+2k+1 (high half) */
            const int g = 8 * h;
            scale_pairs(p[0], p[1], sc[g + 0], sc[g + 2], sc[g + 1], sc[g + 3], &lo, &hi);
            scale_pairs(p[2], p[3], sc[g + 4], sc[g + 6], sc[g + 5], sc[g + 7], &lo, &hi);
        }
        const float d = quant_load_f16(wb + Q6_K_D) * quant_load_f32(xb);
        lanes = _mm256_add_ps(
            lanes, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes_of(lo, hi))));
    }
    float l8[8];
    _mm256_storeu_ps(l8, lanes);
    float sum = 0.0f;
    for (int l = 0; l < 8; l++) sum += l8[l];
    return sum;
}

/* ------------------------------------------------------------ F16, BF16 */

/* The reference sums products in double, one element after the other; that
 * chain stays scalar. Only the conversions and the f32 products (the same
 * IEEE multiply per element) are done 8 at a time. */
AVX2 static inline double add_in_order(double sum, __m256 p) {
    float p8[8];
    _mm256_storeu_ps(p8, p);
    for (int j = 0; j < 8; j++) sum += (double)p8[j];
    return sum;
}

__attribute__((target("avx2,f16c"))) static float f16_vec_dot(int64_t n, const void *w,
                                                              const void *x) {
    const uint8_t *wb = w, *xb = x;
    double sum = 0.0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 wv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wb + 2 * i)));
        const __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(xb + 2 * i)));
        sum = add_in_order(sum, _mm256_mul_ps(wv, xv));
    }
    for (; i < n; i++) sum += (double)(quant_load_f16(wb + 2 * i) * quant_load_f16(xb + 2 * i));
    return (float)sum;
}

AVX2 static inline __m256 load_bf16x8(const uint8_t *p) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

AVX2 static float bf16_vec_dot(int64_t n, const void *w, const void *x) {
    const uint8_t *wb = w, *xb = x;
    double sum = 0.0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        sum = add_in_order(sum, _mm256_mul_ps(load_bf16x8(wb + 2 * i), load_bf16x8(xb + 2 * i)));
    for (; i < n; i++) {
        uint16_t a, b;
        memcpy(&a, wb + 2 * i, 2);
        memcpy(&b, xb + 2 * i, 2);
        sum += (double)(mt_bf16_to_f32(a) * mt_bf16_to_f32(b));
    }
    return (float)sum;
}

/* ------------------------------------------------------------ install */

bool quant_avx2_install(quant_kernel_set *ks) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2")) return false;
    ks->name = "avx2";
    ks->vec_dot[MT_TYPE_Q8_0] = q8_0_vec_dot;
    ks->vec_dot[MT_TYPE_Q4_0] = q4_0_vec_dot;
    ks->vec_dot[MT_TYPE_MXFP4] = mxfp4_vec_dot;
    ks->vec_dot[MT_TYPE_Q4_K] = q4_k_vec_dot;
    ks->vec_dot[MT_TYPE_Q6_K] = q6_k_vec_dot;
    ks->vec_dot[MT_TYPE_BF16] = bf16_vec_dot;
    /* F16C from CPUID leaf 1 (ECX bit 29): clang before 16 has no "f16c" for
     * __builtin_cpu_supports, and the fuzz build (docs/fuzzing.md) uses clang */
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C)) ks->vec_dot[MT_TYPE_F16] = f16_vec_dot;
    return true;
}

#else /* not x86 */

bool quant_avx2_install(quant_kernel_set *ks) {
    (void)ks;
    return false;
}

#endif

/* quant_avx2.c - the "avx2" kernel set (AVX2 + FMA + F16C), laid over the
 * reference set when the CPU has all three: the dot products and matrix
 * tiles of quant_x86.inc compiled with maddubs/madd, plus a Q6_K dot.
 *
 * They must return bit-identical results to the reference kernels: every
 * float operation is the reference's, on the same values, in the same order
 * (one vector lane per reference lane); only exact integer sums are
 * regrouped. FMA is used only where the reference calls fmaf.
 *
 * Q6_K keeps ggml's lane order (element index mod 8): bytes are shuffled so
 * that maddubs pairs element e with e + 8 (the same lane), and two
 * sub-blocks are interleaved so that madd_epi16 pairs each lane's sums with
 * their own sub-block scales. */
#include "quant_kernels.h"
#include "vec_kernels.h"

#if defined(__x86_64__) || defined(__i386__)

#include <cpuid.h>
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

#define QX_TGT  AVX2
#define QX_VNNI 0
#define QX_TB   1
#define QX_ZMM  0
#include "quant_x86.inc"

/* ------------------------------------------------------------ Q6_K */
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

/* ------------------------------------------------------------ install */

bool quant_avx2_install(quant_kernel_set *ks) {
    __builtin_cpu_init();
    /* F16C from CPUID leaf 1 (ECX bit 29): clang before 16 has no "f16c" for
     * __builtin_cpu_supports, and the fuzz build (docs/fuzzing.md) uses clang */
    unsigned a, b, c, d;
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !f16c) return false;
    ks->name = "avx2";
    qx_install(ks);
    ks->vec = vec_avx2_kernels;
    ks->vec_dot[MT_TYPE_Q6_K] = q6_k_vec_dot;
    return true;
}

#else /* not x86 */

bool quant_avx2_install(quant_kernel_set *ks) {
    (void)ks;
    return false;
}

#endif

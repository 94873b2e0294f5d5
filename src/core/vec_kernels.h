/* vec_kernels.h - private to vecops.c and the vec_* SIMD files: the table of
 * float vector kernels of the forward pass (norms, softmax, SwiGLU, situ,
 * sigmoids, RoPE, attention, the KDA recurrence) and the fixed orders that
 * every variant follows.
 *
 * Like the quant kernels (quant_kernels.h), the portable C here is the
 * reference and a SIMD entry must return the same bits: each float
 * operation is the reference's IEEE operation on the same values in the
 * same order, one vector lane per reference lane, never contracted into a
 * fused multiply-add (the project builds with ISO C, where GCC does not
 * contract). The orders:
 *  - sums of many terms (sum of squares, softmax denominators) go into 16
 *    double lanes, element i into lane i mod 16, added by quant_hsum16d;
 *  - attention scores are q . k in 8 float lanes (element j into lane
 *    j mod 8, a multiply then an add), lanes added as quant_hsum8;
 *  - the attention output adds p_s * v_s[d] for positions s in order;
 *  - the KDA step's sums (S k and S q per value channel) add their terms in
 *    key-channel order in float, so a SIMD set takes one value channel per
 *    lane (the state is stored key-major for that);
 *  - tanh (situ) is vec_tanh1 below: a double polynomial or vec_expf;
 *  - exponentials are vec_expf below, never libm's expf (whose result may
 *    depend on the CPU glibc picks a variant for);
 *  - everything else is element by element. */
#ifndef MOONTAIL_VEC_KERNELS_H
#define MOONTAIL_VEC_KERNELS_H

#include "quant_kernels.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------ expf */

/* Constants of vec_expf: e^x = 2^n * e^r with n = round(x / ln 2) and
 * r = x - n ln 2 (ln 2 in two parts, the first with few enough bits that
 * n * VEC_LN2_HI is exact), e^r by Cephes' degree-7 polynomial. */
#define VEC_EXP_MIN   -104.0f /* e^-104 rounds to 0 */
#define VEC_EXP_MAX   89.0f   /* e^89 overflows */
#define VEC_LOG2E     1.44269504088896341f
#define VEC_ROUND_MAG 12582912.0f /* 1.5 * 2^23: adding it rounds to an integer */
#define VEC_LN2_HI    0.693359375f
#define VEC_LN2_LO    -2.12194440e-4f
#define VEC_EXP_P0    1.9875691500e-4f
#define VEC_EXP_P1    1.3981999507e-3f
#define VEC_EXP_P2    8.3334519073e-3f
#define VEC_EXP_P3    4.1665795894e-2f
#define VEC_EXP_P4    1.6666665459e-1f
#define VEC_EXP_P5    5.0000001201e-1f

static inline float vec_bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* e^x within 1 ulp (0.98 measured over every float in [-110, 90]);
 * 0 below -104, +inf above 88.72, NaN for NaN. 2^n is applied as two
 * normal powers of two, so results that are subnormal round once. */
static inline float vec_expf(float x) {
    if (x != x) return x + x;
    if (x < VEC_EXP_MIN) x = VEC_EXP_MIN;
    if (x > VEC_EXP_MAX) x = VEC_EXP_MAX;
    const float nf = (x * VEC_LOG2E + VEC_ROUND_MAG) - VEC_ROUND_MAG;
    float r = x - nf * VEC_LN2_HI;
    r = r - nf * VEC_LN2_LO;
    const float z = r * r;
    float p = VEC_EXP_P0;
    p = p * r + VEC_EXP_P1;
    p = p * r + VEC_EXP_P2;
    p = p * r + VEC_EXP_P3;
    p = p * r + VEC_EXP_P4;
    p = p * r + VEC_EXP_P5;
    p = p * z;
    p = p + r;
    p = p + 1.0f;
    const int32_t n = (int32_t)nf; /* in [-150, 129] */
    const int32_t n1 = ((n + 256) >> 1) - 128, n2 = n - n1;
    const float s1 = vec_bits_to_float((uint32_t)(n1 + 127) << 23);
    const float s2 = vec_bits_to_float((uint32_t)(n2 + 127) << 23);
    return (p * s1) * s2;
}

/* silu(x) * h, the SwiGLU step. */
static inline float vec_swiglu1(float g, float h) {
    return g / (1.0f + vec_expf(-g)) * h;
}

/* 1 / (1 + e^-x). */
static inline float vec_sigmoid1(float x) {
    return 1.0f / (1.0f + vec_expf(-x));
}

/* tanh the same on every machine (no libm): for |x| < 0.5 its Taylor series
 * in double, x - x^3/3 + 2x^5/15 - ..., to x^19 (the next term is below
 * 1e-9 of the sum), by Horner in x^2 from the last coefficient; above,
 * 1 - 2 / (e^2|x| + 1) with vec_expf, where that difference no longer
 * cancels. Near 0 the exp form would lose up to 1e-4 of the value, which a
 * 300-token KDA model turned into 2e-3 of a logit. */
#define VEC_TANH_SMALL 0.5f

/* The Taylor coefficients of tanh: 2^2n (2^2n - 1) B_2n / (2n)!, n = 1..10. */
static inline const double *vec_tanh_coefs(void) {
    static const double c[10] = {1.0,
                                 -1.0 / 3.0,
                                 2.0 / 15.0,
                                 -17.0 / 315.0,
                                 62.0 / 2835.0,
                                 -1382.0 / 155925.0,
                                 21844.0 / 6081075.0,
                                 -929569.0 / 638512875.0,
                                 6404582.0 / 10854718875.0,
                                 -443861162.0 / 1856156927625.0};
    return c;
}

static inline float vec_tanh1(float x) {
    const double *c = vec_tanh_coefs();
    const float ax = fabsf(x);
    float t;
    if (ax < VEC_TANH_SMALL) {
        const double d = ax, d2 = d * d;
        double sum = c[9];
        for (int i = 8; i >= 0; i--) sum = sum * d2 + c[i];
        t = (float)(sum * d);
    } else {
        t = 1.0f - 2.0f / (vec_expf(2.0f * ax) + 1.0f);
    }
    return x < 0.0f ? -t : t;
}

/* situ(g, h) in ggml's order of operations: (tanh(g * (1/beta)) * beta) *
 * sigmoid(g), times tanh(h * (1/lb)) * lb when lb > 0, else times h. ib and
 * ilb are 1/beta and 1/lb, rounded once by the caller. */
static inline float vec_situ1(float g, float h, float beta, float ib, float lb, float ilb) {
    const float a = vec_tanh1(g * ib) * beta * (1.0f / (1.0f + vec_expf(-g)));
    const float u = lb > 0.0f ? vec_tanh1(h * ilb) * lb : h;
    return a * u;
}

/* The KDA step of value channel r (vec_kernel_set.kda_step), s key-major. */
static inline void vec_kda_col(float *s, int32_t hd, int32_t r, const float *ex, const float *k,
                               const float *q, const float *v, float beta, float scale, float *o) {
    float acc = 0.0f;
    for (int32_t i = 0; i < hd; i++) {
        float *e = s + (size_t)i * hd + r;
        *e = *e * ex[i];
        acc = acc + *e * k[i];
    }
    const float d = (v[r] - acc) * beta;
    acc = 0.0f;
    for (int32_t i = 0; i < hd; i++) {
        float *e = s + (size_t)i * hd + r;
        *e = *e + d * k[i];
        acc = acc + *e * q[i];
    }
    o[r] = acc * scale;
}

/* ---------------------------------------------------------- the table */

typedef struct vec_kernel_set {
    /* sum of (double)(x[i] * x[i]) in the 16-lane order */
    double (*sum_squares)(const float *x, int64_t n);
    /* y[i] = x[i] * s * w[i] (multiplied in this order) */
    void (*scale_mul)(const float *x, float s, const float *w, float *y, int64_t n);
    /* v[i] = vec_expf(v[i] - max); returns the sum of the new v[i] in the
     * 16-lane order */
    double (*exp_sum)(float *v, int64_t n, float max);
    /* h[i] = silu(g[i]) * h[i] */
    void (*swiglu)(const float *g, float *h, int64_t n);
    /* rotates pairs (x[i], x[i + half]) (neox) or (x[2i], x[2i+1]) (norm)
     * by cos cs[i], sin sn[i]: x0' = x0 cs - x1 sn, x1' = x0 sn + x1 cs */
    void (*rope_neox)(float *x, const float *cs, const float *sn, int32_t half);
    void (*rope_norm)(float *x, const float *cs, const float *sn, int32_t half);
    /* scores[s] = (q . k_s) * scale for s < n_pos, k_s = k + s * k_stride;
     * returns the largest score (-inf if none is larger) */
    float (*attn_scores)(const float *q, const float *k, size_t k_stride, int32_t dk, int32_t n_pos,
                         float scale, float *scores);
    /* out[d] = out[d] + (p[s] * inv) * v_s[d] for s in order */
    void (*attn_mix)(const float *p, float inv, const float *v, size_t v_stride, int32_t dv,
                     int32_t n_pos, float *out);
    /* y[i] = vec_sigmoid1(x[i]) */
    void (*sigmoid)(const float *x, float *y, int64_t n);
    /* x[i] = x[i] / (1 + vec_expf(-x[i])) */
    void (*silu)(float *x, int64_t n);
    /* h[i] = vec_situ1(g[i], h[i], beta, 1 / beta, lb, lb > 0 ? 1 / lb : 0) */
    void (*situ)(const float *g, float *h, int64_t n, float beta, float lb);
    /* K3's KDA decay: ex[i] = vec_expf(lb * (1 / (1 + vec_expf((g[i] + dt[i]) * a)))) */
    void (*kda_decay)(const float *g, const float *dt, float a, float lb, float *ex, int64_t n);
    /* one KDA delta-rule step of one head, s stored key-major (s[i * hd + r]:
     * key channel i, value channel r); per value channel r, over i in order:
     *   s = s * ex[i];  acc = acc + s * k[i]      (acc from 0)
     *   d = (v[r] - acc) * beta
     *   s = s + d * k[i];  acc2 = acc2 + s * q[i]  (acc2 from 0)
     *   o[r] = acc2 * scale */
    void (*kda_step)(float *s, int32_t hd, const float *ex, const float *k, const float *q,
                     const float *v, float beta, float scale, float *o);
} vec_kernel_set;

/* The portable set (vecops.c). */
extern const vec_kernel_set vec_ref_kernels;

/* The AVX2 set (vec_avx2.c) and the AVX-512 set (vec_avx512.c): NULL
 * where this build has none. quant.c hands them out with the quant sets
 * (quant_avx2_install and quant_avx512_install decide whether the CPU runs
 * them). */
extern const vec_kernel_set *const vec_avx2_kernels;
extern const vec_kernel_set *const vec_avx512_kernels;

/* The set in use, chosen with the quant kernels (quant.c). */
const vec_kernel_set *vec_kernels_active(void);

/* The reference 8-lane dot product of attention scores. */
static inline float vec_dot8_ref(const float *a, const float *b, int32_t n) {
    float l[8] = {0};
    int32_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int i = 0; i < 8; i++) l[i] = l[i] + a[j + i] * b[j + i];
    for (; j < n; j++) l[j % 8] = l[j % 8] + a[j] * b[j];
    return quant_hsum8(l);
}

#endif

/* vecops.h - the float vector steps of the forward pass other than matrix
 * products: sums for RMSNorm and softmax, exponentials, SwiGLU, situ,
 * sigmoids, RoPE rotations, attention over cached rows and the KDA
 * recurrence.
 *
 * Like the quant kernels (quant.h), they run through the kernel set picked
 * at start-up (portable C, AVX2 or AVX-512; MT_KERNELS and
 * quant_kernels_select pick one for both), and every set returns the same
 * bits: each result is defined by one fixed order of IEEE operations
 * (src/core/vec_kernels.h), so logits never depend on the CPU. */
#ifndef MOONTAIL_VECOPS_H
#define MOONTAIL_VECOPS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* e^x within 1 ulp, the same bits on every machine (libm's expf may differ
 * between the variants glibc picks per CPU). */
float mt_expf(float x);

/* a * b + c rounded once: the fused multiply-add of IEEE 754, on every
 * platform (the fmaf that mingw-w64 builds link is not fused: it differs
 * from the exact result in about a quarter of random cases). The product of
 * two floats is exact in double; the sum is rounded to double with round to
 * odd (the TwoSum error decides the last bit), and a double rounded to odd
 * then to float rounds as the exact value would (53 >= 24 + 2 bits). */
static inline float mt_fmaf(float a, float b, float c) {
    const double p = (double)a * (double)b, s = p + (double)c;
    if (!(s - s == 0.0)) return (float)s; /* infinite or NaN */
    const double bp = s - p, e = (p - (s - bp)) + ((double)c - bp);
    uint64_t u;
    memcpy(&u, &s, 8);
    if (e != 0.0 &&
        !(u & 1)) { /* inexact and even: step to the odd neighbour toward the exact sum */
        u += (e > 0.0) == (s > 0.0) ? 1 : (uint64_t)-1;
        double r;
        memcpy(&r, &u, 8);
        return (float)r;
    }
    return (float)s;
}

/* Sum of x[i]^2 (each square rounded to float) accumulated in double. */
double mt_vec_sum_squares(const float *x, int64_t n);

/* y[i] = x[i] * s * w[i]; y may be x. */
void mt_vec_scale_mul(const float *x, float s, const float *w, float *y, int64_t n);

/* v[i] = mt_expf(v[i] - max) for i < n; returns their sum, accumulated in
 * double. */
double mt_vec_exp_sum(float *v, int64_t n, float max);

/* h[i] = silu(g[i]) * h[i], silu(x) = x / (1 + mt_expf(-x)). */
void mt_vec_swiglu(const float *g, float *h, int64_t n);

/* Rotates the pairs of one head by angle i: (x[i], x[i + half]) (NEOX) or
 * (x[2i], x[2i+1]) (NORM), i < half, with cs[i], sn[i] its cosine and sine
 * (scaled): x0' = x0 cs - x1 sn, x1' = x0 sn + x1 cs. */
void mt_vec_rope_neox(float *x, const float *cs, const float *sn, int32_t half);
void mt_vec_rope_norm(float *x, const float *cs, const float *sn, int32_t half);

/* scores[s] = (q . k_s) * scale for s < n_pos, k_s = k + s * k_stride floats
 * (dk wide); returns the largest score. */
float mt_vec_attn_scores(const float *q, const float *k, size_t k_stride, int32_t dk, int32_t n_pos,
                         float scale, float *scores);

/* out[d] = out[d] + (p[s] * inv) * v_s[d] for s < n_pos in order, for
 * d < dv, v_s = v + s * v_stride floats: a mix from zero when out starts
 * zeroed, and one mix when a long one is split into runs of positions. */
void mt_vec_attn_mix(const float *p, float inv, const float *v, size_t v_stride, int32_t dv,
                     int32_t n_pos, float *out);

/* y[i] = 1 / (1 + mt_expf(-x[i])); y may be x. */
void mt_vec_sigmoid(const float *x, float *y, int64_t n);

/* x[i] = silu(x[i]) = x[i] / (1 + mt_expf(-x[i])). */
void mt_vec_silu(float *x, int64_t n);

/* h[i] = situ(g[i], h[i]) (kimi-k3's activation): beta tanh(g / beta) sigmoid(g),
 * times lb tanh(h / lb) when lb > 0, else times h; tanh computed the same on
 * every machine (a double polynomial below 0.5, mt_expf above). */
void mt_vec_situ(const float *g, float *h, int64_t n, float beta, float linear_beta);

/* Kimi K3's KDA decay factors: ex[i] = exp(lb * sigmoid(-(g[i] + dt[i]) * a)). */
void mt_vec_kda_decay(const float *g, const float *dt, float a, float lb, float *ex, int64_t n);

/* One token's delta-rule step of one KDA head. s is the head's state, hd x hd
 * stored key-major (s[i * hd + r]: key channel i, value channel r):
 *   S = S diag(ex);  d = beta (v - S k);  S = S + d k^T;  o = (S q) * scale
 * with each of S k and S q summed over key channels in order, in float. */
void mt_vec_kda_step(float *s, int32_t hd, const float *ex, const float *k, const float *q,
                     const float *v, float beta, float scale, float *o);

#endif

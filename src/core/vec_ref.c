/* vec_ref.c - the portable reference float vector kernels (vec_ref_kernels):
 * each follows the reduction order vec_kernels.h documents, which every SIMD
 * variant (vec_avx2.c, vec_avx512.c) reproduces bit for bit. quant.c puts
 * them in the reference kernel set; vecops.c's entry points call whichever set
 * is active. */
#include "vec_kernels.h"

#include <math.h>

/* ------------------------------------------------------------ reference */

static double ref_sum_squares(const float *x, int64_t n) {
    double lanes[16] = {0};
    for (int64_t i = 0; i < n; i++) lanes[i % 16] += (double)(x[i] * x[i]);
    return quant_hsum16d(lanes);
}

static void ref_scale_mul(const float *x, float s, const float *w, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s * w[i];
}

static double ref_exp_sum(float *v, int64_t n, float max) {
    double lanes[16] = {0};
    for (int64_t i = 0; i < n; i++) {
        v[i] = vec_expf(v[i] - max);
        lanes[i % 16] += (double)v[i];
    }
    return quant_hsum16d(lanes);
}

static void ref_swiglu(const float *g, float *h, int64_t n) {
    for (int64_t i = 0; i < n; i++) h[i] = vec_swiglu1(g[i], h[i]);
}

static void ref_rope_neox(float *x, const float *cs, const float *sn, int32_t half) {
    for (int32_t i = 0; i < half; i++) {
        const float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * cs[i] - x1 * sn[i];
        x[i + half] = x0 * sn[i] + x1 * cs[i];
    }
}

static void ref_rope_norm(float *x, const float *cs, const float *sn, int32_t half) {
    for (int32_t i = 0; i < half; i++) {
        const float x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * cs[i] - x1 * sn[i];
        x[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
    }
}

static float ref_attn_scores(const float *q, const float *k, size_t k_stride, int32_t dk,
                             int32_t n_pos, float scale, float *scores) {
    float max = -INFINITY;
    for (int32_t s = 0; s < n_pos; s++) {
        scores[s] = vec_dot8_ref(q, k + (size_t)s * k_stride, dk) * scale;
        if (scores[s] > max) max = scores[s];
    }
    return max;
}

static void ref_attn_mix(const float *p, float inv, const float *v, size_t v_stride, int32_t dv,
                         int32_t n_pos, float *out) {
    for (int32_t s = 0; s < n_pos; s++) {
        const float ps = p[s] * inv;
        const float *vs = v + (size_t)s * v_stride;
        for (int32_t d = 0; d < dv; d++) out[d] = out[d] + ps * vs[d];
    }
}

static void ref_sigmoid(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = vec_sigmoid1(x[i]);
}

static void ref_silu(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = x[i] / (1.0f + vec_expf(-x[i]));
}

static void ref_situ(const float *g, float *h, int64_t n, float beta, float lb) {
    const float ib = 1.0f / beta, ilb = lb > 0.0f ? 1.0f / lb : 0.0f;
    for (int64_t i = 0; i < n; i++) h[i] = vec_situ1(g[i], h[i], beta, ib, lb, ilb);
}

static void ref_kda_decay(const float *g, const float *dt, float a, float lb, float *ex,
                          int64_t n) {
    for (int64_t i = 0; i < n; i++)
        ex[i] = vec_expf(lb * (1.0f / (1.0f + vec_expf((g[i] + dt[i]) * a))));
}

static void ref_kda_step(float *s, int32_t hd, const float *ex, const float *k, const float *q,
                         const float *v, float beta, float scale, float *o) {
    for (int32_t r = 0; r < hd; r++) vec_kda_col(s, hd, r, ex, k, q, v, beta, scale, o);
}

const vec_kernel_set vec_ref_kernels = {
    ref_sum_squares, ref_scale_mul,   ref_exp_sum,  ref_swiglu,  ref_rope_neox,
    ref_rope_norm,   ref_attn_scores, ref_attn_mix, ref_sigmoid, ref_silu,
    ref_situ,        ref_kda_decay,   ref_kda_step,
};

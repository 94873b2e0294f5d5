/* vecops.c - the public mt_vec_* entry points and the portable reference
 * kernels behind them (vec_kernels.h gives the orders every SIMD variant
 * follows). The set in use is the one quant.c picked for the quant kernels,
 * so MT_KERNELS and quant_kernels_select switch both together. */
#include "moontail/vecops.h"

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
    for (int32_t d = 0; d < dv; d++) out[d] = 0.0f;
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

/* ------------------------------------------------------- entry points */

float mt_expf(float x) {
    return vec_expf(x);
}

double mt_vec_sum_squares(const float *x, int64_t n) {
    return vec_kernels_active()->sum_squares(x, n);
}

void mt_vec_scale_mul(const float *x, float s, const float *w, float *y, int64_t n) {
    vec_kernels_active()->scale_mul(x, s, w, y, n);
}

double mt_vec_exp_sum(float *v, int64_t n, float max) {
    return vec_kernels_active()->exp_sum(v, n, max);
}

void mt_vec_swiglu(const float *g, float *h, int64_t n) {
    vec_kernels_active()->swiglu(g, h, n);
}

void mt_vec_rope_neox(float *x, const float *cs, const float *sn, int32_t half) {
    vec_kernels_active()->rope_neox(x, cs, sn, half);
}

void mt_vec_rope_norm(float *x, const float *cs, const float *sn, int32_t half) {
    vec_kernels_active()->rope_norm(x, cs, sn, half);
}

float mt_vec_attn_scores(const float *q, const float *k, size_t k_stride, int32_t dk, int32_t n_pos,
                         float scale, float *scores) {
    return vec_kernels_active()->attn_scores(q, k, k_stride, dk, n_pos, scale, scores);
}

void mt_vec_attn_mix(const float *p, float inv, const float *v, size_t v_stride, int32_t dv,
                     int32_t n_pos, float *out) {
    vec_kernels_active()->attn_mix(p, inv, v, v_stride, dv, n_pos, out);
}

void mt_vec_sigmoid(const float *x, float *y, int64_t n) {
    vec_kernels_active()->sigmoid(x, y, n);
}

void mt_vec_silu(float *x, int64_t n) {
    vec_kernels_active()->silu(x, n);
}

void mt_vec_situ(const float *g, float *h, int64_t n, float beta, float linear_beta) {
    vec_kernels_active()->situ(g, h, n, beta, linear_beta);
}

void mt_vec_kda_decay(const float *g, const float *dt, float a, float lb, float *ex, int64_t n) {
    vec_kernels_active()->kda_decay(g, dt, a, lb, ex, n);
}

void mt_vec_kda_step(float *s, int32_t hd, const float *ex, const float *k, const float *q,
                     const float *v, float beta, float scale, float *o) {
    vec_kernels_active()->kda_step(s, hd, ex, k, q, v, beta, scale, o);
}

/* vecops.c - the public mt_vec_* entry points: each calls the float vector
 * kernel set in use (the portable ones are in vec_ref.c; vec_kernels.h gives
 * the orders every SIMD variant follows). The set in use is the one quant.c
 * picked for the quant kernels, so MT_KERNELS and quant_kernels_select switch
 * both together. */
#include "moontail/vecops.h"

#include "vec_kernels.h"

#include <math.h>

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

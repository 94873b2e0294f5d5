/* ops.c - small vector building blocks of the forward pass: RMSNorm and
 * single-head causal attention over cached rows. Each uses one fixed
 * summation order (vecops.h), so results never depend on batching, threads
 * or the CPU's kernel set. */
#include "model_internal.h"
#include "moontail/vecops.h"

#include <string.h>

/* rmsnorm(x, w) = x / sqrt(mean(x^2) + eps) * w */
void mt_rmsnorm(const float *x, const float *w, int64_t n, float eps, float *out) {
    const double sum = mt_vec_sum_squares(x, n); /* in double, as ggml's rms_norm */
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    mt_vec_scale_mul(x, scale, w, out, n);
}

/* out = softmax(scale * q.K^T) . V over positions [0, n_pos): scores in 8
 * float lanes, exponentials and their sum (in double) by mt_vec_exp_sum,
 * then out[d] adds p_s * v_s[d] for s in order. */
void mt_attend_one(const float *q, const float *k, size_t k_stride, int32_t dk, const float *v,
                   size_t v_stride, int32_t dv, int32_t n_pos, float scale, float *scores,
                   float *out) {
    const float max = mt_vec_attn_scores(q, k, k_stride, dk, n_pos, scale, scores);
    const double sum = mt_vec_exp_sum(scores, n_pos, max);
    memset(out, 0, (size_t)dv * sizeof *out);
    mt_vec_attn_mix(scores, (float)(1.0 / sum), v, v_stride, dv, n_pos, out);
}

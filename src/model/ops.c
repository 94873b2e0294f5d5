/* ops.c - small vector building blocks of the forward pass: RMSNorm and
 * single-head causal attention over cached rows. Each uses one fixed
 * summation order so results never depend on batching or threads. */
#include "model_internal.h"

#include <math.h>

/* rmsnorm(x, w) = x / sqrt(mean(x^2) + eps) * w */
void mt_rmsnorm(const float *x, const float *w, int64_t n, float eps, float *out) {
    double sum = 0.0; /* double accumulation, as ggml's rms_norm does */
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

/* out = softmax(scale * q.K^T) . V over positions [0, n_pos). */
void mt_attend_one(const float *q, const float *k, size_t k_stride, int32_t dk, const float *v,
                   size_t v_stride, int32_t dv, int32_t n_pos, float scale, float *scores,
                   float *out) {
    float max = -INFINITY;
    for (int32_t s = 0; s < n_pos; s++) {
        const float *ks = k + (size_t)s * k_stride;
        float dot = 0.0f;
        for (int32_t d = 0; d < dk; d++) dot += q[d] * ks[d];
        scores[s] = dot * scale;
        if (scores[s] > max) max = scores[s];
    }
    double sum = 0.0;
    for (int32_t s = 0; s < n_pos; s++) {
        scores[s] = expf(scores[s] - max);
        sum += (double)scores[s];
    }
    float inv = (float)(1.0 / sum);
    for (int32_t d = 0; d < dv; d++) out[d] = 0.0f;
    for (int32_t s = 0; s < n_pos; s++) {
        const float *vs = v + (size_t)s * v_stride;
        float p = scores[s] * inv;
        for (int32_t d = 0; d < dv; d++) out[d] += p * vs[d];
    }
}

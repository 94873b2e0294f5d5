/* attn_res.c - Kimi K3's cross-layer attention residuals: a block's input
 * is not the residual stream alone but a softmax-weighted mix of the
 * checkpoints banked by earlier layers for the same token and the stream:
 *
 *   s_c   = sum_i rmsnorm(c)_i * score_i        for each checkpoint c and for x
 *   p     = softmax(s_0 .. s_{n-1}, s_x)
 *   out_i = sum_c p_c * c_i + p_x * x_i          (raw values, not normalised)
 *
 * `score` is the converter's product of the checkpoint norm's weight and the
 * scoring projection. Only the token's own checkpoints are read, so a token's
 * result never depends on its batch. */
#include "model_internal.h"
#include "moontail/vecops.h"

/* sum_i rmsnorm(v)_i * w_i: ggml's rms_norm (mean of squares in double),
 * then the row sum, also in double. */
static float res_score(const float *v, const float *w, int64_t n, float eps) {
    const double ss = mt_vec_sum_squares(v, n);
    const float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(v[i] * scale * w[i]);
    return (float)sum;
}

void mt_attn_res_mix(const float *x, const float *bank, size_t stride, int32_t n_bank,
                     const float *score, int64_t n_embd, float eps, float *out) {
    if (n_bank == 0) { /* layer 0: nothing banked, the mix is the stream */
        for (int64_t i = 0; i < n_embd; i++) out[i] = x[i];
        return;
    }
    float buf[257], *p = n_bank < 257 ? buf : malloc((size_t)(n_bank + 1) * sizeof *p);
    if (!p) abort(); /* over 256 checkpoints: 1 KiB or more for the scores */
    for (int32_t c = 0; c < n_bank; c++)
        p[c] = res_score(bank + (size_t)c * stride, score, n_embd, eps);
    p[n_bank] = res_score(x, score, n_embd, eps);
    float max = p[0];
    for (int32_t c = 1; c <= n_bank; c++) max = p[c] > max ? p[c] : max;
    const float inv = (float)(1.0 / mt_vec_exp_sum(p, n_bank + 1, max));
    for (int32_t c = 0; c <= n_bank; c++) p[c] *= inv;
    for (int64_t i = 0; i < n_embd; i++) {
        float sum = 0.0f;
        for (int32_t c = 0; c < n_bank; c++) sum += bank[(size_t)c * stride + (size_t)i] * p[c];
        out[i] = sum + x[i] * p[n_bank];
    }
    if (p != buf) free(p);
}

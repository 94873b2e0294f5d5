/* attn_cached.c - one attention head over a session's cached rows of any
 * KV cache type, with llama.cpp's arithmetic for that type:
 *   f32        scores and mix in f32 (mt_attend_one)
 *   f16, bf16  (llama.cpp without flash attention) the query is rounded to
 *              the cache type before q . k_s, and so are the softmax weights
 *              before they multiply the values; products of two 16-bit
 *              values are exact in f32, so only summation order differs
 *   q8_0       (llama.cpp's flash attention, which a quantized V needs) the
 *              query is quantized to q8_0 for q . k_s, the weights stay f32
 *              and each value row is decoded to f32
 * Every head and position is reduced in one fixed order, so results do not
 * depend on batching or threads. */
#include "model_internal.h"
#include "moontail/quant.h"
#include "moontail/vecops.h"

#include <string.h>

/* llama.cpp copies rows into its cache with the type's CPU conversion,
 * the same one that converts activations for a dot product. */
void mt_kv_store(mt_kv_type t, const float *x, int64_t n, uint8_t *dst) {
    if (t == MT_KV_F32)
        memcpy(dst, x, (size_t)n * sizeof(float));
    else
        quant_convert_activations(mt_kv_row_type(t), x, dst, n);
}

int mt_attend_work_init(mt_attend_work *w, int32_t max_pos, int32_t max_dim) {
    w->scores = malloc((size_t)max_pos * sizeof(float));
    w->rows = malloc((size_t)MT_ATTEND_RUN * (size_t)max_dim * sizeof(float));
    /* a converted query is at most 4 bytes a value (f32), weights 2 a position */
    w->conv = malloc((size_t)max_dim * 4 + (size_t)max_pos * 2 + 64);
    if (w->scores && w->rows && w->conv) return 0;
    mt_attend_work_free(w);
    return -1;
}

void mt_attend_work_free(mt_attend_work *w) {
    free(w->scores), free(w->rows), free(w->conv);
    w->scores = w->rows = NULL;
    w->conv = NULL;
}

void mt_attend_cached(mt_kv_type t, const float *q, const uint8_t *k, size_t k_stride, int32_t dk,
                      const uint8_t *v, size_t v_stride, int32_t dv, int32_t n_pos, float scale,
                      mt_attend_work *w, float *out) {
    if (t == MT_KV_F32) {
        mt_attend_one(q, (const float *)k, k_stride / sizeof(float), dk, (const float *)v,
                      v_stride / sizeof(float), dv, n_pos, scale, w->scores, out);
        return;
    }
    const mt_type rt = mt_kv_row_type(t), vt = quant_vec_dot_type(rt);
    const quant_vec_dot_fn dot = quant_vec_dot_get(rt);
    const size_t q_bytes = quant_convert_activations(vt, q, w->conv, dk);
    float *scores = w->scores, max = -INFINITY;
    for (int32_t s = 0; s < n_pos; s++) {
        scores[s] = dot(dk, k + (size_t)s * k_stride, w->conv) * scale;
        if (scores[s] > max) max = scores[s];
    }
    const float inv = (float)(1.0 / mt_vec_exp_sum(scores, n_pos, max));
    for (int32_t s = 0; s < n_pos; s++) scores[s] *= inv;
    if (t != MT_KV_Q8_0) { /* the weights as the cache type, back in f32 (exact) */
        uint8_t *wq = w->conv + ((q_bytes + 63) & ~(size_t)63);
        quant_convert_activations(rt, scores, wq, n_pos);
        quant_dequantize_row(rt, wq, scores, n_pos);
    }
    /* out[d] += p_s * v_s[d] in position order, a run of decoded rows at a
     * time (mt_vec_attn_mix with inv 1 multiplies by p_s exactly) */
    memset(out, 0, (size_t)dv * sizeof(float));
    for (int32_t s0 = 0; s0 < n_pos; s0 += MT_ATTEND_RUN) {
        const int32_t run = n_pos - s0 < MT_ATTEND_RUN ? n_pos - s0 : MT_ATTEND_RUN;
        for (int32_t s = 0; s < run; s++)
            quant_dequantize_row(rt, v + (size_t)(s0 + s) * v_stride, w->rows + (size_t)s * dv, dv);
        mt_vec_attn_mix(scores + s0, 1.0f, w->rows, (size_t)dv, dv, run, out);
    }
}

/* ops.c - small vector building blocks of the forward pass: RMSNorm and
 * single-head causal attention over cached rows. Each uses one fixed
 * summation order so results never depend on batching or threads. */
#include "model_internal.h"

#include <math.h>
#include <string.h>

/* rmsnorm(x, w) = x / sqrt(mean(x^2) + eps) * w */
void mt_rmsnorm(const float *x, const float *w, int64_t n, float eps, float *out) {
    double sum = 0.0; /* double accumulation, as ggml's rms_norm does */
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

/* ------------------------------------------------------------ attention */

/* 8 float lanes as one value: GCC/Clang vector extensions, so the same
 * source runs as one AVX register, two SSE/NEON registers or scalar code,
 * with the same IEEE operation per lane in every case. */
typedef float v8f __attribute__((vector_size(32)));

/* Static helpers pass v8f by value; they never cross a file boundary, so
 * the note that AVX changes how such values are passed does not apply. */
#pragma GCC diagnostic ignored "-Wpsabi"

/* 8 floats at p into the v8f variable v (a macro, not a function: clang refuses a
 * function returning v8f in code built without AVX, such as the default clone) */
#define LOAD8(v, p) memcpy(&(v), (p), sizeof(v8f))

/* q . k in 8 lanes (lane j mod 8 sums q[j] * k[j] from low j to high, a
 * multiply then an add), lanes added as ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)):
 * one fixed order, the same for every token and batch. */
static inline __attribute__((always_inline)) float dot_lanes(const float *q, const float *k,
                                                             int32_t n) {
    v8f acc = {0};
    int32_t j = 0;
    for (; j + 8 <= n; j += 8) {
        v8f a8, b8;
        LOAD8(a8, q + j);
        LOAD8(b8, k + j);
        acc += a8 * b8;
    }
    float a[8];
    memcpy(a, &acc, sizeof a);
    for (; j < n; j++) a[j % 8] += q[j] * k[j];
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* out = softmax(scale * q.K^T) . V over positions [0, n_pos). Scores are
 * dot_lanes; the softmax sums in double from position 0; out[d] adds
 * p_s * v_s[d] for s in order (vectorised across d, which changes nothing). */
/* (clang 14 emits a target_clones function's ifunc only in a file that calls it, so other
 * files cannot link to it: a clang build, such as the fuzz build, gets the portable version,
 * which computes the same bits) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
void mt_attend_one(const float *q, const float *k, size_t k_stride, int32_t dk, const float *v,
                   size_t v_stride, int32_t dv, int32_t n_pos, float scale, float *scores,
                   float *out) {
    float max = -INFINITY;
    for (int32_t s = 0; s < n_pos; s++) {
        scores[s] = dot_lanes(q, k + (size_t)s * k_stride, dk) * scale;
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
        const float p = scores[s] * inv;
        const v8f pv = {p, p, p, p, p, p, p, p};
        int32_t d = 0;
        for (; d + 8 <= dv; d += 8) {
            v8f o, w;
            LOAD8(o, out + d);
            LOAD8(w, vs + d);
            o += pv * w;
            memcpy(out + d, &o, sizeof o);
        }
        for (; d < dv; d++) out[d] += p * vs[d];
    }
}

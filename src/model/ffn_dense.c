/* ffn_dense.c - the SwiGLU feed-forward block used by dense layers, shared
 * experts and (through ffn_moe.c) every routed expert:
 *   FFN(u) = down . (silu(gate . u) * (up . u)) */
#include "model_internal.h"

int mt_ffn_dense(const mt_matrix *gate, const mt_matrix *up, const mt_matrix *down, int32_t n_tok,
                 const float *u, float *out, mt_pool *pool, mt_error *err) {
    const int64_t F = gate->n_rows;
    float *g = malloc((size_t)n_tok * (size_t)F * 2 * sizeof(float));
    if (!g)
        return mt_error_set(err, "FFN: out of memory for %d tokens x %lld", n_tok, (long long)F);
    float *h = g + (size_t)n_tok * F;
    mt_matmul(gate, u, n_tok, g, pool);
    mt_matmul(up, u, n_tok, h, pool);
    for (size_t i = 0; i < (size_t)n_tok * (size_t)F; i++) h[i] = mt_silu(g[i]) * h[i];
    mt_matmul(down, h, n_tok, out, pool);
    free(g);
    return 0;
}

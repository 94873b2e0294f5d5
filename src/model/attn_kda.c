/* attn_kda.c - Kimi Delta Attention (KDA), the linear-attention layer of
 * kimi-linear and kimi-k3. Per token, with D = n_head * hd channels:
 *
 *   q, k, v = silu(conv_K(Wq a)), silu(conv_K(Wk a)), silu(conv_K(Wv a))
 *             (a causal depthwise convolution over the last K inputs of
 *             each channel, carried between calls in the session's state)
 *   q_h, k_h = q_h / |q_h|, k_h / |k_h|               (per head, L2)
 *   g       = A_h * softplus(Wf_b Wf_a a + dt)         (kimi-linear)
 *           = lb * sigmoid(-A_h * (Wf_b Wf_a a + dt))  (k3: kda.gate_lower_bound lb)
 *   beta_h  = sigmoid(Wbeta a)
 *   S_h     = S_h * exp(g_h)        per key channel i: S_h[., i] *= exp(g_i)
 *   d       = beta_h (v_h - S_h k_h)
 *   S_h     = S_h + d k_h^T                              S_h: (hd value x hd key)
 *   o_h     = (S_h q_h) / sqrt(hd)
 *   out     = Wo (rmsnorm(o_h, ssm_norm) * sigmoid(G a))
 *             G = Wg (k3) or Wg_b Wg_a (kimi-linear)
 * A_h = ssm_a = -exp(A_log), folded by the converter.
 *
 * The recurrence runs token by token in position order whatever the batch
 * (llama.cpp may chunk a prompt; the chunked form rounds differently), and
 * each head is computed start to end by one thread, so results never depend
 * on batching or threads (invariant 1). */
#include "model_internal.h"
#include "moontail/vecops.h"

#include <string.h>

typedef struct kda_job {
    const mt_hparams *hp;
    const mt_layer *l;
    mt_kv_cache *const *kv;
    int32_t il, n_tok;
    const bool *reset; /* (n_tok) the session's state restarts before token t */
    float *qkv[3];     /* (n_tok, D) each: projections, convolved in place */
    const float *g;    /* (n_tok, D) decay gate before dt and activation */
    const float *beta; /* (n_tok, n_head) before the sigmoid */
    const float *g2;   /* (n_tok, D) output gate before the sigmoid */
    float *o;          /* (n_tok, D) gated, normalised output */
} kda_job;

static float sigmoid(float x) {
    return 1.0f / (1.0f + mt_expf(-x));
}

/* x[c] <- silu(sum_j w[c][j] window[j]) for the hd channels of one head,
 * window = (the state's K-1 previous inputs, x[c]); the state then shifts. */
static void conv_head(const float *w, float *state, float *x, int32_t hd, int32_t K) {
    for (int32_t c = 0; c < hd; c++) {
        const float *wc = w + (size_t)c * K;
        float *sc = state + (size_t)c * (K - 1);
        float sum = 0.0f;
        for (int32_t j = 0; j < K - 1; j++) sum += sc[j] * wc[j];
        sum += x[c] * wc[K - 1];
        if (K > 1) {
            memmove(sc, sc + 1, (size_t)(K - 2) * sizeof *sc);
            sc[K - 2] = x[c];
        }
        x[c] = sum / (1.0f + mt_expf(-sum));
    }
}

static void l2_normalize(float *x, int32_t n, float eps) {
    const double ss = mt_vec_sum_squares(x, n);
    const float scale = 1.0f / fmaxf(sqrtf((float)ss), eps);
    for (int32_t i = 0; i < n; i++) x[i] *= scale;
}

/* Heads [begin, end), each over every token of the batch in order. */
static void kda_heads(void *ctx, int64_t begin, int64_t end) {
    const kda_job *j = ctx;
    const mt_hparams *hp = j->hp;
    const mt_layer *l = j->l;
    const int32_t H = hp->n_head, hd = hp->kda_head_dim, K = hp->ssm_conv, D = H * hd;
    const float *conv_w[3] = {l->conv_q, l->conv_k, l->conv_v};
    const float lb = hp->kda_gate_lower_bound, scale = 1.0f / sqrtf((float)hd);
    const bool k3_gate = lb > -INFINITY;
    float *ex = malloc(2 * (size_t)hd * sizeof *ex);
    if (!ex) abort(); /* 2 * hd floats */
    float *delta = ex + hd;
    for (int64_t h = begin; h < end; h++) {
        const size_t c0 = (size_t)h * hd; /* first channel of the head */
        for (int32_t t = 0; t < j->n_tok; t++) {
            float *st = mt_kv_layer_rec(j->kv[t], j->il);
            float *S = st + 3 * (size_t)D * (K - 1) + (size_t)h * hd * hd;
            if (j->reset[t]) {
                for (int s = 0; s < 3; s++)
                    memset(st + ((size_t)s * D + c0) * (K - 1), 0,
                           (size_t)hd * (K - 1) * sizeof(float));
                memset(S, 0, (size_t)hd * hd * sizeof(float));
            }
            float *x[3];
            for (int s = 0; s < 3; s++) {
                x[s] = j->qkv[s] + (size_t)t * D + c0;
                conv_head(conv_w[s] + c0 * K, st + ((size_t)s * D + c0) * (K - 1), x[s], hd, K);
            }
            float *q = x[0], *k = x[1], *v = x[2];
            l2_normalize(q, hd, hp->eps);
            l2_normalize(k, hd, hp->eps);

            const float *g = j->g + (size_t)t * D + c0, *dt = l->ssm_dt_b + c0, A = l->ssm_a[h];
            for (int32_t i = 0; i < hd; i++) {
                float gi;
                if (k3_gate) {
                    gi = lb * sigmoid(-((g[i] + dt[i]) * A));
                } else {
                    const float z = g[i] + dt[i];
                    gi = (z > 20.0f ? z : logf(1.0f + mt_expf(z))) * A;
                }
                ex[i] = mt_expf(gi);
            }
            const float beta = sigmoid(j->beta[(size_t)t * H + h]);

            /* decay, then the delta rule; row r of S is value channel r */
            for (int32_t r = 0; r < hd; r++) {
                float *row = S + (size_t)r * hd, sum = 0.0f;
                for (int32_t i = 0; i < hd; i++) row[i] *= ex[i];
                for (int32_t i = 0; i < hd; i++) sum += row[i] * k[i];
                delta[r] = (v[r] - sum) * beta;
            }
            float *o = j->o + (size_t)t * D + c0;
            for (int32_t r = 0; r < hd; r++) {
                float *row = S + (size_t)r * hd, sum = 0.0f;
                for (int32_t i = 0; i < hd; i++) row[i] += delta[r] * k[i];
                for (int32_t i = 0; i < hd; i++) sum += row[i] * q[i];
                o[r] = sum * scale;
            }
            mt_rmsnorm(o, l->ssm_norm, hd, hp->eps, o);
            const float *g2 = j->g2 + (size_t)t * D + c0;
            for (int32_t r = 0; r < hd; r++) o[r] *= sigmoid(g2[r]);
        }
    }
    free(ex);
}

/* Advances each token's session state position; a token at position 0
 * restarts its state, any other must follow the state's last. On error
 * nothing is changed. */
static int take_positions(mt_kv_cache *const *kv, int32_t il, const int32_t *pos, int32_t n_tok,
                          bool *reset, int32_t *old, mt_error *err) {
    for (int32_t t = 0; t < n_tok; t++) {
        int32_t *next = &kv[t]->rec_next[kv[t]->slot[il - kv[t]->layer_begin]];
        old[t] = *next;
        reset[t] = pos[t] == 0;
        if (pos[t] != 0 && pos[t] != *next) {
            for (int32_t u = t - 1; u >= 0; u--)
                kv[u]->rec_next[kv[u]->slot[il - kv[u]->layer_begin]] = old[u];
            return mt_error_set(err,
                                "KDA layer %d: token %d is at position %d but its session's"
                                " recurrent state is at position %d; a linear-attention layer"
                                " takes positions in order (replay from position 0 to rewind)",
                                il, t, pos[t], *next);
        }
        *next = pos[t] + 1;
    }
    return 0;
}

int mt_attn_kda(const mt_model *m, const mt_layer *l, mt_kv_cache *const *kv, int32_t il,
                const int32_t *pos, int32_t n_tok, const float *a, float *out, mt_pool *pool,
                mt_error *err) {
    const mt_hparams *hp = &m->hp;
    const size_t T = (size_t)n_tok, H = (size_t)hp->n_head, hd = (size_t)hp->kda_head_dim,
                 D = H * hd;
    float *buf = malloc((T * (6 * D + H + hd)) * sizeof(float));
    bool *reset = malloc(T * sizeof *reset);
    int32_t *old = malloc(T * sizeof *old);
    if (!buf || !reset || !old) {
        free(buf), free(reset), free(old);
        return mt_error_set(err, "KDA attention: out of memory for %d tokens", n_tok);
    }
    float *q = buf, *k = q + T * D, *v = k + T * D, *g = v + T * D, *g2 = g + T * D,
          *o = g2 + T * D, *beta = o + T * D, *low = beta + T * H; /* low: (T, hd) */
    int rc = take_positions(kv, il, pos, n_tok, reset, old, err);
    if (rc == 0) {
        const bool k3 = l->ssm_g.data != NULL;
        const mt_matrix *in[6] = {&l->wq,       &l->wk,      &l->wv,
                                  &l->ssm_beta, &l->ssm_f_a, k3 ? &l->ssm_g : &l->ssm_g_a};
        float *const res[6] = {q, k, v, beta, low, k3 ? g2 : o}; /* o: scratch for g_a */
        mt_matmul_many(in, res, 6, a, n_tok, pool);
        mt_matmul(&l->ssm_f_b, low, n_tok, g, pool);
        if (!k3) mt_matmul(&l->ssm_g_b, o, n_tok, g2, pool);
        kda_job job = {hp, l, kv, il, n_tok, reset, {q, k, v}, g, beta, g2, o};
        mt_pool_run(pool, (int64_t)H, kda_heads, &job);
        mt_matmul(&l->wo, o, n_tok, out, pool);
    }
    free(buf), free(reset), free(old);
    return rc;
}

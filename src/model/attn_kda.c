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
 *   S_h     = S_h + d k_h^T            S_h: (hd value x hd key), stored key-major
 *   o_h     = (S_h q_h) / sqrt(hd)
 *   out     = Wo (rmsnorm(o_h, ssm_norm) * sigmoid(G a))
 *             G = Wg (k3) or Wg_b Wg_a (kimi-linear)
 * A_h = ssm_a = -exp(A_log), folded by the converter.
 *
 * The recurrence runs token by token in position order whatever the batch
 * (llama.cpp may chunk a prompt; the chunked form rounds differently), and
 * each head is computed start to end by one thread, so results never depend
 * on batching or threads (invariant 1). The per-token step of a head
 * (mt_vec_kda_step) sums S k and S q over key channels in order, one vector
 * lane per value channel: the state is stored key-major so that a key
 * channel's row of S is contiguous. */
#include "model_internal.h"
#include "moontail/mathf.h"
#include "moontail/quant.h"
#include "moontail/vecops.h"

#include <string.h>

/* The input of a low-rank up-projection (ssm_f_b, ssm_g_b: D rows of a few
 * columns) that each head applies to its own rows. */
typedef struct kda_up {
    const mt_matrix *w; /* (D rows) */
    const void *xc;     /* (n_tok) rows converted to w's vec-dot type */
    size_t xc_stride;   /* bytes */
} kda_up;

typedef struct kda_job {
    const mt_hparams *hp;
    const mt_layer *l;
    mt_kv_cache *const *kv;
    int32_t il, n_tok;
    const int32_t *pos; /* (n_tok) positions: where a rewind snapshot goes */
    const bool *reset;  /* (n_tok) the session's state restarts before token t */
    float *qkv[3];      /* (n_tok, D) each: projections, convolved in place */
    kda_up up_g;        /* ssm_f_b: gives g */
    float *g;           /* (n_tok, D) decay gate before dt and activation */
    const float *beta;  /* (n_tok, n_head) before the sigmoid */
    kda_up up_g2;       /* kimi-linear's ssm_g_b: gives g2 (w NULL: g2 is given) */
    float *g2;          /* (n_tok, D) output gate before the sigmoid */
    float *o;           /* (n_tok, D) gated, normalised output */
} kda_job;

/* y[t * D + c] = W[c] . x[t] for the hd rows c0 <= c < c0 + hd of one head,
 * on the calling thread (each element as mt_matmul gives it). */
static void up_head(const kda_up *up, int64_t c0, int32_t hd, int32_t n_tok, float *y, size_t D) {
    mt_matrix part = *up->w;
    part.n_rows = hd;
    part.data = (const char *)part.data + (size_t)c0 * part.row_bytes;
    const mt_matmul_task t = {&part, up->xc, up->xc_stride, n_tok, y + c0, D};
    mt_matmul_tasks(&t, 1, NULL);
}

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
        for (int32_t j = 0; j + 1 < K - 1; j++) sc[j] = sc[j + 1];
        if (K > 1) sc[K - 2] = x[c];
        x[c] = sum;
    }
    mt_vec_silu(x, hd);
}

static void l2_normalize(float *x, int32_t n, float eps) {
    const double ss = mt_vec_sum_squares(x, n);
    const float scale = 1.0f / fmaxf(sqrtf((float)ss), eps);
    for (int32_t i = 0; i < n; i++) x[i] *= scale;
}

/* When a window of rewind snapshots is open at pos (mt_kv_snap_begin), this head's part of
 * the layer's state st after the token (its hd channels of the three convolutions, from
 * channel c0, and its delta matrix) is copied into the snapshot of that position. Heads
 * write disjoint parts, so the threads need no lock. */
static void snap_head(const mt_kv_cache *kv, int32_t il, int32_t pos, const float *st, size_t c0,
                      size_t hd, size_t D, int32_t K) {
    const int32_t i = pos - kv->snap_p0;
    if (kv->snap_cap == 0 || i < 0 || i >= kv->snap_cap) return;
    float *dst = kv->snap + ((size_t)kv->slot[il - kv->layer_begin] * kv->snap_alloc + (size_t)i) *
                                kv->rec_floats;
    const size_t w = (size_t)(K - 1);
    for (size_t s = 0; s < 3; s++) {
        const size_t off = (s * D + c0) * w;
        memcpy(dst + off, st + off, hd * w * sizeof(float));
    }
    const size_t off = 3 * D * w + c0 * hd; /* S_h: (hd, hd) of head c0 / hd */
    memcpy(dst + off, st + off, hd * hd * sizeof(float));
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
    float *sig = ex + hd;
    for (int64_t h = begin; h < end; h++) {
        const size_t c0 = (size_t)h * hd; /* first channel of the head */
        up_head(&j->up_g, (int64_t)c0, hd, j->n_tok, j->g, (size_t)D);
        if (j->up_g2.w) up_head(&j->up_g2, (int64_t)c0, hd, j->n_tok, j->g2, (size_t)D);
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
            if (k3_gate) { /* exp(lb * sigmoid(-(g + dt) A)) */
                mt_vec_kda_decay(g, dt, A, lb, ex, hd);
            } else {
                for (int32_t i = 0; i < hd; i++) {
                    const float z = g[i] + dt[i];
                    ex[i] = mt_expf((z > 20.0f ? z : mt_math_logf(1.0f + mt_expf(z))) * A);
                }
            }
            const float beta = sigmoid(j->beta[(size_t)t * H + h]);

            /* decay, then the delta rule */
            float *o = j->o + (size_t)t * D + c0;
            mt_vec_kda_step(S, hd, ex, k, q, v, beta, scale, o);
            mt_rmsnorm(o, l->ssm_norm, hd, hp->eps, o);
            mt_vec_sigmoid(j->g2 + (size_t)t * D + c0, sig, hd);
            for (int32_t r = 0; r < hd; r++) o[r] *= sig[r];
            snap_head(j->kv[t], j->il, j->pos[t], st, c0, (size_t)hd, (size_t)D, K);
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
                                " takes positions in order (replay from position 0, or rewind with "
                                "mt_kv_rewind inside a pass that kept snapshots)",
                                il, t, pos[t], *next);
        }
        *next = pos[t] + 1;
        const int32_t i = pos[t] - kv[t]->snap_p0; /* a snapshot of it will be written */
        if (kv[t]->snap_cap && i >= 0 && i < kv[t]->snap_cap) kv[t]->snap_n = i + 1;
    }
    return 0;
}

/* Sets up->xc_stride and returns the bytes up's converted input needs (0 for
 * F32 weights, which read x as it is). */
static size_t up_bytes(kda_up *up, int32_t n_tok) {
    const mt_type vt = quant_vec_dot_type(up->w->type);
    up->xc_stride = mt_type_row_size(vt, up->w->n_cols);
    return vt == MT_TYPE_F32 ? 0 : (size_t)n_tok * up->xc_stride;
}

/* up->xc = x (n_tok rows of w's columns) in w's vec-dot type, in buf. */
static void up_input(kda_up *up, const float *x, int32_t n_tok, void *buf, mt_pool *pool) {
    const mt_type vt = quant_vec_dot_type(up->w->type);
    up->xc = x;
    if (vt == MT_TYPE_F32) return;
    mt_convert_rows(vt, x, n_tok, up->w->n_cols, buf, pool);
    up->xc = buf;
}

int mt_attn_kda(const mt_model *m, const mt_layer *l, mt_kv_cache *const *kv, int32_t il,
                const int32_t *pos, int32_t n_tok, const float *a, float *out, mt_pool *pool,
                mt_error *err) {
    const mt_hparams *hp = &m->hp;
    const size_t T = (size_t)n_tok, H = (size_t)hp->n_head, hd = (size_t)hp->kda_head_dim,
                 D = H * hd;
    const bool k3 = l->ssm_g.data != NULL;
    /* the low-rank up-projections run head by head in the heads' section */
    kda_up up_g = {&l->ssm_f_b, NULL, 0}, up_g2 = {k3 ? NULL : &l->ssm_g_b, NULL, 0};
    const size_t n_up = up_bytes(&up_g, n_tok), n_up2 = k3 ? 0 : up_bytes(&up_g2, n_tok);
    float *buf = malloc((T * (6 * D + H + 2 * hd)) * sizeof(float));
    uint8_t *upc = malloc(n_up + n_up2 + 1);
    bool *reset = malloc(T * sizeof *reset);
    int32_t *old = malloc(T * sizeof *old);
    if (!buf || !upc || !reset || !old) {
        free(buf), free(upc), free(reset), free(old);
        return mt_error_set(err, "KDA attention: out of memory for %d tokens", n_tok);
    }
    float *q = buf, *k = q + T * D, *v = k + T * D, *g = v + T * D, *g2 = g + T * D,
          *o = g2 + T * D, *beta = o + T * D;
    float *low = beta + T * H, *low2 = low + T * hd; /* (T, hd): f_a's and g_a's outputs */
    int rc = take_positions(kv, il, pos, n_tok, reset, old, err);
    if (rc == 0) {
        const mt_matrix *in[6] = {&l->wq,       &l->wk,      &l->wv,
                                  &l->ssm_beta, &l->ssm_f_a, k3 ? &l->ssm_g : &l->ssm_g_a};
        float *const res[6] = {q, k, v, beta, low, k3 ? g2 : low2};
        mt_matmul_many(in, res, 6, a, n_tok, pool);
        up_input(&up_g, low, n_tok, upc, pool);
        if (!k3) up_input(&up_g2, low2, n_tok, upc + n_up, pool);
        kda_job job = {hp, l, kv, il, n_tok, pos, reset, {q, k, v}, up_g, g, beta, up_g2, g2, o};
        mt_pool_run(pool, (int64_t)H, kda_heads, &job);
        mt_matmul(&l->wo, o, n_tok, out, pool);
    }
    free(buf), free(upc), free(reset), free(old);
    return rc;
}

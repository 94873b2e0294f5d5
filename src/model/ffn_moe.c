/* ffn_moe.c - the routed Mixture-of-Experts block and its router.
 *
 *   z   = router . u                    (n_expert scores per token)
 *   p   = softmax(z) or sigmoid(z)
 *   sel = p + exp_probs_b               (bias steers selection only)
 *   groups: keep the n_group_used groups with the largest sum of their top-2
 *   idx = top-k(sel);  w = p[idx];  w /= sum(w) if normalised;  w *= scale
 *   out = sum_j w_j . Expert_idx_j(u)   (+ shared expert, sigmoid-gated in qwen2moe)
 *
 * Experts run one at a time over the tokens routed to them; each output row
 * depends only on its own token, and a token's expert outputs are summed in
 * its top-k order, so batching never changes a result. */
#include "model_internal.h"
#include "moontail/vecops.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- router */

/* Indices of the k largest values of v[0..n), largest first; ties go to the
 * lower index (n <= 4096, the loader's limit on experts). */
static void top_k(const float *v, int32_t n, int32_t k, int32_t *idx) {
    bool taken[4096];
    if (n > 4096) abort(); /* the loader refuses more experts; a bug otherwise */
    memset(taken, 0, (size_t)n * sizeof *taken);
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < n; e++)
            if (!taken[e] && (best < 0 || v[e] > v[best])) best = e;
        idx[j] = best;
        if (best >= 0) taken[best] = true;
    }
}

/* Chooses experts and weights for one token from its router scores z. */
void mt_moe_route(const mt_hparams *hp, const float *exp_probs_b, const float *z, int32_t *idx,
                  float *w, float *scratch /* 2 * n_expert */) {
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    float *p = scratch, *sel = scratch + X;
    if (hp->gating == MT_GATING_SIGMOID) {
        mt_vec_sigmoid(z, p, X);
    } else {
        float max = -INFINITY;
        for (int32_t e = 0; e < X; e++) max = fmaxf(max, z[e]);
        memcpy(p, z, (size_t)X * sizeof *p);
        const float inv = (float)(1.0 / mt_vec_exp_sum(p, X, max));
        for (int32_t e = 0; e < X; e++) p[e] *= inv;
    }
    for (int32_t e = 0; e < X; e++) sel[e] = exp_probs_b ? p[e] + exp_probs_b[e] : p[e];

    if (hp->n_group > 1) {
        const int32_t G = hp->n_group, per = X / G;
        float gscore[256];
        int32_t two[2], keep[256];
        for (int32_t g = 0; g < G; g++) {
            top_k(sel + g * per, per, per >= 2 ? 2 : 1, two);
            gscore[g] = sel[g * per + two[0]] + (per >= 2 ? sel[g * per + two[1]] : 0.0f);
        }
        top_k(gscore, G, hp->n_group_used, keep);
        for (int32_t g = 0; g < G; g++) {
            bool kept = false;
            for (int32_t q = 0; q < hp->n_group_used; q++) kept |= keep[q] == g;
            if (!kept)
                for (int32_t e = 0; e < per; e++) sel[g * per + e] = -INFINITY;
        }
    }
    top_k(sel, X, K, idx);
    float sum = 0.0f;
    for (int32_t j = 0; j < K; j++) sum += (w[j] = p[idx[j]]);
    if (hp->expert_weights_norm) {
        if (sum < 6.103515625e-5f) sum = 6.103515625e-5f;
        for (int32_t j = 0; j < K; j++) w[j] /= sum;
    }
    if (hp->expert_weights_scale != 0.0f)
        for (int32_t j = 0; j < K; j++) w[j] *= hp->expert_weights_scale;
}

/* --------------------------------------------------------------- experts */

static mt_matrix expert_matrix(const mt_experts *x, int32_t slot) {
    mt_matrix m = x->m;
    m.data = (const char *)m.data + (size_t)slot * x->expert_bytes;
    return m;
}

/* Rows are grouped by expert so each expert's weights stream once per call,
 * experts no row chose are skipped, and all chosen experts run together in
 * one mt_ffn_multi (two parallel sections). Every row's result is
 * independent of its group, so grouping never changes a bit. */
int mt_model_run_experts(void *model, int32_t il, int32_t n, const int32_t *ids, const float *u,
                         float *y, mt_pool *pool, mt_error *err) {
    const mt_model *m = model;
    const mt_hparams *hp = &m->hp;
    const size_t E = (size_t)hp->n_embd_exp;
    if (il < 0 || il >= hp->n_layer || !m->layers[il].is_moe || !m->layers[il].gate_exps.m.data)
        return mt_error_set(
            err, "routed experts of layer %d are not held here (this file has none)", il);
    const mt_layer *l = &m->layers[il];
    for (int32_t r = 0; r < n; r++)
        if (ids[r] < 0 || ids[r] >= hp->n_expert || mt_model_expert_slot(m, ids[r]) < 0)
            return mt_error_set(err,
                                "expert %d of layer %d is not held here (this shard holds %d"
                                " of %d experts)",
                                ids[r], il, l->gate_exps.n_expert, hp->n_expert);
    const int32_t X = hp->n_expert;
    mt_ffn_act actbuf;
    const mt_ffn_act *act = mt_hparams_act(hp, &actbuf);
    float *xin = malloc((size_t)n * E * sizeof(float) + 1);
    float *yout = malloc((size_t)n * E * sizeof(float) + 1);
    int32_t *rows = malloc((size_t)n * sizeof(int32_t) + 1);
    int32_t *count = calloc((size_t)X + 1, sizeof(int32_t));
    mt_matrix *mats = calloc(3 * (size_t)X, sizeof(mt_matrix));
    mt_ffn_task *tasks = calloc((size_t)X, sizeof(mt_ffn_task));
    int rc = 0;
    if (!xin || !yout || !rows || !count || !mats || !tasks) {
        rc = mt_error_set(err, "experts: out of memory for %d rows", n);
        goto done;
    }
    /* counting sort of the rows by expert, stable (rows keep their order) */
    for (int32_t r = 0; r < n; r++) count[ids[r] + 1]++;
    for (int32_t e = 0; e < X; e++) count[e + 1] += count[e];
    int32_t *next = malloc((size_t)X * sizeof(int32_t) + 1);
    if (!next) {
        rc = mt_error_set(err, "experts: out of memory for %d rows", n);
        goto done;
    }
    memcpy(next, count, (size_t)X * sizeof(int32_t));
    for (int32_t r = 0; r < n; r++) rows[next[ids[r]]++] = r;
    free(next);
    /* an expert that one row chose reads that row and writes its result in
     * place (always so when decoding); the rows of others are gathered */
    int n_tasks = 0;
    for (int32_t e = 0; e < X; e++) {
        const int32_t k0 = count[e], k1 = count[e + 1];
        if (k1 == k0) continue; /* no row chose it: its weights are never read */
        const int32_t slot = mt_model_expert_slot(m, e);
        mt_matrix *g = &mats[3 * n_tasks];
        g[0] = expert_matrix(&l->gate_exps, slot);
        g[1] = expert_matrix(&l->up_exps, slot);
        g[2] = expert_matrix(&l->down_exps, slot);
        const float *x = u + (size_t)rows[k0] * E;
        float *out = y + (size_t)rows[k0] * E;
        if (k1 - k0 > 1) {
            for (int32_t k = k0; k < k1; k++)
                memcpy(xin + (size_t)k * E, u + (size_t)rows[k] * E, E * sizeof(float));
            x = xin + (size_t)k0 * E;
            out = yout + (size_t)k0 * E;
        }
        tasks[n_tasks++] = (mt_ffn_task){&g[0], &g[1], &g[2], k1 - k0, x, out, act};
    }
    rc = mt_ffn_multi(tasks, n_tasks, pool, err);
    for (int32_t e = 0; rc == 0 && e < X; e++)
        if (count[e + 1] - count[e] > 1)
            for (int32_t k = count[e]; k < count[e + 1]; k++)
                memcpy(y + (size_t)rows[k] * E, yout + (size_t)k * E, E * sizeof(float));
done:
    free(xin), free(yout), free(rows), free(count), free(mats), free(tasks);
    return rc;
}

/* out (n_tok, W) = sum_j w_j y_j in each token's top-k order. */
static void weighted_sum(const float *ys, const float *w, size_t T, int32_t K, size_t W,
                         float *out) {
    for (size_t t = 0; t < T; t++) {
        float *o = out + t * W;
        for (size_t d = 0; d < W; d++) o[d] = ys[(t * K) * W + d] * w[t * K];
        for (int32_t j = 1; j < K; j++) {
            const float *y = ys + (t * K + j) * W;
            for (size_t d = 0; d < W; d++) o[d] += y[d] * w[t * K + j];
        }
    }
}

/* Routed experts, then (k3 latent MoE) the latent sum's norm and
 * up-projection, then the shared experts, which read the full-width u:
 *   out = up . rmsnorm(sum_j w_j E_j(down . u)) + shared(u)   (latent)
 *   out = sum_j w_j E_j(u) + shared(u)                        (otherwise)
 * Besides the experts' own two, a decode step has two parallel sections:
 * every product that reads u (router, latent down-projection, the shared
 * experts' gate and up), then every one that writes out (latent
 * up-projection, the shared experts' down). */
int mt_ffn_moe(const mt_model *m, const mt_layer *l, int32_t il, int32_t n_tok, const float *u,
               float *out, const mt_expert_backend *experts, mt_pool *pool, mt_error *err) {
    const mt_hparams *hp = &m->hp;
    const int32_t X = hp->n_expert, K = hp->n_expert_used, E = hp->n_embd, W = hp->n_embd_exp;
    const bool latent = hp->n_expert_latent > 0;
    const size_t T = (size_t)n_tok, F = l->has_shexp ? (size_t)l->gate_shexp.n_rows : 0;
    if (hp->n_group > 256) return mt_error_set(err, "MoE: %d expert groups (max 256)", hp->n_group);
    mt_expert_backend local = {mt_model_run_experts, (void *)m, false};
    if (!experts) experts = &local;
    mt_ffn_act actbuf;
    const mt_ffn_act *act = mt_hparams_act(hp, &actbuf);

    float *z = malloc(T * X * sizeof(float));
    float *scratch = malloc(2 * (size_t)X * sizeof(float));
    int32_t *idx = malloc(T * K * sizeof(int32_t));
    float *w = malloc(T * K * sizeof(float));
    float *uk = malloc(T * K * W * sizeof(float)); /* (n_tok, K, W): the input once per slot */
    float *ys = malloc(T * K * W * sizeof(float)); /* (n_tok, K, W) expert outputs */
    float *lat = latent ? malloc(T * W * sizeof(float)) : NULL; /* (n_tok, W) */
    float *sh = l->has_shexp ? malloc(T * E * sizeof(float)) : NULL;
    float *shg = l->has_shexp ? malloc(2 * T * F * sizeof(float)) : NULL; /* gate, up (n_tok, F) */
    int rc = 0;
    if (!z || !scratch || !idx || !w || !uk || !ys || (latent && !lat) ||
        (l->has_shexp && (!sh || !shg))) {
        rc = mt_error_set(err, "MoE: out of memory for %d tokens", n_tok);
        goto done;
    }
    float *shh = shg ? shg + T * F : NULL;

    /* the router reads the full width, like the shared experts */
    const mt_matrix *in[4] = {&l->router};
    float *res[4] = {z};
    int n_in = 1;
    if (latent) in[n_in] = &l->routed_down, res[n_in++] = lat;
    if (l->has_shexp) {
        in[n_in] = &l->gate_shexp, res[n_in++] = shg;
        in[n_in] = &l->up_shexp, res[n_in++] = shh;
    }
    mt_matmul_many(in, res, n_in, u, n_tok, pool);
    const float *ue = latent ? lat : u;
    for (size_t t = 0; t < T; t++) {
        mt_moe_route(hp, l->exp_probs_b, z + t * X, idx + t * K, w + t * K, scratch);
        for (int32_t j = 0; j < K; j++)
            memcpy(uk + (t * K + j) * W, ue + t * W, (size_t)W * sizeof(float));
    }
    if ((rc = experts->run(experts->ctx, il, (int32_t)(T * K), idx, uk, ys, pool, err))) goto done;
    if (l->has_shexp) mt_ffn_act_rows(act, shg, shh, (int64_t)T, (int64_t)F, pool);

    const mt_matrix *wo[2];
    const float *xo[2];
    float *yo[2];
    int n_out = 0;
    if (latent) {
        weighted_sum(ys, w, T, K, (size_t)W, lat);
        if (l->routed_norm)
            for (size_t t = 0; t < T; t++)
                mt_rmsnorm(lat + t * W, l->routed_norm, W, hp->eps, lat + t * W);
        wo[n_out] = &l->routed_up, xo[n_out] = lat, yo[n_out++] = out;
    } else {
        weighted_sum(ys, w, T, K, (size_t)E, out);
    }
    if (l->has_shexp) wo[n_out] = &l->down_shexp, xo[n_out] = shh, yo[n_out++] = sh;
    mt_matmul_pairs(wo, xo, yo, n_out, n_tok, pool);

    if (l->has_shexp) {
        for (size_t t = 0; t < T; t++) {
            float gate = 1.0f;
            if (l->shexp_gate_inp.data) {
                float gz;
                mt_matmul(&l->shexp_gate_inp, u + t * E, 1, &gz, NULL);
                gate = 1.0f / (1.0f + mt_expf(-gz));
            }
            for (int32_t d = 0; d < E; d++) out[t * E + d] += sh[t * E + d] * gate;
        }
    }
done:
    free(z), free(scratch), free(idx), free(w), free(uk), free(ys), free(lat), free(sh), free(shg);
    return rc;
}

/* forward.c - the forward pass: embeddings, "run layers [a, b) on these
 * hidden states", and the output head. Local generation and (later) every
 * distributed stage call exactly these functions.
 *
 * Per layer:
 *   h  = x + Attn(rmsnorm(x, attn_norm))
 *   x' = h + FFN(rmsnorm(h, ffn_norm))     FFN = dense SwiGLU or MoE
 * Attn is GQA, MLA or (kimi) KDA. kimi-k3 with attention residuals (block
 * size B) changes the skeleton: every B-th layer banks its raw input x as a
 * checkpoint c_j and its stream restarts from the attention output, and
 * each block input is a mix of the banked checkpoints and the stream:
 *   h  = [x if il % B else 0] + Attn(rmsnorm(mix(c, x; attn_res_score), attn_norm))
 *   x' = h + FFN(rmsnorm(mix(c, h; ffn_res_score), ffn_norm))
 * and the head normalises mix(c, x; output_res_score). The checkpoints
 * travel with the token in its hidden state (hp.n_hidden floats). */
#include "model_internal.h"

#include <string.h>

int mt_model_embed(const mt_model *m, const int32_t *tokens, int32_t n_tok, float *hidden,
                   mt_error *err) {
    if (!m->has_head)
        return mt_error_set(err,
                            "%s is a shard without the head (embeddings); the requester"
                            " holds it",
                            m->gguf->path);
    for (int32_t t = 0; t < n_tok; t++) {
        if (tokens[t] < 0 || tokens[t] >= m->hp.n_vocab)
            return mt_error_set(err, "token id %d at index %d is outside the vocabulary [0, %d)",
                                tokens[t], t, m->hp.n_vocab);
        mt_matrix_get_row(&m->tok_embd, tokens[t], hidden + (size_t)t * m->hp.n_hidden);
    }
    return 0;
}

static int check_positions(mt_kv_cache *const *kv, const int32_t *pos, int32_t n_tok, int32_t a,
                           int32_t b, mt_error *err) {
    for (int32_t t = 0; t < n_tok; t++) {
        if (!kv[t] || a < kv[t]->layer_begin || b > kv[t]->layer_end)
            return mt_error_set(
                err, "token %d: layers [%d, %d) are not covered by its session's cache", t, a, b);
        if (pos[t] < 0 || pos[t] >= kv[t]->n_ctx)
            return mt_error_set(err,
                                "position %d of token %d is outside the context [0, %d); start a"
                                " new session or use a larger context",
                                pos[t], t, kv[t]->n_ctx);
    }
    return 0;
}

/* The attention kind of layer il. */
static int attention(const mt_model *m, const mt_layer *l, mt_kv_cache *const *kv, int32_t il,
                     const int32_t *pos, int32_t n_tok, const float *a, float *out, mt_pool *pool,
                     mt_error *err) {
    if (l->is_kda) return mt_attn_kda(m, l, kv, il, pos, n_tok, a, out, pool, err);
    if (mt_arch_has_mla(m->hp.arch))
        return mt_attn_mla(m, l, kv, il, pos, n_tok, a, out, pool, err);
    return mt_attn_gqa(m, l, kv, il, pos, n_tok, a, out, pool, err);
}

/* x_norm (n_tok, n_embd) <- rmsnorm of each token's block input: the stream
 * itself, or (k3) its mix with the n_bank checkpoints banked so far. */
static void block_input(const mt_model *m, const float *hidden, int32_t n_tok, int32_t n_bank,
                        const float *score, const float *norm, float *mixed, float *x_norm) {
    const mt_hparams *hp = &m->hp;
    const size_t E = (size_t)hp->n_embd, W = (size_t)hp->n_hidden;
    for (size_t t = 0; t < (size_t)n_tok; t++) {
        const float *x = hidden + t * W;
        if (score) {
            mt_attn_res_mix(x, x + E, E, n_bank, score, (int64_t)E, hp->eps, mixed + t * E);
            x = mixed + t * E;
        }
        mt_rmsnorm(x, norm, (int64_t)E, hp->eps, x_norm + t * E);
    }
}

int mt_model_forward_batch(const mt_model *m, mt_kv_cache *const *kv, int32_t a, int32_t b,
                           const int32_t *pos, int32_t n_tok, float *hidden,
                           const mt_expert_backend *experts, mt_pool *pool, mt_error *err) {
    const mt_hparams *hp = &m->hp;
    if (n_tok <= 0) return mt_error_set(err, "forward: no tokens given");
    if (a > b || a < m->layer_begin || b > m->layer_end || !m->has_attention)
        return mt_error_set(err, "%s holds %s of layers [%d, %d); layers [%d, %d) were asked for",
                            m->gguf->path, m->has_attention ? "the attention" : "no attention part",
                            m->layer_begin, m->layer_end, a, b);
    if (check_positions(kv, pos, n_tok, a, b, err)) return -1;
    const size_t E = (size_t)hp->n_embd, W = (size_t)hp->n_hidden, T = (size_t)n_tok;
    const int32_t bs = hp->attn_res_block;
    float *x_norm = malloc(T * E * sizeof(float));
    float *out = malloc(T * E * sizeof(float));
    float *mixed = bs > 0 ? malloc(T * E * sizeof(float)) : NULL;
    int rc = 0;
    if (!x_norm || !out || (bs > 0 && !mixed)) {
        rc = mt_error_set(err, "forward: out of memory for %d tokens", n_tok);
        goto done;
    }
    for (int32_t il = a; il < b && rc == 0; il++) {
        const mt_layer *l = &m->layers[il];
        /* k3: checkpoints banked by layers 0, bs, 2bs, ... before this one */
        const int32_t n_bank = bs > 0 ? (il + bs - 1) / bs : 0;
        const bool banks = bs > 0 && il % bs == 0;
        block_input(m, hidden, n_tok, n_bank, l->attn_res_score, l->attn_norm, mixed, x_norm);
        if (banks) /* the raw layer input, not its mix */
            for (size_t t = 0; t < T; t++)
                memcpy(hidden + t * W + E * (size_t)(1 + n_bank), hidden + t * W,
                       E * sizeof(float));
        if ((rc = attention(m, l, kv, il, pos, n_tok, x_norm, out, pool, err))) break;
        /* after a banking layer the stream restarts from the attention output */
        for (size_t t = 0; t < T; t++)
            for (size_t i = 0; i < E; i++)
                hidden[t * W + i] = banks ? out[t * E + i] : hidden[t * W + i] + out[t * E + i];

        block_input(m, hidden, n_tok, n_bank + banks, l->ffn_res_score, l->ffn_norm, mixed, x_norm);
        mt_ffn_act actbuf;
        rc = l->is_moe ? mt_ffn_moe(m, l, il, n_tok, x_norm, out, experts, pool, err)
                       : mt_ffn_dense(&l->ffn_gate, &l->ffn_up, &l->ffn_down,
                                      mt_hparams_act(hp, &actbuf), n_tok, x_norm, out, pool, err);
        if (rc) break;
        for (size_t t = 0; t < T; t++)
            for (size_t i = 0; i < E; i++) hidden[t * W + i] += out[t * E + i];
    }
done:
    free(x_norm);
    free(out);
    free(mixed);
    return rc;
}

int mt_model_forward_layers(const mt_model *m, mt_kv_cache *kv, int32_t a, int32_t b,
                            const int32_t *pos, int32_t n_tok, float *hidden,
                            const mt_expert_backend *experts, mt_pool *pool, mt_error *err) {
    if (n_tok <= 0) return mt_error_set(err, "forward: no tokens given");
    mt_kv_cache **kvs = malloc((size_t)n_tok * sizeof *kvs);
    if (!kvs) return mt_error_set(err, "forward: out of memory");
    for (int32_t t = 0; t < n_tok; t++) kvs[t] = kv;
    int rc = mt_model_forward_batch(m, kvs, a, b, pos, n_tok, hidden, experts, pool, err);
    free(kvs);
    return rc;
}

int mt_model_head_input(const mt_model *m, const float *hidden, int32_t n_tok, float *out,
                        mt_error *err) {
    const mt_hparams *hp = &m->hp;
    const size_t E = (size_t)hp->n_embd, W = (size_t)hp->n_hidden;
    if (hp->attn_res_block > 0 && !m->output_res_score)
        return mt_error_set(err,
                            "%s holds neither the head nor the last layer: it cannot mix the"
                            " checkpoints for the head (output_res_score)",
                            m->gguf->path);
    for (size_t t = 0; t < (size_t)n_tok; t++) {
        const float *x = hidden + t * W;
        if (m->output_res_score)
            mt_attn_res_mix(x, x + E, E, hp->n_res_bank, m->output_res_score, (int64_t)E, hp->eps,
                            out + t * E);
        else
            memcpy(out + t * E, x, E * sizeof(float));
    }
    return 0;
}

void mt_model_head_from_input(const mt_model *m, const float *x, int32_t n_tok, float *logits,
                              mt_pool *pool) {
    const size_t E = (size_t)m->hp.n_embd;
    float *xn = malloc((size_t)n_tok * E * sizeof(float));
    if (!xn) abort(); /* the logits buffer is far larger */
    for (size_t t = 0; t < (size_t)n_tok; t++)
        mt_rmsnorm(x + t * E, m->output_norm, (int64_t)E, m->hp.eps, xn + t * E);
    mt_matmul(&m->output, xn, n_tok, logits, pool);
    free(xn);
}

void mt_model_head(const mt_model *m, const float *hidden, int32_t n_tok, float *logits,
                   mt_pool *pool) {
    float *x = malloc((size_t)n_tok * (size_t)m->hp.n_embd * sizeof(float));
    if (!x || mt_model_head_input(m, hidden, n_tok, x, NULL)) abort(); /* has_head: it has both */
    mt_model_head_from_input(m, x, n_tok, logits, pool);
    free(x);
}

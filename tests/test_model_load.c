/* test_model_load.c - a model file that is well-formed GGUF but wrong for
 * its architecture is refused with a message naming the tensor or key:
 * missing tensors, wrong shapes, unsupported types, missing or mistyped
 * hyperparameters, impossible expert counts, an unknown architecture, a
 * tensor the architecture does not use (also what mt_model_check_file says
 * without loading), a vocabulary whose token count is not the embedding's
 * or the output matrix's row count, and
 * kimi-k3 files whose KDA, attention-residual or latent tensors, block size
 * or layer pattern are wrong. Bad token ids and positions at run time are
 * errors too, not crashes. */
#include "check.h"
#include "moontail/quant.h"
#include "moontail/session.h"
#include "moontail/synth_model.h"

#include <math.h>

typedef struct mutation {
    const char *drop_tensor; /* leave this tensor out */
    const char *reshape;     /* give this tensor shape {ne0, ne1} (zeros) */
    int64_t ne0, ne1;
    const char *retype; /* store this tensor as NVFP4 (zeros), a type without kernels */
    const char *drop_key;
    const char *key;     /* set this key ... */
    uint32_t key_u32;    /* ... to this u32 */
    const char *key_str; /* ... or to this string */
    bool key_is_f32;     /* ... or to the float key_f32 */
    float key_f32;
    uint32_t key_arr_n;     /* ... or to an int32 array of this many 1s (key_u32 at index 0) */
    const char *add_tensor; /* also a tensor of this name (F32, 64 zeros) */
    uint64_t keep_tokens;   /* cut the vocabulary (tokens, types, scores) to this many */
} mutation;

static bool per_token_key(const char *key) {
    return strcmp(key, "tokenizer.ggml.tokens") == 0 ||
           strcmp(key, "tokenizer.ggml.token_type") == 0 ||
           strcmp(key, "tokenizer.ggml.scores") == 0;
}

static void copy_with(const gguf_file *f, const char *dst, const mutation *mu) {
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < f->n_kv; i++) {
        if (mu->drop_key && strcmp(f->kv[i].key, mu->drop_key) == 0) continue;
        gguf_value v = f->kv[i].value;
        if (mu->keep_tokens && per_token_key(f->kv[i].key) && v.type == GGUF_TYPE_ARRAY)
            v.arr.n = mu->keep_tokens;
        gguf_writer_set_value(w, f->kv[i].key, &v);
    }
    if (mu->key && mu->key_arr_n) {
        int32_t *a = malloc(mu->key_arr_n * sizeof *a);
        for (uint32_t i = 0; i < mu->key_arr_n; i++) a[i] = i == 0 ? (int32_t)mu->key_u32 : 1;
        gguf_writer_set_array(w, mu->key, GGUF_TYPE_INT32, a, mu->key_arr_n);
        free(a);
    } else if (mu->key && mu->key_str)
        gguf_writer_set_string(w, mu->key, mu->key_str);
    else if (mu->key && mu->key_is_f32)
        gguf_writer_set_f32(w, mu->key, mu->key_f32);
    else if (mu->key)
        gguf_writer_set_u32(w, mu->key, mu->key_u32);
    mt_error err = {{0}};
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (mu->drop_tensor && strcmp(t->name, mu->drop_tensor) == 0) continue;
        if (mu->reshape && strcmp(t->name, mu->reshape) == 0) {
            int64_t ne[2] = {mu->ne0, mu->ne1};
            float *z = calloc((size_t)(mu->ne0 * mu->ne1), sizeof(float));
            CHECK(gguf_writer_add_tensor(w, t->name, MT_TYPE_F32, 2, ne, z, &err) == 0, "%s",
                  err.msg);
            free(z);
        } else if (mu->retype && strcmp(t->name, mu->retype) == 0) {
            void *z = calloc(t->nbytes, 1);
            CHECK(gguf_writer_add_tensor(w, t->name, (mt_type)40 /* NVFP4 */, t->n_dims, t->ne, z,
                                         &err) == 0,
                  "%s", err.msg);
            free(z);
        } else {
            CHECK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &err) == 0,
                  "%s", err.msg);
        }
    }
    if (mu->add_tensor) {
        float z[64] = {0};
        int64_t ne[1] = {64};
        CHECK(gguf_writer_add_tensor(w, mu->add_tensor, MT_TYPE_F32, 1, ne, z, &err) == 0, "%s",
              err.msg);
    }
    CHECK(gguf_writer_write(w, dst, &err) == 0, "%s", err.msg);
    gguf_writer_free(w);
}

static void expect_load_error(const gguf_file *f, const mutation *mu, const char *want1,
                              const char *want2) {
    const char *path = check_tmp(".gguf");
    copy_with(f, path, mu);
    mt_error err = {{0}}, err2 = {{0}};
    mt_model *m = mt_model_load(path, &err);
    CHECK(m == NULL, "mutated model loaded (wanted error '%s')", want1);
    mt_model_free(m);
    CHECK(strstr(err.msg, path) != NULL, "error does not name the file: %s", err.msg);
    CHECK(strstr(err.msg, want1) && (!want2 || strstr(err.msg, want2)), "error lacks '%s'/'%s': %s",
          want1, want2 ? want2 : "", err.msg);
    /* the check at open says the same without loading */
    gguf_file *g = gguf_open(path, &err2);
    CHECK(g && mt_model_check_file(g, &err2) != 0 && strcmp(err.msg, err2.msg) == 0,
          "mt_model_check_file: '%s' vs the loader's '%s'", err2.msg, err.msg);
    gguf_close(g);
    unlink(path);
}

/* kimi-k3 files with missing or misshapen KDA, attention-residual and latent
 * tensors, a bad block size or layer pattern: one clear error each. The
 * model: 4 layers, MLA at 1 and 3 (KDA at 0 and 2), block size 2, latent 32. */
static void kimi_k3_errors(void) {
    mt_synth_params p = mt_synth_default_params("kimi-k3");
    p.n_layer = 4;
    p.mla_layers = "1,3";
    p.n_expert = 8;
    p.n_expert_used = 2;
    const char *src = check_tmp(".gguf");
    mt_error err = {{0}};
    CHECK(mt_synth_write(&p, src, &err) == 0, "mkmodel kimi-k3: %s", err.msg);
    gguf_file *f = gguf_open(src, &err);
    CHECK(f != NULL, "%s", err.msg);
    if (!f) return;
    const char *same = check_tmp(".gguf");
    copy_with(f, same, &(mutation){0});
    mt_model *m = mt_model_load(same, &err);
    CHECK(m != NULL && m->layers[0].is_kda && !m->layers[1].is_kda && m->hp.n_res_bank == 2,
          "faithful kimi-k3 copy: %s", m ? "wrong layer kinds" : err.msg);
    /* A KDA layer takes a session's positions in order: skipping one, or
     * going back to any but position 0 (a replay), is an error that changes
     * nothing; position 0 starts the state again. */
    mt_kv_cache *kv = m ? mt_kv_cache_new(m, 0, 4, 8, MT_KV_DEFAULT, &err) : NULL;
    float *hidden = m ? calloc(3 * (size_t)m->hp.n_hidden, sizeof(float)) : NULL;
    if (kv && hidden) {
        int32_t ids[3] = {5, 6, 7}, p0[3] = {0, 1, 2}, skip = 4, back = 1;
        CHECK(mt_model_embed(m, ids, 3, hidden, &err) == 0 &&
                  mt_model_forward_layers(m, kv, 0, 4, p0, 3, hidden, NULL, NULL, &err) == 0,
              "kimi-k3 forward: %s", err.msg);
        CHECK(mt_model_forward_layers(m, kv, 0, 4, &skip, 1, hidden, NULL, NULL, &err) != 0 &&
                  strstr(err.msg, "position 4") && strstr(err.msg, "at position 3"),
              "KDA position skip: %s", err.msg);
        CHECK(mt_model_forward_layers(m, kv, 0, 4, &back, 1, hidden, NULL, NULL, &err) != 0 &&
                  strstr(err.msg, "replay from position 0"),
              "KDA position rewind: %s", err.msg);
        CHECK(mt_model_forward_layers(m, kv, 0, 4, p0, 1, hidden, NULL, NULL, &err) == 0,
              "KDA restart at position 0: %s", err.msg);
    }
    free(hidden);
    mt_kv_cache_free(kv);
    mt_model_free(m);
    unlink(same);

    /* KDA tensors */
    expect_load_error(f, &(mutation){.drop_tensor = "blk.2.ssm_conv1d_k.weight"},
                      "blk.2.ssm_conv1d_k.weight", "missing");
    expect_load_error(f, &(mutation){.drop_tensor = "blk.0.ssm_a"}, "blk.0.ssm_a", "missing");
    expect_load_error(f, &(mutation){.reshape = "blk.0.ssm_beta.weight", .ne0 = 64, .ne1 = 3},
                      "blk.0.ssm_beta.weight", "shape");
    expect_load_error(f, &(mutation){.reshape = "blk.2.ssm_g.weight", .ne0 = 64, .ne1 = 32},
                      "blk.2.ssm_g.weight", "shape");
    expect_load_error(f, &(mutation){.drop_tensor = "blk.2.ssm_norm.weight"},
                      "blk.2.ssm_norm.weight", "missing");
    /* attention residuals */
    expect_load_error(f, &(mutation){.drop_tensor = "output_res_score.weight"},
                      "output_res_score.weight", "missing");
    expect_load_error(f, &(mutation){.drop_tensor = "blk.3.ffn_res_score.weight"},
                      "blk.3.ffn_res_score.weight", "missing");
    expect_load_error(f, &(mutation){.key = "kimi-k3.attn_res.block_size", .key_u32 = 5},
                      "attn_res.block_size 5", "at most the 4 layers");
    expect_load_error(f, &(mutation){.key = "kimi-k3.attn_res.block_size", .key_u32 = 0},
                      "block_size is 0", "residual scores");
    expect_load_error(f, &(mutation){.drop_key = "kimi-k3.attn_res.block_size"},
                      "kimi-k3.attn_res.block_size", "missing");
    /* latent experts */
    expect_load_error(f, &(mutation){.drop_tensor = "blk.2.ffn_routed_down.weight"},
                      "blk.2.ffn_routed_down.weight", "missing");
    expect_load_error(f, &(mutation){.reshape = "blk.3.ffn_routed_up.weight", .ne0 = 64, .ne1 = 64},
                      "blk.3.ffn_routed_up.weight", "shape");
    expect_load_error(f, &(mutation){.key = "kimi-k3.expert_latent_length", .key_u32 = 64},
                      "blk.1.ffn_routed_down.weight", "shape");
    /* the layer pattern */
    expect_load_error(
        f, &(mutation){.key = "kimi-k3.attention.head_count_kv", .key_u32 = 0, .key_arr_n = 3},
        "attention.head_count_kv", "3 entries");
    expect_load_error(
        f, &(mutation){.key = "kimi-k3.attention.head_count_kv", .key_u32 = 4, .key_arr_n = 4},
        "layer 0 has head_count_kv 4", NULL);
    /* a KDA layer made MLA: its MLA tensors are missing */
    expect_load_error(
        f, &(mutation){.key = "kimi-k3.attention.head_count_kv", .key_u32 = 1, .key_arr_n = 4},
        "blk.0.attn_q_a.weight", "missing");
    expect_load_error(f, &(mutation){.drop_key = "kimi-k3.kda.head_dim"}, "kimi-k3.kda.head_dim",
                      "missing");
    expect_load_error(f, &(mutation){.key = "kimi-k3.activation.situ_beta", .key_str = "2"},
                      "kimi-k3.activation.situ_beta", NULL);
    gguf_close(f);
    unlink(src);
}

int main(void) {
    kimi_k3_errors();
    mt_synth_params p = mt_synth_default_params("qwen3moe");
    const char *src = check_tmp(".gguf");
    mt_error err = {{0}};
    CHECK(mt_synth_write(&p, src, &err) == 0, "mkmodel: %s", err.msg);
    gguf_file *f = gguf_open(src, &err);
    CHECK(f != NULL, "%s", err.msg);
    if (!f) return check_report("test_model_load");

    /* The unmodified copy loads. */
    const char *same = check_tmp(".gguf");
    copy_with(f, same, &(mutation){0});
    mt_model *m = mt_model_load(same, &err);
    CHECK(m != NULL, "faithful copy refused: %s", err.msg);
    unlink(same);

    expect_load_error(f, &(mutation){.drop_tensor = "blk.1.attn_k_norm.weight"},
                      "blk.1.attn_k_norm.weight", "missing");
    expect_load_error(f, &(mutation){.drop_tensor = "blk.0.ffn_down_exps.weight"}, "ffn_down_exps",
                      "missing");
    expect_load_error(f, &(mutation){.reshape = "blk.0.attn_q.weight", .ne0 = 256, .ne1 = 128},
                      "blk.0.attn_q.weight", "shape");
    expect_load_error(f, &(mutation){.retype = "blk.1.attn_v.weight"}, "NVFP4", "cannot compute");
    expect_load_error(f, &(mutation){.drop_key = "qwen3moe.block_count"}, "qwen3moe.block_count",
                      "missing");
    expect_load_error(f, &(mutation){.key = "qwen3moe.embedding_length", .key_str = "256"},
                      "qwen3moe.embedding_length", "string");
    expect_load_error(f, &(mutation){.key = "qwen3moe.expert_used_count", .key_u32 = 9},
                      "expert counts", NULL);
    expect_load_error(f, &(mutation){.key = "qwen3moe.attention.head_count_kv", .key_u32 = 3},
                      "n_head_kv", NULL);
    expect_load_error(f, &(mutation){.key = "qwen3moe.attention.head_count", .key_u32 = 0},
                      "n_head 0", NULL);
    /* floats the forward pass computes with, and a routing the engine does not know */
    expect_load_error(
        f, &(mutation){.key = "qwen3moe.rope.freq_base", .key_is_f32 = true, .key_f32 = NAN},
        "'qwen3moe.rope.freq_base' is nan", "finite number above 0");
    expect_load_error(f,
                      &(mutation){.key = "qwen3moe.attention.layer_norm_rms_epsilon",
                                  .key_is_f32 = true,
                                  .key_f32 = INFINITY},
                      "'qwen3moe.attention.layer_norm_rms_epsilon' is inf", NULL);
    expect_load_error(f,
                      &(mutation){.key = "qwen3moe.rope.scaling.factor",
                                  .key_is_f32 = true,
                                  .key_f32 = -INFINITY},
                      "'qwen3moe.rope.scaling.factor' is -inf", NULL);
    expect_load_error(f, &(mutation){.key = "qwen3moe.expert_gating_func", .key_u32 = 5},
                      "'qwen3moe.expert_gating_func' is 5", "does not know");
    expect_load_error(f, &(mutation){.key = "general.architecture", .key_str = "gpt2"},
                      "'gpt2' is not supported", NULL);
    expect_load_error(f, &(mutation){.drop_key = "general.architecture"}, "general.architecture",
                      NULL);
    /* a tensor the architecture does not use: named, with why when it is clear */
    expect_load_error(f, &(mutation){.add_tensor = "blk.0.ffn_norm_extra.weight"},
                      "tensor 'blk.0.ffn_norm_extra.weight' is not used by the qwen3moe loader",
                      NULL);
    expect_load_error(f, &(mutation){.add_tensor = "blk.2.attn_norm.weight"},
                      "blk.2.attn_norm.weight", "past the 2 layers of qwen3moe.block_count");
    expect_load_error(f, &(mutation){.add_tensor = "blk.1.nextn.eh_proj.weight"},
                      "blk.1.nextn.eh_proj.weight", "multi-token-prediction");
    expect_load_error(f, &(mutation){.add_tensor = "rope_freqs.weight"}, "rope_freqs.weight",
                      "not used");
    /* A vocabulary that does not fit the embedding or the output matrix
     * (llama.cpp refuses it: "wrong shape"): both counts are named. */
    const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    int64_t n_embd = emb ? emb->ne[0] : 0, n_vocab = emb ? emb->ne[1] : 0;
    char want[160];
    snprintf(want, sizeof want,
             "has %lld tokens (tokenizer.ggml.tokens) but token_embd.weight has"
             " %lld rows",
             (long long)n_vocab - 40, (long long)n_vocab);
    expect_load_error(f, &(mutation){.keep_tokens = (uint64_t)n_vocab - 40}, want,
                      "convert the model again with its own tokenizer");
    snprintf(want, sizeof want,
             "has %lld tokens (tokenizer.ggml.tokens) but token_embd.weight has"
             " %lld rows",
             (long long)n_vocab, (long long)n_vocab - 8);
    expect_load_error(
        f, &(mutation){.reshape = "token_embd.weight", .ne0 = n_embd, .ne1 = n_vocab - 8}, want,
        "must be equal");
    snprintf(want, sizeof want,
             "has %lld tokens (tokenizer.ggml.tokens) but output.weight has"
             " %lld rows",
             (long long)n_vocab, (long long)n_vocab + 8);
    expect_load_error(f, &(mutation){.reshape = "output.weight", .ne0 = n_embd, .ne1 = n_vocab + 8},
                      want, "must be equal");
    CHECK(mt_model_check_file(f, &err) == 0, "check_file on the good model: %s", err.msg);

    /* Run-time inputs are checked too. */
    if (m) {
        mt_session *s = mt_session_new(m, 4, MT_KV_DEFAULT, 1, &err);
        float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
        int32_t bad_id = m->hp.n_vocab;
        CHECK(mt_session_eval(s, &bad_id, 1, 0, false, logits, &err) != 0 &&
                  strstr(err.msg, "outside the vocabulary"),
              "bad token id: %s", err.msg);
        int32_t ids[5] = {1, 2, 3, 4, 5};
        CHECK(mt_session_eval(s, ids, 5, 0, false, logits, &err) != 0 && strstr(err.msg, "--ctx"),
              "context overflow: %s", err.msg);
        CHECK(mt_session_eval(s, ids, 4, 0, false, logits, &err) == 0, "good eval: %s", err.msg);
        free(logits);
        mt_session_free(s);
        mt_model_free(m);
    }
    gguf_close(f);
    unlink(src);
    return check_report("test_model_load");
}

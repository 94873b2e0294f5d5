/* test_model_load.c - a model file that is well-formed GGUF but wrong for
 * its architecture is refused with a message naming the tensor or key:
 * missing tensors, wrong shapes, unsupported types, missing or mistyped
 * hyperparameters, impossible expert counts, an unknown architecture. Bad
 * token ids and positions at run time are errors too, not crashes. */
#include "check.h"
#include "moontail/quant.h"
#include "moontail/session.h"
#include "moontail/synth_model.h"

typedef struct mutation {
    const char *drop_tensor; /* leave this tensor out */
    const char *reshape;     /* give this tensor shape {ne0, ne1} (zeros) */
    int64_t ne0, ne1;
    const char *retype; /* store this tensor as Q5_K (zeros) */
    const char *drop_key;
    const char *key;     /* set this key ... */
    uint32_t key_u32;    /* ... to this u32 */
    const char *key_str; /* ... or to this string */
} mutation;

static void copy_with(const gguf_file *f, const char *dst, const mutation *mu) {
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (!mu->drop_key || strcmp(f->kv[i].key, mu->drop_key) != 0)
            gguf_writer_set_value(w, f->kv[i].key, &f->kv[i].value);
    if (mu->key && mu->key_str)
        gguf_writer_set_string(w, mu->key, mu->key_str);
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
            CHECK(gguf_writer_add_tensor(w, t->name, (mt_type)13 /* Q5_K */, t->n_dims, t->ne, z,
                                         &err) == 0,
                  "%s", err.msg);
            free(z);
        } else {
            CHECK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &err) == 0,
                  "%s", err.msg);
        }
    }
    CHECK(gguf_writer_write(w, dst, &err) == 0, "%s", err.msg);
    gguf_writer_free(w);
}

static void expect_load_error(const gguf_file *f, const mutation *mu, const char *want1,
                              const char *want2) {
    const char *path = check_tmp(".gguf");
    copy_with(f, path, mu);
    mt_error err = {{0}};
    mt_model *m = mt_model_load(path, &err);
    CHECK(m == NULL, "mutated model loaded (wanted error '%s')", want1);
    mt_model_free(m);
    CHECK(strstr(err.msg, path) != NULL, "error does not name the file: %s", err.msg);
    CHECK(strstr(err.msg, want1) && (!want2 || strstr(err.msg, want2)), "error lacks '%s'/'%s': %s",
          want1, want2 ? want2 : "", err.msg);
    unlink(path);
}

int main(void) {
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
    expect_load_error(f, &(mutation){.retype = "blk.1.attn_v.weight"}, "Q5_K", "cannot compute");
    expect_load_error(f, &(mutation){.drop_key = "qwen3moe.block_count"}, "qwen3moe.block_count",
                      "missing");
    expect_load_error(f, &(mutation){.key = "qwen3moe.embedding_length", .key_str = "256"},
                      "qwen3moe.embedding_length", "string");
    expect_load_error(f, &(mutation){.key = "qwen3moe.expert_used_count", .key_u32 = 9},
                      "expert counts", NULL);
    expect_load_error(f, &(mutation){.key = "qwen3moe.attention.head_count_kv", .key_u32 = 3},
                      "n_head_kv", NULL);
    expect_load_error(f, &(mutation){.key = "general.architecture", .key_str = "gpt2"},
                      "'gpt2' is not supported", NULL);
    expect_load_error(f, &(mutation){.drop_key = "general.architecture"}, "general.architecture",
                      NULL);

    /* Run-time inputs are checked too. */
    if (m) {
        mt_session *s = mt_session_new(m, 4, 1, &err);
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

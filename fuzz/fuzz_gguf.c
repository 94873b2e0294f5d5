/* fuzz_gguf.c - libFuzzer target for everything that reads a GGUF file from
 * an untrusted source: the reader (gguf_open_buffer, src/core/gguf_read.c),
 * the typed getters, the shard metadata reader and hash check
 * (mt_shard_info_read, mt_shard_verify, src/model/shard_check.c), the
 * layout a planner reads (mt_shard_layout_read), the vocabulary loader
 * (mt_vocab_load) and the model loader (mt_model_from_gguf), then two
 * tokens through a whole model it accepted. Input: the file's bytes.
 * Seeds: a tiny synthetic model and shards cut from it, and a tiny kimi-k3. */
#include "fuzz_target.h"
#include "moontail/gguf.h"
#include "moontail/model.h"
#include "moontail/session.h"
#include "moontail/shard.h"
#include "moontail/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A model the loader accepted runs: two tokens through every layer and the
 * head (whatever the weights hold, no read outside them, no crash). */
static void run_two_tokens(const mt_model *m) {
    if (!m->has_head || !m->has_attention || m->layer_begin != 0 || m->layer_end != m->hp.n_layer ||
        m->hp.n_vocab < 2)
        return;
    mt_error err = {0};
    mt_session *s = mt_session_new(m, 2, MT_KV_DEFAULT, 1, &err);
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    int32_t ids[2] = {0, 1};
    if (s && logits) (void)mt_session_eval(s, ids, 2, 0, false, logits, &err);
    free(logits);
    mt_session_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* an exact-size copy, so reading one byte too far is caught */
    uint8_t *buf = malloc(size ? size : 1);
    if (size) memcpy(buf, data, size);
    mt_error err = {0};
    gguf_file *f = gguf_open_buffer(buf, size, "fuzz.gguf", &err);
    if (!f) {
        if (!err.msg[0]) abort(); /* a refusal names its reason */
        free(buf);
        return 0;
    }
    uint64_t u;
    uint32_t u32;
    float fl;
    bool b;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const char *k = f->kv[i].key;
        mt_error e2 = {0};
        (void)gguf_get_u64(f, k, &u, &e2);
        (void)gguf_get_u32(f, k, &u32, &e2);
        (void)gguf_get_f32(f, k, &fl, &e2);
        (void)gguf_get_bool(f, k, &b, &e2);
        free(gguf_get_string(f, k, &e2));
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (gguf_find_tensor(f, t->name) == NULL) abort();
        /* the whole tensor lies inside the buffer */
        const uint8_t *p = t->data;
        if (p < buf || p > buf + size || t->nbytes > (size_t)(buf + size - p)) abort();
    }
    mt_shard_info info;
    memset(&info, 0, sizeof info);
    if (mt_shard_info_read(f, &info, &err) == 0) {
        (void)mt_shard_verify(f, &err);
        mt_shard_info_free(&info);
    }
    mt_shard_layout l;
    if (mt_shard_layout_read(f, &l, &err) == 0) mt_shard_layout_free(&l);
    mt_vocab *v = mt_vocab_load(f, &err);
    if (v) {
        int32_t *ids = NULL;
        if (mt_tokenize(v, "Hello, world! 123", 17, true, true, &ids, &err) >= 0) free(ids);
        mt_vocab_free(v);
    }
    gguf_close(f);
    /* the model loader takes the file */
    f = gguf_open_buffer(buf, size, "fuzz.gguf", &err);
    if (f) {
        mt_model *m = mt_model_from_gguf(f, &err);
        if (m && size < (1u << 20)) run_two_tokens(m);
        if (m) mt_model_free(m);
    }
    free(buf);
    return 0;
}

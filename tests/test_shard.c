/* test_shard.c - shards and shard plans (moontail/shard.h).
 *
 * A shard read back holds exactly the model's bytes for what it says it
 * holds (byte compare, expert slices included), all of the model's metadata
 * plus valid moontail.shard.* keys, and opens like any GGUF (a whole-model
 * shard even loads as a model). One flipped byte makes mt_shard_verify name
 * the tensor. cell:N and swarm:N plans of every architecture pass
 * mt_plan_check; manifests with a missing, duplicated, foreign or tampered
 * shard fail with a message naming the problem; bad selections give clear
 * errors. Every shard of a plan passes the loader's checks at open
 * (mt_model_check_file). A model written as 3 parts (gguf_split_write) and
 * opened from its last part has the single file's identity (the same
 * source_id, also the id written into the parts), layout, bit-identical
 * logits and byte-identical shards; one part opened alone is refused for
 * slicing. */
#include "check.h"
#include "moontail/file.h"
#include "moontail/session.h"
#include "moontail/model.h"
#include "moontail/shard.h"
#include "moontail/synth_model.h"

#include <dirent.h>
#include <jansson.h>
#include <sys/stat.h>

/* ------------------------------------------------------------- helpers */

/* A small quantized model: n_embd 128, Q8_0 matrices (F32 norms, routers). */
static const char *make_model(const char *arch, uint64_t seed, int32_t n_layer) {
    mt_synth_params p = mt_synth_default_params(arch);
    p.type = MT_TYPE_Q8_0;
    p.seed = seed;
    p.n_layer = n_layer;
    p.n_embd = 128;
    p.n_head = 4;
    p.head_dim = 32;
    p.n_ff = 128;
    p.n_ff_exp = 64;
    if (strncmp(arch, "kimi", 4) == 0) { /* KDA at 0 and 2, MLA at 1 and 3 */
        p.mla_layers = "1,3";
        p.n_expert = 8;
        p.n_expert_used = 2;
        p.expert_type = MT_TYPE_Q8_0;
        p.kv_lora = 64;
    } else if (strcmp(arch, "deepseek2") == 0) {
        p.q_lora = 64;
        p.kv_lora = 64;
        p.qk_nope = 32;
        p.qk_rope = 16;
        p.v_dim = 32;
    }
    const char *path = check_tmp(".gguf");
    mt_error err = {{0}};
    CHECK(mt_synth_write(&p, path, &err) == 0, "mkmodel %s: %s", arch, err.msg);
    return path;
}

static char *tmp_dir(void) {
    static char buf[8][256];
    static int k;
    const char *p = check_tmp("-dir");
    snprintf(buf[k & 7], sizeof buf[0], "%s", p);
    mt_dir_make(buf[k & 7], false);
    return buf[k++ & 7];
}

/* Removes dir and what it holds (files and directories, any depth). */
static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        mt_file_info fi;
        if (mt_file_stat(p, &fi) == 0 && fi.dir)
            rm_dir(p);
        else
            mt_file_remove(p);
    }
    if (d) closedir(d);
    CHECK(mt_dir_remove(dir) == 0, "cannot remove %s", dir);
}

/* Copies a file, flipping the byte at `at` (no flip when at < 0). */
static void copy_flip(const char *src, const char *dst, long at) {
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    CHECK(in && out, "copy %s -> %s", src, dst);
    if (!in || !out) {
        if (in) fclose(in);
        if (out) fclose(out);
        return;
    }
    int c;
    long pos = 0;
    while ((c = fgetc(in)) != EOF) fputc(pos++ == at ? c ^ 0x5a : c, out);
    fclose(in);
    fclose(out);
}

static bool has(const char *s, const char *want) {
    return s && strstr(s, want) != NULL;
}

/* ------------------------------------------------- split and read back */

/* Every tensor of the shard equals the right bytes of the model. */
static void check_bytes(const gguf_file *model, const gguf_file *sf, const mt_shard_info *in) {
    for (uint64_t i = 0; i < sf->n_tensors; i++) {
        const gguf_tensor *t = &sf->tensors[i];
        const gguf_tensor *m = gguf_find_tensor(model, t->name);
        CHECK(m != NULL, "shard tensor '%s' not in model", t->name);
        if (!m) continue;
        CHECK(t->type == m->type && t->ne[0] == m->ne[0] && t->ne[1] == m->ne[1],
              "tensor '%s' type/shape differs", t->name);
        bool sliced = strstr(t->name, "_exps.") && in->n_experts >= 0;
        if (!sliced) {
            CHECK(t->nbytes == m->nbytes && memcmp(t->data, m->data, m->nbytes) == 0,
                  "tensor '%s' bytes differ from the model's", t->name);
            continue;
        }
        CHECK(t->ne[2] == in->n_experts, "'%s' holds %lld experts", t->name, (long long)t->ne[2]);
        for (int32_t j = 0; j < in->n_experts && j < t->ne[2]; j++)
            CHECK(memcmp((const char *)t->data + (size_t)j * t->nb[2],
                         (const char *)m->data + (size_t)in->experts[j] * m->nb[2], m->nb[2]) == 0,
                  "'%s' expert slot %d differs from model expert %d", t->name, j, in->experts[j]);
    }
}

static void test_split_read_back(void) {
    const char *path = make_model("qwen3moe", 1, 4);
    mt_error err = {{0}};
    gguf_file *model = gguf_open(path, &err);
    CHECK(model, "%s", err.msg);
    if (!model) return;

    /* an expert shard: layers 1..2, experts {1, 4, 6}, no attention */
    const int32_t ids[] = {1, 4, 6};
    mt_shard_spec spec = {1, 3, false, false, ids, 3};
    const char *out = check_tmp(".gguf");
    CHECK(mt_shard_write(model, &spec, out, &err) == 0, "split: %s", err.msg);
    gguf_file *sf = gguf_open(out, &err);
    CHECK(sf, "shard does not open as GGUF: %s", err.msg);
    if (sf) {
        mt_shard_info in;
        CHECK(mt_shard_info_read(sf, &in, &err) == 0, "info: %s", err.msg);
        CHECK(in.version == 1 && in.layer_begin == 1 && in.layer_end == 3 && !in.attention &&
                  !in.head && in.source_n_expert == 8,
              "shard info fields wrong");
        CHECK(in.n_experts == 3 && in.experts && in.experts[0] == 1 && in.experts[1] == 4 &&
                  in.experts[2] == 6,
              "expert ids wrong");
        CHECK(sf->n_tensors == 6, "expected 3 expert tensors x 2 layers, got %llu",
              (unsigned long long)sf->n_tensors);
        CHECK(!gguf_find_tensor(sf, "blk.1.attn_q.weight") &&
                  !gguf_find_tensor(sf, "blk.0.ffn_up_exps.weight") &&
                  gguf_find_tensor(sf, "blk.2.ffn_down_exps.weight"),
              "wrong tensors selected");
        char id[MT_SHARD_HASH_HEX];
        CHECK(mt_shard_source_id(model, id, NULL, &err) == 0 && strcmp(id, in.source_id) == 0,
              "source_id differs from the model's");
        check_bytes(model, sf, &in);
        /* every model key is there, with the same type */
        for (uint64_t i = 0; i < model->n_kv; i++) {
            const gguf_kv *kv = gguf_find_kv(sf, model->kv[i].key);
            CHECK(kv && kv->value.type == model->kv[i].value.type, "key '%s' lost",
                  model->kv[i].key);
        }
        CHECK(sf->n_kv == model->n_kv + 10, "shard has %llu keys, model %llu (+10 expected)",
              (unsigned long long)sf->n_kv, (unsigned long long)model->n_kv);
        CHECK(mt_shard_verify(sf, &err) == 0, "verify: %s", err.msg);
        /* a shard is not a model to split again */
        CHECK(mt_shard_write(sf, &spec, check_tmp(".gguf"), &err) < 0 &&
                  has(err.msg, "already a shard"),
              "splitting a shard: %s", err.msg);
        mt_shard_info_free(&in);

        /* one flipped byte inside blk.2.ffn_up_exps.weight: verify names it */
        const gguf_tensor *t = gguf_find_tensor(sf, "blk.2.ffn_up_exps.weight");
        const char *bad = check_tmp(".gguf");
        copy_flip(out, bad, (long)(sf->data_offset + t->offset + t->nbytes / 2));
        gguf_file *bf = gguf_open(bad, &err);
        CHECK(bf, "tampered shard should still parse: %s", err.msg);
        if (bf) {
            CHECK(mt_shard_verify(bf, &err) < 0 && has(err.msg, "blk.2.ffn_up_exps.weight") &&
                      has(err.msg, "stored hash"),
                  "tamper not named: %s", err.msg);
            /* one tensor at a time (a node's background re-check): only that one fails */
            mt_shard_info bi;
            CHECK(mt_shard_info_read(bf, &bi, &err) == 0, "tampered info: %s", err.msg);
            int failed = 0, named = 0;
            for (uint64_t i = 0; i < bi.n_tensors; i++) {
                mt_error e1 = {{0}};
                mt_shard_io io1 = {.threads = 1};
                if (mt_shard_verify_tensor(bf, &bi, i, &io1, &e1) != 0) {
                    failed++;
                    named += has(e1.msg, "'blk.2.ffn_up_exps.weight'") && has(e1.msg, bad) &&
                             has(e1.msg, "fetch or split it again");
                }
            }
            CHECK(failed == 1 && named == 1, "per-tensor checks: %d failed, %d named it", failed,
                  named);
            CHECK(mt_shard_verify_tensor(bf, &bi, bi.n_tensors, NULL, &err) < 0 &&
                      has(err.msg, "outside"),
                  "a tensor past the end: %s", err.msg);
            mt_shard_info_free(&bi);
            gguf_close(bf);
        }
        unlink(bad);
        gguf_close(sf);
    }
    unlink(out);

    /* everything: a shard that is the whole model loads as a model */
    mt_shard_spec all = {0, 4, true, true, NULL, -1};
    out = check_tmp(".gguf");
    CHECK(mt_shard_write(model, &all, out, &err) == 0, "split all: %s", err.msg);
    if ((sf = gguf_open(out, &err))) {
        mt_shard_info in;
        CHECK(mt_shard_info_read(sf, &in, &err) == 0 && in.n_experts == -1 && !in.experts,
              "all-experts info: %s", err.msg);
        CHECK(!gguf_find_kv(sf, "moontail.shard.experts"), "experts key present for all");
        CHECK(sf->n_tensors == model->n_tensors, "whole shard lost tensors");
        check_bytes(model, sf, &in);
        mt_shard_info_free(&in);
        gguf_close(sf);
    }
    mt_model *m = mt_model_load(out, &err);
    CHECK(m, "whole-model shard does not load as a model: %s", err.msg);
    mt_model_free(m);
    unlink(out);

    /* head only */
    mt_shard_spec head = {0, 0, false, true, NULL, 0};
    out = check_tmp(".gguf");
    CHECK(mt_shard_write(model, &head, out, &err) == 0, "split head: %s", err.msg);
    if ((sf = gguf_open(out, &err))) {
        CHECK(sf->n_tensors == 3 && gguf_find_tensor(sf, "token_embd.weight") &&
                  gguf_find_tensor(sf, "output.weight"),
              "head shard tensors wrong");
        CHECK(mt_shard_verify(sf, &err) == 0, "head verify: %s", err.msg);
        gguf_close(sf);
    }
    unlink(out);

    /* a full model is "not a shard", cleanly */
    mt_shard_info in;
    CHECK(mt_shard_info_read(model, &in, &err) == MT_SHARD_NOT_A_SHARD &&
              has(err.msg, "not a MoonTail shard"),
          "full model as shard: %s", err.msg);
    gguf_close(model);
    unlink(path);
}

/* ----------------------------------------------------------------- plans */

/* The shards of a cell plan, run in this process stage after stage, give
 * the whole model's logits bit for bit: a stage's shard and the hidden state
 * (with kimi-k3's banked checkpoints) carry everything the layers need. */
static void check_pipeline(const char *arch, const char *path, const char *dir, int32_t n_stage) {
    char base[256], p[800];
    snprintf(base, sizeof base, "%s", strrchr(path, '/') + 1);
    *strstr(base, ".gguf") = 0;
    snprintf(p, sizeof p, "%s/%s-head-0.gguf", dir, base);
    mt_error err = {{0}};
    mt_model *whole = mt_model_load(path, &err), *head = whole ? mt_model_load(p, &err) : NULL;
    CHECK(whole && head, "%s pipeline: %s", arch, err.msg);
    enum { N = 7 };
    int32_t ids[N] = {5, 17, 3, 99, 42, 7, 120}, pos[N];
    for (int i = 0; i < N; i++) pos[i] = i;
    const size_t W = whole ? (size_t)whole->hp.n_hidden : 1, V = whole ? whole->hp.n_vocab : 1;
    float *h = malloc(N * W * sizeof(float)), *want = malloc(N * V * sizeof(float)),
          *got = calloc(N * V, sizeof(float));
    mt_session *s = whole ? mt_session_new(whole, N, MT_KV_DEFAULT, 1, &err) : NULL;
    int rc = s && head ? mt_session_eval(s, ids, N, 0, true, want, &err) : -1;
    if (rc == 0) rc = mt_model_embed(head, ids, N, h, &err);
    for (int32_t k = 0; rc == 0 && k < n_stage; k++) {
        snprintf(p, sizeof p, "%s/%s-stage-%d.gguf", dir, base, k);
        mt_model *st = mt_model_load(p, &err);
        mt_kv_cache *kv =
            st ? mt_kv_cache_new(st, st->layer_begin, st->layer_end, N, MT_KV_DEFAULT, &err) : NULL;
        rc = kv ? mt_model_forward_layers(st, kv, st->layer_begin, st->layer_end, pos, N, h, NULL,
                                          NULL, &err)
                : -1;
        mt_kv_cache_free(kv);
        mt_model_free(st);
    }
    CHECK(rc == 0, "%s pipeline of %d stages: %s", arch, n_stage, err.msg);
    if (rc == 0) mt_model_head(head, h, N, got, NULL);
    CHECK(rc == 0 && memcmp(want, got, N * V * sizeof(float)) == 0,
          "%s: %d stages give other logits than the whole model", arch, n_stage);
    free(h), free(want), free(got);
    mt_session_free(s);
    mt_model_free(head);
    mt_model_free(whole);
}

static void check_plan(const char *arch, int32_t n_layer, mt_plan_mode mode, int32_t n) {
    const char *path = make_model(arch, 7, n_layer);
    mt_error err = {{0}};
    gguf_file *model = gguf_open(path, &err);
    CHECK(model, "%s", err.msg);
    if (!model) return;
    mt_plan plan;
    int rc = mode == MT_PLAN_CELL ? mt_plan_cell(model, n, &plan, &err)
                                  : mt_plan_swarm(model, n, &plan, &err);
    CHECK(rc == 0, "%s %s:%d: %s", arch, mt_plan_mode_name(mode), n, err.msg);
    if (rc == 0) {
        CHECK(plan.n_shards == n + 1, "plan has %d shards", plan.n_shards);
        if (mode == MT_PLAN_CELL) {
            /* stages are contiguous, non-empty and cover every layer */
            int32_t next = 0;
            uint64_t lo = UINT64_MAX, hi = 0;
            for (int32_t k = 1; k < plan.n_shards; k++) {
                const mt_shard_spec *s = &plan.shards[k].spec;
                CHECK(s->layer_begin == next && s->layer_end > s->layer_begin, "stage %d is %d:%d",
                      k - 1, s->layer_begin, s->layer_end);
                next = s->layer_end;
                uint64_t b = plan.shards[k].tensor_bytes;
                lo = b < lo ? b : lo;
                hi = b > hi ? b : hi;
            }
            CHECK(next == n_layer, "stages end at %d", next);
            CHECK(plan.shards[0].spec.head && plan.shards[0].role == MT_PLAN_ROLE_HEAD,
                  "shard 0 is not the head");
            /* equal MoE layers and n | n_layer: stages differ by at most the dense layer */
            if (strcmp(arch, "deepseek2") != 0 && strncmp(arch, "kimi", 4) != 0 && n_layer % n == 0)
                CHECK(hi == lo, "%s cell:%d unbalanced: %llu vs %llu", arch, n,
                      (unsigned long long)lo, (unsigned long long)hi);
        } else {
            /* expert ranges are contiguous, differ in size by at most one, cover all */
            mt_shard_layout l;
            CHECK(mt_shard_layout_read(model, &l, &err) == 0, "%s", err.msg);
            int32_t next = 0, lo = INT32_MAX, hi = 0;
            for (int32_t k = 1; k < plan.n_shards; k++) {
                const mt_shard_spec *s = &plan.shards[k].spec;
                for (int32_t j = 0; j < s->n_experts; j++)
                    CHECK(s->experts[j] == next + j, "shard %d expert %d", k, j);
                next += s->n_experts;
                lo = s->n_experts < lo ? s->n_experts : lo;
                hi = s->n_experts > hi ? s->n_experts : hi;
                CHECK(!s->attention && !s->head && s->layer_end == n_layer, "expert shard %d", k);
            }
            CHECK(next == l.n_expert && hi - lo <= 1, "swarm covers %d of %d experts", next,
                  l.n_expert);
            CHECK(plan.shards[0].role == MT_PLAN_ROLE_BACKBONE && plan.shards[0].spec.head &&
                      plan.shards[0].spec.attention && plan.shards[0].spec.n_experts == 0,
                  "backbone spec wrong");
            mt_shard_layout_free(&l);
        }
        char *dir = tmp_dir(), manifest[512], *report = NULL;
        CHECK(mt_plan_write(model, &plan, dir, manifest, sizeof manifest, &err) == 0,
              "plan write: %s", err.msg);
        /* every shard is a file the loader takes: nothing missing, nothing stray */
        char stem[256];
        snprintf(stem, sizeof stem, "%s", strrchr(path, '/') + 1);
        *strstr(stem, ".gguf") = 0;
        for (int32_t k = 0; k < plan.n_shards; k++) {
            char sp[600];
            snprintf(sp, sizeof sp, "%s/%s-%s-%d.gguf", dir, stem,
                     mt_plan_role_name(plan.shards[k].role), plan.shards[k].index);
            gguf_file *sf = gguf_open(sp, &err);
            CHECK(sf && mt_model_check_file(sf, &err) == 0, "%s %s:%d shard %s: %s", arch,
                  mt_plan_mode_name(mode), n, sp, err.msg);
            gguf_close(sf);
        }
        rc = mt_plan_check(path, manifest, &report, &err);
        CHECK(rc == 0 && has(report, "ok:"), "%s %s:%d check: %s", arch, mt_plan_mode_name(mode), n,
              report ? report : err.msg);
        if (mode == MT_PLAN_CELL) check_pipeline(arch, path, dir, n);
        if (mode == MT_PLAN_SWARM && strcmp(arch, "deepseek2") == 0) {
            /* the leading dense layer has no routed experts: all in the backbone */
            char p[600];
            snprintf(p, sizeof p, "%s/%s", dir, strrchr(path, '/') + 1);
            strcpy(strstr(p, ".gguf"), "-experts-0.gguf");
            gguf_file *ef = gguf_open(p, &err);
            CHECK(ef && !gguf_find_tensor(ef, "blk.0.ffn_up.weight") &&
                      !gguf_find_tensor(ef, "blk.0.ffn_up_exps.weight") &&
                      gguf_find_tensor(ef, "blk.1.ffn_up_exps.weight"),
                  "deepseek2 expert shard content wrong: %s", err.msg);
            gguf_close(ef);
        }
        free(report);
        rm_dir(dir);
        mt_plan_free(&plan);
    }
    gguf_close(model);
    unlink(path);
}

/* ------------------------------------------------------- bad manifests */

/* Writes a copy of manifest `src` edited by `edit` and checks it. */
static int check_edited(const char *model, const char *src, void (*edit)(json_t *, void *),
                        void *ctx, char **report) {
    json_error_t je;
    json_t *root = json_load_file(src, 0, &je);
    CHECK(root, "manifest: %s", je.text);
    edit(root, ctx);
    char dst[600];
    snprintf(dst, sizeof dst, "%s.edited.json", src);
    CHECK(json_dump_file(root, dst, JSON_INDENT(1)) == 0, "cannot write %s", dst);
    json_decref(root);
    mt_error err = {{0}};
    *report = NULL;
    int rc = mt_plan_check(model, dst, report, &err);
    unlink(dst);
    return rc;
}

static void drop_last(json_t *root, void *ctx) {
    (void)ctx;
    json_t *s = json_object_get(root, "shards");
    json_array_remove(s, json_array_size(s) - 1);
}
static void dup_first(json_t *root, void *ctx) {
    (void)ctx;
    json_t *s = json_object_get(root, "shards");
    json_array_append_new(s, json_deep_copy(json_array_get(s, 1)));
}
static void dup_all(json_t *root, void *replicas) {
    json_t *s = json_object_get(root, "shards");
    size_t n = json_array_size(s);
    for (size_t i = 0; i < n; i++) json_array_append_new(s, json_deep_copy(json_array_get(s, i)));
    json_object_set_new(root, "replicas", json_integer(*(int *)replicas));
}
static void set_replicas(json_t *root, void *replicas) {
    json_object_set_new(root, "replicas", json_integer(*(int *)replicas));
}
static void set_file(json_t *root, void *file) {
    json_object_set_new(json_array_get(json_object_get(root, "shards"), 1), "file",
                        json_string(file));
}
static void set_layers(json_t *root, void *ctx) {
    (void)ctx;
    json_t *e = json_array_get(json_object_get(root, "shards"), 2);
    json_object_set_new(e, "layers", json_pack("[ii]", 0, 1));
    json_object_set_new(e, "experts", json_null());
}
static void set_source(json_t *root, void *id) {
    json_object_set_new(root, "source_id", json_string(id));
}

static void test_bad_manifests(void) {
    const char *path = make_model("qwen3moe", 1, 2), *other = make_model("qwen3moe", 2, 2);
    mt_error err = {{0}};
    gguf_file *model = gguf_open(path, &err), *omodel = gguf_open(other, &err);
    CHECK(model && omodel, "%s", err.msg);
    if (!model || !omodel) return;
    mt_plan plan, oplan;
    char *dir = tmp_dir(), *odir = tmp_dir(), manifest[512], omanifest[512], *rep;
    CHECK(mt_plan_swarm(model, 3, &plan, &err) == 0 &&
              mt_plan_write(model, &plan, dir, manifest, sizeof manifest, &err) == 0 &&
              mt_plan_swarm(omodel, 3, &oplan, &err) == 0 &&
              mt_plan_write(omodel, &oplan, odir, omanifest, sizeof omanifest, &err) == 0,
          "plans: %s", err.msg);

    /* a shard left out: its experts are held by nobody */
    CHECK(check_edited(path, manifest, drop_last, NULL, &rep) == 1 &&
              has(rep, "held by no shard") && has(rep, "experts 5-7") && has(rep, "FAILED"),
          "missing shard: %s", rep);
    free(rep);
    /* a shard listed twice with replicas 1 */
    CHECK(check_edited(path, manifest, dup_first, NULL, &rep) == 1 &&
              has(rep, "held 2 times, want 1") && has(rep, "experts-0.gguf"),
          "duplicated shard: %s", rep);
    free(rep);
    /* every shard twice and replicas 2: fine; replicas 2 with one copy: not */
    int two = 2;
    CHECK(check_edited(path, manifest, dup_all, &two, &rep) == 0 && has(rep, "exactly 2 times"),
          "replicas 2: %s", rep);
    free(rep);
    CHECK(check_edited(path, manifest, set_replicas, &two, &rep) == 1 &&
              has(rep, "held 1 times, want 2"),
          "replicas 2 with one copy: %s", rep);
    free(rep);
    /* a file that is not there */
    CHECK(check_edited(path, manifest, set_file, "no-such-shard.gguf", &rep) == 1 &&
              has(rep, "no-such-shard.gguf") && has(rep, "cannot open"),
          "missing file: %s", rep);
    free(rep);
    /* a shard of another model (different seed) in its place */
    char foreign[600];
    snprintf(foreign, sizeof foreign, "%s", omanifest);
    strcpy(strstr(foreign, "-swarm-manifest.json"), "-experts-0.gguf");
    CHECK(check_edited(path, manifest, set_file, foreign, &rep) == 1 && has(rep, "different model"),
          "foreign shard: %s", rep);
    free(rep);
    /* what the manifest says about a shard must be what the shard holds */
    CHECK(check_edited(path, manifest, set_layers, NULL, &rep) == 1 &&
              has(rep, "manifest says layers [0, 1], the shard holds [0, 2]") &&
              has(rep, "\"experts\" differ"),
          "wrong claims: %s", rep);
    free(rep);
    /* the manifest of another model */
    CHECK(check_edited(path, manifest, set_source, "00", &rep) == 1 && has(rep, "not this model's"),
          "foreign manifest: %s", rep);
    free(rep);
    /* a tampered shard: one byte of a tensor */
    char victim[600], saved[620];
    snprintf(victim, sizeof victim, "%s", manifest);
    strcpy(strstr(victim, "-swarm-manifest.json"), "-experts-1.gguf");
    snprintf(saved, sizeof saved, "%s.orig", victim);
    gguf_file *vf = gguf_open(victim, &err);
    CHECK(vf, "%s", err.msg);
    if (vf) {
        const gguf_tensor *t = gguf_find_tensor(vf, "blk.1.ffn_gate_exps.weight");
        long at = (long)(vf->data_offset + t->offset + 7);
        gguf_close(vf);
        rename(victim, saved);
        copy_flip(saved, victim, at);
        rep = NULL;
        CHECK(mt_plan_check(path, manifest, &rep, &err) == 1 &&
                  has(rep, "blk.1.ffn_gate_exps.weight") && has(rep, "stored hash") &&
                  has(rep, "file hash differs"),
              "tampered shard: %s", rep);
        free(rep);
        rename(saved, victim);
    }
    /* not a manifest */
    CHECK(mt_plan_check(path, path, &rep, &err) == -1 && has(err.msg, "not valid JSON"),
          "garbage manifest: %s", err.msg);
    free(rep);

    mt_plan_free(&plan);
    mt_plan_free(&oplan);
    rm_dir(dir);
    rm_dir(odir);
    gguf_close(model);
    gguf_close(omodel);
    unlink(path);
    unlink(other);
}

/* ------------------------------------------------------- bad selections */

static void test_bad_selections(void) {
    const char *path = make_model("qwen3moe", 1, 4);
    mt_error err = {{0}};
    gguf_file *model = gguf_open(path, &err);
    CHECK(model, "%s", err.msg);
    if (!model) return;
    mt_shard_layout l;
    CHECK(mt_shard_layout_read(model, &l, &err) == 0, "%s", err.msg);
    CHECK(l.n_layer == 4 && l.n_expert == 8, "layout %d layers %d experts", l.n_layer, l.n_expert);

    const int32_t big[] = {2, 8}, dup[] = {1, 1}, down[] = {3, 1};
    struct {
        mt_shard_spec s;
        const char *want;
    } cases[] = {
        {{2, 9, true, false, NULL, -1}, "outside the model's layers; it has 4 layers"},
        {{-1, 2, true, false, NULL, -1}, "outside the model's layers"},
        {{3, 3, true, false, NULL, -1}, "is empty"},
        {{0, 2, true, false, big, 2}, "expert id 8 is out of range: the model has 8 experts"},
        {{0, 2, true, false, dup, 2}, "expert id 1 is listed twice"},
        {{0, 2, true, false, down, 2}, "must be ascending"},
        {{0, 2, false, false, NULL, 0}, "holds no tensors"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err.msg[0] = 0;
        CHECK(mt_shard_spec_check(&l, &cases[i].s, &err) < 0 && has(err.msg, cases[i].want),
              "case %zu: want '%s', got '%s'", i, cases[i].want, err.msg);
        CHECK(mt_shard_write(model, &cases[i].s, check_tmp(".gguf"), &err) < 0 &&
                  has(err.msg, cases[i].want),
              "write case %zu: %s", i, err.msg);
    }

    int32_t *ids = NULL, n = 0;
    CHECK(mt_shard_parse_experts("0,3,5-7", 8, &ids, &n, &err) == 0 && n == 5 && ids[0] == 0 &&
              ids[1] == 3 && ids[2] == 5 && ids[4] == 7,
          "parse 0,3,5-7: %s", err.msg);
    free(ids);
    CHECK(mt_shard_parse_experts("6,1-2", 8, &ids, &n, &err) == 0 && n == 3 && ids[0] == 1 &&
              ids[2] == 6,
          "parse sorts: %s", err.msg);
    free(ids);
    const char *bad[][2] = {{"1,1", "listed twice"}, {"5-7,6", "expert id 6 is listed twice"},
                            {"3-1", "backwards"},    {"8", "out of range"},
                            {"a", "expected an id"}, {"1,", "expected an id"},
                            {"1-", "after '-'"},     {"-1", "expected an id"},
                            {"2x", "bad entry"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ids = NULL;
        CHECK(mt_shard_parse_experts(bad[i][0], 8, &ids, &n, &err) < 0 && has(err.msg, bad[i][1]),
              "parse '%s': want '%s', got '%s'", bad[i][0], bad[i][1], err.msg);
        free(ids);
    }

    mt_plan_mode mode;
    CHECK(mt_plan_parse("swarm:12", &mode, &n, &err) == 0 && mode == MT_PLAN_SWARM && n == 12,
          "parse swarm:12");
    CHECK(mt_plan_parse("cell:0", &mode, &n, &err) < 0 && has(err.msg, "1..4096"), "cell:0");
    CHECK(mt_plan_parse("mesh:2", &mode, &n, &err) < 0 && has(err.msg, "cell:N or swarm:N"),
          "mesh:2");
    mt_plan plan;
    CHECK(mt_plan_cell(model, 5, &plan, &err) < 0 && has(err.msg, "1 to 4 stages"), "cell:5: %s",
          err.msg);
    CHECK(mt_plan_swarm(model, 9, &plan, &err) < 0 && has(err.msg, "1 to 8 expert shards"),
          "swarm:9: %s", err.msg);

    /* classification: unknown names are errors naming the tensor */
    mt_shard_part part;
    int32_t il;
    CHECK(mt_shard_classify("blk.12.ffn_up_exps.weight", &part, &il, &err) == 0 &&
              part == MT_SHARD_PART_EXPERTS && il == 12,
          "classify experts");
    CHECK(mt_shard_classify("blk.3.ffn_gate_inp_shexp.weight", &part, &il, &err) == 0 &&
              part == MT_SHARD_PART_ATTENTION && il == 3,
          "classify shexp gate");
    CHECK(mt_shard_classify("blk.0.exp_probs_b.bias", &part, &il, &err) == 0 &&
              part == MT_SHARD_PART_ATTENTION,
          "classify exp_probs_b");
    CHECK(mt_shard_classify("output.weight", &part, &il, &err) == 0 && part == MT_SHARD_PART_HEAD &&
              il == -1,
          "classify output");
    const char *unknown[] = {"mystery.weight",         "blk.x.attn_q.weight",
                             "blk.01.attn_q.weight",   "blk.0.mystery.weight",
                             "blk.0.ffn_up_exps.bias", "output"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        CHECK(mt_shard_classify(unknown[i], &part, &il, &err) < 0 && has(err.msg, unknown[i]),
              "'%s' classified: %s", unknown[i], err.msg);

    /* a model with an unknown tensor cannot be split, and the error names it */
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < model->n_kv; i++)
        gguf_writer_set_value(w, model->kv[i].key, &model->kv[i].value);
    for (uint64_t i = 0; i < model->n_tensors; i++) {
        const gguf_tensor *t = &model->tensors[i];
        gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, &err);
    }
    float z[32] = {0};
    int64_t ne[1] = {32};
    gguf_writer_add_tensor(w, "blk.1.attn_mystery.weight", MT_TYPE_F32, 1, ne, z, &err);
    const char *odd = check_tmp(".gguf");
    CHECK(gguf_writer_write(w, odd, &err) == 0, "%s", err.msg);
    gguf_writer_free(w);
    gguf_file *of = gguf_open(odd, &err);
    mt_shard_spec any = {0, 1, true, false, NULL, -1};
    CHECK(of && mt_shard_write(of, &any, check_tmp(".gguf"), &err) < 0 &&
              has(err.msg, "blk.1.attn_mystery.weight"),
          "unknown tensor: %s", err.msg);
    gguf_close(of);
    unlink(odd);

    /* a dense llama has nothing for a swarm */
    mt_synth_params p = mt_synth_default_params("llama");
    p.dense = true;
    const char *dense = check_tmp(".gguf");
    CHECK(mt_synth_write(&p, dense, &err) == 0, "%s", err.msg);
    gguf_file *df = gguf_open(dense, &err);
    CHECK(df && mt_plan_swarm(df, 2, &plan, &err) < 0 && has(err.msg, "no routed experts"),
          "dense swarm: %s", err.msg);
    gguf_close(df);
    unlink(dense);

    mt_shard_layout_free(&l);
    gguf_close(model);
    unlink(path);
}

/* ------------------------------------------------------- split models */

/* Reads a whole (small) file. */
static uint8_t *slurp(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    uint8_t *b = NULL;
    *n = 0;
    if (fp && fseek(fp, 0, SEEK_END) == 0) {
        long len = ftell(fp);
        rewind(fp);
        b = malloc((size_t)len + 1);
        *n = b ? fread(b, 1, (size_t)len, fp) : 0;
    }
    if (fp) fclose(fp);
    return b;
}

static bool same_file(const char *a, const char *b) {
    size_t na, nb;
    uint8_t *pa = slurp(a, &na), *pb = slurp(b, &nb);
    bool same = pa && pb && na == nb && memcmp(pa, pb, na) == 0;
    free(pa);
    free(pb);
    return same;
}

/* The last token's logits of ids 1..6 on the model at path (NULL on error). */
static float *logits_of(const char *path) {
    mt_error err = {{0}};
    mt_model *m = mt_model_load(path, &err);
    CHECK(m, "load %s: %s", path, err.msg);
    if (!m) return NULL;
    mt_session *s = mt_session_new(m, 16, MT_KV_DEFAULT, 2, &err);
    float *l = malloc((size_t)m->hp.n_vocab * 6 * sizeof *l);
    int32_t ids[6] = {1, 2, 3, 4, 5, 6};
    CHECK(s && l && mt_session_eval(s, ids, 6, 0, true, l, &err) == 0, "eval %s: %s", path,
          err.msg);
    mt_session_free(s);
    mt_model_free(m);
    return l;
}

static int id_of_hashes(void *model, const uint8_t (*hashes)[32], char *out, mt_error *err) {
    return mt_shard_source_id_from(model, hashes, out, err);
}

static void test_split_model(const char *arch) {
    const char *path = make_model(arch, 3, 4);
    char prefix[256], part[300], part1[300];
    snprintf(prefix, sizeof prefix, "%s", check_tmp("-parts"));
    mt_error err = {{0}};
    gguf_file *single = gguf_open(path, &err);
    CHECK(single, "%s", err.msg);
    if (!single) return;
    char id[MT_SHARD_HASH_HEX], sid[MT_SHARD_HASH_HEX];
    CHECK(mt_shard_source_id(single, id, NULL, &err) == 0, "%s", err.msg);
    /* the parts' id computed from the bytes as they are copied, as `split --parts` does */
    gguf_split_opts o = {.source_id_of = id_of_hashes, .source_id_ctx = single};
    CHECK(gguf_split_write(single, 3, prefix, &o, &err) == 0, "%s: %s", arch, err.msg);
    gguf_split_path(part, sizeof part, prefix, 2, 3);
    gguf_split_path(part1, sizeof part1, prefix, 0, 3);
    gguf_file *split = gguf_open(part, &err);
    CHECK(split && split->n_parts == 3 && split->n_tensors == single->n_tensors, "%s: %s", arch,
          err.msg);
    if (!split) {
        gguf_close(single);
        return;
    }
    /* the same identity, also in the parts' own key */
    CHECK(mt_shard_source_id(split, sid, NULL, &err) == 0 && strcmp(id, sid) == 0,
          "%s: split source_id %s, single %s", arch, sid, id);
    char *stored = gguf_get_string(split, GGUF_SPLIT_SOURCE_ID_KEY, NULL);
    CHECK(stored && strcmp(stored, id) == 0, "%s: stored id %s", arch, stored ? stored : "none");
    free(stored);
    CHECK(mt_model_check_file(split, &err) == 0, "%s: check_file on the split model: %s", arch,
          err.msg);
    /* the same layout; a part alone is not a model to slice */
    mt_shard_layout a, b;
    CHECK(mt_shard_layout_read(single, &a, &err) == 0 && mt_shard_layout_read(split, &b, &err) == 0,
          "%s: layout %s", arch, err.msg);
    bool same = a.n_layer == b.n_layer && a.n_expert == b.n_expert && a.head_bytes == b.head_bytes;
    for (int32_t il = 0; same && il < a.n_layer; il++)
        same = a.attn_bytes[il] == b.attn_bytes[il] && a.expert_bytes[il] == b.expert_bytes[il];
    CHECK(same, "%s: layouts differ", arch);
    mt_shard_layout_free(&a);
    mt_shard_layout_free(&b);
    gguf_file *alone = gguf_open_single(part1, &err);
    CHECK(alone && mt_shard_layout_read(alone, &a, &err) != 0 && strstr(err.msg, "opened alone"),
          "%s: one part alone: %s", arch, err.msg);
    gguf_close(alone);
    /* shards cut from either are the same bytes */
    const int32_t ids[] = {1, 4, 6};
    mt_shard_spec specs[2] = {{1, 3, false, false, ids, 3}, {2, 4, true, true, NULL, -1}};
    for (int k = 0; k < 2; k++) {
        char sa[300], sb[300];
        snprintf(sa, sizeof sa, "%s", check_tmp(".gguf"));
        snprintf(sb, sizeof sb, "%s", check_tmp(".gguf"));
        CHECK(mt_shard_write(single, &specs[k], sa, &err) == 0 &&
                  mt_shard_write(split, &specs[k], sb, &err) == 0,
              "%s: shard %d: %s", arch, k, err.msg);
        CHECK(same_file(sa, sb), "%s: shard %d cut from the split model differs", arch, k);
        unlink(sa);
        unlink(sb);
    }
    gguf_close(split);
    gguf_close(single);
    /* bit-identical logits */
    float *la = logits_of(path), *lb = logits_of(part);
    mt_model *m = mt_model_load(path, &err);
    if (la && lb && m)
        CHECK(memcmp(la, lb, (size_t)m->hp.n_vocab * 6 * sizeof *la) == 0,
              "%s: split model logits differ", arch);
    mt_model_free(m);
    free(la);
    free(lb);
    for (int k = 0; k < 3; k++) {
        gguf_split_path(part, sizeof part, prefix, (uint32_t)k, 3);
        unlink(part);
    }
    unlink(path);
}

int main(void) {
    test_split_read_back();
    test_split_model("qwen3moe");
    test_split_model("deepseek2");
    test_split_model("kimi-k3");
    const char *archs[] = {"llama", "qwen2moe", "qwen3moe", "deepseek2", "kimi-k3", "kimi-linear"};
    for (int a = 0; a < 6; a++) {
        check_plan(archs[a], 4, MT_PLAN_CELL, 2);
        check_plan(archs[a], 4, MT_PLAN_CELL, 3);
        check_plan(archs[a], 4, MT_PLAN_SWARM, 3);
    }
    test_bad_manifests();
    test_bad_selections();
    return check_report("test_shard");
}

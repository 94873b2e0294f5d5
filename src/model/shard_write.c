/* shard_write.c - cutting a shard out of a model.
 *
 * A shard is a subset of a model's tensors written as its own GGUF file
 * (the format and its keys are described in moontail/shard.h). This file
 * sorts a model's tensors into parts (head, a layer's attention part, a
 * layer's routed experts), checks what the caller asked for, and writes
 * the shard: the model's metadata, the selected tensors (routed expert
 * tensors sliced along ne[2] when only some experts are kept) and the
 * moontail.shard.* keys with a content hash per tensor. The tensors' bytes
 * stream from the model's files into the shard (gguf_stream.h), hashed on
 * the way; the header with those hashes is written last. */
#include "moontail/model.h"
#include "shard_internal.h"
#include "moontail/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------ classification */

static const char *const head_names[] = {"token_embd", "output_norm", "output"};

/* Model-wide tensors that every attention part needs: copied, not split. */
static const char *const shared_names[] = {"rope_freqs"};

/* Tensors the head and the last layer's attention part both need: copied. */
static const char *const final_names[] = {"output_res_score"};

/* Merged routed-expert tensors {ne0, ne1, n_expert}: sliced by expert. */
static const char *const expert_names[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
                                           "ffn_gate_up_exps"};

/* Everything else a layer of llama / qwen2moe / qwen3moe / deepseek2 / kimi
 * holds (kimi: the KDA tensors, the MLA output gate, the attention-residual
 * scores and the latent MoE's projections and norm). */
static const char *const attention_names[] = {
    "attn_norm",       "ffn_norm",      "attn_q",          "attn_k",         "attn_v",
    "attn_qkv",        "attn_output",   "attn_q_norm",     "attn_k_norm",    "attn_q_a",
    "attn_q_a_norm",   "attn_q_b",      "attn_kv_a_mqa",   "attn_kv_a_norm", "attn_k_b",
    "attn_v_b",        "attn_kv_b",     "ffn_gate_inp",    "exp_probs_b",    "ffn_gate_inp_shexp",
    "ffn_gate_shexp",  "ffn_up_shexp",  "ffn_down_shexp",  "ffn_gate",       "ffn_up",
    "ffn_down",        "ssm_conv1d_q",  "ssm_conv1d_k",    "ssm_conv1d_v",   "ssm_f_a",
    "ssm_f_b",         "ssm_beta",      "ssm_dt",          "ssm_g",          "ssm_g_a",
    "ssm_g_b",         "ssm_norm",      "attn_gate",       "attn_res_score", "ffn_res_score",
    "ffn_routed_down", "ffn_routed_up", "ffn_routed_norm",
};

/* Layer tensors whose name has no .weight/.bias suffix (kimi's A). */
static const char *const bare_attention_names[] = {"ssm_a"};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static bool in_list(const char *s, size_t len, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strlen(list[i]) == len && memcmp(list[i], s, len) == 0) return true;
    return false;
}

/* Splits "<base>.<weight|bias>"; returns the base length or 0. */
static size_t base_len(const char *s) {
    const char *dot = strrchr(s, '.');
    if (!dot || dot == s || (strcmp(dot, ".weight") != 0 && strcmp(dot, ".bias") != 0)) return 0;
    return (size_t)(dot - s);
}

int mt_shard_classify(const char *name, mt_shard_part *part, int32_t *layer, mt_error *err) {
    size_t n = base_len(name);
    if (n && !memchr(name, '.', n) && in_list(name, n, head_names, COUNT(head_names))) {
        *part = MT_SHARD_PART_HEAD;
        *layer = -1;
        return 0;
    }
    if (n && !memchr(name, '.', n) && in_list(name, n, shared_names, COUNT(shared_names))) {
        *part = MT_SHARD_PART_SHARED;
        *layer = -1;
        return 0;
    }
    if (n && !memchr(name, '.', n) && in_list(name, n, final_names, COUNT(final_names))) {
        *part = MT_SHARD_PART_FINAL;
        *layer = -1;
        return 0;
    }
    if (strncmp(name, "blk.", 4) == 0) {
        const char *p = name + 4;
        int32_t il = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 6) il = il * 10 + (*p++ - '0'), digits++;
        if (digits == 0 || digits > 5 || *p != '.' || (digits > 1 && name[4] == '0'))
            return mt_error_set(err, "tensor '%s': malformed layer number after 'blk.'", name);
        const char *rest = p + 1;
        size_t rn = base_len(rest);
        *layer = il;
        if (rn && in_list(rest, rn, expert_names, COUNT(expert_names))) {
            if (strcmp(rest + rn, ".weight") != 0)
                return mt_error_set(err,
                                    "tensor '%s': routed-expert biases are not supported by"
                                    " shards; only merged .weight expert tensors can be sliced",
                                    name);
            *part = MT_SHARD_PART_EXPERTS;
            return 0;
        }
        /* deepseek's multi-token-prediction layer (blk.N.nextn.*) is a layer part too */
        if ((rn && (in_list(rest, rn, attention_names, COUNT(attention_names)) ||
                    strncmp(rest, "nextn.", 6) == 0)) ||
            in_list(rest, strlen(rest), bare_attention_names, COUNT(bare_attention_names))) {
            *part = MT_SHARD_PART_ATTENTION;
            return 0;
        }
    }
    return mt_error_set(err,
                        "tensor '%s' is not a tensor name shards know (head: token_embd, "
                        "output_norm, output; shared: rope_freqs; final: output_res_score; layers: "
                        "blk.N.<attention,"
                        " KDA, norm, router,"
                        " shared or routed expert tensor>); the model cannot be split until its"
                        " part is defined",
                        name);
}

/* -------------------------------------------------------------- layout */

void mt_shard_layout_free(mt_shard_layout *l) {
    if (!l) return;
    free(l->attn_bytes);
    free(l->expert_bytes);
    free(l->part);
    free(l->layer);
    memset(l, 0, sizeof *l);
}

/* Reads "<arch>.<suffix>" as u32; *out untouched when absent. */
static int arch_u32(const gguf_file *f, const char *arch, const char *suffix, bool required,
                    uint32_t *out, mt_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    mt_error e = {{0}};
    if (gguf_get_u32(f, key, out, &e)) return 0;
    if (e.msg[0]) return mt_error_set(err, "%s: %s", f->path, e.msg);
    if (required)
        return mt_error_set(err, "%s: key '%s' is missing; a model needs it to be split", f->path,
                            key);
    return 0;
}

int mt_shard_layout_read(const gguf_file *f, mt_shard_layout *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    if (gguf_find_kv(f, "moontail.shard.version"))
        return mt_error_set(err,
                            "%s is already a shard (it has moontail.shard.version); split the"
                            " full model instead",
                            f->path);
    /* a split model opened with gguf_open is whole; one file of it alone is not */
    uint32_t split_count = 1;
    mt_error e = {{0}};
    if (!gguf_get_u32(f, "split.count", &split_count, &e) && e.msg[0])
        return mt_error_set(err, "%s: %s", f->path, e.msg);
    if (split_count > f->n_parts)
        return mt_error_set(err,
                            "%s is one of %u files of a split model but was opened alone; open"
                            " it with all its parts (any command given one part finds the"
                            " others)",
                            f->path, split_count);
    char *arch = gguf_get_string(f, "general.architecture", &e);
    if (!arch)
        return mt_error_set(err, "%s: %s", f->path,
                            e.msg[0] ? e.msg : "key 'general.architecture' is missing");
    uint32_t n_layer = 0, n_expert = 0;
    int rc = arch_u32(f, arch, "block_count", true, &n_layer, err);
    if (!rc) rc = arch_u32(f, arch, "expert_count", false, &n_expert, err);
    if (!rc && (n_layer < 1 || n_layer > MT_MAX_LAYERS))
        rc = mt_error_set(err, "%s: %s.block_count = %u is outside 1..65536", f->path, arch,
                          n_layer);
    if (!rc && n_expert > 65536)
        rc = mt_error_set(err, "%s: %s.expert_count = %u is outside 0..65536", f->path, arch,
                          n_expert);
    free(arch);
    if (rc) return -1;

    out->n_layer = (int32_t)n_layer;
    out->n_expert = (int32_t)n_expert;
    out->attn_bytes = calloc(n_layer, sizeof *out->attn_bytes);
    out->expert_bytes = calloc(n_layer, sizeof *out->expert_bytes);
    out->part = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *out->part);
    out->layer = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *out->layer);
    if (!out->attn_bytes || !out->expert_bytes || !out->part || !out->layer) {
        mt_shard_layout_free(out);
        return mt_error_set(err, "out of memory");
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (mt_shard_classify(t->name, &out->part[i], &out->layer[i], err)) goto fail;
        int32_t il = out->layer[i];
        if (il >= out->n_layer) {
            mt_error_set(err, "tensor '%s' is in layer %d but %s has %d layers (block_count)",
                         t->name, il, f->path, out->n_layer);
            goto fail;
        }
        switch (out->part[i]) {
        case MT_SHARD_PART_HEAD:
            out->head_bytes += t->nbytes;
            break;
        case MT_SHARD_PART_SHARED:
            out->shared_bytes += t->nbytes;
            break;
        case MT_SHARD_PART_FINAL:
            out->final_bytes += t->nbytes;
            break;
        case MT_SHARD_PART_ATTENTION:
            out->attn_bytes[il] += t->nbytes;
            break;
        case MT_SHARD_PART_EXPERTS:
            if (t->n_dims != 3 || n_expert == 0 || t->ne[2] != (int64_t)n_expert) {
                mt_error_set(err,
                             "tensor '%s' has shape [%lld, %lld, %lld, %lld]; a routed expert"
                             " tensor must be 3-D with ne[2] = expert_count (%u)",
                             t->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                             (long long)t->ne[3], n_expert);
                goto fail;
            }
            out->expert_bytes[il] += t->nb[2];
            break;
        }
    }
    return 0;
fail:
    mt_error_prefix(err, "%s", f->path);
    mt_shard_layout_free(out);
    return -1;
}

/* ---------------------------------------------------------------- specs */

static bool selects(const mt_shard_layout *l, const mt_shard_spec *s, uint64_t i) {
    int32_t il = l->layer[i];
    bool in_range = il >= s->layer_begin && il < s->layer_end;
    switch (l->part[i]) {
    case MT_SHARD_PART_HEAD:
        return s->head;
    case MT_SHARD_PART_SHARED:
        return s->head || (s->attention && s->layer_begin < s->layer_end);
    case MT_SHARD_PART_FINAL:
        return mt_shard_spec_has_final(l->n_layer, s->head, s->attention, s->layer_begin,
                                       s->layer_end);
    case MT_SHARD_PART_ATTENTION:
        return s->attention && in_range;
    case MT_SHARD_PART_EXPERTS:
        return s->n_experts != 0 && in_range;
    }
    return false;
}

int mt_shard_spec_check(const mt_shard_layout *l, const mt_shard_spec *s, mt_error *err) {
    if (s->layer_begin < 0 || s->layer_end > l->n_layer || s->layer_begin > s->layer_end)
        return mt_error_set(err,
                            "layer range %d:%d is outside the model's layers; it has %d layers,"
                            " so use A:B with 0 <= A < B <= %d (B exclusive)",
                            s->layer_begin, s->layer_end, l->n_layer, l->n_layer);
    if (s->layer_begin == s->layer_end && !s->head)
        return mt_error_set(err,
                            "layer range %d:%d is empty (layers are [A, B)); use A < B, or select"
                            " the head alone",
                            s->layer_begin, s->layer_end);
    if (s->n_experts < -1)
        return mt_error_set(err, "expert count %d is invalid (-1 = all, 0 = none)", s->n_experts);
    if (s->n_experts > 0 && l->n_expert == 0)
        return mt_error_set(err, "the model has no routed experts; do not select experts");
    for (int32_t j = 0; j < s->n_experts; j++) {
        int32_t e = s->experts[j];
        if (e < 0 || e >= l->n_expert)
            return mt_error_set(err,
                                "expert id %d is out of range: the model has %d experts (ids"
                                " 0-%d)",
                                e, l->n_expert, l->n_expert - 1);
        if (j > 0 && e == s->experts[j - 1])
            return mt_error_set(err, "expert id %d is listed twice; list each expert once", e);
        if (j > 0 && e < s->experts[j - 1])
            return mt_error_set(err, "expert ids must be ascending (%d comes after %d)", e,
                                s->experts[j - 1]);
    }
    if (mt_shard_spec_bytes(l, s) == 0)
        return mt_error_set(err,
                            "the selection (layers %d:%d, attention %s, %s, head %s) holds no"
                            " tensors; select attention parts, experts of MoE layers or the head",
                            s->layer_begin, s->layer_end, s->attention ? "on" : "off",
                            s->n_experts < 0   ? "all experts"
                            : s->n_experts > 0 ? "some experts"
                                               : "no experts",
                            s->head ? "on" : "off");
    return 0;
}

uint64_t mt_shard_spec_bytes(const mt_shard_layout *l, const mt_shard_spec *s) {
    uint64_t n = s->head ? l->head_bytes : 0;
    if (s->head || (s->attention && s->layer_begin < s->layer_end)) n += l->shared_bytes;
    if (mt_shard_spec_has_final(l->n_layer, s->head, s->attention, s->layer_begin, s->layer_end))
        n += l->final_bytes;
    int64_t experts = s->n_experts < 0 ? l->n_expert : s->n_experts;
    for (int32_t il = s->layer_begin < 0 ? 0 : s->layer_begin; il < s->layer_end && il < l->n_layer;
         il++) {
        if (s->attention) n += l->attn_bytes[il];
        n += (uint64_t)experts * l->expert_bytes[il];
    }
    return n;
}

/* ----------------------------------------------------------------- write */

/* Progress of the core writer under the step's name. */
typedef struct write_progress {
    mt_shard_io *io;
    const char *what;
} write_progress;

static void on_write_progress(void *ctx, uint64_t done, uint64_t total) {
    write_progress *wp = ctx;
    shard_progress(wp->io, wp->what, done, total);
}

/* 64 characters the writer replaces by each tensor's hash (shard.h). */
static const char placeholder[] =
    "0000000000000000000000000000000000000000000000000000000000000000";

int shard_write(const gguf_file *f, const mt_shard_layout *l, const char *source_id,
                const uint8_t (*model_raw)[32], const mt_shard_spec *s, const char *out_path,
                mt_shard_io *io, mt_error *err) {
    if (mt_shard_spec_check(l, s, err)) {
        mt_error_prefix(err, "%s", f->path);
        return -1;
    }
    /* the shard replaces out_path by a rename: never a device (/dev/null) or a directory */
    mt_file_info sb;
    if (mt_file_stat(out_path, &sb) == 0 && !sb.regular)
        return mt_error_set(err,
                            "%s exists and is not a regular file; give the path of a shard file to"
                            " write",
                            out_path);
    uint64_t n = f->n_tensors, cap = n ? n : 1;
    const char **names = calloc(cap, sizeof *names), **holders = calloc(cap, sizeof *holders);
    shard_slice *slices = calloc(cap, sizeof *slices), *fresh = calloc(cap, sizeof *fresh);
    uint8_t(*hashes)[32] = calloc(cap, sizeof *hashes), (*expect)[32] = calloc(cap, sizeof *expect);
    uint8_t(*fresh_hash)[32] = calloc(cap, sizeof *fresh_hash);
    bool *known = calloc(cap, sizeof *known);
    gguf_writer *w = gguf_writer_new();
    char *tmp = malloc(strlen(out_path) + 8);
    gguf_reader *rd = NULL;
    mt_pool *pool = NULL;
    bool own_pool = false;
    int rc = -1;
    if (!names || !holders || !slices || !fresh || !hashes || !expect || !fresh_hash || !known ||
        !w || !tmp) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    if (!(rd = gguf_reader_open(f, err)) || !(pool = shard_io_pool(io, &own_pool, err))) goto done;

    gguf_writer_copy_metadata(w, f);
    gguf_writer_set_u32(w, "moontail.shard.version", MT_SHARD_VERSION);
    gguf_writer_set_u32(w, "moontail.shard.layer_begin", (uint32_t)s->layer_begin);
    gguf_writer_set_u32(w, "moontail.shard.layer_end", (uint32_t)s->layer_end);
    gguf_writer_set_bool(w, "moontail.shard.attention", s->attention);
    gguf_writer_set_bool(w, "moontail.shard.head", s->head);
    if (s->n_experts >= 0) {
        /* int32 ids in [0, n_expert) have the same bytes as u32; an empty list
         * still needs a valid pointer (the writer memcpy's zero bytes from it) */
        static const int32_t none = 0;
        gguf_writer_set_array(w, "moontail.shard.experts", GGUF_TYPE_UINT32,
                              s->experts ? s->experts : &none, (uint64_t)s->n_experts);
    }
    gguf_writer_set_u32(w, "moontail.shard.source_n_expert", (uint32_t)l->n_expert);
    gguf_writer_set_string(w, "moontail.shard.source_id", source_id);

    /* the tensors, each streamed at write time from its bytes in the model's file */
    uint64_t k = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!selects(l, s, i)) continue;
        const gguf_tensor *t = &f->tensors[i];
        bool sliced = l->part[i] == MT_SHARD_PART_EXPERTS && s->n_experts > 0;
        /* expert j of the shard = expert s->experts[j] of the model */
        slices[k] =
            sliced ? (shard_slice){i, s->experts, s->n_experts} : (shard_slice){i, NULL, -1};
        gguf_range *ranges;
        uint32_t nr;
        if (shard_slice_ranges(f, &slices[k], &ranges, &nr, err)) goto done;
        int64_t ne[3] = {t->ne[0], t->ne[1], s->n_experts};
        int r = gguf_writer_add_tensor_ranges(w, t->name, t->type, sliced ? 3 : t->n_dims,
                                              sliced ? ne : t->ne, rd, t->part, ranges, nr, err);
        free(ranges);
        if (r) goto done;
        names[k] = t->name;
        holders[k] = placeholder;
        k++;
    }
    gguf_writer_set_string_array(w, "moontail.shard.tensor_names", names, k);
    gguf_writer_set_string_array(w, "moontail.shard.tensor_hashes", holders, k);

    /* hashes known before the bytes pass (the model's, or the cache's) are checked on the way */
    shard_cached(rd, slices, k, io, expect, known);
    for (uint64_t j = 0; model_raw && j < k; j++)
        if (slices[j].n_experts < 0 && !known[j]) {
            memcpy(expect[j], model_raw[slices[j].tensor], 32);
            known[j] = true;
        }
    const char *base = strrchr(out_path, '/');
    char what[300];
    snprintf(what, sizeof what, "writing %s", base ? base + 1 : out_path);
    write_progress wp = {io, what};
    gguf_write_opts o = {.pool = pool,
                         .hash_key = "moontail.shard.tensor_hashes",
                         .hashes = hashes,
                         .expect = (const uint8_t(*)[32])expect,
                         .expect_set = known,
                         .progress = on_write_progress,
                         .progress_ctx = &wp,
                         .sync = true};

    /* write next to the target and rename, so a crash never leaves a half shard */
    sprintf(tmp, "%s.part", out_path);
    if (gguf_writer_write_opts(w, tmp, &o, err)) {
        mt_file_remove(tmp);
        goto done;
    }
    if (mt_file_replace(tmp, out_path) != 0) {
        mt_error_set(err, "%s: cannot rename from '%s': %s", out_path, tmp, strerror(errno));
        mt_file_remove(tmp);
        goto done;
    }
    if (io && mt_file_stat(out_path, &sb) == 0) io->bytes_written += sb.size;
    /* what was learnt about the model's bytes, for the next shard or check */
    uint64_t m = 0;
    for (uint64_t j = 0; j < k; j++)
        if (!known[j]) {
            fresh[m] = slices[j];
            memcpy(fresh_hash[m++], hashes[j], 32);
        }
    shard_cache_store(rd, fresh, m, io, (const uint8_t(*)[32])fresh_hash);
    rc = 0;
done:
    if (own_pool) mt_pool_free(pool);
    gguf_reader_close(rd);
    gguf_writer_free(w);
    free(names);
    free(holders);
    free(slices);
    free(fresh);
    free(hashes);
    free(expect);
    free(fresh_hash);
    free(known);
    free(tmp);
    return rc;
}

int mt_shard_write_io(const gguf_file *f, const mt_shard_layout *l, const char *source_id,
                      const mt_shard_spec *s, const char *out_path, mt_shard_io *io,
                      mt_error *err) {
    return shard_write(f, l, source_id, NULL, s, out_path, io, err);
}

int mt_shard_write_with(const gguf_file *f, const mt_shard_layout *l, const char *source_id,
                        const mt_shard_spec *s, const char *out_path, mt_error *err) {
    return shard_write(f, l, source_id, NULL, s, out_path, NULL, err);
}

int mt_shard_write(const gguf_file *f, const mt_shard_spec *s, const char *out_path,
                   mt_error *err) {
    mt_shard_layout l;
    if (mt_shard_layout_read(f, &l, err)) return -1;
    char id[MT_SHARD_HASH_HEX];
    uint8_t(*raw)[32] = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *raw);
    gguf_reader *rd = NULL;
    int rc = raw ? mt_shard_spec_check(&l, s, err) : mt_error_set(err, "out of memory");
    if (rc) mt_error_prefix(err, "%s", f->path);
    if (!rc) rc = (rd = gguf_reader_open(f, err)) ? shard_model_hashes(rd, NULL, raw, id, err) : -1;
    if (!rc) rc = shard_write(f, &l, id, (const uint8_t(*)[32])raw, s, out_path, NULL, err);
    gguf_reader_close(rd);
    free(raw);
    mt_shard_layout_free(&l);
    return rc;
}

/* --------------------------------------------------------- expert lists */

int mt_shard_parse_experts(const char *s, int32_t n_expert, int32_t **out, int32_t *n,
                           mt_error *err) {
    *out = NULL;
    *n = 0;
    if (n_expert <= 0)
        return mt_error_set(err, "the model has no routed experts; do not select experts");
    uint8_t *seen = calloc((size_t)n_expert, 1);
    int32_t *ids = malloc((size_t)n_expert * sizeof *ids);
    if (!seen || !ids) {
        free(seen);
        free(ids);
        return mt_error_set(err, "out of memory");
    }
    int32_t count = 0;
    const char *p = s;
    int rc = 0;
    while (!rc) {
        long long a, b;
        char *end;
        errno = 0;
        if (*p < '0' || *p > '9') {
            rc = mt_error_set(err, "expert list '%s': expected an id at '%s' (e.g. 0,3,5-9)", s, p);
            break;
        }
        a = strtoll(p, &end, 10);
        b = a;
        if (!errno && *end == '-') {
            p = end + 1;
            if (*p < '0' || *p > '9') {
                rc =
                    mt_error_set(err, "expert list '%s': expected an id after '-' at '%s'", s, end);
                break;
            }
            b = strtoll(p, &end, 10);
        }
        if (errno || (*end && *end != ',')) {
            rc = mt_error_set(err, "expert list '%s': bad entry at '%s' (e.g. 0,3,5-9)", s, p);
            break;
        }
        if (b < a) {
            rc = mt_error_set(err, "expert list '%s': range %lld-%lld goes backwards", s, a, b);
            break;
        }
        if (b >= n_expert) {
            rc = mt_error_set(err,
                              "expert id %lld is out of range: the model has %d experts (ids"
                              " 0-%d)",
                              b, n_expert, n_expert - 1);
            break;
        }
        for (long long e = a; e <= b && !rc; e++) {
            if (seen[e]) rc = mt_error_set(err, "expert id %lld is listed twice in '%s'", e, s);
            seen[e] = 1;
        }
        if (!*end) break;
        p = end + 1;
    }
    if (!rc)
        for (int32_t e = 0; e < n_expert; e++)
            if (seen[e]) ids[count++] = e;
    free(seen);
    if (rc) {
        free(ids);
        return -1;
    }
    *out = ids;
    *n = count;
    return 0;
}

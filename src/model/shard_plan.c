/* shard_plan.c - cutting a model into a whole set of shards for one
 * deployment, and writing the set with its manifest.
 *
 * cell:N  = the requester's head shard + N pipeline stages of contiguous
 *           whole layers, the largest stage as small as possible in bytes;
 * swarm:N = one backbone shard (head + every layer's attention part, which
 *           the requester keeps) + N expert shards, each holding every MoE
 *           layer's routed experts for a contiguous range of ids.
 * The manifest format is described at mt_plan_write in moontail/shard.h;
 * mt_plan_check (shard_check.c) reads it back. */
#include "shard_internal.h"
#include "moontail/file.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- names */

const char *mt_plan_mode_name(mt_plan_mode m) {
    return m == MT_PLAN_CELL ? "cell" : "swarm";
}

const char *mt_plan_role_name(mt_plan_role r) {
    static const char *const names[] = {"head", "stage", "backbone", "experts"};
    return (unsigned)r < 4 ? names[r] : "?";
}

int mt_plan_parse(const char *s, mt_plan_mode *mode, int32_t *n, mt_error *err) {
    const char *num;
    if (strncmp(s, "cell:", 5) == 0) {
        *mode = MT_PLAN_CELL;
        num = s + 5;
    } else if (strncmp(s, "swarm:", 6) == 0) {
        *mode = MT_PLAN_SWARM;
        num = s + 6;
    } else {
        return mt_error_set(err, "plan '%s': expected cell:N or swarm:N", s);
    }
    char *end;
    errno = 0;
    long v = strtol(num, &end, 10);
    if (errno || end == num || *end || v < 1 || v > 4096 || *num < '0' || *num > '9')
        return mt_error_set(err, "plan '%s': N must be a whole number in 1..4096", s);
    *n = (int32_t)v;
    return 0;
}

void mt_plan_free(mt_plan *p) {
    if (!p) return;
    free(p->shards);
    free(p->expert_ids);
    memset(p, 0, sizeof *p);
}

static int plan_alloc(mt_plan *p, mt_plan_mode mode, int32_t n_shards, int32_t n_ids,
                      mt_error *err) {
    memset(p, 0, sizeof *p);
    p->mode = mode;
    p->n_shards = n_shards;
    p->shards = calloc((size_t)n_shards, sizeof *p->shards);
    p->expert_ids = calloc(n_ids > 0 ? (size_t)n_ids : 1, sizeof *p->expert_ids);
    if (!p->shards || !p->expert_ids) {
        mt_plan_free(p);
        return mt_error_set(err, "out of memory");
    }
    return 0;
}

static void plan_set(mt_plan *p, int32_t i, const mt_shard_layout *l, mt_plan_role role,
                     int32_t index, mt_shard_spec spec) {
    p->shards[i].role = role;
    p->shards[i].index = index;
    p->shards[i].spec = spec;
    p->shards[i].tensor_bytes = mt_shard_spec_bytes(l, &spec);
}

/* ------------------------------------------------------------------ cell */

/* Number of contiguous groups a greedy left-to-right packing into groups of
 * at most cap bytes needs. */
static int32_t groups_needed(const uint64_t *w, int32_t n, uint64_t cap) {
    int32_t g = 1;
    uint64_t sum = 0;
    for (int32_t i = 0; i < n; i++) {
        if (sum + w[i] > cap) g++, sum = 0;
        sum += w[i];
    }
    return g;
}

/* Splits layers (weights w) into exactly k contiguous non-empty groups with
 * the smallest possible largest group; begin[g] is group g's first layer. */
static void partition(const uint64_t *w, int32_t n, int32_t k, int32_t *begin) {
    uint64_t lo = 0, hi = 0;
    for (int32_t i = 0; i < n; i++) {
        if (w[i] > lo) lo = w[i];
        hi += w[i];
    }
    while (lo < hi) { /* smallest cap that k groups can meet */
        uint64_t mid = lo + (hi - lo) / 2;
        if (groups_needed(w, n, mid) <= k)
            hi = mid;
        else
            lo = mid + 1;
    }
    int32_t g = 0;
    uint64_t sum = 0;
    begin[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        if (sum + w[i] > lo) begin[++g] = i, sum = 0;
        sum += w[i];
    }
    /* fewer groups than asked: split the heaviest splittable group where its
     * two halves are most even (never raises the largest group) */
    for (g++; g < k; g++) {
        int32_t best = -1;
        uint64_t best_w = 0;
        for (int32_t j = 0; j < g; j++) {
            int32_t end = j + 1 < g ? begin[j + 1] : n;
            uint64_t s = 0;
            for (int32_t i = begin[j]; i < end; i++) s += w[i];
            if (end - begin[j] >= 2 && (best < 0 || s > best_w)) best = j, best_w = s;
        }
        int32_t end = best + 1 < g ? begin[best + 1] : n, cut = begin[best] + 1;
        uint64_t left = w[begin[best]], best_gap = UINT64_MAX;
        for (int32_t i = begin[best] + 1; i < end; i++) {
            uint64_t right = best_w - left, gap = left > right ? left - right : right - left;
            if (gap < best_gap) best_gap = gap, cut = i;
            left += w[i];
        }
        memmove(&begin[best + 2], &begin[best + 1], (size_t)(g - best - 1) * sizeof *begin);
        begin[best + 1] = cut;
    }
}

int mt_plan_cell(const gguf_file *model, int32_t n_stages, mt_plan *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    mt_shard_layout l;
    if (mt_shard_layout_read(model, &l, err)) return -1;
    if (n_stages < 1 || n_stages > l.n_layer) {
        mt_error_set(err, "%s: cell:%d needs 1 to %d stages (one layer at least per stage)",
                     model->path, n_stages, l.n_layer);
        mt_shard_layout_free(&l);
        return -1;
    }
    int rc = -1;
    uint64_t *w = malloc((size_t)l.n_layer * sizeof *w);
    int32_t *begin = malloc(((size_t)n_stages + 1) * sizeof *begin);
    if (!w || !begin) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    if (plan_alloc(out, MT_PLAN_CELL, n_stages + 1, 0, err)) goto done;
    for (int32_t il = 0; il < l.n_layer; il++)
        w[il] = l.attn_bytes[il] + (uint64_t)l.n_expert * l.expert_bytes[il];
    partition(w, l.n_layer, n_stages, begin);
    begin[n_stages] = l.n_layer;
    plan_set(out, 0, &l, MT_PLAN_ROLE_HEAD, 0, (mt_shard_spec){0, 0, false, true, NULL, 0});
    for (int32_t k = 0; k < n_stages; k++)
        plan_set(out, k + 1, &l, MT_PLAN_ROLE_STAGE, k,
                 (mt_shard_spec){begin[k], begin[k + 1], true, false, NULL, -1});
    rc = 0;
done:
    free(w);
    free(begin);
    mt_shard_layout_free(&l);
    return rc;
}

/* ----------------------------------------------------------------- swarm */

int mt_plan_swarm(const gguf_file *model, int32_t n, mt_plan *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    mt_shard_layout l;
    if (mt_shard_layout_read(model, &l, err)) return -1;
    int rc = -1;
    if (l.n_expert == 0) {
        mt_error_set(err, "%s has no routed experts; a swarm plan needs them (use cell:N)",
                     model->path);
        goto done;
    }
    if (n < 1 || n > l.n_expert) {
        mt_error_set(err, "%s: swarm:%d needs 1 to %d expert shards (one expert at least each)",
                     model->path, n, l.n_expert);
        goto done;
    }
    if (plan_alloc(out, MT_PLAN_SWARM, n + 1, l.n_expert, err)) goto done;
    for (int32_t e = 0; e < l.n_expert; e++) out->expert_ids[e] = e;
    plan_set(out, 0, &l, MT_PLAN_ROLE_BACKBONE, 0,
             (mt_shard_spec){0, l.n_layer, true, true, NULL, 0});
    for (int32_t k = 0; k < n; k++) {
        int32_t a = (int32_t)((int64_t)k * l.n_expert / n);
        int32_t b = (int32_t)((int64_t)(k + 1) * l.n_expert / n);
        plan_set(out, k + 1, &l, MT_PLAN_ROLE_EXPERTS, k,
                 (mt_shard_spec){0, l.n_layer, false, false, out->expert_ids + a, b - a});
    }
    rc = 0;
done:
    mt_shard_layout_free(&l);
    return rc;
}

/* ----------------------------------------------------------------- write */

static json_t *spec_json(const mt_shard_spec *s) {
    json_t *o = json_object();
    json_object_set_new(o, "layers", json_pack("[ii]", s->layer_begin, s->layer_end));
    json_object_set_new(o, "attention", json_boolean(s->attention));
    json_object_set_new(o, "head", json_boolean(s->head));
    if (s->n_experts < 0) {
        json_object_set_new(o, "experts", json_null());
    } else {
        json_t *a = json_array();
        for (int32_t j = 0; j < s->n_experts; j++)
            json_array_append_new(a, json_integer(s->experts[j]));
        json_object_set_new(o, "experts", a);
    }
    return o;
}

int mt_plan_write_io(const gguf_file *model, const mt_plan *plan, const char *out_dir,
                     char *manifest_path, size_t cap, mt_shard_io *io_in, mt_error *err) {
    if (mt_dir_make(out_dir, false) != 0 && errno != EEXIST)
        return mt_error_set(err, "%s: cannot create the output directory: %s", out_dir,
                            strerror(errno));
    mt_shard_layout l;
    if (mt_shard_layout_read(model, &l, err)) return -1;
    mt_shard_io none = {0}, *io = io_in ? io_in : &none;
    mt_pool *caller_pool = io->pool;
    bool own_pool = false;
    int rc = -1;
    int32_t ns = plan->n_shards;
    json_t *root = json_object(), *shards = json_array();
    char source_id[MT_SHARD_HASH_HEX], stem[256], path[4096];
    char(*names)[512] = calloc((size_t)ns, sizeof *names);
    char **paths = calloc((size_t)ns, sizeof *paths);
    char(*file_hash)[MT_SHARD_HASH_HEX] = calloc((size_t)ns, sizeof *file_hash);
    uint64_t *sizes = calloc((size_t)ns, sizeof *sizes);
    uint8_t(*raw)[32] = malloc((model->n_tensors ? model->n_tensors : 1) * sizeof *raw);
    gguf_reader *rd = NULL;
    const char *base = strrchr(model->path, '/');
    base = base ? base + 1 : model->path;
    snprintf(stem, sizeof stem, "%s", base);
    size_t sl = strlen(stem);
    if (sl > 5 && strcmp(stem + sl - 5, ".gguf") == 0) stem[sl -= 5] = 0;
    /* a split model's shards are named after the model, not its first part */
    char suffix[32];
    snprintf(suffix, sizeof suffix, "-%05u-of-%05u", 1u, model->n_parts);
    size_t xl = strlen(suffix);
    if (model->n_parts > 1 && sl > xl && strcmp(stem + sl - xl, suffix) == 0) stem[sl - xl] = 0;
    if (!root || !shards || !names || !paths || !file_hash || !sizes || !raw) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    /* one pool for every step */
    if (!(io->pool = shard_io_pool(io, &own_pool, err))) goto done;
    if (!(rd = gguf_reader_open(model, err)) || shard_model_hashes(rd, io, raw, source_id, err))
        goto done;

    for (int32_t i = 0; i < ns; i++) {
        const mt_plan_shard *ps = &plan->shards[i];
        snprintf(names[i], sizeof names[i], "%s-%s-%d.gguf", stem, mt_plan_role_name(ps->role),
                 ps->index);
        if ((size_t)snprintf(path, sizeof path, "%s/%s", out_dir, names[i]) >= sizeof path) {
            mt_error_set(err, "%s/%s: path too long", out_dir, names[i]);
            goto done;
        }
        if (!(paths[i] = strdup(path))) {
            mt_error_set(err, "out of memory");
            goto done;
        }
        if (shard_write(model, &l, source_id, (const uint8_t(*)[32])raw, &ps->spec, path, io, err))
            goto done;
        /* read it back: the file must open and describe itself correctly */
        gguf_file *sf = gguf_open(path, err);
        if (!sf) goto done;
        mt_shard_info info;
        if (mt_shard_info_read(sf, &info, err)) {
            gguf_close(sf);
            goto done;
        }
        mt_shard_info_free(&info);
        sizes[i] = sf->size;
        gguf_close(sf);
    }
    /* each file's hash for the manifest, a file per thread */
    if (shard_hash_files((const char *const *)paths, (size_t)ns, io, "hashing the shards",
                         file_hash, err))
        goto done;
    for (int32_t i = 0; i < ns; i++) {
        const mt_plan_shard *ps = &plan->shards[i];
        json_t *o = json_object();
        json_object_set_new(o, "file", json_string(names[i]));
        json_object_set_new(o, "role", json_string(mt_plan_role_name(ps->role)));
        json_object_set_new(o, "index", json_integer(ps->index));
        json_object_update_new(o, spec_json(&ps->spec));
        json_object_set_new(o, "bytes", json_integer((json_int_t)sizes[i]));
        json_object_set_new(o, "blake2b", json_string(file_hash[i]));
        json_array_append_new(shards, o);
    }
    json_object_set_new(root, "format", json_string("moontail-manifest-v1"));
    json_object_set_new(root, "model", json_string(base));
    json_object_set_new(root, "source_id", json_string(source_id));
    json_object_set_new(root, "mode", json_string(mt_plan_mode_name(plan->mode)));
    json_object_set_new(root, "replicas", json_integer(1));
    json_object_set_new(root, "n_layer", json_integer(l.n_layer));
    json_object_set_new(root, "n_expert", json_integer(l.n_expert));
    json_object_set(root, "shards", shards);
    snprintf(path, sizeof path, "%s/%s-%s-manifest.json", out_dir, stem,
             mt_plan_mode_name(plan->mode));
    if (json_dump_file(root, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
        mt_error_set(err, "%s: cannot write the manifest: %s", path, strerror(errno));
        goto done;
    }
    if (manifest_path) snprintf(manifest_path, cap, "%s", path);
    rc = 0;
done:
    if (own_pool) mt_pool_free(io->pool);
    io->pool = caller_pool;
    gguf_reader_close(rd);
    for (int32_t i = 0; paths && i < ns; i++) free(paths[i]);
    free(paths);
    free(names);
    free(file_hash);
    free(sizes);
    free(raw);
    json_decref(shards);
    json_decref(root);
    mt_shard_layout_free(&l);
    return rc;
}

int mt_plan_write(const gguf_file *model, const mt_plan *plan, const char *out_dir,
                  char *manifest_path, size_t cap, mt_error *err) {
    return mt_plan_write_io(model, plan, out_dir, manifest_path, cap, NULL, err);
}

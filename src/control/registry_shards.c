/* registry_shards.c - the shards the registry hands out: their names, their
 * specs, and the seed copies it cuts from the model.
 *
 * A shard is named after what it holds, so the same assignment always means
 * the same file: "L<a>-<b>[A][-E<eb>-<ee>]" (layers [a, b), A = attention
 * part, experts [eb, ee); no E part for a dense model), "head" (cell: the
 * requester's token embeddings, final norm and output) and "backbone"
 * (swarm: head + every attention part). The seed copy lives in shard_dir as
 * <name>.gguf with a manifest <name>.json:
 *   {"name": ..., "bytes": N, "blake2b": "<hex of the file>",
 *    "piece_bytes": P, "pieces": ["<hex BLAKE2b-256 of piece i>", ...]}
 * which is what fetchers verify every piece against (shard_fetch.h). */
#include "moontail/shard_fetch.h"
#include "moontail/log.h"
#include "registry_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static pthread_mutex_t cut_lock = PTHREAD_MUTEX_INITIALIZER;

void reg_shard_name(const reg_assign *a, char out[96]) {
    if (a->role == REG_ROLE_NONE || a->role == REG_ROLE_SPARE) {
        out[0] = 0;
        return;
    }
    int k = snprintf(out, 96, "L%d-%d%s", a->layer_begin, a->layer_end, a->attention ? "A" : "");
    if (a->expert_end > a->expert_begin)
        snprintf(out + k, (size_t)(96 - k), "-E%d-%d", a->expert_begin, a->expert_end);
}

int reg_shard_parse(const mt_registry *r, const char *name, reg_assign *a, bool *head) {
    memset(a, 0, sizeof *a);
    *head = false;
    if (strcmp(name, "head") == 0 || strcmp(name, "backbone") == 0) {
        *head = true;
        a->attention = strcmp(name, "backbone") == 0;
        a->layer_end = a->attention ? r->layout.n_layer : 0;
        return 0;
    }
    int lb, le, eb = 0, ee = 0, n = 0, m = 0;
    if (sscanf(name, "L%d-%d%n", &lb, &le, &n) != 2) return -1;
    const char *p = name + n;
    if (*p == 'A') a->attention = true, p++;
    if (*p == '-') {
        if (sscanf(p, "-E%d-%d%n", &eb, &ee, &m) != 2 || p[m]) return -1;
    } else if (*p) {
        return -1;
    }
    if (lb < 0 || le <= lb || le > r->layout.n_layer || eb < 0 || ee < eb ||
        ee > r->layout.n_expert)
        return -1;
    a->role = a->attention ? REG_ROLE_STAGE : REG_ROLE_EXPERTS;
    a->layer_begin = lb, a->layer_end = le, a->expert_begin = eb, a->expert_end = ee;
    char again[96];
    reg_shard_name(a, again);
    return strcmp(again, name) == 0 ? 0 : -1; /* one spelling per shard */
}

void reg_assign_spec(const mt_registry *r, const reg_assign *a, mt_shard_spec *spec, int32_t *ids) {
    memset(spec, 0, sizeof *spec);
    spec->layer_begin = a->layer_begin;
    spec->layer_end = a->layer_end;
    spec->attention = a->attention;
    int32_t nx = r->layout.n_expert;
    if (a->expert_end <= a->expert_begin || nx == 0) {
        spec->n_experts = 0;
    } else if (a->expert_begin == 0 && a->expert_end == nx) {
        spec->n_experts = -1;
    } else {
        for (int32_t e = a->expert_begin; e < a->expert_end; e++) ids[e - a->expert_begin] = e;
        spec->experts = ids;
        spec->n_experts = a->expert_end - a->expert_begin;
    }
}

static char *path_of(const mt_registry *r, const char *name, const char *ext) {
    size_t n = strlen(r->shard_dir) + strlen(name) + strlen(ext) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s%s", r->shard_dir, name, ext);
    return p;
}

/* Cuts the shard and writes its manifest (the caller holds cut_lock). */
static int cut(mt_registry *r, const char *name, const char *gguf, const char *manifest,
               mt_error *err) {
    reg_assign a;
    bool head;
    if (reg_shard_parse(r, name, &a, &head))
        return mt_error_set(err, "'%s' is not a shard name of this model", name);
    int32_t *ids = malloc(((size_t)r->layout.n_expert + 1) * sizeof *ids);
    if (!ids) return mt_error_set(err, "out of memory");
    mt_shard_spec spec;
    reg_assign_spec(r, &a, &spec, ids);
    if (head) spec.head = true;
    int rc = mt_shard_write_io(r->model, &r->layout, r->source_id, &spec, gguf, &r->io, err);
    free(ids);
    if (rc) return -1;
    json_t *m = mt_shard_manifest_of_file(gguf, name, MT_SHARD_PIECE_BYTES, err);
    if (!m) return -1;
    char *tmp = path_of(r, name, ".json.part");
    rc = tmp && json_dump_file(m, tmp, JSON_INDENT(1)) == 0 && rename(tmp, manifest) == 0
             ? 0
             : mt_error_set(err, "cannot write %s: %s", manifest, strerror(errno));
    free(tmp);
    json_decref(m);
    return rc;
}

json_t *reg_shard_manifest(mt_registry *r, const char *name, mt_error *err) {
    char *gguf = path_of(r, name, ".gguf"), *manifest = path_of(r, name, ".json");
    json_t *m = NULL;
    if (!gguf || !manifest) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    pthread_mutex_lock(&cut_lock);
    struct stat sb;
    int rc = 0;
    if (stat(manifest, &sb) != 0 || stat(gguf, &sb) != 0) {
        if (!r->cfg.quiet) mt_log(MT_LOG_INFO, "registry", "cutting shard %s", name);
        rc = cut(r, name, gguf, manifest, err);
    }
    pthread_mutex_unlock(&cut_lock);
    if (rc == 0) {
        json_error_t je;
        m = json_load_file(manifest, 0, &je);
        if (!m) mt_error_set(err, "%s: %s", manifest, je.text);
    }
done:
    free(gguf);
    free(manifest);
    return m;
}

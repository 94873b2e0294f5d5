/* registry_shards.c - the shards the registry hands out: their names, their
 * specs, and the seed copies it cuts from the model.
 *
 * A shard is named after what it holds, so the same assignment always means
 * the same file: "L<a>-<b>[A][-E<c>-<d>]" (layers a to b, A = attention part,
 * experts c to d, both ranges inclusive and written as `moontail status`
 * writes layers: "L3" for a single one, "E5" for one expert; no E part for a
 * dense model), "head" (cell: the
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
    if (a->role == MT_PLACE_NONE || a->role == MT_PLACE_SPARE) {
        out[0] = 0;
        return;
    }
    int k = snprintf(out, 96, "L%d", a->layer_begin);
    if (a->layer_end - a->layer_begin > 1)
        k += snprintf(out + k, (size_t)(96 - k), "-%d", a->layer_end - 1);
    if (a->attention) k += snprintf(out + k, (size_t)(96 - k), "A");
    if (a->expert_end > a->expert_begin) {
        k += snprintf(out + k, (size_t)(96 - k), "-E%d", a->expert_begin);
        if (a->expert_end - a->expert_begin > 1)
            snprintf(out + k, (size_t)(96 - k), "-%d", a->expert_end - 1);
    }
}

/* A number at *p (digits only, at most 9), advancing *p; -1 when there is none. */
static int number(const char **p) {
    int v = 0, n = 0;
    while (**p >= '0' && **p <= '9' && n < 9) v = v * 10 + (*(*p)++ - '0'), n++;
    return n ? v : -1;
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
    /* L<a>[-<b>][A][-E<c>[-<d>]], ranges inclusive */
    const char *p = name;
    if (*p++ != 'L') return -1;
    int lb = number(&p), le = lb, eb = 0, ee = -1;
    if (lb < 0) return -1;
    if (p[0] == '-' && p[1] >= '0' && p[1] <= '9') {
        p++;
        le = number(&p);
    }
    if (*p == 'A') a->attention = true, p++;
    if (p[0] == '-' && p[1] == 'E') {
        p += 2;
        eb = ee = number(&p);
        if (eb < 0) return -1;
        if (*p == '-') {
            p++;
            if ((ee = number(&p)) < 0) return -1;
        }
    }
    if (*p || lb < 0 || le < lb || le >= r->layout.n_layer || (ee >= 0 && ee < eb) ||
        ee >= r->layout.n_expert)
        return -1;
    a->role = a->attention ? MT_PLACE_STAGE : MT_PLACE_EXPERTS;
    a->layer_begin = lb, a->layer_end = le + 1, a->expert_begin = eb, a->expert_end = ee + 1;
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

/* Whether the seed copy at gguf holds what `name` means for this model: a shard directory
 * may hold files of another model, or of a version that named shards differently (layers
 * [a, b) where names now say a to b inclusive); those are cut again. */
static bool seed_matches(const mt_registry *r, const char *name, const char *gguf) {
    reg_assign a;
    bool head;
    if (reg_shard_parse(r, name, &a, &head)) return false;
    int32_t *ids = malloc(((size_t)r->layout.n_expert + 1) * sizeof *ids);
    gguf_file *f = ids ? gguf_open(gguf, NULL) : NULL;
    mt_shard_info info;
    bool ok = f && mt_shard_info_read(f, &info, NULL) == 0;
    if (ok) {
        mt_shard_spec spec;
        reg_assign_spec(r, &a, &spec, ids);
        ok = strcmp(info.source_id, r->source_id) == 0 && info.head == head &&
             info.attention == a.attention && info.layer_begin == a.layer_begin &&
             info.layer_end == a.layer_end && info.n_experts == spec.n_experts;
        for (int32_t i = 0; ok && i < spec.n_experts; i++) ok = info.experts[i] == spec.experts[i];
        mt_shard_info_free(&info);
    }
    if (f) gguf_close(f);
    free(ids);
    return ok;
}

/* Whether the seed copy of name was found to match, or was cut, since the start (caller holds
 * cut_lock). seed_matches opens the file under the lock every manifest request takes, and
 * what it looks for (another model's file, an older version's name) can only be left from
 * before this run: once per name is enough. A linear search: the list holds one name per
 * seed file this run handed out. */
static bool seed_checked(const mt_registry *r, const char *name) {
    for (int32_t i = 0; i < r->n_seeds_checked; i++)
        if (strcmp(r->seeds_checked[i], name) == 0) return true;
    return false;
}

/* Adds name to the seeds checked (caller holds cut_lock); without memory it is checked again
 * at its next request. */
static void note_seed_checked(mt_registry *r, const char *name) {
    if (r->n_seeds_checked == r->cap_seeds_checked) {
        int32_t cap = r->cap_seeds_checked ? r->cap_seeds_checked * 2 : 16;
        char(*more)[96] = realloc(r->seeds_checked, (size_t)cap * sizeof *more);
        if (!more) return;
        r->seeds_checked = more;
        r->cap_seeds_checked = cap;
    }
    snprintf(r->seeds_checked[r->n_seeds_checked++], sizeof *r->seeds_checked, "%s", name);
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
    bool have = stat(manifest, &sb) == 0 && stat(gguf, &sb) == 0, checked = seed_checked(r, name);
    if (have && !checked && !seed_matches(r, name, gguf)) {
        mt_log_as(&r->log, MT_LOG_WARN, "%s holds another shard than '%s' means for this model",
                  gguf, name);
        have = false;
    }
    if (!have) {
        mt_log_as(&r->log, MT_LOG_INFO, "cutting shard %s", name);
        rc = cut(r, name, gguf, manifest, err);
    }
    if (rc == 0 && !checked) note_seed_checked(r, name);
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

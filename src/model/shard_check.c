/* shard_check.c - reading and checking shards.
 *
 * Nothing in a shard is trusted: mt_shard_info_read checks every
 * moontail.shard.* key and that the file's tensors are exactly the ones its
 * keys describe, mt_shard_verify recomputes every tensor's content hash, and
 * mt_plan_check proves that the shards a manifest lists are, together, the
 * model: every tensor slice held exactly `replicas` times, byte for byte. */
#include "moontail/model.h"
#include "shard_internal.h"

#include <jansson.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ shard info */

void mt_shard_info_free(mt_shard_info *info) {
    if (!info) return;
    free(info->experts);
    free(info->tensor_index);
    free(info->tensor_hash);
    memset(info, 0, sizeof *info);
}

static bool is_hex64(const char *s, uint64_t len) {
    if (len != 64) return false;
    for (uint64_t i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

/* A required u32 key of the shard; -1 naming it when missing or mistyped. */
static int key_u32(const gguf_file *f, const char *key, uint32_t *out, mt_error *err) {
    mt_error e = {{0}};
    if (gguf_get_u32(f, key, out, &e)) return 0;
    if (e.msg[0]) return mt_error_set(err, "%s: %s", f->path, e.msg);
    return mt_error_set(err, "%s: key '%s' is missing; the shard is incomplete", f->path, key);
}

static int key_bool(const gguf_file *f, const char *key, bool *out, mt_error *err) {
    mt_error e = {{0}};
    if (gguf_get_bool(f, key, out, &e)) return 0;
    return mt_error_set(err, "%s: key '%s': %s", f->path, key,
                        e.msg[0] ? e.msg : "missing (a required shard key)");
}

/* A string-array key with exactly n entries. */
static const gguf_value *key_strs(const gguf_file *f, const char *key, mt_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->value.type != GGUF_TYPE_ARRAY || kv->value.arr.type != GGUF_TYPE_STRING) {
        mt_error_set(err, "%s: key '%s' is %s; it must be an array of strings", f->path, key,
                     kv ? "of another type" : "missing");
        return NULL;
    }
    return &kv->value;
}

int mt_shard_info_read(const gguf_file *f, mt_shard_info *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    if (!gguf_find_kv(f, "moontail.shard.version")) {
        mt_error_set(err,
                     "%s is not a MoonTail shard (no moontail.shard.version key); it is a full"
                     " model or another GGUF file",
                     f->path);
        return MT_SHARD_NOT_A_SHARD;
    }
    uint32_t v, lb, le, nx;
    if (key_u32(f, "moontail.shard.version", &v, err)) return -1;
    if (v != MT_SHARD_VERSION)
        return mt_error_set(err,
                            "%s: shard format version %u is not supported (this build reads"
                            " version %d); use a matching moontail",
                            f->path, v, MT_SHARD_VERSION);
    out->version = v;
    if (key_u32(f, "moontail.shard.layer_begin", &lb, err) ||
        key_u32(f, "moontail.shard.layer_end", &le, err) ||
        key_u32(f, "moontail.shard.source_n_expert", &nx, err) ||
        key_bool(f, "moontail.shard.attention", &out->attention, err) ||
        key_bool(f, "moontail.shard.head", &out->head, err))
        return -1;

    /* the model's own keys, copied into the shard, bound the ranges */
    mt_error e = {{0}};
    char *arch = gguf_get_string(f, "general.architecture", &e);
    if (!arch) return mt_error_set(err, "%s: key 'general.architecture' is missing", f->path);
    char key[128];
    uint32_t n_layer = 0, n_expert = 0;
    snprintf(key, sizeof key, "%s.block_count", arch);
    bool have_layers = gguf_get_u32(f, key, &n_layer, &e);
    snprintf(key, sizeof key, "%s.expert_count", arch);
    if (!gguf_get_u32(f, key, &n_expert, &e)) n_expert = 0;
    free(arch);
    if (!have_layers) return mt_error_set(err, "%s: key 'block_count' is missing", f->path);
    if (lb > le || le > n_layer)
        return mt_error_set(err,
                            "%s: moontail.shard layers %u:%u are not inside the model's %u"
                            " layers",
                            f->path, lb, le, n_layer);
    if (nx != n_expert || nx > 65536)
        return mt_error_set(err,
                            "%s: moontail.shard.source_n_expert = %u but expert_count = %u; the"
                            " shard's metadata is inconsistent",
                            f->path, nx, n_expert);
    out->layer_begin = (int32_t)lb;
    out->layer_end = (int32_t)le;
    out->source_n_expert = (int32_t)nx;
    out->source_n_layer = (int32_t)n_layer;

    const gguf_kv *sid = gguf_find_kv(f, "moontail.shard.source_id");
    if (!sid || sid->value.type != GGUF_TYPE_STRING ||
        !is_hex64(sid->value.str.ptr, sid->value.str.len))
        return mt_error_set(err,
                            "%s: key 'moontail.shard.source_id' must be a string of 64 lowercase"
                            " hex digits",
                            f->path);
    memcpy(out->source_id, sid->value.str.ptr, 64);
    out->source_id[64] = 0;

    out->n_experts = -1;
    const gguf_kv *ex = gguf_find_kv(f, "moontail.shard.experts");
    if (ex) {
        if (ex->value.type != GGUF_TYPE_ARRAY || ex->value.arr.type != GGUF_TYPE_UINT32 ||
            ex->value.arr.n > nx)
            return mt_error_set(err,
                                "%s: key 'moontail.shard.experts' must be an array of at most %u"
                                " uint32 expert ids",
                                f->path, nx);
        out->n_experts = (int32_t)ex->value.arr.n;
        out->experts = malloc((ex->value.arr.n ? ex->value.arr.n : 1) * sizeof(int32_t));
        if (!out->experts) return mt_error_set(err, "out of memory");
        for (uint64_t j = 0; j < ex->value.arr.n; j++) {
            uint32_t id;
            memcpy(&id, ex->value.arr.data + 4 * j, 4);
            if (id >= nx || (j > 0 && (int32_t)id <= out->experts[j - 1])) {
                mt_error_set(err,
                             "%s: moontail.shard.experts[%llu] = %u: ids must ascend, without"
                             " repeats, below %u",
                             f->path, (unsigned long long)j, id, nx);
                goto fail;
            }
            out->experts[j] = (int32_t)id;
        }
    }

    const gguf_value *names = key_strs(f, "moontail.shard.tensor_names", err);
    const gguf_value *hashes = names ? key_strs(f, "moontail.shard.tensor_hashes", err) : NULL;
    if (!hashes) goto fail;
    if (names->arr.n != f->n_tensors || hashes->arr.n != f->n_tensors) {
        mt_error_set(err,
                     "%s: moontail.shard.tensor_names has %llu and tensor_hashes %llu entries,"
                     " but the file holds %llu tensors",
                     f->path, (unsigned long long)names->arr.n, (unsigned long long)hashes->arr.n,
                     (unsigned long long)f->n_tensors);
        goto fail;
    }
    uint64_t n = f->n_tensors;
    out->n_tensors = n;
    out->tensor_index = malloc((n ? n : 1) * sizeof *out->tensor_index);
    out->tensor_hash = malloc((n ? n : 1) * sizeof *out->tensor_hash);
    uint8_t *seen = calloc(n ? n : 1, 1);
    if (!out->tensor_index || !out->tensor_hash || !seen) {
        free(seen);
        mt_error_set(err, "out of memory");
        goto fail;
    }
    for (uint64_t i = 0; i < n; i++) {
        char name[96];
        const gguf_str *s = &names->arr.strs[i], *h = &hashes->arr.strs[i];
        const gguf_tensor *t = NULL;
        if (s->len < sizeof name) {
            memcpy(name, s->ptr, s->len);
            name[s->len] = 0;
            t = strlen(name) == s->len ? gguf_find_tensor(f, name) : NULL;
        }
        if (!t || seen[t - f->tensors]) {
            mt_error_set(err, "%s: moontail.shard.tensor_names[%llu] '%.*s' is %s", f->path,
                         (unsigned long long)i, (int)(s->len < 80 ? s->len : 80), s->ptr,
                         t ? "listed twice" : "not a tensor of the file");
            free(seen);
            goto fail;
        }
        seen[t - f->tensors] = 1;
        if (!is_hex64(h->ptr, h->len)) {
            mt_error_set(err, "%s: the stored hash of tensor '%s' is not 64 lowercase hex digits",
                         f->path, t->name);
            free(seen);
            goto fail;
        }
        out->tensor_index[i] = (uint64_t)(t - f->tensors);
        memcpy(out->tensor_hash[i], h->ptr, 64);
        out->tensor_hash[i][64] = 0;

        /* the tensor must be one the shard's description selects */
        mt_shard_part part;
        int32_t il;
        if (mt_shard_classify(t->name, &part, &il, err)) {
            mt_error_prefix(err, "%s", f->path);
            free(seen);
            goto fail;
        }
        bool in_range = il >= out->layer_begin && il < out->layer_end, ok = false;
        switch (part) {
        case MT_SHARD_PART_HEAD:
            ok = out->head;
            break;
        case MT_SHARD_PART_SHARED:
            ok = out->head || (out->attention && out->layer_begin < out->layer_end);
            break;
        case MT_SHARD_PART_FINAL:
            ok = mt_shard_spec_has_final(out->source_n_layer, out->head, out->attention,
                                         out->layer_begin, out->layer_end);
            break;
        case MT_SHARD_PART_ATTENTION:
            ok = in_range && out->attention;
            break;
        case MT_SHARD_PART_EXPERTS:
            ok = in_range && out->n_experts != 0;
            break;
        }
        int64_t want = out->n_experts < 0 ? (int64_t)nx : out->n_experts;
        if (ok && part == MT_SHARD_PART_EXPERTS && (t->n_dims != 3 || t->ne[2] != want)) {
            mt_error_set(
                err, "%s: tensor '%s' holds %lld experts but the shard's metadata says %lld",
                f->path, t->name, (long long)(t->n_dims == 3 ? t->ne[2] : 0), (long long)want);
            free(seen);
            goto fail;
        }
        if (!ok) {
            mt_error_set(err,
                         "%s: tensor '%s' is outside what the shard says it holds (layers %u:%u,"
                         " attention %s, head %s, %s experts)",
                         f->path, t->name, lb, le, out->attention ? "on" : "off",
                         out->head ? "on" : "off", out->n_experts == 0 ? "no" : "some or all");
            free(seen);
            goto fail;
        }
    }
    free(seen);
    return 0;
fail:
    mt_shard_info_free(out);
    return -1;
}

/* Hashes the shard's tensors [first, first + count) (in tensor_names order)
 * on io's threads, read in chunks, never through the mapping, and always
 * hashed (the cache is for models); the first mismatch is an error naming
 * the tensor and the file. */
static int verify_tensors(const gguf_file *f, const mt_shard_info *info, uint64_t first,
                          uint64_t count, mt_shard_io *io, mt_error *err) {
    if (first > info->n_tensors || count > info->n_tensors - first)
        return mt_error_set(err, "%s: tensors [%llu, +%llu) are outside the shard's %llu", f->path,
                            (unsigned long long)first, (unsigned long long)count,
                            (unsigned long long)info->n_tensors);
    shard_slice *sl = malloc((count ? count : 1) * sizeof *sl);
    uint8_t(*raw)[32] = malloc((count ? count : 1) * sizeof *raw);
    gguf_reader *rd = NULL;
    int rc = -1;
    if (!sl || !raw) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    for (uint64_t i = 0; i < count; i++)
        sl[i] = (shard_slice){info->tensor_index[first + i], NULL, -1};
    const char *base = strrchr(f->path, '/');
    char what[300];
    snprintf(what, sizeof what, "checking %s", base ? base + 1 : f->path);
    if (!(rd = gguf_reader_open(f, err)) ||
        shard_hash_slices(rd, sl, count, io, false, what, raw, err))
        goto done;
    rc = 0;
    for (uint64_t i = 0; i < count && !rc; i++) {
        const gguf_tensor *t = &f->tensors[info->tensor_index[first + i]];
        char h[MT_SHARD_HASH_HEX];
        sodium_bin2hex(h, sizeof h, raw[i], 32);
        if (strcmp(h, info->tensor_hash[first + i]) != 0)
            rc = mt_error_set(err,
                              "%s: tensor '%s' does not match its stored hash (stored %.16s...,"
                              " computed %.16s...); the shard is corrupted or was modified:"
                              " delete the file, then fetch or split it again",
                              f->path, t->name, info->tensor_hash[first + i], h);
    }
done:
    gguf_reader_close(rd);
    free(sl);
    free(raw);
    return rc;
}

int mt_shard_verify_io(const gguf_file *f, mt_shard_io *io, mt_error *err) {
    mt_shard_info info;
    if (mt_shard_info_read(f, &info, err)) return -1;
    int rc = verify_tensors(f, &info, 0, info.n_tensors, io, err);
    mt_shard_info_free(&info);
    return rc;
}

int mt_shard_verify(const gguf_file *f, mt_error *err) {
    return mt_shard_verify_io(f, NULL, err);
}

int mt_shard_verify_tensor(const gguf_file *f, const mt_shard_info *info, uint64_t i,
                           mt_shard_io *io, mt_error *err) {
    return verify_tensors(f, info, i, 1, io, err);
}

/* ------------------------------------------------------------ plan check */

#define REPORT_MAX_LINES 50

typedef struct report {
    char *buf;
    size_t n, cap;
    int n_problems;
} report;

static void report_vadd(report *r, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int need = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (need < 0) return;
    if (r->n + (size_t)need + 2 > r->cap) {
        size_t cap = r->cap ? r->cap : 1024;
        while (cap < r->n + (size_t)need + 2) cap *= 2;
        char *p = realloc(r->buf, cap);
        if (!p) return;
        r->buf = p;
        r->cap = cap;
    }
    vsnprintf(r->buf + r->n, (size_t)need + 1, fmt, ap);
    r->n += (size_t)need;
    r->buf[r->n++] = '\n';
    r->buf[r->n] = 0;
}

static void report_add(report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report_add(report *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report_vadd(r, fmt, ap);
    va_end(ap);
}

static void problem(report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(report *r, const char *fmt, ...) {
    if (++r->n_problems > REPORT_MAX_LINES) return;
    va_list ap;
    va_start(ap, fmt);
    report_vadd(r, fmt, ap);
    va_end(ap);
}

/* Coverage of one model: every tensor is one slice, a routed expert tensor
 * one slice per expert. For each slice: how many manifest entries hold it
 * and the first two of them (to name them in the report). */
typedef struct coverage {
    uint64_t *first; /* (n_tensors) index of the tensor's first slice */
    uint64_t n_slices;
    int32_t *count;  /* (n_slices) */
    int32_t *holder; /* (n_slices, 2) entry indices, -1 = none */
} coverage;

static void cover(coverage *c, uint64_t slice, int32_t entry) {
    int32_t *h = &c->holder[2 * slice];
    if (c->count[slice] < 2) h[c->count[slice]] = entry;
    c->count[slice]++;
}

/* The shard's path: as given when absolute, else next to the manifest. */
static char *shard_path(const char *manifest, const char *file) {
    const char *slash = strrchr(manifest, '/');
    size_t dir = file[0] == '/' || !slash ? 0 : (size_t)(slash - manifest) + 1;
    char *p = malloc(dir + strlen(file) + 1);
    if (!p) return NULL;
    memcpy(p, manifest, dir);
    strcpy(p + dir, file);
    return p;
}

/* Compares what a manifest entry claims about a shard with the shard itself. */
static void check_claims(report *r, const char *who, json_t *js, const mt_shard_info *in,
                         const gguf_file *sf) {
    json_t *v;
    if ((v = json_object_get(js, "layers"))) {
        if (!json_is_array(v) || json_array_size(v) != 2 ||
            !json_is_integer(json_array_get(v, 0)) || !json_is_integer(json_array_get(v, 1)))
            problem(r, "%s: \"layers\" must be [begin, end]", who);
        else if (json_integer_value(json_array_get(v, 0)) != in->layer_begin ||
                 json_integer_value(json_array_get(v, 1)) != in->layer_end)
            problem(r, "%s: manifest says layers [%lld, %lld], the shard holds [%d, %d]", who,
                    json_integer_value(json_array_get(v, 0)),
                    json_integer_value(json_array_get(v, 1)), in->layer_begin, in->layer_end);
    }
    const char *flags[2] = {"attention", "head"};
    bool have[2] = {in->attention, in->head};
    for (int k = 0; k < 2; k++)
        if ((v = json_object_get(js, flags[k])) &&
            (!json_is_boolean(v) || json_is_true(v) != have[k]))
            problem(r, "%s: manifest says \"%s\": %s, the shard says %s", who, flags[k],
                    json_is_boolean(v) ? (json_is_true(v) ? "true" : "false") : "(not a bool)",
                    have[k] ? "true" : "false");
    if ((v = json_object_get(js, "experts"))) {
        bool same = json_is_null(v) ? in->n_experts < 0
                                    : json_is_array(v) && in->n_experts >= 0 &&
                                          json_array_size(v) == (size_t)in->n_experts;
        for (int32_t j = 0; same && !json_is_null(v) && j < in->n_experts; j++) {
            json_t *e = json_array_get(v, (size_t)j);
            same = json_is_integer(e) && json_integer_value(e) == in->experts[j];
        }
        if (!same) problem(r, "%s: manifest's \"experts\" differ from the shard's expert ids", who);
    }
    if ((v = json_object_get(js, "bytes")) &&
        (!json_is_integer(v) || (uint64_t)json_integer_value(v) != sf->size))
        problem(r, "%s: manifest says %lld bytes, the file has %zu", who,
                json_is_integer(v) ? json_integer_value(v) : -1LL, sf->size);
    if ((v = json_object_get(js, "blake2b"))) {
        char h[MT_SHARD_HASH_HEX];
        mt_error e = {{0}};
        if (mt_shard_hash_file(sf->path, h, &e)) {
            problem(r, "%s: %s", who, e.msg);
            return;
        }
        if (!json_is_string(v) || strcmp(json_string_value(v), h) != 0)
            problem(r,
                    "%s: file hash differs from the manifest's blake2b (file %.16s...); the file"
                    " was modified or is another version",
                    who, h);
    }
}

/* What every manifest entry is checked against: the model, read through rd
 * as io says, and its tensors' hashes. */
typedef struct check_ctx {
    const gguf_file *model;
    const mt_shard_layout *lay;
    const char (*model_hash)[MT_SHARD_HASH_HEX];
    const char *source_id;
    gguf_reader *rd;
    mt_shard_io *io;
} check_ctx;

/* Checks one manifest entry and adds its slices to the coverage. */
static void check_entry(report *r, const check_ctx *cx, coverage *c, const char *manifest,
                        int32_t k, json_t *js) {
    const gguf_file *model = cx->model;
    const mt_shard_layout *lay = cx->lay;
    char who[300];
    json_t *jf = json_object_get(js, "file");
    if (!json_is_object(js) || !json_is_string(jf)) {
        problem(r, "shard #%d: the manifest entry has no \"file\" string", k);
        return;
    }
    snprintf(who, sizeof who, "shard #%d (%s)", k, json_string_value(jf));
    char *path = shard_path(manifest, json_string_value(jf));
    mt_error err = {{0}};
    gguf_file *sf = path ? gguf_open(path, &err) : NULL;
    free(path);
    if (!sf) {
        problem(r, "%s: cannot open: %s", who, err.msg);
        return;
    }
    mt_shard_info in;
    int rc = mt_shard_info_read(sf, &in, &err);
    if (rc) {
        problem(r, "%s: %s", who, err.msg);
        gguf_close(sf);
        return;
    }
    uint64_t nt = in.n_tensors;
    shard_slice *sl = malloc((nt ? nt : 1) * sizeof *sl);
    uint64_t *mi_of = malloc((nt ? nt : 1) * sizeof *mi_of);
    uint8_t(*sh)[32] = malloc((nt ? nt : 1) * sizeof *sh);
    int64_t *slot = malloc((nt ? nt : 1) * sizeof *slot); /* -2 skip, -1 whole, else index in sl */
    if (!sl || !mi_of || !sh || !slot) {
        problem(r, "%s: out of memory", who);
        goto done;
    }
    if (strcmp(in.source_id, cx->source_id) != 0) {
        problem(r,
                "%s: cut from a different model (source_id %.16s..., this model %.16s...);"
                " split this model again",
                who, in.source_id, cx->source_id);
        goto done;
    }
    json_t *role = json_object_get(js, "role");
    if (role && (!json_is_string(role) || (strcmp(json_string_value(role), "head") != 0 &&
                                           strcmp(json_string_value(role), "stage") != 0 &&
                                           strcmp(json_string_value(role), "backbone") != 0 &&
                                           strcmp(json_string_value(role), "experts") != 0)))
        problem(r, "%s: \"role\" must be head, stage, backbone or experts", who);
    check_claims(r, who, js, &in, sf);
    if (mt_shard_verify_io(sf, cx->io, &err)) problem(r, "%s: %s", who, err.msg);
    /* each tensor: the model's type and shape; the expert slices it holds are hashed
     * together (or come from the cache), whole tensors have the model's hashes */
    size_t n_sl = 0;
    for (uint64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = &sf->tensors[in.tensor_index[i]];
        const gguf_tensor *mt = gguf_find_tensor(model, t->name);
        slot[i] = -2;
        if (!mt) {
            problem(r, "%s: tensor '%s' is not in the model", who, t->name);
            continue;
        }
        uint64_t mi = (uint64_t)(mt - model->tensors);
        bool sliced = lay->part[mi] == MT_SHARD_PART_EXPERTS && in.n_experts >= 0;
        int64_t ne2 = sliced ? in.n_experts : mt->ne[2];
        if (t->type != mt->type || t->ne[0] != mt->ne[0] || t->ne[1] != mt->ne[1] ||
            t->ne[2] != ne2 || t->ne[3] != mt->ne[3]) {
            problem(r, "%s: tensor '%s' has another type or shape than the model's", who, t->name);
            continue;
        }
        mi_of[i] = mi;
        slot[i] = -1;
        if (sliced) {
            sl[n_sl] = (shard_slice){mi, in.experts, in.n_experts};
            slot[i] = (int64_t)n_sl++;
        }
    }
    const char *mbase = strrchr(model->path, '/');
    char what[300];
    snprintf(what, sizeof what, "hashing %s's expert slices", mbase ? mbase + 1 : model->path);
    if (n_sl && shard_hash_slices(cx->rd, sl, n_sl, cx->io, true, what, sh, &err)) {
        problem(r, "%s: %s", who, err.msg);
        goto done;
    }
    for (uint64_t i = 0; i < nt; i++) {
        if (slot[i] == -2) continue;
        const gguf_tensor *t = &sf->tensors[in.tensor_index[i]];
        uint64_t mi = mi_of[i];
        char h[MT_SHARD_HASH_HEX];
        if (slot[i] >= 0)
            sodium_bin2hex(h, sizeof h, sh[slot[i]], 32);
        else
            memcpy(h, cx->model_hash[mi], MT_SHARD_HASH_HEX);
        if (strcmp(h, in.tensor_hash[i]) != 0) {
            problem(r, "%s: tensor '%s' differs from the model's bytes for the same slice", who,
                    t->name);
            continue;
        }
        if (lay->part[mi] != MT_SHARD_PART_EXPERTS)
            cover(c, c->first[mi], k);
        else if (slot[i] < 0)
            for (int32_t e = 0; e < lay->n_expert; e++) cover(c, c->first[mi] + (uint64_t)e, k);
        else
            for (int32_t j = 0; j < in.n_experts; j++)
                cover(c, c->first[mi] + (uint64_t)in.experts[j], k);
    }
    /* shared tensors are copied, not split: every shard computing attention needs them */
    if (in.head || (in.attention && in.layer_begin < in.layer_end))
        for (uint64_t i = 0; i < model->n_tensors; i++)
            if (lay->part[i] == MT_SHARD_PART_SHARED &&
                !gguf_find_tensor(sf, model->tensors[i].name))
                problem(r,
                        "%s: lacks the shared tensor '%s' that every shard with the head or"
                        " attention holds; split the model again",
                        who, model->tensors[i].name);
    /* final tensors likewise, in every shard with the head or the last layer's attention */
    if (mt_shard_spec_has_final(lay->n_layer, in.head, in.attention, in.layer_begin, in.layer_end))
        for (uint64_t i = 0; i < model->n_tensors; i++)
            if (lay->part[i] == MT_SHARD_PART_FINAL &&
                !gguf_find_tensor(sf, model->tensors[i].name))
                problem(r,
                        "%s: lacks the tensor '%s' that every shard with the head or the last"
                        " layer's attention holds; split the model again",
                        who, model->tensors[i].name);
done:
    free(sl);
    free(mi_of);
    free(sh);
    free(slot);
    mt_shard_info_free(&in);
    gguf_close(sf);
}

/* Reports every run of slices of one tensor whose count is not `want`. */
static void report_coverage(report *r, const gguf_file *model, const mt_shard_layout *lay,
                            const coverage *c, json_t *shards, int32_t want, uint64_t *n_bad) {
    for (uint64_t i = 0; i < model->n_tensors; i++) {
        uint64_t n = lay->part[i] == MT_SHARD_PART_EXPERTS ? (uint64_t)lay->n_expert : 1;
        for (uint64_t a = 0; a < n;) {
            uint64_t s = c->first[i] + a, b = a + 1;
            while (b < n && c->count[c->first[i] + b] == c->count[s]) b++;
            int32_t got = c->count[s];
            /* shared and final tensors: one copy per shard that needs them, so any count >= 1 */
            bool copied =
                lay->part[i] == MT_SHARD_PART_SHARED || lay->part[i] == MT_SHARD_PART_FINAL;
            bool fine = copied ? got >= 1 : got == want;
            if (!fine) {
                *n_bad += b - a;
                char what[160];
                if (n > 1)
                    snprintf(what, sizeof what, "tensor '%s' experts %llu-%llu",
                             model->tensors[i].name, (unsigned long long)a,
                             (unsigned long long)(b - 1));
                else
                    snprintf(what, sizeof what, "tensor '%s'", model->tensors[i].name);
                if (got == 0) {
                    problem(r, "%s: held by no shard (want %d); a shard is missing", what, want);
                } else {
                    const int32_t *h = &c->holder[2 * s];
                    json_t *f0 = json_object_get(json_array_get(shards, (size_t)h[0]), "file");
                    json_t *f1 = h[1] >= 0
                                     ? json_object_get(json_array_get(shards, (size_t)h[1]), "file")
                                     : NULL;
                    problem(r, "%s: held %d times, want %d (by #%d %s%s%s%s)", what, got, want,
                            h[0], json_string_value(f0), f1 ? ", #" : "",
                            f1 ? json_string_value(f1) : "", got > 2 ? ", ..." : "");
                }
            }
            a = b;
        }
    }
}

int mt_plan_check_io(const char *model_path, const char *manifest_path, char **report_out,
                     mt_shard_io *io_in, mt_error *err) {
    *report_out = NULL;
    report r = {0};
    int rc = -1;
    mt_shard_layout lay = {0};
    coverage c = {0};
    char(*model_hash)[MT_SHARD_HASH_HEX] = NULL;
    json_t *root = NULL;
    gguf_reader *rd = NULL;
    mt_shard_io none = {0}, *io = io_in ? io_in : &none;
    mt_pool *caller_pool = io->pool;
    bool own_pool = false;
    gguf_file *model = gguf_open(model_path, err);
    if (!model) return -1;
    if (mt_model_check_file(model, err) || mt_shard_layout_read(model, &lay, err)) goto done;

    json_error_t je;
    root = json_load_file(manifest_path, 0, &je);
    if (!root) {
        mt_error_set(err, "%s:%d:%d: the manifest is not valid JSON: %s", manifest_path, je.line,
                     je.column, je.text);
        goto done;
    }
    json_t *fmt = json_object_get(root, "format"), *shards = json_object_get(root, "shards");
    json_t *jr = json_object_get(root, "replicas"), *jid = json_object_get(root, "source_id");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "moontail-manifest-v1") != 0) {
        mt_error_set(err,
                     "%s: \"format\" is not \"moontail-manifest-v1\"; this is not a MoonTail"
                     " manifest (or a newer one)",
                     manifest_path);
        goto done;
    }
    if (!json_is_array(shards) || json_array_size(shards) == 0 ||
        json_array_size(shards) > 1000000) {
        mt_error_set(err, "%s: \"shards\" must be a non-empty array", manifest_path);
        goto done;
    }
    if (jr &&
        (!json_is_integer(jr) || json_integer_value(jr) < 1 || json_integer_value(jr) > 1000)) {
        mt_error_set(err, "%s: \"replicas\" must be a whole number in 1..1000", manifest_path);
        goto done;
    }
    int32_t want = jr ? (int32_t)json_integer_value(jr) : 1;

    /* the model's own hashes: whole tensors now, expert slices as shards ask */
    uint64_t n = model->n_tensors;
    char source_id[MT_SHARD_HASH_HEX];
    model_hash = malloc((n ? n : 1) * sizeof *model_hash);
    c.first = malloc((n ? n : 1) * sizeof *c.first);
    if (!model_hash || !c.first) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    if (!(io->pool = shard_io_pool(io, &own_pool, err)) || !(rd = gguf_reader_open(model, err)))
        goto done;
    if (mt_shard_source_id_io(model, io, source_id, model_hash, err)) goto done;
    for (uint64_t i = 0; i < n; i++) {
        c.first[i] = c.n_slices;
        c.n_slices += lay.part[i] == MT_SHARD_PART_EXPERTS ? (uint64_t)lay.n_expert : 1;
    }
    c.count = calloc(c.n_slices ? c.n_slices : 1, sizeof *c.count);
    c.holder = malloc((c.n_slices ? c.n_slices : 1) * 2 * sizeof *c.holder);
    if (!c.count || !c.holder) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    for (uint64_t s = 0; s < 2 * c.n_slices; s++) c.holder[s] = -1;

    if (!json_is_string(jid) || strcmp(json_string_value(jid), source_id) != 0)
        problem(&r,
                "manifest: source_id %.16s... is not this model's (%.16s...); the manifest was"
                " made for another model",
                json_is_string(jid) ? json_string_value(jid) : "(missing)", source_id);
    json_t *jl = json_object_get(root, "n_layer"), *jx = json_object_get(root, "n_expert");
    if ((jl && json_integer_value(jl) != lay.n_layer) ||
        (jx && json_integer_value(jx) != lay.n_expert))
        problem(&r, "manifest: n_layer/n_expert (%lld/%lld) are not the model's (%d/%d)",
                json_integer_value(jl), json_integer_value(jx), lay.n_layer, lay.n_expert);
    size_t n_shards = json_array_size(shards);
    check_ctx cx = {model, &lay, (const char(*)[MT_SHARD_HASH_HEX])model_hash, source_id, rd, io};
    for (size_t k = 0; k < n_shards; k++)
        check_entry(&r, &cx, &c, manifest_path, (int32_t)k, json_array_get(shards, k));
    uint64_t n_bad = 0;
    report_coverage(&r, model, &lay, &c, shards, want, &n_bad);

    if (r.n_problems > REPORT_MAX_LINES)
        report_add(&r, "... and %d more problems", r.n_problems - REPORT_MAX_LINES);
    if (r.n_problems == 0) {
        report_add(&r,
                   "ok: %zu shards hold all %llu tensors of %s (%d layers, %d experts) exactly %d"
                   " time%s; every hash matches",
                   n_shards, (unsigned long long)n, model_path, lay.n_layer, lay.n_expert, want,
                   want == 1 ? "" : "s");
        rc = 0;
    } else {
        report_add(&r,
                   "FAILED: %d problem%s in %s (%llu of %llu tensor slices not held exactly %d"
                   " time%s)",
                   r.n_problems, r.n_problems == 1 ? "" : "s", manifest_path,
                   (unsigned long long)n_bad, (unsigned long long)c.n_slices, want,
                   want == 1 ? "" : "s");
        mt_error_set(err, "%s: %d problem%s; see the report", manifest_path, r.n_problems,
                     r.n_problems == 1 ? "" : "s");
        rc = 1;
    }
    *report_out = r.buf;
    r.buf = NULL;
done:
    if (own_pool) mt_pool_free(io->pool);
    io->pool = caller_pool;
    gguf_reader_close(rd);
    free(r.buf);
    free(model_hash);
    free(c.first);
    free(c.count);
    free(c.holder);
    json_decref(root);
    mt_shard_layout_free(&lay);
    gguf_close(model);
    return rc;
}

int mt_plan_check(const char *model_path, const char *manifest_path, char **report_out,
                  mt_error *err) {
    return mt_plan_check_io(model_path, manifest_path, report_out, NULL, err);
}

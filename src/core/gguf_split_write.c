/* gguf_split_write.c - writes a model as the files of a split set, in the
 * layout llama.cpp's gguf-split writes (gguf.h describes the keys).
 *
 * The tensors, in model order, are cut into runs of nearly equal bytes;
 * each part is then a gguf_writer (gguf_write.c encodes it): the model's
 * metadata in the first part, the split keys in every part, its run of
 * tensors streamed from the model's files (gguf_stream.h). A source-id key
 * computed from the tensors' hashes is written as a placeholder first and
 * overwritten in every part once the last tensor has been hashed, so the
 * model is read once. */
#include "moontail/file.h"
#include "moontail/file_write.h"
#include "moontail/gguf_stream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN  GGUF_DEFAULT_ALIGNMENT
#define ID_LEN GGUF_SPLIT_SOURCE_ID_LEN

static uint64_t padded(uint64_t n) {
    return n + (ALIGN - n % ALIGN) % ALIGN;
}

/* ------------------------------------------------------------ the cuts */

/* start[k] = first tensor of part k: cut where the running byte count is
 * nearest k/N of the total, keeping every part non-empty. */
static void plan_parts(const gguf_file *src, uint32_t n_parts, uint64_t *start) {
    uint64_t n = src->n_tensors, total = 0;
    for (uint64_t i = 0; i < n; i++) total += padded(src->tensors[i].nbytes);
    start[0] = 0;
    start[n_parts] = n;
    uint64_t j = 0, before = 0; /* bytes of tensors [0, j) */
    for (uint32_t k = 1; k < n_parts; k++) {
        uint64_t target = total / n_parts * k + total % n_parts * k / n_parts;
        while (j < n && before + padded(src->tensors[j].nbytes) <= target)
            before += padded(src->tensors[j++].nbytes);
        /* cut at j, or after tensor j when that lands nearer the target */
        uint64_t cut = j;
        if (j < n && before + padded(src->tensors[j].nbytes) - target < target - before)
            cut = j + 1;
        uint64_t lo = start[k - 1] + 1, hi = n - (n_parts - k);
        start[k] = cut < lo ? lo : cut > hi ? hi : cut;
    }
}

/* --------------------------------------------------------------- parts */

/* One split write: what every part needs. */
typedef struct split_job {
    const gguf_file *src;
    gguf_reader *rd;
    const gguf_split_opts *o;
    uint32_t n_parts;
    const uint64_t *start; /* (n_parts + 1) first tensor of each part */
    const char *id;        /* the source-id key's value (or placeholder), or NULL */
    uint8_t (*hashes)[32]; /* (n_tensors) when the id is computed from them, else NULL */
    uint64_t done, total;  /* tensor bytes of the parts before this one, of all */
} split_job;

/* A part's progress as the whole write's. */
static void on_progress(void *ctx, uint64_t done, uint64_t total) {
    (void)total;
    const split_job *j = ctx;
    j->o->progress(j->o->progress_ctx, j->done + done, j->total);
}

/* ggml's dimension count: trailing dimensions of 1 are not written. */
static uint32_t n_dims_of(const gguf_tensor *t) {
    uint32_t n = GGUF_MAX_DIMS;
    while (n > 1 && t->ne[n - 1] == 1) n--;
    return n;
}

/* Writes part k to path; *id_at: where the id's characters are in it. */
static int write_part(split_job *j, uint32_t k, const char *path, uint64_t *id_at, mt_error *err) {
    const gguf_file *src = j->src;
    gguf_writer *w = gguf_writer_new();
    if (!w) return mt_error_set(err, "out of memory");
    if (k == 0) gguf_writer_copy_metadata(w, src);
    /* gguf-split's order: split.no, split.tensors.count, then split.count */
    gguf_writer_set_value(w, "split.no", &(gguf_value){.type = GGUF_TYPE_UINT16, .u = k});
    gguf_writer_set_i32(w, "split.tensors.count", (int32_t)src->n_tensors);
    gguf_writer_set_value(w, "split.count",
                          &(gguf_value){.type = GGUF_TYPE_UINT16, .u = j->n_parts});
    if (j->id) {
        gguf_writer_set_string(w, GGUF_SPLIT_SOURCE_ID_KEY, j->id);
        /* past the value's type and the string's length */
        *id_at = gguf_writer_value_offset(w, GGUF_SPLIT_SOURCE_ID_KEY) + 4 + 8;
    }
    int rc = 0;
    for (uint64_t i = j->start[k]; rc == 0 && i < j->start[k + 1]; i++) {
        const gguf_tensor *t = &src->tensors[i];
        gguf_range r = {gguf_tensor_file_offset(src, t), t->nbytes};
        rc = gguf_writer_add_tensor_ranges(w, t->name, t->type, n_dims_of(t), t->ne, j->rd, t->part,
                                           &r, 1, err);
    }
    gguf_write_opts wo = {.pool = j->o->pool,
                          .hashes = j->hashes ? j->hashes + j->start[k] : NULL,
                          .progress = j->o->progress ? on_progress : NULL,
                          .progress_ctx = j,
                          .sync = true}; /* on disk before it takes its name */
    if (rc == 0) rc = gguf_writer_write_opts(w, path, &wo, err);
    gguf_writer_free(w);
    return rc;
}

/* Overwrites the placeholder at `at` of the written part with the id. */
static int put_id(const char *path, uint64_t at, const char *id, mt_error *err) {
    int fd = mt_file_open(path, MT_O_WRITE, 0);
    ssize_t n = fd < 0 ? -1 : mt_file_pwrite(fd, id, ID_LEN, at);
    if (n == ID_LEN && mt_file_sync(fd, true) != 0) n = -1;
    int e = errno;
    if (fd >= 0 && mt_file_close(fd) != 0 && n == ID_LEN) n = -1, e = errno;
    if (n != ID_LEN)
        return mt_error_set(err, "%s: cannot write the model's identity into it: %s", path,
                            n < 0 ? strerror(e) : "short write");
    return 0;
}

/* The id computed from the hashes, checked to fill the placeholder exactly. */
static int computed_id(const split_job *j, char out[ID_LEN + 1], mt_error *err) {
    memset(out, 0, ID_LEN + 1);
    if (j->o->source_id_of(j->o->source_id_ctx, (const uint8_t(*)[32])j->hashes, out, err))
        return -1;
    if (strnlen(out, ID_LEN + 1) != ID_LEN)
        return mt_error_set(err,
                            "%s: the split's source id '%.*s' is not %d characters; the"
                            " source_id_of callback must write exactly that many",
                            j->src->path, ID_LEN + 1, out, ID_LEN);
    return 0;
}

/* ---------------------------------------------------------------- write */

/* Part k's name and, in tmp (cap + 4 bytes), the name it is written under. */
static void part_names(char *final, char *tmp, size_t cap, const char *prefix, uint32_t k,
                       uint32_t n_parts) {
    gguf_split_path(final, cap, prefix, k, n_parts);
    snprintf(tmp, cap + 4, "%s.tmp", final);
}

int gguf_split_write(const gguf_file *src, uint32_t n_parts, const char *prefix,
                     const gguf_split_opts *opts, mt_error *err) {
    static const gguf_split_opts none = {0};
    const gguf_split_opts *o = opts ? opts : &none;
    uint64_t n = src->n_tensors;
    if (n_parts < 1 || n_parts > GGUF_SPLIT_MAX_PARTS || n_parts > n)
        return mt_error_set(err,
                            "%s: cannot be written as %u parts: it has %llu tensors and every part"
                            " needs one (at most %d parts)",
                            src->path, n_parts, (unsigned long long)n, GGUF_SPLIT_MAX_PARTS);
    if (n > INT32_MAX)
        return mt_error_set(err, "%s: %llu tensors do not fit split.tensors.count (int32)",
                            src->path, (unsigned long long)n);
    bool later = !o->source_id && o->source_id_of;
    char placeholder[ID_LEN + 1];
    memset(placeholder, '0', ID_LEN);
    placeholder[ID_LEN] = 0;
    size_t cap = strlen(prefix) + 32;
    uint64_t *start = malloc((n_parts + 1) * sizeof *start);
    uint64_t *id_at = calloc(n_parts, sizeof *id_at);
    char *final = malloc(cap), *tmp = malloc(cap + 4);
    split_job j = {src, NULL, o, n_parts, start, later ? placeholder : o->source_id, NULL, 0, 0};
    if (later) j.hashes = malloc(n * sizeof *j.hashes);
    int rc = 0;
    if (!start || !id_at || !final || !tmp || (later && !j.hashes))
        rc = mt_error_set(err, "out of memory");
    else if (!(j.rd = gguf_reader_open(src, err)))
        rc = -1;
    if (rc == 0) plan_parts(src, n_parts, start);
    for (uint64_t i = 0; i < n; i++) j.total += src->tensors[i].nbytes;

    uint32_t written = 0;
    for (uint32_t k = 0; k < n_parts && rc == 0; k++, written++) {
        part_names(final, tmp, cap, prefix, k, n_parts);
        rc = write_part(&j, k, tmp, &id_at[k], err);
        for (uint64_t i = start[k]; i < start[k + 1]; i++) j.done += src->tensors[i].nbytes;
    }
    char id[ID_LEN + 1];
    if (rc == 0 && later) rc = computed_id(&j, id, err);
    for (uint32_t k = 0; k < written && rc == 0 && later; k++) {
        part_names(final, tmp, cap, prefix, k, n_parts);
        rc = put_id(tmp, id_at[k], id, err);
    }
    /* every part is complete: only now do they take their names */
    for (uint32_t k = 0; k < written; k++) {
        part_names(final, tmp, cap, prefix, k, n_parts);
        if (rc == 0 && mt_file_replace(tmp, final) != 0)
            rc = mt_error_set(err, "%s: cannot rename from '%s': %s", final, tmp, strerror(errno));
        if (rc) mt_file_remove(tmp);
    }
    if (rc == 0) mt_dir_sync_parent(final); /* the names too */
    if (rc == 0 && o->part_tensors) memcpy(o->part_tensors, start, (n_parts + 1) * sizeof *start);
    gguf_reader_close(j.rd);
    free(j.hashes);
    free(start);
    free(id_at);
    free(final);
    free(tmp);
    return rc;
}

/* gguf_split_read.c - opening a model that llama.cpp's gguf-split (or
 * `moontail split --parts`) wrote as several files, from any of them.
 *
 * The part given names the set: its split.no and split.count must agree
 * with its name NAME-0000k-of-0000N.gguf, from which the other names
 * follow. Every part is opened and checked on its own (gguf_read.c), then
 * against the set: the same count, its own index, the same GGUF version and
 * set identity, no tensor twice, and as many tensors in all as the first
 * part's split.tensors.count. The parts are then presented as one
 * gguf_file (gguf.h). gguf_open, the entry point for any model path, is here:
 * it opens the file given and joins its set when it is a part of one. */
#include "gguf_internal.h"
#include "moontail/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "-00002-of-00005.gguf": '-', 5 digits, "-of-", 5 digits, ".gguf" */
#define SUFFIX_LEN 20

int gguf_split_path(char *out, size_t cap, const char *prefix, uint32_t no, uint32_t count) {
    int n = snprintf(out, cap, "%s-%05u-of-%05u.gguf", prefix, no + 1, count);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

/* Reads a key that must be a non-negative integer (llama.cpp writes u16 or
 * i32; any width is accepted). *out is untouched when the key is absent. */
static int split_u64(const gguf_file *f, const char *key, uint64_t *out, bool *present,
                     mt_error *err) {
    mt_error e = {{0}};
    *present = gguf_get_u64(f, key, out, &e);
    if (!*present && e.msg[0])
        return mt_error_set(err, "%s; split files give it as an unsigned number", e.msg);
    return 0;
}

int gguf_split_keys(const gguf_file *f, uint32_t *no, uint32_t *count, mt_error *err) {
    uint64_t n = 1, k = 0;
    bool has_n, has_k;
    *no = 0;
    *count = 1;
    if (split_u64(f, "split.count", &n, &has_n, err)) return -1;
    if (!has_n || n <= 1) return 0;
    if (n > GGUF_SPLIT_MAX_PARTS)
        return mt_error_set(err, "%s: split.count %llu is more than the %d parts a split allows",
                            f->path, (unsigned long long)n, GGUF_SPLIT_MAX_PARTS);
    if (split_u64(f, "split.no", &k, &has_k, err)) return -1;
    if (!has_k)
        return mt_error_set(err,
                            "%s: split.count is %llu but split.no is missing, so it is not known"
                            " which part of the split model this file is",
                            f->path, (unsigned long long)n);
    if (k >= n)
        return mt_error_set(err, "%s: split.no %llu is not below split.count %llu", f->path,
                            (unsigned long long)k, (unsigned long long)n);
    *no = (uint32_t)k;
    *count = (uint32_t)n;
    return 0;
}

/* Parses the name's "-KKKKK-of-NNNNN.gguf" (K 1-based); false if it has none. */
static bool name_numbers(const char *path, uint32_t *k, uint32_t *n) {
    size_t len = strlen(path);
    if (len <= SUFFIX_LEN) return false;
    const char *s = path + len - SUFFIX_LEN;
    uint32_t a = 0, b = 0;
    if (s[0] != '-' || memcmp(s + 6, "-of-", 4) != 0 || memcmp(s + 15, ".gguf", 5) != 0)
        return false;
    for (int i = 0; i < 5; i++) {
        if (s[1 + i] < '0' || s[1 + i] > '9' || s[10 + i] < '0' || s[10 + i] > '9') return false;
        a = a * 10 + (uint32_t)(s[1 + i] - '0');
        b = b * 10 + (uint32_t)(s[10 + i] - '0');
    }
    *k = a;
    *n = b;
    return true;
}

/* The set identity a part carries, or "" (a heap copy, or NULL when out of memory). */
static char *set_id(const gguf_file *f) {
    char *s = gguf_get_string(f, GGUF_SPLIT_SOURCE_ID_KEY, NULL);
    return s ? s : strdup("");
}

/* Checks part i of `count` against the first part; messages name both. */
static int check_part(gguf_file *const *sub, uint32_t i, uint32_t count, uint32_t given,
                      const char *id0, mt_error *err) {
    const gguf_file *p = sub[i], *first = sub[0];
    uint32_t no, n;
    if (gguf_split_keys(p, &no, &n, err)) return -1;
    if (n == 1)
        return mt_error_set(err,
                            "%s: has the name of part %u of %u of a split model but is not a part"
                            " (it has no split.count); put the file gguf-split wrote back",
                            p->path, i + 1, count);
    if (n != count)
        return mt_error_set(err,
                            "%s: belongs to a model split into %u files, but %s says %u; it is a"
                            " part of another split (of another model, or of this one with"
                            " another part count): use the parts of one set",
                            p->path, n, sub[given]->path, count);
    if (no != i)
        return mt_error_set(err,
                            "%s: holds part %u of %u (split.no %u) but has the name of part %u;"
                            " it was renamed or copied over another part: each part must keep"
                            " the name gguf-split gave it",
                            p->path, no + 1, count, no, i + 1);
    if (i == 0) return 0;
    if (p->version != first->version)
        return mt_error_set(err,
                            "%s: GGUF version %u, but %s is version %u; the parts were not"
                            " written together: use the parts of one set",
                            p->path, p->version, first->path, first->version);
    char *id = set_id(p);
    int rc = 0;
    if (!id)
        rc = mt_error_set(err, "out of memory");
    else if (strcmp(id, id0) != 0)
        rc = mt_error_set(err,
                          "%s: is a part of another model (its %s is %.16s%s, %s has %.16s%s):"
                          " use the parts of one set",
                          p->path, GGUF_SPLIT_SOURCE_ID_KEY, *id ? id : "(none)", *id ? "..." : "",
                          first->path, *id0 ? id0 : "(none)", *id0 ? "..." : "");
    free(id);
    return rc;
}

/* Opens part i, telling a missing file from a bad one. */
static gguf_file *open_part(const char *path, uint32_t i, uint32_t count, const char *given,
                            mt_error *err) {
    mt_file_info sb;
    if (mt_file_stat(path, &sb) != 0 && errno == ENOENT) {
        mt_error_set(err,
                     "%s: part %u of %u of the split model is missing (%s is part of it); put all"
                     " %u files gguf-split wrote in one directory",
                     path, i + 1, count, given, count);
        return NULL;
    }
    gguf_file *p = gguf_open_single(path, err);
    if (!p) mt_error_prefix(err, "part %u of %u of a split model", i + 1, count);
    return p;
}

/* The set as one file: part 0's metadata, every part's tensors in order. */
static gguf_file *join(gguf_file **sub, uint32_t count, uint64_t total, mt_error *err) {
    gguf_file_priv *fp = calloc(1, sizeof *fp);
    gguf_file *f = fp ? &fp->pub : NULL;
    const gguf_file *first = sub[0];
    if (!fp || !(f->path = strdup(first->path)) ||
        !(f->tensors = calloc(total ? total : 1, sizeof *f->tensors)) ||
        !(f->parts = calloc(count, sizeof *f->parts)) || gguf_index_init(&fp->tensor_ix, total)) {
        mt_error_set(err, "out of memory joining %u parts", count);
        goto fail;
    }
    f->base = first->base;
    f->size = first->size;
    f->mapped = first->mapped;
    f->version = first->version;
    f->alignment = first->alignment;
    f->data_offset = first->data_offset;
    f->n_kv = first->n_kv;
    f->kv = first->kv;
    fp->kv_ix = ((const gguf_file_priv *)first)->kv_ix; /* borrowed: part 0 frees it */
    f->n_parts = count;
    for (uint32_t i = 0; i < count; i++) {
        const gguf_file *p = sub[i];
        f->parts[i] = (gguf_part){p->path, p->base, p->size};
        for (uint64_t j = 0; j < p->n_tensors; j++) {
            uint64_t k = f->n_tensors++;
            f->tensors[k] = p->tensors[j];
            f->tensors[k].part = i;
            int64_t was = gguf_index_add_tensor(f, k);
            if (was >= 0) {
                mt_error_set(err,
                             "tensor '%s' is in both %s and %s; one of them is a part of another"
                             " model or of another split: use the parts of one set",
                             p->tensors[j].name, sub[f->tensors[was].part]->path, p->path);
                goto fail;
            }
        }
    }
    fp->sub = sub;
    fp->n_sub = count;
    return f;
fail:
    if (fp) {
        free(f->path);
        free(f->tensors);
        free(f->parts);
        free(fp->tensor_ix.slots);
        free(fp);
    }
    return NULL;
}

gguf_file *gguf_split_join(gguf_file *given, mt_error *err) {
    uint32_t no, count, kn = 0, nn = 0;
    gguf_file **sub = NULL;
    char *id0 = NULL, *prefix = NULL, *path = NULL;
    gguf_file *out = NULL;
    if (gguf_split_keys(given, &no, &count, err)) goto done;
    if (!name_numbers(given->path, &kn, &nn)) {
        mt_error_set(err,
                     "%s: is part %u of a model split into %u files, but its name does not end"
                     " in -%05u-of-%05u.gguf, so the other parts cannot be found; give the files"
                     " the names gguf-split gave them (NAME-00001-of-%05u.gguf ...)",
                     given->path, no + 1, count, no + 1, count, count);
        goto done;
    }
    if (kn != no + 1 || nn != count) {
        mt_error_set(err,
                     "%s: its name says part %u of %u, but it holds part %u of %u (split.no %u,"
                     " split.count %u); it was renamed or copied over another part: each part"
                     " must keep the name gguf-split gave it",
                     given->path, kn, nn, no + 1, count, no, count);
        goto done;
    }

    size_t plen = strlen(given->path) - SUFFIX_LEN, cap = plen + SUFFIX_LEN + 1;
    sub = calloc(count, sizeof *sub);
    prefix = malloc(plen + 1);
    path = malloc(cap);
    if (!sub || !prefix || !path) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    memcpy(prefix, given->path, plen);
    prefix[plen] = 0;
    sub[no] = given;
    given = NULL;
    for (uint32_t i = 0; i < count; i++) {
        if (!sub[i]) {
            gguf_split_path(path, cap, prefix, i, count);
            if (!(sub[i] = open_part(path, i, count, sub[no]->path, err))) goto done;
        }
        if (i == 0 && !(id0 = set_id(sub[0]))) {
            mt_error_set(err, "out of memory");
            goto done;
        }
        if (check_part(sub, i, count, no, id0, err)) goto done;
    }

    uint64_t want = 0, total = 0;
    bool has;
    if (split_u64(sub[0], "split.tensors.count", &want, &has, err)) goto done;
    if (!has) {
        mt_error_set(err,
                     "%s: split.tensors.count is missing; the first part of a split model must"
                     " say how many tensors the parts hold (gguf-split writes it)",
                     sub[0]->path);
        goto done;
    }
    for (uint32_t i = 0; i < count; i++) {
        uint64_t w;
        if (split_u64(sub[i], "split.tensors.count", &w, &has, err)) goto done;
        if (has && w != want) {
            mt_error_set(err,
                         "%s: split.tensors.count %llu, but %s says %llu; it is a part of another"
                         " model: use the parts of one set",
                         sub[i]->path, (unsigned long long)w, sub[0]->path,
                         (unsigned long long)want);
            goto done;
        }
        total += sub[i]->n_tensors;
    }
    if (total != want) {
        mt_error_set(err,
                     "%s: the %u parts hold %llu tensors, but split.tensors.count says %llu; a"
                     " part is damaged or from another model: use the parts of one set",
                     sub[0]->path, count, (unsigned long long)total, (unsigned long long)want);
        goto done;
    }
    if (total >= UINT32_MAX) {
        mt_error_set(err, "%s: %llu tensors are more than a model can have", sub[0]->path,
                     (unsigned long long)total);
        goto done;
    }
    if ((out = join(sub, count, total, err))) sub = NULL; /* the set owns the parts now */
done:
    if (sub)
        for (uint32_t i = 0; i < count; i++) gguf_close(sub[i]);
    free(sub);
    gguf_close(given);
    free(id0);
    free(prefix);
    free(path);
    return out;
}

gguf_file *gguf_open(const char *path, mt_error *err) {
    gguf_file *f = gguf_open_single(path, err);
    uint32_t no, count;
    if (!f) return NULL;
    if (gguf_split_keys(f, &no, &count, err)) {
        gguf_close(f);
        return NULL;
    }
    return count > 1 ? gguf_split_join(f, err) : f;
}

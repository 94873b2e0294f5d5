/* gguf.h - reading and writing GGUF model files.
 *
 * The reader maps the file read-only and never trusts it: every count,
 * length, offset, type and shape is checked against the file size before
 * use, and failures name the file and the field. Tensor data and string
 * values are zero-copy views into the mapping; they live until gguf_close.
 * The writer collects metadata and tensors in memory and writes a file with
 * the same layout rules ggml uses (aligned, offsets in info order); tensors
 * may also be streamed from another model's files at write time instead of
 * held in memory (gguf_stream.h).
 *
 * Split models. llama.cpp's gguf-split writes a large model as files
 * NAME-00001-of-0000N.gguf ... NAME-0000N-of-0000N.gguf. Every part is a
 * GGUF file of its own with the keys
 *   split.no             u16  its 0-based index
 *   split.count          u16  N
 *   split.tensors.count  i32  the tensors of all parts together
 * The first part holds all other metadata; each part holds its own tensors
 * (the first one too). gguf_open opens such a set from any of its parts as
 * one gguf_file; gguf_split_write (gguf_split_write.c) writes one. */
#ifndef MOONTAIL_GGUF_H
#define MOONTAIL_GGUF_H

#include "moontail/error.h"
#include "moontail/tensor_type.h"
#include "moontail/threadpool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GGUF_MAGIC             0x46554747u /* "GGUF" read as little-endian u32 */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS          4

typedef enum gguf_value_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_value_type;

/* A string inside the file: not NUL-terminated. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct gguf_value {
    gguf_value_type type;
    union {
        uint64_t u; /* UINT8..UINT64 (zero-extended), BOOL */
        int64_t i;  /* INT8..INT64 (sign-extended) */
        double f;   /* FLOAT32, FLOAT64 */
        gguf_str str;
        struct {
            gguf_value_type type; /* element type; never ARRAY (nested arrays are rejected) */
            uint64_t n;
            const uint8_t *data; /* packed elements (for numbers) */
            gguf_str *strs;      /* n entries, for arrays of strings */
        } arr;
    };
} gguf_value;

typedef struct gguf_kv {
    char *key; /* NUL-terminated copy */
    gguf_value value;
} gguf_kv;

typedef struct gguf_tensor {
    char *name; /* NUL-terminated copy */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] fastest; missing dims are 1 */
    size_t nb[GGUF_MAX_DIMS];  /* byte strides */
    mt_type type;
    uint64_t offset;  /* relative to the data section of its part */
    size_t nbytes;    /* whole tensor */
    const void *data; /* view into the mapping */
    uint32_t part;    /* index into gguf_file.parts of the file that holds it */
} gguf_tensor;

/* One file of a model. A model in one file is its own only part; a model
 * written by gguf-split (NAME-00001-of-000NN.gguf) has one per file. */
typedef struct gguf_part {
    const char *path;    /* as opened */
    const uint8_t *base; /* its mapping */
    size_t size;         /* bytes */
} gguf_part;

typedef struct gguf_file {
    char *path;          /* a split model: its first part */
    const uint8_t *base; /* mapping (or caller's buffer) */
    size_t size;
    bool mapped;
    uint32_t version;
    uint32_t alignment;
    size_t data_offset;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    uint32_t n_parts; /* >= 1; parts[0] is the file above (path, base, size) */
    gguf_part *parts;
} gguf_file;

/* ------------------------------------------------------------- reading */

/* Opens and validates a model: a GGUF file, or, when the file is one part
 * of a split model (split.count > 1), every part of that set, found by the
 * names gguf-split gives them, in the directory of the one given. The set is
 * presented as one file: the first part's metadata (path, base, size,
 * version, kv), tensors[] of all parts in part order (each tensor's `part`
 * and data in its own file), parts[] listing each file. Every part must say
 * the same split.count and its own split.no, have the same GGUF version and
 * (when written by moontail) the same GGUF_SPLIT_SOURCE_ID_KEY; no tensor
 * may be in two parts; the total must equal split.tensors.count. Returns
 * NULL with err naming the file and the fix on failure. */
gguf_file *gguf_open(const char *path, mt_error *err);

/* Opens exactly one file, without looking for the other parts of a split
 * model (n_parts is 1 and tensors[] holds this file's own). */
gguf_file *gguf_open_single(const char *path, mt_error *err);

/* Same checks on a caller-owned buffer (kept, not copied); `name` is used in
 * messages. For tests and fuzzing. */
gguf_file *gguf_open_buffer(const void *buf, size_t size, const char *name, mt_error *err);

void gguf_close(gguf_file *f);

/* Bytes of all the model's files together. */
uint64_t gguf_total_size(const gguf_file *f);

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters. They return true and set *out when the key exists and holds
 * a value convertible without loss (any integer width for integers, F32/F64
 * for floats); false when absent. A key of the wrong kind is an error:
 * they return false and fill err (if err is non-NULL) so callers can tell
 * "absent" (err->msg[0] == 0) from "malformed". */
bool gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, mt_error *err);
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, mt_error *err);
bool gguf_get_f32(const gguf_file *f, const char *key, float *out, mt_error *err);
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out, mt_error *err);
/* Returns a NUL-terminated heap copy (caller frees), or NULL. */
char *gguf_get_string(const gguf_file *f, const char *key, mt_error *err);

/* Bytes of one scalar of type t (0 for STRING, ARRAY and invalid ids). */
size_t gguf_type_size(gguf_value_type t);

/* Printable name of a value type ("uint32", ...). */
const char *gguf_type_name(gguf_value_type t);

/* ------------------------------------------------------------- writing */

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);

void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
void gguf_writer_set_string(gguf_writer *w, const char *key, const char *v);
/* Numeric array: `n` elements of `type`, packed little-endian at `data`. */
void gguf_writer_set_array(gguf_writer *w, const char *key, gguf_value_type type, const void *data,
                           uint64_t n);
void gguf_writer_set_string_array(gguf_writer *w, const char *key, const char *const *v,
                                  uint64_t n);
/* Raw byte-level copy of a value read from another file (for shard cutting). */
void gguf_writer_set_value(gguf_writer *w, const char *key, const gguf_value *v);
/* Sets every key of f's metadata, in f's order and with its exact types,
 * except those of f's files rather than of the model: split.*,
 * GGUF_SPLIT_SOURCE_ID_KEY and a general.alignment other than the
 * GGUF_DEFAULT_ALIGNMENT the writer uses. */
void gguf_writer_copy_metadata(gguf_writer *w, const gguf_file *f);
/* Where key's value (its type, then the value) will start in the file the
 * writer writes, as metadata now stands; 0 when key is not set. */
uint64_t gguf_writer_value_offset(const gguf_writer *w, const char *key);

/* Adds a tensor. The data (nbytes = row size * rows) is copied. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, mt_type type, uint32_t n_dims,
                           const int64_t *ne, const void *data, mt_error *err);

/* Writes the file (alignment GGUF_DEFAULT_ALIGNMENT). Returns 0 or -1. */
int gguf_writer_write(gguf_writer *w, const char *path, mt_error *err);

/* ---------------------------------------------------------- split sets */

#define GGUF_SPLIT_MAX_PARTS 65535 /* split.count is a u16 */

/* Written by moontail into every part of a split model it writes: the hex
 * BLAKE2b-256 identity of the model's tensors (moontail/shard.h's
 * source_id), so that a part of another model with the same layout is
 * recognised when the set is opened. */
#define GGUF_SPLIT_SOURCE_ID_KEY "moontail.split.source_id"

/* The name of part `no` (0-based) of `count`: "<prefix>-%05u-of-%05u.gguf",
 * as llama.cpp's llama_split_path makes it. Returns the length, or -1 when
 * it does not fit in cap bytes. */
int gguf_split_path(char *out, size_t cap, const char *prefix, uint32_t no, uint32_t count);

/* Called as tensor bytes are copied: bytes done of the total. */
typedef void (*gguf_split_progress_fn)(void *ctx, uint64_t done, uint64_t total);

#define GGUF_SPLIT_SOURCE_ID_LEN 64 /* characters of a value source_id_of writes */

/* How gguf_split_write goes about it (NULL or all zero: no source-id key,
 * this thread, no progress). */
typedef struct gguf_split_opts {
    /* GGUF_SPLIT_SOURCE_ID_KEY's value in every part; NULL: the key is not
     * written, unless source_id_of is given ... */
    const char *source_id;
    /* ... which computes it from the tensors' bytes as they are copied, so
     * that the model is read once: called when every part's tensors are
     * written, with each tensor's BLAKE2b-256 in src's order, it writes
     * GGUF_SPLIT_SOURCE_ID_LEN characters and a NUL into out. */
    int (*source_id_of)(void *ctx, const uint8_t (*hashes)[32], char *out, mt_error *err);
    void *source_id_ctx;
    mt_pool *pool; /* copies tensors on its threads (NULL: this thread) */
    gguf_split_progress_fn progress;
    void *progress_ctx;
    /* out, when not NULL: the first tensor index of each part (n_parts + 1
     * entries, the last = n_tensors) */
    uint64_t *part_tensors;
} gguf_split_opts;

/* Writes `src` (a file or an opened split set) as n_parts files
 * <prefix>-0000k-of-0000N.gguf in gguf-split's layout: the first part has
 * src's metadata (without its own split.* keys, GGUF_SPLIT_SOURCE_ID_KEY and
 * a general.alignment other than 32), every part split.no (u16),
 * split.tensors.count (i32) and split.count (u16) in that order, then
 * GGUF_SPLIT_SOURCE_ID_KEY when o gives one; GGUF version 3, alignment 32.
 * Tensors keep src's order; part k holds a contiguous run of them, cut so
 * that every part has at least one tensor and the parts' tensor bytes are
 * as even as the order allows. Each part is built with a gguf_writer, its
 * tensors streamed from src's files (gguf_stream.h: peak memory is the
 * metadata and a few chunks per thread). Parts are written under temporary
 * names and renamed when all are complete.
 * 1 <= n_parts <= min(n_tensors, 65535). */
int gguf_split_write(const gguf_file *src, uint32_t n_parts, const char *prefix,
                     const gguf_split_opts *o, mt_error *err);

#endif

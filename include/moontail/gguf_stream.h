/* gguf_stream.h - a model's bytes without its mapping, and GGUF files written
 * straight from them.
 *
 * Going through a whole model by its mapping makes every page read part of
 * the process's resident memory until the mapping goes, so hashing or
 * cutting a 1 TB model would look like (and, under a memory limit, be) a
 * 1 TB process. A gguf_reader reads the bytes with pread from each file of
 * the model instead, into buffers the caller bounds; a model opened from a
 * buffer (gguf_open_buffer) is read from memory.
 *
 * The writer (gguf.h) takes tensors whose bytes are ranges of such a model
 * (gguf_writer_add_tensor_ranges), and gguf_writer_write_opts copies them
 * in chunks on the threads of a pool, hashing each tensor as it goes: the
 * peak memory of a write is a few chunks per thread plus the header. */
#ifndef MOONTAIL_GGUF_STREAM_H
#define MOONTAIL_GGUF_STREAM_H

#include "moontail/gguf.h"
#include "moontail/threadpool.h"

#include <stdbool.h>
#include <stdint.h>

/* Bytes a reader or writer moves at a time per thread. */
#define GGUF_STREAM_CHUNK (4u << 20)

/* ------------------------------------------------------------- reading */

typedef struct gguf_reader gguf_reader;

/* What identifies the contents of one file, for caches: a file with the
 * same device, inode, size, modification and change times (ns) has not been
 * written since (the change time moves even when the modification time is
 * set back). */
typedef struct gguf_file_id {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
} gguf_file_id;

/* Opens every file (part) of f for reading. A part whose path no longer
 * leads to the file f mapped (gone, or another size or other first 64 KiB)
 * is read from the mapping instead, each piece's pages given back as soon
 * as it is copied (MADV_DONTNEED), so memory stays bounded then too; it has
 * no file identity. Thread-safe to read from. */
gguf_reader *gguf_reader_open(const gguf_file *f, mt_error *err);
void gguf_reader_close(gguf_reader *r);

/* Reads n bytes at `offset` of part `part` into dst; -1 naming the file
 * when the range is outside it or the read fails. */
int gguf_reader_read(gguf_reader *r, uint32_t part, uint64_t offset, void *dst, size_t n,
                     mt_error *err);

/* The bytes themselves when the model is in memory (opened from a buffer),
 * else NULL: then read them. */
const uint8_t *gguf_reader_memory(const gguf_reader *r, uint32_t part, uint64_t offset);

/* The identity of part `part` as read (fstat of the open file); false for
 * a model in memory or a part read from its mapping, which have none. */
bool gguf_reader_file_id(const gguf_reader *r, uint32_t part, gguf_file_id *id);

/* Whether part `part` still has the identity it had when opened (fstat of
 * the open file again): false once it was written to meanwhile, and for a
 * part without identity. What was read of a changed file is not worth
 * remembering. */
bool gguf_reader_unchanged(const gguf_reader *r, uint32_t part);

const gguf_file *gguf_reader_file(const gguf_reader *r);

/* Where a tensor's bytes start in the file of its part (bytes from the
 * start of that file). */
uint64_t gguf_tensor_file_offset(const gguf_file *f, const gguf_tensor *t);

/* ------------------------------------------------------------- writing */

typedef struct gguf_range {
    uint64_t offset, nbytes; /* in the file of a part */
} gguf_range;

/* Adds a tensor whose bytes are the ranges, in order, of part `part` as
 * src reads it; nothing is read now (src must stay open until the write).
 * The ranges must add up to the tensor's size and lie inside the part. */
int gguf_writer_add_tensor_ranges(gguf_writer *w, const char *name, mt_type type, uint32_t n_dims,
                                  const int64_t *ne, gguf_reader *src, uint32_t part,
                                  const gguf_range *ranges, uint32_t n_ranges, mt_error *err);

typedef struct gguf_write_opts {
    mt_pool *pool; /* copies tensors on its threads, largest first (NULL: this thread) */
    /* A string-array key holding one 64-character placeholder per tensor:
     * entry i is replaced by the hex BLAKE2b-256 of tensor i's bytes as
     * written (the header is written last, once the data are). NULL: none. */
    const char *hash_key;
    uint8_t (*hashes)[32];       /* out: each tensor's BLAKE2b-256, or NULL */
    const uint8_t (*expect)[32]; /* in: hashes tensors must have where expect_set[i] ... */
    const bool *expect_set;      /* ... (a mismatch fails the write naming the tensor) */
    /* Bytes of tensor data written so far, of total; called by one thread
     * at a time. */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    bool sync; /* fsync the file before closing it */
} gguf_write_opts;

/* Writes the file as gguf_writer_write does, with the options above. On
 * failure the file may be left incomplete (write to a temporary name). */
int gguf_writer_write_opts(gguf_writer *w, const char *path, const gguf_write_opts *o,
                           mt_error *err);

/* Tensors added so far. */
size_t gguf_writer_n_tensors(const gguf_writer *w);

#endif

/* shard_internal.h - what the shard files (shard_hash.c, shard_write.c,
 * shard_plan.c, shard_check.c) share: hashing slices of a model through a
 * gguf_reader, in parallel and through the hash cache. */
#ifndef MOONTAIL_SHARD_INTERNAL_H
#define MOONTAIL_SHARD_INTERNAL_H

#include "moontail/gguf_stream.h"
#include "moontail/shard.h"

/* Bytes a shard stores for one tensor of the model: all of it, or the
 * concatenated ne[2] slices of some experts (ascending ids). */
typedef struct shard_slice {
    uint64_t tensor;        /* index into the model's tensors */
    const int32_t *experts; /* NULL with n_experts = -1: the whole tensor */
    int32_t n_experts;
} shard_slice;

/* The slice's bytes as ranges of its part's file (runs of consecutive
 * experts merged), into a heap array. Refuses expert ids outside ne[2] or
 * a tensor that is not 3-D. */
int shard_slice_ranges(const gguf_file *f, const shard_slice *s, gguf_range **out, uint32_t *n,
                       mt_error *err);
uint64_t shard_slice_bytes(const gguf_file *f, const shard_slice *s);

/* The pool io names, or a new one of io->threads (*owned: free it). */
mt_pool *shard_io_pool(mt_shard_io *io, bool *owned, mt_error *err);

/* What the cache knows of the slices: found[i] set and out[i] filled for
 * each it holds (none with no cache or io->rehash). */
void shard_cached(gguf_reader *rd, const shard_slice *s, size_t n, mt_shard_io *io,
                  uint8_t (*out)[32], bool *found);

/* Stores hashes of slices in io's cache (when it has one). */
void shard_cache_store(gguf_reader *rd, const shard_slice *s, size_t n, mt_shard_io *io,
                       const uint8_t (*hashes)[32]);

/* The BLAKE2b-256 of each slice into out, read on io's threads (largest
 * first). With of_model (the slices are the model's, not a shard's being
 * verified), hashes come from io's cache where it has them, the computed
 * ones are stored, and the bytes count in io's figures. `what` names the
 * step for progress. */
int shard_hash_slices(gguf_reader *rd, const shard_slice *s, size_t n, mt_shard_io *io,
                      bool of_model, const char *what, uint8_t (*out)[32], mt_error *err);

/* Every tensor's hash (raw, model order) and the source_id, as io says. */
int shard_model_hashes(gguf_reader *rd, mt_shard_io *io, uint8_t (*raw)[32],
                       char source_id[MT_SHARD_HASH_HEX], mt_error *err);

/* The whole-file hashes of n files, one file per thread. */
int shard_hash_files(const char *const *paths, size_t n, mt_shard_io *io, const char *what,
                     char (*out)[MT_SHARD_HASH_HEX], mt_error *err);

/* mt_shard_write_io, also checking every whole tensor against model_raw
 * (the model's tensor hashes in model order, as shard_model_hashes gives
 * them) when it is not NULL. */
int shard_write(const gguf_file *f, const mt_shard_layout *l, const char *source_id,
                const uint8_t (*model_raw)[32], const mt_shard_spec *s, const char *out_path,
                mt_shard_io *io, mt_error *err);

/* Progress of a step (nothing without a callback or when total is 0). */
void shard_progress(mt_shard_io *io, const char *what, uint64_t done, uint64_t total);

#endif

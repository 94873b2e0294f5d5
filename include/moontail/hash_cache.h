/* hash_cache.h - content hashes of model files kept across runs, so that a
 * model is read to be hashed once, not at every `split`, `plan check` or
 * registry start.
 *
 * A SQLite database of BLAKE2b-256 hashes of byte slices of files, keyed by
 * the file's identity (gguf_file_id: device, inode, size, modification and
 * change times in ns) and the slice (offset, length, and which experts of a
 * routed expert tensor). A file whose identity changed (written, touched,
 * replaced) loses its hashes the next time it is looked up, so a hash from
 * the cache is always of the file as it is now, short of someone resetting
 * both its times. Several processes may share one cache. */
#ifndef MOONTAIL_HASH_CACHE_H
#define MOONTAIL_HASH_CACHE_H

#include "moontail/error.h"
#include "moontail/gguf_stream.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mt_hash_cache mt_hash_cache;

/* Opens the cache database at path, creating it (and the tables) when
 * missing; its directory must exist. */
mt_hash_cache *mt_hash_cache_open(const char *path, mt_error *err);
void mt_hash_cache_close(mt_hash_cache *c);
const char *mt_hash_cache_path(const mt_hash_cache *c);

/* The per-user cache: $XDG_CACHE_HOME/moontail/hashes.sqlite, or
 * $HOME/.cache/moontail/hashes.sqlite; makes the directory (0700). -1 when
 * neither variable is set or the directory cannot be made. */
int mt_hash_cache_default_path(char *out, size_t cap, mt_error *err);

/* The row of one file as it is now (id from gguf_reader_file_id; path is
 * kept for people reading the database): made on first sight, emptied when
 * the identity changed. Returns the row id (> 0), or -1. */
int64_t mt_hash_cache_file(mt_hash_cache *c, const char *path, const gguf_file_id *id,
                           mt_error *err);

/* The hash of bytes [offset, offset + nbytes) of a file row, taken as the
 * slice `slice` names ("" = all of them); false when not cached. */
bool mt_hash_cache_get(mt_hash_cache *c, int64_t file, uint64_t offset, uint64_t nbytes,
                       const char *slice, uint8_t out[32]);
int mt_hash_cache_put(mt_hash_cache *c, int64_t file, uint64_t offset, uint64_t nbytes,
                      const char *slice, const uint8_t hash[32], mt_error *err);

/* Groups puts into one transaction (much faster for thousands of tensors). */
int mt_hash_cache_begin(mt_hash_cache *c, mt_error *err);
int mt_hash_cache_commit(mt_hash_cache *c, mt_error *err);

#endif

/* shard_fetch.h - getting a shard's bytes from the machines that have them.
 *
 * A shard manifest (JSON) names the file's size, its BLAKE2b-256 and one
 * BLAKE2b-256 per piece of piece_bytes (the last piece may be shorter):
 *   {"name": "L0-2A", "bytes": N, "blake2b": "<hex>", "piece_bytes": P,
 *    "pieces": ["<hex>", ...]}
 * A fetch downloads the pieces from several sources at once (HTTP GET
 * <source>/v1/shards/<name> with a Range header), checks each piece against
 * its hash before it is written, and spreads the pieces over the sources
 * (peers first, the seed last, as the caller orders them); a source that
 * fails or sends a bad piece is skipped for that piece and tried less. It
 * resumes: the partial file <out>.part and its piece map <out>.part.map
 * survive an interrupted fetch, and the next fetch skips pieces already
 * there (re-verified). The finished file is checked whole and renamed to
 * out. Nothing is ever trusted from a source without its hash.
 *
 * Disk space: the whole of <out>.part is reserved (fallocate) before any
 * piece is fetched, so a disk too small fails at once rather than after
 * most of the download. A fetch that fails for lack of space (at the start
 * or on a later write) removes its partial files, which could not be
 * completed there and only hold the room, and says so in stats->no_space. */
#ifndef MOONTAIL_SHARD_FETCH_H
#define MOONTAIL_SHARD_FETCH_H

#include "moontail/error.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define MT_SHARD_PIECE_BYTES (4u << 20)

/* The manifest of a file on disk (reads it once). */
json_t *mt_shard_manifest_of_file(const char *path, const char *name, uint32_t piece_bytes,
                                  mt_error *err);

/* Checks a manifest's fields (types, sizes, hex digests, piece count). */
int mt_shard_manifest_check(const json_t *m, mt_error *err);

typedef struct mt_fetch_progress {
    uint64_t bytes_done, bytes_total; /* verified bytes, whole shard */
    uint64_t bytes_reused;            /* of bytes_done: already on disk when the fetch began */
    double rate;                      /* bytes/s downloaded in this fetch so far */
    double eta_s;                     /* seconds left at that rate (-1 unknown) */
    int pieces_done, pieces_total;
    int pieces_from_peers, pieces_from_seed; /* downloaded in this fetch */
    int bad_pieces;                          /* rejected by their hash */
    bool no_space;      /* failed for lack of room in out's directory (partial files removed) */
    uint64_t disk_free; /* then: the bytes free there once they were removed */
} mt_fetch_progress;

typedef void (*mt_fetch_progress_fn)(void *ctx, const mt_fetch_progress *p);

typedef struct mt_fetch_config {
    const json_t *manifest;
    const char *const *sources; /* base URLs "http://host:port", peers first */
    int n_sources;
    int n_seeds;                   /* how many of the LAST sources are seeds (counted apart) */
    const char *out;               /* final file path */
    int parallel;                  /* pieces in flight at once (<= 0: min(4, sources * 2)) */
    int timeout_ms;                /* per piece (<= 0: 60 s) */
    mt_fetch_progress_fn progress; /* called after every piece (may be NULL) */
    void *progress_ctx;
} mt_fetch_config;

/* Fetches the shard. Returns 0 when out holds exactly the manifest's bytes.
 * *stats (if not NULL) gets the final figures. */
int mt_shard_fetch(const mt_fetch_config *cfg, mt_fetch_progress *stats, mt_error *err);

/* True when path exists and matches the manifest's size and hash. */
int mt_shard_file_matches(const char *path, const json_t *manifest);

#endif

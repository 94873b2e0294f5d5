/* shard_fetch.c - manifests of shard files and the parallel, resumable,
 * verified download of a shard from peers and seeds (shard_fetch.h).
 *
 * Fetches of the same file by several processes (requesters sharing a
 * cache directory) take turns: each holds a lock on <out>.part.map while it
 * fetches, and one that had to wait first looks whether the file it wants
 * is there already. */
#include "moontail/shard_fetch.h"
#include "moontail/clock.h"
#include "moontail/http.h"
#include "moontail/sysinfo.h"
#include "moontail/file.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- manifests ------------------------------------------------------------------------ */

static void hex_hash(const uint8_t *data, size_t n, char out[65]) {
    uint8_t h[32];
    crypto_generichash(h, sizeof h, data, n, NULL, 0);
    sodium_bin2hex(out, 65, h, sizeof h);
}

json_t *mt_shard_manifest_of_file(const char *path, const char *name, uint32_t piece_bytes,
                                  mt_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        mt_error_set(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    uint8_t *buf = malloc(piece_bytes);
    json_t *pieces = json_array();
    crypto_generichash_state whole;
    crypto_generichash_init(&whole, NULL, 0, 32);
    uint64_t total = 0;
    size_t k;
    while (buf && (k = fread(buf, 1, piece_bytes, f)) > 0) {
        char h[65];
        hex_hash(buf, k, h);
        json_array_append_new(pieces, json_string(h));
        crypto_generichash_update(&whole, buf, k);
        total += k;
    }
    bool bad = !buf || ferror(f);
    fclose(f);
    free(buf);
    if (bad) {
        json_decref(pieces);
        mt_error_set(err, "%s: read error", path);
        return NULL;
    }
    uint8_t h[32];
    char hex[65];
    crypto_generichash_final(&whole, h, 32);
    sodium_bin2hex(hex, sizeof hex, h, 32);
    return json_pack("{s:s, s:I, s:s, s:I, s:o}", "name", name, "bytes", (json_int_t)total,
                     "blake2b", hex, "piece_bytes", (json_int_t)piece_bytes, "pieces", pieces);
}

static bool is_hex64(const char *s) {
    if (!s || strlen(s) != 64) return false;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

int mt_shard_manifest_check(const json_t *m, mt_error *err) {
    json_t *name = json_object_get(m, "name"), *bytes = json_object_get(m, "bytes"),
           *hash = json_object_get(m, "blake2b"), *pb = json_object_get(m, "piece_bytes"),
           *pieces = json_object_get(m, "pieces");
    if (!json_is_string(name) || !json_is_integer(bytes) || json_integer_value(bytes) < 0 ||
        !is_hex64(json_string_value(hash)) || !json_is_integer(pb) ||
        json_integer_value(pb) < 4096 || json_integer_value(pb) > (1 << 30) ||
        !json_is_array(pieces))
        return mt_error_set(err, "shard manifest: missing or malformed name, bytes, blake2b,"
                                 " piece_bytes (4 KiB - 1 GiB) or pieces");
    const char *n = json_string_value(name);
    if (!n[0] || strlen(n) > 95) /* it names a file and a URL path; shard names are short */
        return mt_error_set(err, "shard manifest: the name must be 1 to 95 characters");
    for (const char *p = n; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_'))
            return mt_error_set(err,
                                "shard manifest: name '%s' has characters other than"
                                " letters, digits, '-' and '_'",
                                n);
    uint64_t total = (uint64_t)json_integer_value(bytes), piece = (uint64_t)json_integer_value(pb);
    uint64_t want = (total + piece - 1) / piece;
    if (json_array_size(pieces) != want)
        return mt_error_set(err,
                            "shard manifest: %zu piece hashes for %llu bytes in pieces of %llu"
                            " (want %llu)",
                            json_array_size(pieces), (unsigned long long)total,
                            (unsigned long long)piece, (unsigned long long)want);
    for (size_t i = 0; i < want; i++)
        if (!is_hex64(json_string_value(json_array_get(pieces, i))))
            return mt_error_set(err, "shard manifest: piece hash %zu is not 64 hex digits", i);
    return 0;
}

static int hash_file(const char *path, uint64_t *size, char out[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    uint8_t *buf = malloc(1 << 20);
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 32);
    size_t k;
    *size = 0;
    while (buf && (k = fread(buf, 1, 1 << 20, f)) > 0) {
        crypto_generichash_update(&st, buf, k);
        *size += k;
    }
    bool bad = !buf || ferror(f);
    free(buf);
    fclose(f);
    if (bad) return -1;
    uint8_t h[32];
    crypto_generichash_final(&st, h, 32);
    sodium_bin2hex(out, 65, h, 32);
    return 0;
}

int mt_shard_file_matches(const char *path, const json_t *m) {
    uint64_t size;
    char h[65];
    const char *want = json_string_value(json_object_get(m, "blake2b"));
    if (!want || hash_file(path, &size, h)) return 0;
    return size == (uint64_t)json_integer_value(json_object_get(m, "bytes")) &&
           strcmp(h, want) == 0;
}

/* ---- fetching ----------------------------------------------------------------------------- */

typedef struct fetch {
    const mt_fetch_config *cfg;
    const char *name;
    uint64_t total, piece;
    int n_pieces;
    uint8_t *have; /* (n_pieces) 1 = verified on disk */
    int next;      /* next piece to hand out */
    int *failures; /* (n_sources) */
    int fd, map_fd;
    pthread_mutex_t lock;
    mt_fetch_progress p;
    double t0;
    uint64_t downloaded;
    char error[512];
    bool failed;
    bool no_space; /* a write failed for lack of room (ENOSPC, EDQUOT, EFBIG, a short write) */
} fetch;

static size_t piece_len(const fetch *f, int i) {
    uint64_t from = (uint64_t)i * f->piece;
    return (size_t)(f->total - from < f->piece ? f->total - from : f->piece);
}

static bool piece_ok(const fetch *f, int i, const uint8_t *data) {
    char h[65];
    hex_hash(data, piece_len(f, i), h);
    return strcmp(h, json_string_value(json_array_get(json_object_get(f->cfg->manifest, "pieces"),
                                                      (size_t)i))) == 0;
}

/* One piece from the best source: the least-failed, starting at a
 * different source per piece so that the load spreads. */
static int get_piece(fetch *f, int i, uint8_t *buf, bool *from_seed, mt_error *err) {
    const mt_fetch_config *c = f->cfg;
    int n = c->n_sources;
    for (int attempt = 0; attempt < n * 2; attempt++) {
        int best = -1;
        pthread_mutex_lock(&f->lock);
        for (int k = 0; k < n; k++) {
            int s = (i + attempt + k) % n;
            /* seeds last: a seed is used when no peer is in better standing */
            int score = f->failures[s] * 4 + (s >= n - c->n_seeds ? 1 : 0);
            int bscore = best < 0 ? 1 << 30 : f->failures[best] * 4 + (best >= n - c->n_seeds);
            if (score < bscore) best = s;
        }
        pthread_mutex_unlock(&f->lock);
        char url[600];
        snprintf(url, sizeof url, "%s/v1/shards/%s", c->sources[best], f->name);
        mt_error e = {{0}};
        int rc = mt_http_get_range(url, (uint64_t)i * f->piece, piece_len(f, i), buf,
                                   c->timeout_ms > 0 ? c->timeout_ms : 60000, &e);
        if (rc == 0 && piece_ok(f, i, buf)) {
            *from_seed = best >= n - c->n_seeds;
            return 0;
        }
        pthread_mutex_lock(&f->lock);
        f->failures[best]++;
        if (rc == 0) f->p.bad_pieces++;
        pthread_mutex_unlock(&f->lock);
        if (rc == 0)
            mt_error_set(err, "piece %d from %s does not match its hash", i, url);
        else
            *err = e;
    }
    return -1;
}

/* Writes n bytes at offset off. Returns 0 or an errno value; a short write
 * to a regular file that reports no error means the disk is full. */
static int write_all_at(int fd, const void *data, size_t n, uint64_t off) {
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t w = mt_file_pwrite(fd, p, n, off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno;
        if (w == 0) return ENOSPC;
        p += w, n -= (size_t)w, off += (uint64_t)w;
    }
    return 0;
}

/* The directory part of path ("." when it has none). */
static void dir_of(const char *path, char *out, size_t cap) {
    snprintf(out, cap, "%s", path);
    char *slash = NULL;
    for (char *c = out; *c; c++)
        if (mt_path_sep(*c)) slash = c;
    if (slash == out)
        out[1] = 0;
    else if (slash)
        *slash = 0;
    else
        snprintf(out, cap, ".");
}

/* The fetch ran out of disk: its partial files go (they cannot be completed
 * there and only hold the room) and the error says how much room there is. */
static void fail_no_space(fetch *f, const char *part, const char *map, const char *why,
                          mt_error *err) {
    /* closed first: an open file keeps its blocks, and the free space is measured next */
    if (f->fd >= 0) mt_file_close(f->fd), f->fd = -1;
    if (f->map_fd >= 0) mt_file_close(f->map_fd), f->map_fd = -1;
    mt_file_remove(part);
    mt_file_remove(map);
    char dir[4096];
    dir_of(f->cfg->out, dir, sizeof dir);
    int64_t free_bytes = mt_sys_disk_free(dir);
    uint64_t avail = free_bytes > 0 ? (uint64_t)free_bytes : 0;
    mt_error_set(err,
                 "fetching shard '%s': no space left in %s for its %llu bytes (%s; %llu bytes"
                 " free there once the partial file was removed)",
                 f->name, dir, (unsigned long long)f->total, why, (unsigned long long)avail);
    f->p.no_space = true;
    f->p.disk_free = avail;
}

static void *worker(void *arg) {
    fetch *f = arg;
    uint8_t *buf = malloc(f->piece);
    if (!buf) { /* not silently: the pieces it would have fetched would be missing */
        pthread_mutex_lock(&f->lock);
        if (!f->failed) snprintf(f->error, sizeof f->error, "out of memory for a piece buffer");
        f->failed = true;
        pthread_mutex_unlock(&f->lock);
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&f->lock);
        while (f->next < f->n_pieces && f->have[f->next]) f->next++;
        int i = f->failed ? f->n_pieces : f->next++;
        pthread_mutex_unlock(&f->lock);
        if (i >= f->n_pieces) break;
        bool seed = false, full = false;
        mt_error err = {{0}};
        int rc = get_piece(f, i, buf, &seed, &err);
        if (rc == 0) {
            int e = write_all_at(f->fd, buf, piece_len(f, i), (uint64_t)i * f->piece);
            if (e == 0 && mt_file_sync(f->fd, true) != 0) e = errno;
            full = e == ENOSPC || e == EDQUOT || e == EFBIG;
            if (e) rc = mt_error_set(&err, "writing piece %d: %s", i, strerror(e));
        }
        uint8_t one = 1;
        if (rc == 0) {
            int e = write_all_at(f->map_fd, &one, 1, (uint64_t)i);
            full = e == ENOSPC || e == EDQUOT || e == EFBIG;
            if (e) rc = mt_error_set(&err, "writing the piece map: %s", strerror(e));
        }
        pthread_mutex_lock(&f->lock);
        if (rc) {
            if (!f->failed) snprintf(f->error, sizeof f->error, "%s", err.msg);
            f->failed = true;
            f->no_space |= full;
        } else {
            f->have[i] = 1;
            f->downloaded += piece_len(f, i);
            f->p.bytes_done += piece_len(f, i);
            f->p.pieces_done++;
            if (seed)
                f->p.pieces_from_seed++;
            else
                f->p.pieces_from_peers++;
            double dt = mt_mono_s() - f->t0;
            f->p.rate = dt > 0 ? (double)f->downloaded / dt : 0;
            f->p.eta_s = f->p.rate > 0 ? (double)(f->total - f->p.bytes_done) / f->p.rate : -1;
            if (f->cfg->progress) f->cfg->progress(f->cfg->progress_ctx, &f->p);
        }
        pthread_mutex_unlock(&f->lock);
    }
    free(buf);
    return NULL;
}

/* Marks pieces already in <out>.part (per its map) after checking them again. */
static void reuse_pieces(fetch *f) {
    uint8_t *buf = malloc(f->piece);
    if (!buf) return;
    for (int i = 0; i < f->n_pieces; i++) {
        uint8_t m = 0;
        if (mt_file_pread(f->map_fd, &m, 1, (uint64_t)i) != 1 || m != 1) continue;
        if (mt_file_pread(f->fd, buf, piece_len(f, i), (uint64_t)i * f->piece) !=
                (ssize_t)piece_len(f, i) ||
            !piece_ok(f, i, buf)) {
            uint8_t zero = 0;
            if (mt_file_pwrite(f->map_fd, &zero, 1, (uint64_t)i) != 1) break;
            continue;
        }
        f->have[i] = 1;
        f->p.bytes_done += piece_len(f, i);
        f->p.bytes_reused += piece_len(f, i);
        f->p.pieces_done++;
    }
    free(buf);
}

/* Opens path (created if missing) with an exclusive lock on it; *waited
 * tells whether another holder made this wait. -1 with errno on failure. A
 * holder deletes the file when it is done, so a lock on a file that is no
 * longer at path locks nothing: open it again. */
static int open_locked(const char *path, bool *waited) {
    *waited = false;
    for (;;) {
        int fd = mt_file_open(path, MT_O_READ | MT_O_WRITE | MT_O_CREATE, 0644);
        if (fd < 0) return -1;
        bool w = false;
        if (mt_file_lock(fd, &w) != 0) {
            int e = errno;
            mt_file_close(fd);
            errno = e;
            return -1;
        }
        *waited = *waited || w;
        mt_file_info held, now;
        if (mt_file_fstat(fd, &held) == 0 && mt_file_stat(path, &now) == 0 && held.ino == now.ino &&
            held.dev == now.dev)
            return fd;
        mt_file_close(fd);
    }
}

int mt_shard_fetch(const mt_fetch_config *c, mt_fetch_progress *stats, mt_error *err) {
    if (mt_shard_manifest_check(c->manifest, err)) return -1;
    if (c->n_sources <= 0)
        return mt_error_set(err, "no source holds shard '%s' yet; wait for the registry's seed",
                            json_string_value(json_object_get(c->manifest, "name")));
    fetch f = {.cfg = c, .fd = -1, .map_fd = -1};
    f.name = json_string_value(json_object_get(c->manifest, "name"));
    f.total = (uint64_t)json_integer_value(json_object_get(c->manifest, "bytes"));
    f.piece = (uint64_t)json_integer_value(json_object_get(c->manifest, "piece_bytes"));
    f.n_pieces = (int)json_array_size(json_object_get(c->manifest, "pieces"));
    f.p.bytes_total = f.total;
    f.p.pieces_total = f.n_pieces;
    f.p.eta_s = -1;
    pthread_mutex_init(&f.lock, NULL);
    size_t n = strlen(c->out);
    char *part = malloc(n + 16), *map = malloc(n + 16);
    f.have = calloc((size_t)f.n_pieces + 1, 1);
    f.failures = calloc((size_t)c->n_sources, sizeof *f.failures);
    int rc = -1;
    if (!part || !map || !f.have || !f.failures) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    sprintf(part, "%s.part", c->out);
    sprintf(map, "%s.part.map", c->out);
    bool waited = false;
    if ((f.map_fd = open_locked(map, &waited)) < 0) {
        mt_error_set(err, "%s: %s", map, strerror(errno));
        goto done;
    }
    if (waited && mt_shard_file_matches(c->out, c->manifest)) { /* fetched meanwhile */
        mt_file_remove(map);
        f.p.bytes_done = f.p.bytes_reused = f.total;
        f.p.pieces_done = f.n_pieces;
        rc = 0;
        goto done;
    }
    f.fd = mt_file_open(part, MT_O_READ | MT_O_WRITE | MT_O_CREATE, 0644);
    if (f.fd < 0 || f.map_fd < 0 || mt_file_resize(f.fd, f.total) != 0 ||
        mt_file_resize(f.map_fd, (uint64_t)f.n_pieces) != 0) {
        int e = errno;
        if (e == ENOSPC || e == EDQUOT || e == EFBIG)
            fail_no_space(&f, part, map, strerror(e), err);
        else
            mt_error_set(err, "%s: %s", part, strerror(e));
        goto done;
    }
    /* reserve the room now: a disk too small fails here, not after most of the download
     * (file systems without fallocate get the sparse file and fail on a write instead) */
    int fe = f.total > 0 && mt_file_reserve(f.fd, f.total) != 0 ? errno : 0;
    if (fe == ENOSPC || fe == EDQUOT || fe == EFBIG) {
        fail_no_space(&f, part, map, strerror(fe), err);
        goto done;
    }
    reuse_pieces(&f);
    f.t0 = mt_mono_s();
    int threads = c->parallel > 0 ? c->parallel : c->n_sources * 2 < 4 ? c->n_sources * 2 : 4;
    pthread_t tid[16];
    if (threads > 16) threads = 16;
    int started = 0;
    for (; started < threads; started++)
        if (pthread_create(&tid[started], NULL, worker, &f)) break;
    if (started == 0) worker(&f);
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    if (f.failed && f.no_space) {
        fail_no_space(&f, part, map, f.error, err);
        goto done;
    }
    if (f.failed) {
        mt_error_set(err, "fetching shard '%s': %s (%d of %d pieces kept for the next try)", f.name,
                     f.error, f.p.pieces_done, f.n_pieces);
        goto done;
    }
    mt_file_close(f.fd), f.fd = -1;
    if (!mt_shard_file_matches(part, c->manifest)) {
        /* every piece matched, so only a changed manifest or disk can get here */
        mt_file_remove(map);
        mt_file_remove(part);
        mt_error_set(err, "fetching shard '%s': the whole file does not match its hash", f.name);
        goto done;
    }
    if (mt_file_replace(part, c->out) != 0) {
        mt_error_set(err, "%s: %s", c->out, strerror(errno));
        goto done;
    }
    mt_file_remove(map);
    rc = 0;
done:
    if (stats) *stats = f.p;
    if (f.fd >= 0) mt_file_close(f.fd);
    if (f.map_fd >= 0) mt_file_close(f.map_fd);
    pthread_mutex_destroy(&f.lock);
    free(part);
    free(map);
    free(f.have);
    free(f.failures);
    return rc;
}

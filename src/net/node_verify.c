/* node_verify.c - a node's shard checks (see mt_node_config in node.h):
 * every tensor hashed against the hash the shard stores before it is
 * served, then, while it serves, one tensor now and then on a slow,
 * low-priority thread, so that a file changed on disk under the node (which
 * maps it) is noticed. A failed re-check stops the node computing: its
 * numbers would be wrong. The hashing itself is the shards' own
 * (mt_shard_verify_io, mt_shard_verify_tensor). */
#include "moontail/clock.h"
#include "moontail/shard.h"
#include "node_internal.h"
#include "moontail/proc.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RECHECK_MS_DEFAULT   10000
#define RECHECK_RATE_DEFAULT (64ull << 20)

/* Waits on recheck_cv until mt_mono_s() reaches `until` or the node stops
 * (caller holds n->lock). */
static void wait_until(mt_node *n, double until) {
    while (!n->stop) {
        double now = mt_mono_s();
        if (now >= until) return;
        struct timespec ts = {.tv_sec = (time_t)until,
                              .tv_nsec = (long)((until - (double)(time_t)until) * 1e9)};
        mt_cond_wait_until(&n->recheck_cv, &n->lock, &ts);
    }
}

int node_verify_shard(mt_node *n, const char *path, mt_error *err) {
    const gguf_file *f = n->model->gguf;
    mt_shard_info *info = calloc(1, sizeof *info);
    if (!info) return mt_error_set(err, "out of memory");
    int rc = mt_shard_info_read(f, info, err);
    if (rc == MT_SHARD_NOT_A_SHARD) {
        free(info);
        if (err) err->msg[0] = 0;
        mt_log_as(&n->log, MT_LOG_INFO,
                  "%s is a whole model, not a shard: it stores no tensor hashes, so there is"
                  " nothing to verify",
                  path);
        return 0;
    }
    if (rc) {
        free(info);
        return -1;
    }
    n->shard_info = info;
    if (n->cfg.shard_verified) {
        mt_log_as(&n->log, MT_LOG_INFO,
                  "%s: its bytes were just checked by the caller; not hashed again", path);
        return 0;
    }
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < info->n_tensors; i++)
        bytes += f->tensors[info->tensor_index[i]].nbytes;
    mt_shard_io io = {.threads = n->cfg.threads,
                      .progress = n->cfg.verify_progress,
                      .progress_ctx = n->cfg.verify_progress_ctx};
    double t0 = mt_mono_s();
    if (mt_shard_verify_io(f, &io, err)) return -1;
    double s = mt_mono_s() - t0;
    mt_log_as(&n->log, MT_LOG_INFO,
              "%s: all %llu tensors match their stored hashes (%.1f MB in %.2f s, %.2f GB/s)", path,
              (unsigned long long)info->n_tensors, bytes / 1e6, s, s > 0 ? bytes / 1e9 / s : 0.0);
    return 0;
}

/* The re-check's progress: holds the read rate to n->cfg.recheck_rate by
 * waiting after each chunk (not at all once the node stops). */
typedef struct pace {
    mt_node *n;
    double t0;
} pace;

static void pace_progress(void *ctx, const char *what, uint64_t done, uint64_t total) {
    (void)what, (void)total;
    pace *p = ctx;
    pthread_mutex_lock(&p->n->lock);
    wait_until(p->n, p->t0 + (double)done / (double)p->n->cfg.recheck_rate);
    pthread_mutex_unlock(&p->n->lock);
}

static void *recheck_main(void *arg) {
    mt_node *n = arg;
    /* low priority for this thread and the hashing thread it starts (on Linux nice is
     * inherited; the rate limit bounds the work anyway) */
    mt_thread_background();
    const mt_shard_info *info = n->shard_info;
    uint64_t next = randombytes_uniform(
        (uint32_t)(info->n_tensors < UINT32_MAX ? info->n_tensors : UINT32_MAX));
    pthread_mutex_lock(&n->lock);
    while (!n->stop && !n->shard_bad) {
        wait_until(n, mt_mono_s() + n->cfg.recheck_ms / 1000.0);
        if (n->stop) break;
        pthread_mutex_unlock(&n->lock);
        pace p = {n, mt_mono_s()};
        mt_shard_io io = {.threads = 1, .progress = pace_progress, .progress_ctx = &p};
        mt_error e = {{0}};
        int rc = mt_shard_verify_tensor(n->model->gguf, info, next, &io, &e);
        next = (next + 1) % info->n_tensors;
        pthread_mutex_lock(&n->lock);
        if (n->stop) break;
        n->rechecked++;
        if (rc) {
            n->shard_bad = true;
            snprintf(n->shard_error, sizeof n->shard_error, "%s", e.msg);
            pthread_mutex_unlock(&n->lock);
            mt_log_as(&n->log, MT_LOG_ERROR,
                      "the background shard check failed, so this node computes nothing more: %s",
                      e.msg);
            pthread_mutex_lock(&n->lock);
        }
    }
    pthread_mutex_unlock(&n->lock);
    return NULL;
}

int node_recheck_start(mt_node *n, mt_error *err) {
    if (!n->shard_info || n->shard_info->n_tensors == 0 || n->cfg.recheck_ms < 0) return 0;
    if (n->cfg.recheck_ms == 0) n->cfg.recheck_ms = RECHECK_MS_DEFAULT;
    if (n->cfg.recheck_rate == 0) n->cfg.recheck_rate = RECHECK_RATE_DEFAULT;
    if (sodium_init() < 0) return mt_error_set(err, "cannot initialise libsodium");
    if (pthread_create(&n->recheck_thread, NULL, recheck_main, n) != 0)
        return mt_error_set(err, "cannot start the shard re-check thread");
    n->recheck_started = true;
    return 0;
}

void node_recheck_stop(mt_node *n) {
    if (n->recheck_started) {
        pthread_mutex_lock(&n->lock);
        pthread_cond_broadcast(&n->recheck_cv);
        pthread_mutex_unlock(&n->lock);
        pthread_join(n->recheck_thread, NULL);
        n->recheck_started = false;
    }
    if (n->shard_info) mt_shard_info_free(n->shard_info);
    free(n->shard_info);
    n->shard_info = NULL;
}

bool mt_node_shard_error(mt_node *n, char *buf, size_t cap) {
    pthread_mutex_lock(&n->lock);
    bool bad = n->shard_bad;
    if (buf && cap) snprintf(buf, cap, "%s", bad ? n->shard_error : "");
    pthread_mutex_unlock(&n->lock);
    return bad;
}

uint64_t mt_node_rechecked(mt_node *n) {
    pthread_mutex_lock(&n->lock);
    uint64_t k = n->rechecked;
    pthread_mutex_unlock(&n->lock);
    return k;
}

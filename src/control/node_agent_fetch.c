/* node_agent_fetch.c - the node agent's shard fetch thread: gets the
 * registry's manifest of the shard it wants, fetches the pieces from peers
 * that hold it and from the seed (shard_fetch.c), with progress in the log
 * and for heartbeats, and on failure records why and backs off; a disk too
 * small for the shard lowers the capacity the node offers. */
#include "node_agent_internal.h"
#include "moontail/clock.h"
#include "moontail/file.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
/* Keeps the figures for heartbeats and shows progress (a bar on a terminal). */
static void on_progress(void *ctx, const mt_fetch_progress *p) {
    mt_agent *a = ctx;
    pthread_mutex_lock(&a->lock);
    a->progress = *p;
    pthread_mutex_unlock(&a->lock);
    mt_progress_update(&a->bar, p->bytes_done, p->bytes_total, p->rate, p->eta_s);
}

/* A fetch ran out of room in the data directory: from now on the node offers
 * only what fits there (with the shard it serves, already on disk), so that
 * the registry places the shard on another node instead of waiting for this
 * one (caller holds a->lock). */
static void disk_full(mt_agent *a, const char *name, const mt_fetch_progress *fin,
                      const char *why) {
    int64_t held = 0;
    char *path = a->serving[0] ? agent_shard_path(a, a->serving) : NULL;
    mt_file_info sb;
    if (path && mt_file_stat(path, &sb) == 0) held = (int64_t)sb.size;
    free(path);
    int64_t was = agent_offered_capacity(a), fits = (int64_t)fin->disk_free + held;
    if (fits < 1) fits = 1; /* the registry's smallest capacity: nothing fits */
    if (a->disk_limit < 0 || fits < a->disk_limit) a->disk_limit = fits;
    mt_log_as(
        &a->log, MT_LOG_WARN,
        "%s; shard %s does not fit in %s: offering %.1f MB from now on (was %.1f MB), so that"
        " the registry places it elsewhere. To offer more, free space in %s or give the node a"
        " --data directory on a larger disk, then restart it",
        why, name, a->data_dir, agent_offered_capacity(a) / 1e6, was / 1e6, a->data_dir);
}

static void *fetch_main(void *arg) {
    mt_agent *a = arg;
    pthread_mutex_lock(&a->lock);
    char name[96];
    snprintf(name, sizeof name, "%s", a->fetching);
    pthread_mutex_unlock(&a->lock);

    mt_error err = {{0}};
    char url[600];
    snprintf(url, sizeof url, "%s/v1/shards/%s/manifest", a->registry, name);
    json_t *m = NULL, *hb = NULL; /* the manifest; the sources */
    mt_fetch_progress fin = {0};
    int st = mt_http_json("GET", url, NULL, NULL, 600000, &m, &err);
    int rc = st == 200 && m ? mt_shard_manifest_check(m, &err) : -1;
    if (st != 200 && rc) mt_error_prefix(&err, "manifest of %s", name);
    char *path = agent_shard_path(a, name);
    if (rc == 0 && path && !mt_shard_file_matches(path, m)) {
        /* sources: peers that serve it now (from the last heartbeat), then the seed */
        const char *srcs[66];
        int n = 0, seeds = 0;
        /* a copy, not a reference: jansson's json_decref reads the count before its
         * atomic decrement, a data race when the heartbeat thread drops the same list */
        pthread_mutex_lock(&a->lock);
        hb = json_deep_copy(a->sources);
        pthread_mutex_unlock(&a->lock);
        for (size_t i = 0; i < json_array_size(hb) && n < 64; i++)
            if (json_is_string(json_array_get(hb, i)))
                srcs[n++] = json_string_value(json_array_get(hb, i));
        srcs[n++] = a->registry;
        seeds = 1;
        mt_log_as(&a->log, MT_LOG_INFO,
                  "fetching shard %s (%lld bytes) from %d peer%s and the seed", name,
                  (long long)json_integer_value(json_object_get(m, "bytes")), n - 1,
                  n == 2 ? "" : "s");
        mt_fetch_config fc = {.manifest = m,
                              .sources = srcs,
                              .n_sources = n,
                              .n_seeds = seeds,
                              .out = path,
                              .progress = on_progress,
                              .progress_ctx = a};
        char label[120];
        snprintf(label, sizeof label, "fetching %s", name);
        mt_progress_init_log(&a->bar, &a->log, label, 0);
        rc = mt_shard_fetch(&fc, &fin, &err);
        if (rc == 0)
            mt_log_as(&a->log, MT_LOG_INFO,
                      "shard %s: %d pieces from peers, %d from the seed, %d reused, %.1f MB/s",
                      name, fin.pieces_from_peers, fin.pieces_from_seed,
                      (int)(fin.bytes_reused /
                            (uint64_t)json_integer_value(json_object_get(m, "piece_bytes"))),
                      fin.rate / 1e6);
    }
    free(path);
    json_decref(m);
    json_decref(hb);
    pthread_mutex_lock(&a->lock);
    if (rc) {
        snprintf(a->last_error, sizeof a->last_error, "%s", err.msg);
        agent_set_problem(a, name, "cannot fetch", err.msg);
        a->fetch_failures = strcmp(a->fetch_failed, name) == 0 ? a->fetch_failures + 1 : 1;
        snprintf(a->fetch_failed, sizeof a->fetch_failed, "%s", name);
        /* the same shard again after 1 s, doubling to 10 s: not on every heartbeat, and a
         * node whose sources were busy a while is not left idle for a minute */
        int wait_s = a->fetch_failures > 4 ? 10 : 1 << (a->fetch_failures - 1);
        a->fetch_retry_at = mt_mono_s() + wait_s;
        if (fin.no_space)
            disk_full(a, name, &fin, err.msg);
        else
            mt_log_as(&a->log, MT_LOG_WARN, "%s; trying again in %d s", err.msg, wait_s);
    } else {
        if (strcmp(a->problem_shard, name) == 0) a->problem[0] = a->problem_shard[0] = 0;
        a->fetch_failed[0] = 0;
        a->fetch_failures = 0;
        snprintf(a->verified, sizeof a->verified, "%s", name);
    }
    a->fetching[0] = 0;
    a->fetch_running = false;
    mt_bg_thread_wake(&a->hb);
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

void agent_fetch_start(mt_agent *a) {
    if (a->fetch_running ||
        (strcmp(a->fetch_failed, a->want) == 0 && mt_mono_s() < a->fetch_retry_at))
        return;
    if (a->fetch_joinable) pthread_join(a->fetch_thread, NULL), a->fetch_joinable = false;
    snprintf(a->fetching, sizeof a->fetching, "%s", a->want);
    memset(&a->progress, 0, sizeof a->progress);
    a->fetch_running = true;
    if (pthread_create(&a->fetch_thread, NULL, fetch_main, a) != 0) {
        a->fetch_running = false;
        a->fetching[0] = 0;
    } else {
        a->fetch_joinable = true;
    }
}

bool agent_fetch_join(mt_agent *a) {
    if (!a->fetch_joinable) return true;
    /* a fetch may be waiting on a slow peer: 5 s, then it is left running rather than keep
     * a stopping node waiting for minutes */
    if (mt_thread_join_ms(a->fetch_thread, 5000) == 0) {
        a->fetch_joinable = false;
        return true;
    }
    mt_log_as(&a->log, MT_LOG_WARN,
              "a shard fetch is still waiting on the network; not waiting for it");
    return false;
}

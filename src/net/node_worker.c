/* node_worker.c - the node's worker thread: continuous batching (see
 * include/moontail/node.h). Each step takes every request waiting, admits
 * at most one per session (creating, checking and evicting sessions), runs
 * all STAGE_FORWARD requests of a layer range as one mt_model_forward_batch
 * and all EXPERT_RUN requests of a layer as one mt_model_run_experts, and
 * replies to each (a chained STAGE_FORWARD's rows go back to its reader,
 * which forwards them: node_chain.c). Between steps, and while it waits
 * for work, it drops sessions unused for session_idle_ms (node.h). */
#include "moontail/clock.h"
#include "node_internal.h"

#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- sessions (worker only; the table: node_sessions.c) ------------------------------------ */

static node_session *session_find(mt_node *n, const uint8_t *owner, uint64_t id) {
    return node_session_find(&n->sessions, owner, id);
}

static void session_drop(mt_node *n, node_session *s) {
    size_t bytes = mt_kv_cache_bytes(s->kv);
    node_session_remove(&n->sessions, s);
    pthread_mutex_lock(&n->lock);
    n->stats.sessions--;
    n->stats.kv_bytes -= bytes;
    n->stats.kv_used = n->sessions.kv_used;
    pthread_mutex_unlock(&n->lock);
}

/* Bytes a session's cache has written at n_past positions: caches are mapped
 * lazily (kv_cache.c), so this is what it costs, not its full context. */
static uint64_t session_bytes(const mt_node *n, int32_t n_past) {
    return n->kv_fixed + (uint64_t)n_past * n->kv_per_position;
}

/* The session's cache holds [0, n_past) (its bytes follow). */
static void session_set_past(mt_node *n, node_session *s, int32_t n_past) {
    s->n_past = n_past;
    node_session_hold(&n->sessions, s, session_bytes(n, n_past));
    pthread_mutex_lock(&n->lock);
    n->stats.kv_used = n->sessions.kv_used;
    pthread_mutex_unlock(&n->lock);
}

/* Drops the sessions unused since now - session_idle_ms: the oldest first,
 * so only those are looked at. */
static void sessions_expire(mt_node *n, int64_t now) {
    int dropped = 0;
    size_t bytes = 0;
    for (node_session *s;
         (s = n->sessions.oldest) && now - s->last_used_ms >= n->cfg.session_idle_ms;) {
        bytes += mt_kv_cache_bytes(s->kv);
        session_drop(n, s);
        dropped++;
    }
    if (!dropped) return;
    pthread_mutex_lock(&n->lock);
    n->stats.expired += (uint64_t)dropped;
    pthread_mutex_unlock(&n->lock);
    mt_log_as(&n->log, MT_LOG_INFO,
              "%d session%s unused for %d s expired; %.1f MB of KV cache freed", dropped,
              dropped == 1 ? "" : "s", n->cfg.session_idle_ms / 1000, (double)bytes / 1e6);
}

/* Evicts the least recently used session unless it was used in this step
 * (then so was every other): false when there was none to evict. */
static bool evict_oldest(mt_node *n) {
    node_session *lru = n->sessions.oldest;
    if (!lru || lru->last_used == n->step) return false;
    session_drop(n, lru);
    pthread_mutex_lock(&n->lock);
    n->stats.evictions++;
    pthread_mutex_unlock(&n->lock);
    return true;
}

/* Makes s (used in this step) hold `positions` within the node's KV budget
 * (mt_node_size_sessions), evicting least recently used sessions other than
 * those of this step only while the bytes do not fit. -1 when the sessions
 * of this step alone would not fit. */
static int kv_make_room(mt_node *n, node_session *s, uint64_t positions) {
    uint64_t need = n->kv_fixed + positions * n->kv_per_position;
    while (n->sessions.kv_used - s->held + need > n->kv_budget)
        if (!evict_oldest(n)) return -1;
    node_session_hold(&n->sessions, s, need);
    pthread_mutex_lock(&n->lock);
    n->stats.kv_used = n->sessions.kv_used;
    pthread_mutex_unlock(&n->lock);
    return 0;
}

/* ---- misbehaving on purpose (tests only) ---------------------------------------------- */

/* With cfg.corrupt_rate (mt_node_config; `--misbehave corrupt-output[:RATE]`), flips the
 * sign bit of every fourth element of a reply's rows, for that fraction of replies: a node
 * computing wrong results, for the spot-checking tests. Logged with the wall-clock time so
 * that a test can measure how long detection took. */
static void maybe_corrupt(mt_node *n, const mt_proto_msg *m, float *rows, size_t count) {
    double rate = n->cfg.corrupt_rate;
    if (!(rate > 0) || (rate < 1 && randombytes_uniform(1u << 30) >= rate * (1u << 30))) return;
    for (size_t i = 0; i < count; i += 4) {
        uint32_t bits;
        memcpy(&bits, &rows[i], sizeof bits);
        bits ^= 0x80000000u;
        memcpy(&rows[i], &bits, sizeof bits);
    }
    mt_log_as(&n->log, MT_LOG_WARN,
              "misbehave (testing only): corrupted the output of session %016llx positions"
              " [%d, %d) at unix ms %lld",
              (unsigned long long)m->session, m->pos[0], m->pos[0] + m->n, (long long)mt_wall_ms());
}

/* ---- the worker --------------------------------------------------------------------- */

/* What a step does with one job. */
typedef struct step_item {
    node_job *job;
    node_session *session; /* STAGE_FORWARD */
} step_item;

/* After the model's last layer (kimi-k3): each token's stream becomes the
 * head's input, the stream mixed with every checkpoint (mt_model_head_input),
 * which is all the reply carries back. */
static int head_input(mt_node *n, float *hidden, int32_t T, mt_error *err) {
    const size_t E = (size_t)n->info.n_embd, W = (size_t)mt_proto_hidden_width(&n->info);
    float *x = malloc((size_t)T * E * sizeof(float));
    if (!x) return mt_error_set(err, "out of memory for %d tokens", T);
    int rc = mt_model_head_input(n->model, hidden, T, x, err);
    for (size_t t = 0; rc == 0 && t < (size_t)T; t++)
        memcpy(hidden + t * W, x + t * E, E * sizeof(float));
    free(x);
    return rc;
}

/* Runs the scheduled STAGE_FORWARD jobs with layer range [a, b) as one batch.
 * Each token's whole hidden state (W floats) is rebuilt from what it brought
 * (the stream and the checkpoints banked before a; later slots zero); the
 * reply carries the stream and the checkpoints banked in [a, b) (after the
 * last layer, the head's input alone), a chained job gets the whole state to
 * pass on (node_chain.c). */
static void run_stage_group(mt_node *n, step_item *items, int n_items, int32_t a, int32_t b) {
    const mt_proto_info *in = &n->info;
    const size_t W = (size_t)mt_proto_hidden_width(in), C = (size_t)mt_proto_cols_out(in, a, b);
    int32_t T = 0, n_jobs = 0;
    for (int i = 0; i < n_items; i++) {
        if (!items[i].job) continue;
        const mt_proto_msg *m = &items[i].job->msg;
        if (m->type == MT_PROTO_STAGE_FORWARD && m->layer_begin == a && m->layer_end == b)
            T += m->n, n_jobs++;
    }
    float *hidden = calloc((size_t)T * W, sizeof(float));
    float *out = malloc((size_t)T * C * sizeof(float));
    int32_t *pos = malloc((size_t)T * sizeof(int32_t));
    mt_kv_cache **kv = malloc((size_t)T * sizeof *kv);
    mt_error err = {{0}};
    int rc = 0;
    if (!hidden || !out || !pos || !kv) rc = mt_error_set(&err, "out of memory for %d tokens", T);
    for (int i = 0, t = 0; i < n_items && rc == 0; i++) {
        if (!items[i].job) continue;
        const mt_proto_msg *m = &items[i].job->msg;
        if (m->type != MT_PROTO_STAGE_FORWARD || m->layer_begin != a || m->layer_end != b) continue;
        mt_proto_unpack_in(in, a, m->n, m->rows, hidden + (size_t)t * W);
        for (int32_t k = 0; k < m->n; k++) pos[t + k] = m->pos[k], kv[t + k] = items[i].session->kv;
        t += m->n;
    }
    mt_expert_backend be = mt_expert_dispatch_backend(&n->dispatch);
    if (rc == 0)
        rc = mt_model_forward_batch(n->model, kv, a, b, pos, T, hidden,
                                    n->use_dispatch ? &be : NULL, n->pool, &err);
    if (rc == 0 && mt_proto_out_is_head_input(in, b)) /* the last layer: mix for the head */
        rc = head_input(n, hidden, T, &err);
    pthread_mutex_lock(&n->lock);
    n->stats.stage_batches++;
    if (n_jobs > n->stats.max_stage_requests) n->stats.max_stage_requests = n_jobs;
    if (rc == 0) { /* what the registry meters: tokens x layers computed */
        n->stats.served_tokens += (uint64_t)T;
        n->stats.served_token_layers += (uint64_t)T * (uint64_t)(b - a);
    }
    pthread_mutex_unlock(&n->lock);
    for (int i = 0, t = 0; i < n_items; i++) {
        node_job *j = items[i].job;
        if (!j) continue;
        mt_proto_msg *m = &j->msg;
        if (m->type != MT_PROTO_STAGE_FORWARD || m->layer_begin != a || m->layer_end != b) continue;
        node_session *s = items[i].session;
        if (rc) {
            /* later positions are unsure */
            session_set_past(n, s, s->n_past < m->pos[0] ? s->n_past : m->pos[0]);
            node_send_error(j->client, m->request_id, MT_PROTO_ERR_COMPUTE, "layers [%d, %d): %s",
                            a, b, err.msg);
        } else {
            session_set_past(n, s, m->pos[0] + m->n);
            float *h = hidden + (size_t)t * W, *o = out + (size_t)t * C;
            mt_proto_pack_out(in, a, b, m->n, h, o);
            maybe_corrupt(n, m, o, (size_t)m->n * C);
            mt_proto_msg r = {.type = MT_PROTO_STAGE_REPLY,
                              .request_id = m->request_id,
                              .dtype = m->dtype,
                              .n = m->n,
                              .cols = (int32_t)C,
                              .rows = o};
            if (!j->fwd) {
                node_send_msg(j->client, &r);
            } else if ((j->fwd->rows = malloc((size_t)m->n * W * sizeof(float)))) {
                memcpy(j->fwd->rows, h, (size_t)m->n * W * sizeof(float));
            } else {
                node_send_error(j->client, m->request_id, MT_PROTO_ERR_BUSY,
                                "out of memory for the rows to forward");
            }
        }
        t += m->n;
        node_job_done(j);
        items[i].job = NULL;
    }
    free(hidden), free(out), free(pos), free(kv);
}

/* Runs the scheduled EXPERT_RUN jobs of layer il as one call. */
static void run_expert_group(mt_node *n, step_item *items, int n_items, int32_t il) {
    const size_t E = (size_t)n->info.n_embd_exp;
    int32_t R = 0, n_jobs = 0;
    for (int i = 0; i < n_items; i++) {
        if (!items[i].job) continue;
        const mt_proto_msg *m = &items[i].job->msg;
        if (m->type == MT_PROTO_EXPERT_RUN && m->layer_begin == il) R += m->n, n_jobs++;
    }
    float *u = malloc((size_t)R * E * sizeof(float)), *y = malloc((size_t)R * E * sizeof(float));
    int32_t *ids = malloc((size_t)R * sizeof(int32_t));
    mt_error err = {{0}};
    int rc = 0;
    if (!u || !y || !ids) rc = mt_error_set(&err, "out of memory for %d rows", R);
    for (int i = 0, r = 0; i < n_items && rc == 0; i++) {
        if (!items[i].job) continue;
        const mt_proto_msg *m = &items[i].job->msg;
        if (m->type != MT_PROTO_EXPERT_RUN || m->layer_begin != il) continue;
        memcpy(u + (size_t)r * E, m->rows, (size_t)m->n * E * sizeof(float));
        memcpy(ids + r, m->ids, (size_t)m->n * sizeof(int32_t));
        r += m->n;
    }
    if (rc == 0) rc = mt_model_run_experts(n->model, il, R, ids, u, y, n->pool, &err);
    pthread_mutex_lock(&n->lock);
    n->stats.expert_batches++;
    if (n_jobs > n->stats.max_expert_requests) n->stats.max_expert_requests = n_jobs;
    if (rc == 0) n->stats.served_expert_rows += (uint64_t)R;
    pthread_mutex_unlock(&n->lock);
    for (int i = 0, r = 0; i < n_items; i++) {
        node_job *j = items[i].job;
        if (!j) continue;
        mt_proto_msg *m = &j->msg;
        if (m->type != MT_PROTO_EXPERT_RUN || m->layer_begin != il) continue;
        if (rc) {
            node_send_error(j->client, m->request_id, MT_PROTO_ERR_COMPUTE, "layer %d experts: %s",
                            il, err.msg);
        } else {
            mt_proto_msg rep = {.type = MT_PROTO_EXPERT_REPLY,
                                .request_id = m->request_id,
                                .dtype = m->dtype,
                                .n = m->n,
                                .cols = (int32_t)E,
                                .rows = y + (size_t)r * E};
            node_send_msg(j->client, &rep);
        }
        r += m->n;
        node_job_done(j);
        items[i].job = NULL;
    }
    free(u), free(y), free(ids);
}

/* A session named in this step (the jobs themselves may be gone by then). */
typedef struct session_key {
    uint8_t owner[MT_KEYS_PUBLIC_BYTES];
    uint64_t id;
} session_key;

/* Session bookkeeping for one STAGE_FORWARD: 0 = scheduled (*out set),
 * 1 = defer to the next step, -1 = answered with an ERROR. */
static int stage_admit(mt_node *n, node_job *j, node_session **out) {
    mt_proto_msg *m = &j->msg;
    node_client *c = j->client;
    int32_t p0 = m->pos[0];
    node_session *s = session_find(n, c->pk, m->session);
    if (s && (s->layer_begin != m->layer_begin || s->layer_end != m->layer_end)) {
        if (p0 != 0) {
            node_send_error(
                c, m->request_id, MT_PROTO_ERR_BAD_REQUEST,
                "session %016llx runs layers [%d, %d) here, not [%d, %d); start again at"
                " position 0 to change its layers",
                (unsigned long long)m->session, s->layer_begin, s->layer_end, m->layer_begin,
                m->layer_end);
            return -1;
        }
        session_drop(n, s); /* restarted with other layers */
        s = NULL;
    }
    if (!s) {
        if (p0 != 0) {
            node_send_error(
                c, m->request_id, MT_PROTO_ERR_UNKNOWN_SESSION,
                "session %016llx is not known here (evicted or never started); replay its"
                " tokens from position 0",
                (unsigned long long)m->session);
            return -1;
        }
        /* an explicit --max-sessions caps the count; memory is checked below */
        if (n->sessions.count >= n->session_cap && !evict_oldest(n))
            return 1; /* all sessions busy in this step */
        mt_error err = {{0}};
        mt_kv_cache *kv = mt_kv_cache_new(n->model, m->layer_begin, m->layer_end, n->info.n_ctx,
                                          n->cfg.kv_type, &err);
        if (!kv || !(s = node_session_add(&n->sessions, c->pk, m->session))) {
            mt_kv_cache_free(kv);
            node_send_error(c, m->request_id, MT_PROTO_ERR_BUSY, "cannot start a session: %s",
                            kv ? "out of memory" : err.msg);
            return -1;
        }
        s->kv = kv;
        s->layer_begin = m->layer_begin;
        s->layer_end = m->layer_end;
        pthread_mutex_lock(&n->lock);
        n->stats.sessions++;
        n->stats.kv_bytes += mt_kv_cache_bytes(s->kv);
        pthread_mutex_unlock(&n->lock);
    } else if (p0 > s->n_past) {
        node_send_error(c, m->request_id, MT_PROTO_ERR_POSITION,
                        "position gap: session %016llx holds positions [0, %d) and this request"
                        " starts at %d; send position %d next (or replay from 0)",
                        (unsigned long long)m->session, s->n_past, p0, s->n_past);
        return -1;
    }
    node_session_touch(&n->sessions, s, n->step, mt_mono_ms());
    if (kv_make_room(n, s, (uint64_t)p0 + (uint64_t)m->n)) {
        node_send_error(c, m->request_id, MT_PROTO_ERR_BUSY,
                        "this node's KV memory (%.1f MB) is taken by the sessions of this step;"
                        " retry",
                        (double)n->kv_budget / 1e6);
        return -1;
    }
    *out = s;
    return 0;
}

/* One step over the jobs taken from the queue. Returns the jobs deferred to
 * the next step, in their order. */
static node_job *worker_step(mt_node *n, node_job *list) {
    n->step++;
    int count = 0;
    for (node_job *j = list; j; j = j->next) count++;
    step_item *items = calloc((size_t)count, sizeof *items);
    session_key *seen = malloc((size_t)count * sizeof *seen); /* sessions looked at */
    node_job *deferred = NULL, **dtail = &deferred;
    int n_items = 0, n_seen = 0;
    int64_t tokens = 0, rows = 0;
    const int64_t max_tok = n->cfg.max_batch_tokens;
    const int64_t max_rows = max_tok * (n->info.n_expert_used > 0 ? n->info.n_expert_used : 1);
    for (node_job *j = list, *next; j; j = next) {
        next = j->next;
        j->next = NULL;
        mt_proto_msg *m = &j->msg;
        bool defer = !items || !seen;
        if (!defer && (m->type == MT_PROTO_STAGE_FORWARD || m->type == MT_PROTO_SESSION_END)) {
            for (int i = 0; i < n_seen && !defer; i++)
                defer = seen[i].id == m->session &&
                        memcmp(seen[i].owner, j->client->pk, MT_KEYS_PUBLIC_BYTES) == 0;
            memcpy(seen[n_seen].owner, j->client->pk, MT_KEYS_PUBLIC_BYTES);
            seen[n_seen++].id = m->session;
        }
        node_session *s = NULL;
        if (!defer && m->type == MT_PROTO_STAGE_FORWARD && tokens && tokens + m->n > max_tok) {
            defer = true; /* and keep its session from being evicted or expired meanwhile */
            if ((s = session_find(n, j->client->pk, m->session)))
                node_session_touch(&n->sessions, s, n->step, mt_mono_ms());
            s = NULL;
        }
        if (!defer && m->type == MT_PROTO_EXPERT_RUN) defer = rows && rows + m->n > max_rows;
        if (!defer && m->type == MT_PROTO_SESSION_END) {
            s = session_find(n, j->client->pk, m->session);
            if (s) session_drop(n, s);
            mt_proto_msg r = {.type = MT_PROTO_SESSION_END_REPLY,
                              .request_id = m->request_id,
                              .existed = s != NULL};
            node_send_msg(j->client, &r);
            node_job_done(j);
            continue;
        }
        if (!defer && m->type == MT_PROTO_STAGE_FORWARD) {
            int rc = stage_admit(n, j, &s);
            if (rc < 0) {
                node_job_done(j);
                continue;
            }
            defer = rc > 0;
        }
        if (defer) {
            *dtail = j;
            dtail = &j->next;
            continue;
        }
        if (m->type == MT_PROTO_STAGE_FORWARD) tokens += m->n;
        if (m->type == MT_PROTO_EXPERT_RUN) rows += m->n;
        items[n_items++] = (step_item){j, s};
    }
    /* one compute call per layer range (stages) and per layer (experts) */
    for (int i = 0; i < n_items; i++) {
        if (!items[i].job) continue;
        const mt_proto_msg *m = &items[i].job->msg;
        if (m->type == MT_PROTO_STAGE_FORWARD)
            run_stage_group(n, items + i, n_items - i, m->layer_begin, m->layer_end);
        else
            run_expert_group(n, items + i, n_items - i, m->layer_begin);
    }
    if (n_items) {
        pthread_mutex_lock(&n->lock);
        n->stats.steps++;
        pthread_mutex_unlock(&n->lock);
    }
    free(items);
    free(seen);
    return deferred;
}

/* How often idle sessions are looked for: expiry happens between
 * session_idle_ms and session_idle_ms plus this after the last request. */
static int64_t sweep_interval_ms(const mt_node *n) {
    int64_t t = n->cfg.session_idle_ms / 4;
    return t < 10 ? 10 : t > 1000 ? 1000 : t;
}

/* A shard that failed its background check computes nothing: every request
 * is refused, so that requesters take another replica. */
static node_job *refuse_all(mt_node *n, node_job *list) {
    char why[512];
    mt_node_shard_error(n, why, sizeof why);
    for (node_job *j = list, *next; j; j = next) {
        next = j->next;
        node_send_error(j->client, j->msg.request_id, MT_PROTO_ERR_BUSY,
                        "this node's shard changed on disk, so it computes nothing more: %s", why);
        node_job_done(j);
    }
    return NULL;
}

void *node_worker_main(void *arg) {
    mt_node *n = arg;
    int64_t next_sweep = mt_mono_ms() + sweep_interval_ms(n);
    pthread_mutex_lock(&n->lock);
    while (!n->stop) {
        if (n->q_head && !n->held) {
            node_job *list = n->q_head;
            n->q_head = n->q_tail = NULL;
            n->stats.queued = 0;
            bool bad = n->shard_bad;
            pthread_mutex_unlock(&n->lock);
            node_job *deferred = bad ? refuse_all(n, list) : worker_step(n, list);
            pthread_mutex_lock(&n->lock);
            if (deferred) { /* back in front of anything that arrived meanwhile */
                node_job *t = deferred;
                int k = 1;
                for (; t->next; t = t->next) k++;
                t->next = n->q_head;
                if (!n->q_head) n->q_tail = t;
                n->q_head = deferred;
                n->stats.queued += k;
            }
        } else if (n->stats.sessions == 0) {
            pthread_cond_wait(&n->work_cv, &n->lock); /* nothing to expire */
        } else {
            struct timespec until = {.tv_sec = next_sweep / 1000,
                                     .tv_nsec = (long)(next_sweep % 1000) * 1000000L};
            pthread_cond_timedwait(&n->work_cv, &n->lock, &until); /* woken or timed out */
        }
        int64_t now = mt_mono_ms();
        if (now >= next_sweep && !n->stop) {
            pthread_mutex_unlock(&n->lock);
            sessions_expire(n, now);
            pthread_mutex_lock(&n->lock);
            next_sweep = now + sweep_interval_ms(n);
        }
    }
    node_job *list = n->q_head;
    n->q_head = n->q_tail = NULL;
    n->stats.queued = 0;
    pthread_mutex_unlock(&n->lock);
    for (node_job *j = list, *next; j; j = next) {
        next = j->next;
        node_send_error(j->client, j->msg.request_id, MT_PROTO_ERR_BUSY,
                        "the node is shutting down");
        node_job_done(j);
    }
    return NULL;
}

/* node_worker.c - the node's worker thread: continuous batching (see
 * include/moontail/node.h). Each step looks at every request waiting, takes
 * at most one per session (creating, checking and evicting sessions) in the
 * step order of node.h (experts, decodes, then chunks of prompts), runs all
 * STAGE_FORWARD tokens of a layer range as one mt_model_forward_batch and
 * all EXPERT_RUN requests of a layer as one mt_model_run_experts, and replies
 * to each request finished (a one-way STAGE_FORWARD's chunks go on to its
 * next hop, or into the pass table on the last stage, as each is computed:
 * node_oneway.c). A prompt not finished stays
 * queued, in its place, for the next step. Between steps, and while it waits
 * for work, it drops sessions unused for session_idle_ms (node.h), and the
 * one-way passes and next hops left that long (node_oneway.c). */
#include "moontail/clock.h"
#include "node_internal.h"

#include <math.h>
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

/* Bytes a session's cache has written, or will have once its prompt in
 * progress ends: caches are mapped lazily (kv_cache.c), so this is what it
 * costs, not its full context. */
static uint64_t session_bytes(const mt_node *n, const node_session *s) {
    int32_t end = s->n_past;
    if (s->busy && s->busy->msg.pos[0] + s->busy->msg.n > end)
        end = s->busy->msg.pos[0] + s->busy->msg.n;
    return n->kv_fixed + (uint64_t)end * n->kv_per_position + mt_kv_cache_snap_bytes(s->kv);
}

/* The session's cache holds [0, n_past) (its bytes follow, with those its
 * prompt in progress will write). */
static void session_set_past(mt_node *n, node_session *s, int32_t n_past) {
    s->n_past = n_past;
    node_session_hold(&n->sessions, s, session_bytes(n, s));
    pthread_mutex_lock(&n->lock);
    n->stats.kv_used = n->sessions.kv_used;
    pthread_mutex_unlock(&n->lock);
}

/* Drops the sessions unused since now - session_idle_ms: the oldest first,
 * so only those are looked at. */
static void sessions_expire(mt_node *n, int64_t now) {
    int dropped = 0;
    size_t bytes = 0;
    for (node_session *s = n->sessions.oldest, *newer;
         s && now - s->last_used_ms >= n->cfg.session_idle_ms; s = newer) {
        newer = s->newer;
        if (s->busy) continue; /* a prompt in progress: its next chunk is coming */
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

/* Evicts the least recently used session that was not used in this step
 * and has no prompt in progress: false when there is none (the recency list
 * puts the sessions of this step last). */
static bool evict_oldest(mt_node *n) {
    for (node_session *s = n->sessions.oldest; s; s = s->newer) {
        if (s->last_used == n->step) return false;
        if (s->busy) continue;
        session_drop(n, s);
        pthread_mutex_lock(&n->lock);
        n->stats.evictions++;
        pthread_mutex_unlock(&n->lock);
        return true;
    }
    return false;
}

/* Makes s (used in this step) hold `positions` within the node's KV budget
 * (mt_node_size_sessions), evicting least recently used sessions other than
 * those of this step only while the bytes do not fit. -1 when the sessions
 * of this step alone would not fit. */
static int kv_make_room(mt_node *n, node_session *s, uint64_t positions) {
    uint64_t need = n->kv_fixed + positions * n->kv_per_position + mt_kv_cache_snap_bytes(s->kv);
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

/* What a step does with one job: all of it, or a chunk of a STAGE_FORWARD. */
typedef struct step_item {
    node_job *job;         /* NULL once computed in this step */
    node_job **slot;       /* the step's reference to the job: NULL once it is answered */
    node_session *session; /* STAGE_FORWARD */
    int32_t first, count;  /* STAGE_FORWARD: its tokens [first, first + count) */
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

/* A job's last chunk is done: replies with its rows (a one-way job has sent
 * each chunk on already). */
static void stage_finish(mt_node *n, node_job *j) {
    mt_proto_msg *m = &j->msg;
    const mt_proto_info *in = &n->info;
    const int32_t C = mt_proto_cols_out(in, m->layer_begin, m->layer_end);
    if (m->oneway) return;
    maybe_corrupt(n, m, j->out, (size_t)m->n * (size_t)C);
    mt_proto_msg r = {.type = MT_PROTO_STAGE_REPLY,
                      .request_id = m->request_id,
                      .dtype = m->dtype,
                      .n = m->n,
                      .cols = C,
                      .rows = j->out};
    node_send_msg(j->client, &r);
}

/* Runs the scheduled STAGE_FORWARD tokens with layer range [a, b) as one
 * batch. Each token's whole hidden state (W floats) is rebuilt from what it
 * brought (the stream and the checkpoints banked before a; later slots
 * zero); the reply carries the stream and the checkpoints banked in [a, b)
 * (after the last layer, the head's input alone), a one-way job with next
 * hops keeps the whole state to pass on (node_oneway.c). A job is answered
 * with its last chunk (one-way: each chunk goes on as it is done); a failed
 * chunk answers it with an ERROR (one-way: a CHAIN_ABORT). */
static void run_stage_group(mt_node *n, step_item *items, int n_items, int32_t a, int32_t b) {
    const mt_proto_info *in = &n->info;
    const size_t W = (size_t)mt_proto_hidden_width(in), C = (size_t)mt_proto_cols_out(in, a, b);
    const size_t cols_in = (size_t)mt_proto_cols_in(in, a);
    int32_t T = 0, n_jobs = 0, n_partial = 0;
    for (int i = 0; i < n_items; i++) {
        if (!items[i].job) continue;
        const mt_proto_msg *m = &items[i].job->msg;
        if (m->type != MT_PROTO_STAGE_FORWARD || m->layer_begin != a || m->layer_end != b) continue;
        T += items[i].count, n_jobs++;
        n_partial += items[i].job->done + items[i].count < m->n;
    }
    float *hidden = calloc((size_t)T * W, sizeof(float));
    int32_t *pos = malloc((size_t)T * sizeof(int32_t));
    mt_kv_cache **kv = malloc((size_t)T * sizeof *kv);
    mt_error err = {{0}};
    int rc = 0;
    if (!hidden || !pos || !kv) rc = mt_error_set(&err, "out of memory for %d tokens", T);
    for (int i = 0, t = 0; i < n_items && rc == 0; i++) {
        if (!items[i].job) continue;
        const mt_proto_msg *m = &items[i].job->msg;
        if (m->type != MT_PROTO_STAGE_FORWARD || m->layer_begin != a || m->layer_end != b) continue;
        const int32_t f = items[i].first, k_n = items[i].count;
        mt_proto_unpack_in(in, a, k_n, m->rows + (size_t)f * cols_in, hidden + (size_t)t * W);
        for (int32_t k = 0; k < k_n; k++)
            pos[t + k] = m->pos[f + k], kv[t + k] = items[i].session->kv;
        t += k_n;
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
        n->stats.prefill_chunks += (uint64_t)n_partial;
    }
    pthread_mutex_unlock(&n->lock);
    for (int i = 0, t = 0; i < n_items; i++) {
        node_job *j = items[i].job;
        if (!j) continue;
        mt_proto_msg *m = &j->msg;
        if (m->type != MT_PROTO_STAGE_FORWARD || m->layer_begin != a || m->layer_end != b) continue;
        node_session *s = items[i].session;
        const int32_t f = items[i].first, k_n = items[i].count;
        items[i].job = NULL;
        if (rc) {
            /* positions from this chunk on are unsure */
            s->busy = NULL;
            session_set_past(n, s, s->n_past < m->pos[f] ? s->n_past : m->pos[f]);
            node_job_fail(n, j, MT_PROTO_ERR_COMPUTE, "layers [%d, %d): %s", a, b, err.msg);
        } else {
            const float *h = hidden + (size_t)t * W;
            if (m->oneway && m->n_hops)
                memcpy(j->out + (size_t)f * W, h, (size_t)k_n * W * sizeof(float));
            else
                mt_proto_pack_out(in, a, b, k_n, h, j->out + (size_t)f * C);
            j->done += k_n;
            t += k_n;
            /* a prompt in progress keeps the memory of its whole request */
            s->busy = j->done < m->n ? j : NULL;
            session_set_past(n, s, m->pos[f] + k_n);
            if (m->oneway) node_oneway_chunk(n, j, f, k_n); /* on its way at once */
            if (s->busy) continue;                          /* more chunks in later steps */
            stage_finish(n, j);
        }
        *items[i].slot = NULL;
        node_job_done(j);
    }
    free(hidden), free(pos), free(kv);
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
        *items[i].slot = NULL;
    }
    free(u), free(y), free(ids);
}

/* Session bookkeeping for one STAGE_FORWARD: 0 = scheduled (*out set),
 * 1 = defer to the next step, -1 = answered with an ERROR. */
static int stage_admit(mt_node *n, node_job *j, node_session **out) {
    mt_proto_msg *m = &j->msg;
    const uint8_t *owner = node_job_owner(j);
    int32_t p0 = m->pos[0];
    node_session *s = session_find(n, owner, m->session);
    if (s && (s->layer_begin != m->layer_begin || s->layer_end != m->layer_end)) {
        if (p0 != 0) {
            node_job_fail(n, j, MT_PROTO_ERR_BAD_REQUEST,
                          "session %016llx runs layers [%d, %d) here, not [%d, %d); start again at"
                          " position 0 to change its layers",
                          (unsigned long long)m->session, s->layer_begin, s->layer_end,
                          m->layer_begin, m->layer_end);
            return -1;
        }
        session_drop(n, s); /* restarted with other layers */
        s = NULL;
    }
    if (!s) {
        if (p0 != 0) {
            node_job_fail(n, j, MT_PROTO_ERR_UNKNOWN_SESSION,
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
        if (!kv || !(s = node_session_add(&n->sessions, owner, m->session))) {
            mt_kv_cache_free(kv);
            node_job_fail(n, j, MT_PROTO_ERR_BUSY, "cannot start a session: %s",
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
        node_job_fail(n, j, MT_PROTO_ERR_POSITION,
                      "position gap: session %016llx holds positions [0, %d) and this request"
                      " starts at %d; send position %d next (or replay from 0)",
                      (unsigned long long)m->session, s->n_past, p0, s->n_past);
        return -1;
    }
    /* back inside the last speculative pass: restore the KDA states (attention rows are
     * simply written again); then this request's snapshots, if it is speculative */
    mt_error err = {{0}};
    if (p0 < s->n_past) {
        if (mt_kv_rewind(s->kv, p0, &err)) {
            node_job_fail(n, j, MT_PROTO_ERR_POSITION, "session %016llx: %s",
                          (unsigned long long)m->session, err.msg);
            return -1;
        }
        session_set_past(n, s, p0); /* a later failure here leaves the session where it went */
    }
    if (mt_kv_snap_begin(s->kv, p0, m->speculative ? m->n : 0, &err)) {
        node_job_fail(n, j, MT_PROTO_ERR_BUSY, "session %016llx: %s; retry",
                      (unsigned long long)m->session, err.msg);
        return -1;
    }
    node_session_touch(&n->sessions, s, n->step, mt_mono_ms());
    if (kv_make_room(n, s, (uint64_t)p0 + (uint64_t)m->n)) {
        node_job_fail(n, j, MT_PROTO_ERR_BUSY,
                      "this node's KV memory (%.1f MB) is taken by the sessions of this step;"
                      " retry",
                      (double)n->kv_budget / 1e6);
        return -1;
    }
    *out = s;
    return 0;
}

/* ---- decode pacing (node.h, "Step order"; the rule: node_pace.c) ------------------ */

/* Job j of session s is in this step (mt_node_pace_note). */
static void pace_note(node_session *s, const node_job *j, bool decode) {
    mt_node_pace_note(&s->pace, j->arrived_ms, decode);
}

/* The prompt tokens this step may take (the prompts ready, a chunk each, up to
 * budget); 0 with pacing off. */
static int64_t pace_prompt_tokens(const mt_node *n, node_job *const *all, const bool *ready,
                                  int count, int64_t budget) {
    int64_t t = 0;
    if (n->cfg.no_pacing) return 0;
    for (int k = 0; k < count && t < budget; k++)
        if (all[k] && ready[k] && all[k]->msg.type == MT_PROTO_STAGE_FORWARD &&
            !node_is_decode(&all[k]->msg)) {
            int64_t c = all[k]->msg.n - all[k]->done;
            t += c < n->cfg.prefill_chunk ? c : n->cfg.prefill_chunk;
        }
    return t < budget ? t : budget;
}

/* The rhythms of the sessions that decoded lately, into n->pace_due; their count. */
static int pace_gather(mt_node *n, double now) {
    int k = 0;
    for (node_session *s = n->sessions.newest;
         s && (double)(now - (double)s->last_used_ms) <= 2 * MT_NODE_PACE_MAX_PERIOD_MS;
         s = s->older) {
        if (!(s->pace.period_ms > 0)) continue;
        if (k == n->pace_cap) {
            int cap = n->pace_cap ? 2 * n->pace_cap : 64;
            mt_node_pace_decode *v = realloc(n->pace_due, (size_t)cap * sizeof *v);
            if (!v) break; /* pacing is an optimisation: decide on those seen */
            n->pace_due = v, n->pace_cap = cap;
        }
        n->pace_due[k++] = s->pace;
    }
    return k;
}

/* The jobs of one step that name a session, by (owner, session): an
 * open-addressing set of indices into the step's jobs (-1: empty), twice as
 * many slots as jobs, so that finding a session's first job is O(1). */
typedef struct step_firsts {
    int *slot;
    size_t mask;
} step_firsts;

/* Whether all[k] may run in this step: an EXPERT_RUN always; a session's
 * request when it is the first of that session's waiting (f: the firsts of
 * all[0..k)) and the session is not in the middle of another. A session
 * named is kept from being evicted or expired in this step. */
static bool job_ready(mt_node *n, node_job *const *all, int k, step_firsts *f) {
    const node_job *j = all[k];
    const mt_proto_msg *m = &j->msg;
    if (m->type == MT_PROTO_EXPERT_RUN) return true;
    const uint8_t *owner = node_job_owner(j);
    node_session *s = session_find(n, owner, m->session);
    if (s) node_session_touch(&n->sessions, s, n->step, mt_mono_ms());
    size_t h = (size_t)node_sessions_hash(&n->sessions, owner, m->session) & f->mask;
    for (; f->slot[h] >= 0; h = (h + 1) & f->mask) {
        const node_job *o = all[f->slot[h]];
        if (o->msg.session == m->session &&
            memcmp(node_job_owner(o), owner, MT_KEYS_PUBLIC_BYTES) == 0)
            return false; /* an earlier job of the session waits */
    }
    f->slot[h] = k;
    return !s || !s->busy || s->busy == j;
}

/* Schedules `count` more tokens of the STAGE_FORWARD *slot, admitting it
 * (stage_admit) and making its rows' buffer at its first chunk. 0 =
 * scheduled in *item, 1 = wait for a later step, -1 = answered with an
 * ERROR (*slot cleared). */
static int stage_take(mt_node *n, node_job **slot, int32_t count, step_item *item) {
    node_job *j = *slot;
    const mt_proto_msg *m = &j->msg;
    node_session *s = NULL;
    int rc = 0;
    if (j->done == 0) {
        rc = stage_admit(n, j, &s);
        /* a one-way job with next hops keeps whole states for the next hop, else the
         * reply's columns */
        const size_t width =
            (size_t)(m->oneway && m->n_hops
                         ? mt_proto_hidden_width(&n->info)
                         : mt_proto_cols_out(&n->info, m->layer_begin, m->layer_end));
        if (rc == 0 && !(j->out = malloc((size_t)m->n * width * sizeof(float)))) {
            node_job_fail(n, j, MT_PROTO_ERR_BUSY,
                          "out of memory for the rows of %d tokens; retry later", m->n);
            rc = -1;
        }
    } else if (!(s = session_find(n, node_job_owner(j), m->session)) || s->busy != j) {
        /* cannot happen: a session with a job in progress is kept (evict_oldest) */
        node_job_fail(n, j, MT_PROTO_ERR_COMPUTE,
                      "session %016llx was lost in the middle of this request; replay it",
                      (unsigned long long)m->session);
        if (s) s->busy = NULL;
        rc = -1;
    }
    if (rc < 0) {
        node_job_done(j);
        *slot = NULL;
    }
    if (rc) return rc;
    *item = (step_item){j, slot, s, j->done, count};
    return 0;
}

/* One step over the jobs taken from the queue (node.h, "Step order").
 * Returns the jobs not answered yet, in their order, for the next step;
 * *did_work says whether any job was computed or answered. */
static node_job *worker_step(mt_node *n, node_job *list, bool *did_work) {
    *did_work = true;
    n->step++;
    int count = 0;
    for (node_job *j = list; j; j = j->next) count++;
    node_job **all = malloc((size_t)count * sizeof *all); /* NULL once answered */
    step_item *items = calloc((size_t)count, sizeof *items);
    bool *ready = malloc((size_t)count * sizeof *ready);
    step_firsts firsts = {0};
    for (firsts.mask = 1; firsts.mask < 2 * (size_t)count; firsts.mask *= 2) {
    }
    firsts.slot = malloc(firsts.mask * sizeof *firsts.slot);
    firsts.mask--;
    if (!all || !items || !ready || !firsts.slot) { /* retried at the next step */
        free(all), free(items), free(ready), free(firsts.slot);
        return list;
    }
    memset(firsts.slot, 0xff, (firsts.mask + 1) * sizeof *firsts.slot); /* all -1 */
    int k = 0;
    for (node_job *j = list, *next; j; j = next) next = j->next, j->next = NULL, all[k++] = j;
    for (k = 0; k < count; k++) ready[k] = job_ready(n, all, k, &firsts);
    free(firsts.slot);
    int n_items = 0;
    int64_t tokens = 0, rows = 0;
    const int64_t max_tok = n->cfg.max_batch_tokens;
    const int64_t max_rows = max_tok * (n->info.n_expert_used > 0 ? n->info.n_expert_used : 1);
    /* 1. experts and session ends */
    for (k = 0; k < count; k++) {
        node_job *j = all[k];
        mt_proto_msg *m = &j->msg;
        if (!ready[k]) continue;
        if (m->type == MT_PROTO_SESSION_END) {
            node_session *s = session_find(n, j->client->pk, m->session);
            if (s) session_drop(n, s);
            mt_proto_msg r = {.type = MT_PROTO_SESSION_END_REPLY,
                              .request_id = m->request_id,
                              .existed = s != NULL};
            node_send_msg(j->client, &r);
            node_job_done(j);
            all[k] = NULL;
        } else if (m->type == MT_PROTO_EXPERT_RUN && !(rows && rows + m->n > max_rows)) {
            rows += m->n;
            items[n_items++] = (step_item){j, &all[k], NULL, 0, m->n};
        }
    }
    /* 2. every decode, whole */
    for (k = 0; k < count; k++) {
        if (!all[k] || !ready[k] || all[k]->msg.type != MT_PROTO_STAGE_FORWARD ||
            !node_is_decode(&all[k]->msg))
            continue;
        const int32_t t = all[k]->msg.n;
        if (tokens && tokens + t > max_tok) continue;
        if (node_oneway_hop_full(n, all[k])) continue; /* waits for room on its next hop */
        if (stage_take(n, &all[k], t, &items[n_items]) == 0) {
            pace_note(items[n_items].session, all[k], true);
            n_items++, tokens += t;
        }
    }
    /* 3. chunks of prompts in arrival order, up to the step's budget */
    const int64_t step_max = n->cfg.step_tokens < max_tok ? n->cfg.step_tokens : max_tok;
    int64_t budget = step_max - tokens < 1 ? 1 : step_max - tokens;
    /* while decodes wait, no more prompt tokens than decode tokens: a decoding user's step
     * then costs at most what a step of twice its decodes costs (a step's cost grows more
     * slowly than its tokens), and a prompt that arrives makes its tokens come at most about
     * half as fast, at every stage it crosses (docs/design.md, "Batching") */
    if (tokens > 0 && budget > tokens) budget = tokens;
    /* decode pacing: with no decode in this step, a prompt step that would still run when
     * a decode is due takes only the tokens that end before it, or, when not even one
     * does, is not started (the worker waits for the decode, or until the hold); with
     * decodes, no prompt tokens join them when the prompt step fits in the gap after this
     * step (at most MT_NODE_PACE_MAX_SKIPS steps in a row, so that prompts advance) */
    const double now = mt_mono_ms_frac();
    const bool was_holding = n->pace_hold_until > 0;
    n->pace_hold_until = 0;
    const int64_t planned = budget > 0 ? pace_prompt_tokens(n, all, ready, count, budget) : 0;
    if (planned > 0) {
        const int n_due = pace_gather(n, now); /* may move n->pace_due */
        const double most =
            mt_node_pace_plan(&n->pace_costs, n->pace_due, n_due, now, (double)tokens,
                              (double)planned, &n->pace_skips, &n->pace_hold_until);
        if ((double)budget > most) budget = (int64_t)most;
    }
    if (n->pace_hold_until > 0 && !was_holding) {
        pthread_mutex_lock(&n->lock);
        n->stats.paced_holds++;
        pthread_mutex_unlock(&n->lock);
    }
    int64_t prompt_tokens = 0;
    for (k = 0; k < count && budget > 0; k++) {
        if (!all[k] || !ready[k] || all[k]->msg.type != MT_PROTO_STAGE_FORWARD ||
            node_is_decode(&all[k]->msg))
            continue;
        if (node_oneway_hop_full(n, all[k])) continue;
        int64_t t = all[k]->msg.n - all[k]->done;
        if (t > n->cfg.prefill_chunk) t = n->cfg.prefill_chunk;
        if (t > budget) t = budget;
        if (stage_take(n, &all[k], (int32_t)t, &items[n_items]) == 0) {
            pace_note(items[n_items].session, all[k], false);
            n_items++, budget -= t, prompt_tokens += t;
        }
    }
    if (n_items) { /* counted before any reply, so that a client seeing one sees the step */
        pthread_mutex_lock(&n->lock);
        n->stats.steps++;
        pthread_mutex_unlock(&n->lock);
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
    if (rows == 0 && (prompt_tokens > 0) != (tokens > 0)) /* prompt chunks or decodes alone */
        mt_node_pace_measured(&n->pace_costs, prompt_tokens > 0, mt_mono_ms_frac() - now,
                              (double)(prompt_tokens > 0 ? prompt_tokens : tokens));
    if (prompt_tokens > 0) n->pace_skips = 0;
    node_job *left = NULL, **tail = &left;
    int n_left = 0;
    for (k = 0; k < count; k++)
        if (all[k]) *tail = all[k], tail = &all[k]->next, n_left++;
    free(all), free(items), free(ready);
    *did_work = n_items > 0 || n_left < count;
    return left;
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
    for (node_session *s = n->sessions.newest; s; s = s->older) s->busy = NULL; /* jobs all gone */
    for (node_job *j = list, *next; j; j = next) {
        next = j->next;
        node_job_fail(n, j, MT_PROTO_ERR_BUSY,
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
            bool bad = n->shard_bad, did_work = true;
            pthread_mutex_unlock(&n->lock);
            node_job *deferred = bad ? refuse_all(n, list) : worker_step(n, list, &did_work);
            pthread_mutex_lock(&n->lock);
            if (deferred) { /* back in front of anything that arrived meanwhile */
                node_job *t = deferred;
                int k = 1;
                for (; t->next; t = t->next) k++;
                t->next = n->q_head;
                if (!n->q_head) n->q_tail = t;
                n->q_head = deferred;
                n->stats.queued += k;
                if (!did_work) { /* all waiting (room on a next hop, a decode due): not a
                                    busy loop; an arrival ends the wait */
                    double wait_ms = 5;
                    if (n->pace_hold_until > 0) wait_ms = n->pace_hold_until - mt_mono_ms_frac();
                    if (wait_ms > 0) {
                        struct timespec until = mt_mono_after_ms((int64_t)ceil(wait_ms));
                        mt_cond_wait_until(&n->work_cv, &n->lock, &until);
                    }
                }
            }
        } else if (n->stats.sessions == 0 && n->n_hops == 0 && n->n_passes == 0) {
            pthread_cond_wait(&n->work_cv, &n->lock); /* nothing to expire */
        } else {
            struct timespec until = {.tv_sec = next_sweep / 1000,
                                     .tv_nsec = (long)(next_sweep % 1000) * 1000000L};
            mt_cond_wait_until(&n->work_cv, &n->lock, &until); /* woken or timed out */
        }
        int64_t now = mt_mono_ms();
        if (now >= next_sweep && !n->stop) {
            pthread_mutex_unlock(&n->lock);
            sessions_expire(n, now);
            node_passes_expire(n, now, n->cfg.session_idle_ms);
            node_hops_expire(n, now, n->cfg.session_idle_ms);
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
        node_job_fail(n, j, MT_PROTO_ERR_BUSY, "the node is shutting down");
        node_job_done(j);
    }
    return NULL;
}

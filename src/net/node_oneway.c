/* node_oneway.c - a stage node's part in one-way passes (proto.h): the
 * senders that carry finished chunks to next hops, the last stage's pass
 * table that answers the requester's STAGE_AWAIT, and CHAIN_ABORTs.
 *
 * Next hops: one node_hop per (address, key), each with a queue of encoded-
 * to-be messages and a sender thread that connects (as a client with this
 * node's own key, pinned to the hop's key), checks the hop holds the same
 * model, and sends them in order. A session's chunks therefore reach the
 * next stage in position order. The worker only queues (the queue is
 * bounded in bytes: node_oneway_hop_full), it never waits on the network. A
 * message the sender cannot deliver (a connection that broke is reconnected
 * once) becomes a CHAIN_ABORT to the pass's last stage naming that hop, and
 * so does every message queued behind it (one connection attempt for all).
 * Each sender waits on its own condition variable (a message for one hop
 * wakes only that hop's sender). The table keeps NODE_MAX_HOPS hops for
 * forwards: when they are all taken, the one idle longest is given to the
 * new (address, key); when none is idle the pass is aborted at once naming
 * this stage (CHAIN_ABORTs have NODE_HOP_RESERVE more, so that this abort
 * still goes out). Hops idle for session_idle_ms are ended (the worker's
 * sweep: node_hops_expire), and all of them at stop.
 *
 * Pass table (last stage): the rows of a pass arrive chunk by chunk, in
 * order, from the stage before; the requester's AWAIT names the pass and
 * that stage's key. Whichever comes last (the final chunk, the AWAIT, or an
 * abort) answers the AWAIT. Entries nobody claims expire with the sessions'
 * idle time. The table is a hash on (origin, session, pass id) with a count
 * per origin (its share, MT_NODE_PASSES_PER_ORIGIN), so that finding a pass
 * under the node's lock costs the same with 65,536 of them as with one. */
#include "moontail/clock.h"
#include "node_internal.h"

#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- next hops ------------------------------------------------------------------------ */

static void *hop_main(void *arg);

static bool hop_is(const node_hop *e, const char *addr, const uint8_t *pk) {
    return strcmp(e->addr, addr) == 0 && memcmp(e->pk, pk, MT_KEYS_PUBLIC_BYTES) == 0;
}

static bool hop_idle(const node_hop *e) {
    return !e->head && !e->sending && !e->retire;
}

/* A new hop for (addr, pk) with its sender, in a free slot (n->lock held);
 * NULL when a thread cannot start. */
static node_hop *hop_new_locked(mt_node *n, const char *addr, const uint8_t *pk) {
    node_hop *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    snprintf(e->addr, sizeof e->addr, "%s", addr);
    memcpy(e->pk, pk, MT_KEYS_PUBLIC_BYTES);
    e->idle_since_ms = mt_mono_ms();
    pthread_cond_init(&e->cv, NULL);
    struct hop_arg {
        mt_node *n;
        node_hop *e;
    } *a = malloc(sizeof *a);
    if (!a) {
        pthread_cond_destroy(&e->cv);
        free(e);
        return NULL;
    }
    a->n = n, a->e = e;
    if (pthread_create(&e->thread, NULL, hop_main, a)) {
        free(a);
        pthread_cond_destroy(&e->cv);
        free(e);
        return NULL;
    }
    e->started = true;
    n->hops[n->n_hops++] = e;
    n->stats.hops = n->n_hops;
    return e;
}

/* The hop for (addr, pk) (n->lock held): the one kept, else a new one while
 * there are fewer than NODE_MAX_HOPS, else the hop idle the longest given to
 * (addr, pk) (its sender drops its connection: node_hop.gen), else, for a
 * CHAIN_ABORT (`reserve`), a new one in the reserve. NULL with `why` when
 * none can be had. */
static node_hop *hop_get_locked(mt_node *n, const char *addr, const uint8_t *pk, bool reserve,
                                char *why, size_t why_size) {
    for (int i = 0; i < n->n_hops; i++)
        if (hop_is(n->hops[i], addr, pk)) return n->hops[i];
    if (n->stop) {
        snprintf(why, why_size, "the node is stopping");
        return NULL;
    }
    node_hop *e = NULL;
    if (n->n_hops < NODE_MAX_HOPS) {
        e = hop_new_locked(n, addr, pk);
    } else {
        node_hop *idle = NULL;
        for (int i = 0; i < n->n_hops; i++)
            if (hop_idle(n->hops[i]) && (!idle || n->hops[i]->idle_since_ms < idle->idle_since_ms))
                idle = n->hops[i];
        if (idle) {
            snprintf(idle->addr, sizeof idle->addr, "%s", addr);
            memcpy(idle->pk, pk, MT_KEYS_PUBLIC_BYTES);
            idle->gen++;
            return idle;
        }
        if (!reserve || n->n_hops >= NODE_MAX_HOPS + NODE_HOP_RESERVE) {
            snprintf(why, why_size,
                     "this stage keeps %d next-hop connections and all of them are sending;"
                     " replay the pass later or on another route",
                     n->n_hops);
            return NULL;
        }
        e = hop_new_locked(n, addr, pk);
    }
    if (!e) snprintf(why, why_size, "out of memory or threads for a next-hop sender");
    return e;
}

/* Queues m (its arrays taken) for the hop (addr, pk); a CHAIN_ABORT may use
 * the reserve. false with `why` when it could not be queued (m freed). */
static bool hop_push(mt_node *n, const char *addr, const uint8_t *pk, mt_proto_msg *m, char *why,
                     size_t why_size) {
    node_hop_msg *q = malloc(sizeof *q);
    pthread_mutex_lock(&n->lock);
    node_hop *e =
        q ? hop_get_locked(n, addr, pk, m->type == MT_PROTO_CHAIN_ABORT, why, why_size) : NULL;
    if (!q) snprintf(why, why_size, "out of memory");
    if (e) {
        q->next = NULL;
        q->msg = *m;
        q->bytes = (uint64_t)m->n * (uint64_t)m->cols * sizeof(float);
        if (e->tail)
            e->tail->next = q;
        else
            e->head = q;
        e->tail = q;
        e->queued_bytes += q->bytes;
        n->stats.hop_queued++;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&n->lock);
    if (!e) {
        free(q);
        mt_proto_msg_free(m);
    }
    return e != NULL;
}

/* Connects e to (addr, pk), as read under the lock (sender thread), and
 * checks that it holds this node's model. */
static int hop_connect(mt_node *n, node_hop *e, const char *addr, const uint8_t *pk,
                       mt_error *err) {
    mt_remote_close(e->r);
    mt_keys me;
    node_identity(n, &me); /* the certificate as it is now (it may have been renewed) */
    pthread_mutex_lock(&n->lock);
    n->stats.hop_connects++;
    pthread_mutex_unlock(&n->lock);
    e->r = mt_remote_connect(addr, pk, &me, n->cfg.timeout_ms, 0, err);
    mt_keys_wipe(&me);
    if (!e->r) return -1;
    /* the rows passed on are this model's whole hidden states: the hop must hold the same */
    const mt_proto_info *h = mt_remote_info(e->r), *in = &n->info;
    if (strcmp(h->source_id, in->source_id) != 0 || h->n_embd != in->n_embd ||
        h->n_layer != in->n_layer || h->res_block != in->res_block) {
        mt_error_set(err, "it holds another model (source_id %.16s..., this node's %.16s...)",
                     h->source_id, in->source_id);
        mt_remote_close(e->r);
        e->r = NULL;
        return -1;
    }
    return 0;
}

/* Sends m to e: a broken connection is reconnected once (a connection that
 * cannot be made is not tried again for this message). */
static int hop_send(mt_node *n, node_hop *e, const char *addr, const uint8_t *pk, mt_proto_msg *m,
                    mt_error *err) {
    bool fresh = !e->r;
    if (fresh && hop_connect(n, e, addr, pk, err)) return -1;
    if (mt_remote_send(e->r, m, err) == 0) return 0;
    if (fresh) return -1;
    mt_error e2 = {{0}};
    if (hop_connect(n, e, addr, pk, &e2)) {
        char first[sizeof err->msg];
        snprintf(first, sizeof first, "%s", err->msg);
        mt_error_set(err, "%.300s; reconnecting failed too: %.200s", first, e2.msg);
        return -1;
    }
    return mt_remote_send(e->r, m, err);
}

static void abort_to_last(mt_node *n, const mt_proto_msg *m, int32_t back, uint32_t code,
                          const char *text);

/* A message for addr that could not be sent: a forward's pass is aborted
 * (reported to its last stage), anything else is only logged. */
static void hop_msg_failed(mt_node *n, const char *addr, mt_proto_msg *m, const char *why) {
    mt_log_as(&n->log, MT_LOG_WARN, "next hop %s: %s of session %016llx: %s", addr,
              mt_proto_type_name(m->type), (unsigned long long)m->session, why);
    /* a forward into the hop: it is m->n_hops stages before the last */
    if (m->type == MT_PROTO_STAGE_FORWARD && m->n_hops > 0) {
        char text[MT_PROTO_MAX_TEXT + 1];
        snprintf(text, sizeof text, "next hop %s (layers [%d, %d)) cannot be reached: %.900s", addr,
                 m->layer_begin, m->layer_end, why);
        abort_to_last(n, m, m->n_hops, MT_PROTO_ERR_COMPUTE, text);
    }
}

static void *hop_main(void *arg) {
    struct {
        mt_node *n;
        node_hop *e;
    } *a = arg;
    mt_node *n = a->n;
    node_hop *e = a->e;
    free(arg);
    uint32_t gen = 0; /* the (addr, pk) e->r is connected to */
    char addr[MT_PROTO_HOP_ADDR_MAX + 1];
    uint8_t pk[MT_KEYS_PUBLIC_BYTES];
    pthread_mutex_lock(&n->lock);
    for (;;) {
        while (!e->head && !n->stop && !e->retire) pthread_cond_wait(&e->cv, &n->lock);
        if (n->stop || e->retire) break;
        node_hop_msg *q = e->head;
        e->head = q->next;
        if (!e->head) e->tail = NULL;
        e->sending = true;
        n->stats.hop_queued--;
        const bool moved = gen != e->gen;
        gen = e->gen;
        snprintf(addr, sizeof addr, "%s", e->addr);
        memcpy(pk, e->pk, sizeof pk);
        pthread_mutex_unlock(&n->lock);
        if (moved) { /* the hop was given to another (addr, pk) while idle */
            mt_remote_close(e->r);
            e->r = NULL;
        }
        mt_error err = {{0}};
        node_hop_msg *failed = NULL;
        const bool sent = hop_send(n, e, addr, pk, &q->msg, &err) == 0;
        pthread_mutex_lock(&n->lock);
        if (sent && q->msg.type == MT_PROTO_STAGE_FORWARD) n->stats.hop_messages++;
        if (!sent) {
            /* the hop cannot be reached: everything queued for it fails now, rather than
             * each message waiting for its own connection attempt */
            q->next = e->head;
            failed = q;
            for (node_hop_msg *f = e->head; f; f = f->next) n->stats.hop_queued--;
            e->head = e->tail = NULL;
        }
        pthread_mutex_unlock(&n->lock);
        uint64_t freed = sent ? q->bytes : 0;
        int n_failed = 0;
        for (node_hop_msg *f = failed, *next; f; f = next) {
            next = f->next;
            hop_msg_failed(n, addr, &f->msg, err.msg);
            freed += f->bytes;
            mt_proto_msg_free(&f->msg);
            free(f);
            n_failed++;
        }
        if (sent) {
            mt_proto_msg_free(&q->msg);
            free(q);
        }
        pthread_mutex_lock(&n->lock);
        n->stats.hop_failed += (uint64_t)n_failed;
        e->queued_bytes -= freed;
        e->sending = false;
        if (!e->head) e->idle_since_ms = mt_mono_ms();
        pthread_cond_broadcast(&n->work_cv); /* jobs waiting for room may go on */
    }
    /* stopping, or retired idle: what is still queued is dropped */
    for (node_hop_msg *q = e->head, *next; q; q = next) {
        next = q->next;
        mt_proto_msg_free(&q->msg);
        free(q);
        n->stats.hop_queued--;
    }
    e->head = e->tail = NULL;
    e->queued_bytes = 0;
    pthread_mutex_unlock(&n->lock);
    mt_remote_close(e->r);
    e->r = NULL;
    return NULL;
}

/* Ends hop e (taken out of the table already, idle or the node stopping):
 * its sender, its connection, itself. No lock held. */
static void hop_end(mt_node *n, node_hop *e) {
    pthread_mutex_lock(&n->lock);
    e->retire = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&n->lock);
    if (e->started) pthread_join(e->thread, NULL);
    pthread_cond_destroy(&e->cv);
    free(e);
}

void node_hops_expire(mt_node *n, int64_t now_ms, int64_t max_idle_ms) {
    node_hop *old[NODE_MAX_HOPS + NODE_HOP_RESERVE];
    int n_old = 0;
    pthread_mutex_lock(&n->lock);
    for (int i = 0; i < n->n_hops;) {
        node_hop *e = n->hops[i];
        if (hop_idle(e) && now_ms - e->idle_since_ms >= max_idle_ms) {
            e->retire = true;
            old[n_old++] = e;
            n->hops[i] = n->hops[--n->n_hops];
        } else {
            i++;
        }
    }
    n->stats.hops = n->n_hops;
    pthread_mutex_unlock(&n->lock);
    for (int i = 0; i < n_old; i++) hop_end(n, old[i]);
    if (n_old)
        mt_log_as(&n->log, MT_LOG_INFO, "%d next hop%s unused for %lld s closed", n_old,
                  n_old == 1 ? "" : "s", (long long)(max_idle_ms / 1000));
}

bool node_oneway_hop_full(mt_node *n, const node_job *j) {
    const mt_proto_msg *m = &j->msg;
    if (!m->oneway || m->n_hops == 0) return false;
    bool full = false;
    pthread_mutex_lock(&n->lock);
    for (int i = 0; i < n->n_hops; i++)
        if (hop_is(n->hops[i], m->hops[0].addr, m->hops[0].pk))
            full = n->hops[i]->queued_bytes >= (uint64_t)NODE_HOP_QUEUE_MB << 20;
    pthread_mutex_unlock(&n->lock);
    return full;
}

/* ---- the pass table (last stage) ----------------------------------------------------- */

/* Keyed (SipHash, a random key per node) so that a client choosing
 * its session and pass ids cannot pile its passes into one chain. */
static size_t pass_bucket(const mt_node *n, const uint8_t *owner, uint64_t session,
                          uint64_t pass_id) {
    uint8_t in[MT_KEYS_PUBLIC_BYTES + 16], h[crypto_shorthash_BYTES];
    memcpy(in, owner, MT_KEYS_PUBLIC_BYTES);
    memcpy(in + MT_KEYS_PUBLIC_BYTES, &session, 8);
    memcpy(in + MT_KEYS_PUBLIC_BYTES + 8, &pass_id, 8);
    crypto_shorthash(h, in, sizeof in, n->pass_key);
    uint64_t v;
    memcpy(&v, h, sizeof v);
    return (size_t)(v % NODE_PASS_BUCKETS);
}

static node_origin **origin_slot(const mt_node *n, const uint8_t *pk) {
    uint8_t h[crypto_shorthash_BYTES];
    crypto_shorthash(h, pk, MT_KEYS_PUBLIC_BYTES, n->pass_key);
    uint64_t v;
    memcpy(&v, h, sizeof v);
    node_origin **o = &n->origin_buckets[v % NODE_ORIGIN_BUCKETS];
    while (*o && memcmp((*o)->pk, pk, MT_KEYS_PUBLIC_BYTES) != 0) o = &(*o)->next;
    return o; /* the origin's entry, or the end of its chain */
}

_Static_assert(sizeof((mt_node *)0)->pass_key == crypto_shorthash_KEYBYTES,
               "mt_node.pass_key is crypto_shorthash's key");

int node_passes_init(mt_node *n, mt_error *err) {
    if (sodium_init() < 0) return mt_error_set(err, "libsodium cannot be initialised");
    randombytes_buf(n->pass_key, sizeof n->pass_key);
    n->pass_buckets = calloc(NODE_PASS_BUCKETS, sizeof *n->pass_buckets);
    n->origin_buckets = calloc(NODE_ORIGIN_BUCKETS, sizeof *n->origin_buckets);
    if (!n->pass_buckets || !n->origin_buckets)
        return mt_error_set(err, "out of memory for the one-way pass table");
    return 0;
}

/* The pass (owner, session, pass_id), created when `create` (lock held);
 * NULL when absent, or (with `why`) when the table is full or the owner
 * keeps its share of it already (MT_NODE_PASSES_PER_ORIGIN: one requester
 * cannot take the room of all the others). */
static node_pass *pass_get_locked(mt_node *n, const uint8_t *owner, uint64_t session,
                                  uint64_t pass_id, bool create, char *why, size_t why_size) {
    node_pass **chain = &n->pass_buckets[pass_bucket(n, owner, session, pass_id)];
    for (node_pass *p = *chain; p; p = p->next)
        if (p->session == session && p->pass_id == pass_id &&
            memcmp(p->owner, owner, MT_KEYS_PUBLIC_BYTES) == 0)
            return p;
    if (!create) return NULL;
    if (n->n_passes >= NODE_MAX_PASSES) {
        snprintf(why, why_size,
                 "this last stage keeps %d one-way passes already (all its requesters'); replay"
                 " the pass later or on another route",
                 n->n_passes);
        return NULL;
    }
    node_origin **o = origin_slot(n, owner);
    if (*o && (*o)->passes >= MT_NODE_PASSES_PER_ORIGIN) {
        snprintf(why, why_size,
                 "this requester keeps %d one-way passes on this last stage already, its most;"
                 " await (or let expire) the passes sent before sending more",
                 (*o)->passes);
        return NULL;
    }
    node_pass *p = calloc(1, sizeof *p);
    if (!p || (!*o && !(*o = calloc(1, sizeof **o)))) {
        free(p);
        snprintf(why, why_size, "out of memory for a one-way pass");
        return NULL;
    }
    memcpy((*o)->pk, owner, MT_KEYS_PUBLIC_BYTES);
    (*o)->passes++;
    memcpy(p->owner, owner, MT_KEYS_PUBLIC_BYTES);
    p->session = session;
    p->pass_id = pass_id;
    p->begin = -1;
    p->created_ms = mt_mono_ms();
    p->next = *chain;
    *chain = p;
    n->n_passes++;
    return p;
}

/* Takes p out of the table (lock held); its origin's count follows. */
static void pass_unlink_locked(mt_node *n, node_pass *p) {
    node_pass **pp = &n->pass_buckets[pass_bucket(n, p->owner, p->session, p->pass_id)];
    while (*pp != p) pp = &(*pp)->next;
    *pp = p->next;
    p->next = NULL;
    n->n_passes--;
    node_origin **o = origin_slot(n, p->owner), *gone = *o;
    if (gone && --gone->passes == 0) {
        *o = gone->next;
        free(gone);
    }
}

/* p failed at the stage `back` stages before the last (-1: none named). */
static void pass_fail_locked(node_pass *p, uint32_t code, int32_t back, const char *text) {
    if (p->code) return; /* the first failure is the one to report */
    p->code = code ? code : MT_PROTO_ERR_COMPUTE;
    p->back = back;
    snprintf(p->text, sizeof p->text, "%s", text);
}

/* Takes p out of the table when its AWAIT can be answered (lock held):
 * the caller answers it with pass_answer. */
static node_pass *pass_ready_locked(mt_node *n, node_pass *p) {
    if (!p->waiter || !(p->code || (p->begin >= 0 && p->got == p->end - p->begin))) return NULL;
    pass_unlink_locked(n, p);
    return p;
}

/* Answers p's AWAIT (no lock held) and frees p. */
static void pass_answer(mt_node *n, node_pass *p) {
    node_client *c = p->waiter;
    if (!p->code && memcmp(p->from, p->prev_pk, MT_KEYS_PUBLIC_BYTES) != 0)
        node_send_error(c, p->request_id, MT_PROTO_ERR_BAD_REQUEST,
                        "the rows of this pass came from another stage than the one named");
    else if (p->code)
        node_send_stage_error(c, p->request_id, p->code, p->back, p->text);
    else {
        mt_proto_msg r = {.type = MT_PROTO_STAGE_REPLY,
                          .request_id = p->request_id,
                          .dtype = p->dtype,
                          .n = p->end - p->begin,
                          .cols = p->cols,
                          .rows = p->rows};
        node_send_msg(c, &r);
        pthread_mutex_lock(&n->lock);
        n->stats.passes_answered++;
        pthread_mutex_unlock(&n->lock);
    }
    pthread_mutex_lock(&n->lock);
    node_client_unref_locked(c);
    pthread_mutex_unlock(&n->lock);
    free(p->rows);
    free(p);
}

/* The last stage's own failure of a one-way pass (or one reported to it). */
static void pass_fail(mt_node *n, const uint8_t *owner, uint64_t session, uint64_t pass_id,
                      uint32_t code, int32_t back, const char *text) {
    char why[256];
    pthread_mutex_lock(&n->lock);
    node_pass *p = pass_get_locked(n, owner, session, pass_id, true, why, sizeof why);
    if (p) pass_fail_locked(p, code, back, text);
    node_pass *done = p ? pass_ready_locked(n, p) : NULL;
    pthread_mutex_unlock(&n->lock);
    if (done) pass_answer(n, done);
    if (!p)
        mt_log_as(&n->log, MT_LOG_WARN,
                  "the failure of a one-way pass of session %016llx (%s) is not kept: %s",
                  (unsigned long long)session, text, why);
}

void node_oneway_await(node_client *c, mt_proto_msg *m) {
    mt_node *n = c->node;
    char why[256];
    pthread_mutex_lock(&n->lock);
    node_pass *p = pass_get_locked(n, c->pk, m->session, m->origin.pass_id, true, why, sizeof why);
    const char *bad = NULL;
    if (!p)
        bad = why;
    else if (p->waiter)
        bad = "this pass is awaited already";
    if (bad) {
        pthread_mutex_unlock(&n->lock);
        node_send_error(c, m->request_id, MT_PROTO_ERR_BUSY, "STAGE_AWAIT: %s", bad);
        mt_proto_msg_free(m);
        return;
    }
    if (p->begin < 0) p->begin = m->pass_begin, p->end = m->origin.pass_end;
    if (p->begin != m->pass_begin || p->end != m->origin.pass_end) {
        char text[200];
        snprintf(text, sizeof text,
                 "stage 0 before the last: the pass's rows are positions [%d, %d), not [%d, %d)",
                 p->begin, p->end, m->pass_begin, m->origin.pass_end);
        pass_fail_locked(p, MT_PROTO_ERR_BAD_REQUEST, 0, text);
    }
    c->refs++;
    p->waiter = c;
    p->request_id = m->request_id;
    memcpy(p->prev_pk, m->prev_pk, MT_KEYS_PUBLIC_BYTES);
    node_pass *done = pass_ready_locked(n, p);
    pthread_mutex_unlock(&n->lock);
    mt_proto_msg_free(m);
    if (done) pass_answer(n, done);
}

void node_oneway_abort(node_client *c, mt_proto_msg *m) {
    mt_node *n = c->node;
    char text[MT_PROTO_MAX_TEXT + 1];
    snprintf(text, sizeof text, "stage %d before the last: %.990s", m->back, m->text);
    mt_log_as(&n->log, MT_LOG_INFO, "one-way pass of session %016llx aborted by %s: %s",
              (unsigned long long)m->session, c->peer, text);
    pass_fail(n, m->origin.pk, m->session, m->origin.pass_id, m->code, m->back, text);
    mt_proto_msg_free(m);
}

void node_passes_expire(mt_node *n, int64_t now_ms, int64_t max_age_ms) {
    node_pass *old = NULL;
    pthread_mutex_lock(&n->lock);
    for (size_t b = 0; n->pass_buckets && n->n_passes > 0 && b < NODE_PASS_BUCKETS; b++)
        for (node_pass *p = n->pass_buckets[b], *next; p; p = next) {
            next = p->next;
            if (now_ms - p->created_ms < max_age_ms) continue;
            pass_unlink_locked(n, p);
            p->next = old;
            old = p;
        }
    pthread_mutex_unlock(&n->lock);
    for (node_pass *p = old, *next; p; p = next) {
        next = p->next;
        if (p->waiter) {
            pass_fail_locked(p, MT_PROTO_ERR_BUSY, -1,
                             "the pass did not arrive whole in time; replay it");
            pass_answer(n, p);
        } else {
            free(p->rows);
            free(p);
        }
    }
}

/* ---- aborts --------------------------------------------------------------------------- */

/* Tells the last stage of m's pass (its last hop; this node when m has no
 * hops) that the stage `back` stages before it failed the pass. */
static void abort_to_last(mt_node *n, const mt_proto_msg *m, int32_t back, uint32_t code,
                          const char *text) {
    if (m->n_hops == 0) {
        char t[MT_PROTO_MAX_TEXT + 1];
        snprintf(t, sizeof t, "stage %d before the last: %.990s", back, text);
        pass_fail(n, m->origin.pk, m->session, m->origin.pass_id, code, back, t);
        return;
    }
    mt_proto_msg a = {.type = MT_PROTO_CHAIN_ABORT,
                      .session = m->session,
                      .origin = m->origin,
                      .code = code,
                      .back = back};
    snprintf(a.text, sizeof a.text, "%s", text);
    const mt_proto_hop *last = &m->hops[m->n_hops - 1];
    char why[256];
    if (!hop_push(n, last->addr, last->pk, &a, why, sizeof why))
        mt_log_as(&n->log, MT_LOG_WARN,
                  "cannot tell the last stage %s that the pass of session %016llx failed (%s):"
                  " %s; its requester finds out when its wait runs out",
                  last->addr, (unsigned long long)m->session, text, why);
}

void node_oneway_fail(mt_node *n, const mt_proto_msg *m, uint32_t code, const char *fmt, ...) {
    char text[MT_PROTO_MAX_TEXT + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&n->lock);
    n->stats.errors++;
    pthread_mutex_unlock(&n->lock);
    mt_log_as(&n->log, MT_LOG_WARN, "one-way pass of session %016llx: error %u: %s",
              (unsigned long long)m->session, code, text);
    abort_to_last(n, m, m->n_hops, code, text);
}

void node_job_fail(mt_node *n, node_job *j, uint32_t code, const char *fmt, ...) {
    char text[MT_PROTO_MAX_TEXT + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (j->msg.oneway)
        node_oneway_fail(n, &j->msg, code, "%s", text);
    else
        node_send_error(j->client, j->msg.request_id, code, "%s", text);
}

/* ---- finished chunks ------------------------------------------------------------------ */

void node_oneway_chunk(mt_node *n, node_job *j, int32_t first, int32_t count) {
    const mt_proto_msg *m = &j->msg;
    const mt_proto_info *in = &n->info;
    if (m->n_hops == 0) { /* the last stage: into the pass table */
        const int32_t C = mt_proto_cols_out(in, m->layer_begin, m->layer_end);
        char why[256];
        pthread_mutex_lock(&n->lock);
        node_pass *p =
            pass_get_locked(n, m->origin.pk, m->session, m->origin.pass_id, true, why, sizeof why);
        /* the rows are sized from pass_end (the requester's, or its AWAIT's): at most one
         * STAGE_REPLY's rows, within this node's context, before anything is allocated */
        const int32_t most = mt_proto_max_rows(MT_PROTO_STAGE_REPLY, C, m->dtype);
        if (p && !p->code) {
            const int32_t p0 = m->pos[first];
            if (p->begin < 0) p->begin = p0, p->end = m->origin.pass_end;
            if (!p->rows &&
                (p->end > in->n_ctx || p->end <= p->begin || (int64_t)p->end - p->begin > most)) {
                char text[300];
                snprintf(text, sizeof text,
                         "stage 0 before the last: the pass's positions [%d, %d) (pass_end) are"
                         " not within this stage's context of %d positions and one reply of %d"
                         " rows; send longer passes as several",
                         p->begin, p->end, in->n_ctx, most);
                pass_fail_locked(p, MT_PROTO_ERR_BAD_REQUEST, 0, text);
            } else if (!p->rows) {
                p->cols = C;
                p->rows = malloc((size_t)(p->end - p->begin) * (size_t)C * sizeof(float));
                memcpy(p->from, j->client->pk, MT_KEYS_PUBLIC_BYTES);
                p->dtype = m->dtype;
            }
            if (p->code) {
                /* refused above */
            } else if (!p->rows) {
                pass_fail_locked(p, MT_PROTO_ERR_BUSY, 0, "stage 0 before the last: out of memory");
            } else if (p0 != p->begin + p->got || p0 + count > p->end ||
                       memcmp(p->from, j->client->pk, MT_KEYS_PUBLIC_BYTES) != 0) {
                pass_fail_locked(p, MT_PROTO_ERR_POSITION, 0,
                                 "stage 0 before the last: a chunk of the pass came out of order"
                                 " or from another stage");
            } else {
                memcpy(p->rows + (size_t)p->got * (size_t)C, j->out + (size_t)first * (size_t)C,
                       (size_t)count * (size_t)C * sizeof(float));
                p->got += count;
            }
        }
        node_pass *done = p ? pass_ready_locked(n, p) : NULL;
        pthread_mutex_unlock(&n->lock);
        if (done) pass_answer(n, done);
        if (!p)
            mt_log_as(&n->log, MT_LOG_WARN,
                      "positions [%d, %d) of a one-way pass of session %016llx are dropped: %s",
                      m->pos[first], m->pos[first] + count, (unsigned long long)m->session, why);
        return;
    }
    /* the next hop gets what its layers need: the stream and the checkpoints banked so far */
    const mt_proto_hop *h = &m->hops[0];
    const size_t W = (size_t)mt_proto_hidden_width(in);
    const int32_t cin = mt_proto_cols_in(in, h->layer_begin);
    mt_proto_msg f = {.type = MT_PROTO_STAGE_FORWARD,
                      .session = m->session,
                      .dtype = m->dtype,
                      .n = count,
                      .cols = cin,
                      .layer_begin = h->layer_begin,
                      .layer_end = h->layer_end,
                      .n_hops = m->n_hops - 1,
                      .oneway = true,
                      .speculative = m->speculative,
                      .prompt = !node_is_decode(m), /* its chunks stay a prompt's downstream */
                      .origin = m->origin};
    f.pos = malloc((size_t)count * sizeof(int32_t));
    f.rows = malloc((size_t)count * (size_t)cin * sizeof(float));
    if (f.n_hops) f.hops = malloc((size_t)f.n_hops * sizeof *f.hops);
    if (!f.pos || !f.rows || (f.n_hops && !f.hops)) {
        mt_proto_msg_free(&f);
        node_oneway_fail(n, m, MT_PROTO_ERR_BUSY, "out of memory for a chunk of %d tokens", count);
        return;
    }
    memcpy(f.pos, m->pos + first, (size_t)count * sizeof(int32_t));
    if (f.n_hops) memcpy(f.hops, m->hops + 1, (size_t)f.n_hops * sizeof *f.hops);
    mt_proto_pack_in(in, h->layer_begin, count, j->out + (size_t)first * W, f.rows);
    char why[256];
    if (!hop_push(n, h->addr, h->pk, &f, why, sizeof why))
        node_oneway_fail(n, m, MT_PROTO_ERR_BUSY,
                         "positions [%d, %d) cannot be passed on to next hop %s: %s", m->pos[first],
                         m->pos[first] + count, h->addr, why);
}

/* ---- stop ----------------------------------------------------------------------------- */

void node_hops_free(mt_node *n) {
    pthread_mutex_lock(&n->lock); /* n->stop is set: no hop is added any more */
    int k = n->n_hops;
    n->n_hops = 0;
    n->stats.hops = 0;
    pthread_mutex_unlock(&n->lock);
    for (int i = 0; i < k; i++) hop_end(n, n->hops[i]);
    node_passes_expire(n, INT64_MAX, 0);
    free(n->pass_buckets);
    free(n->origin_buckets); /* empty: each origin went with its last pass */
    n->pass_buckets = NULL;
    n->origin_buckets = NULL;
}

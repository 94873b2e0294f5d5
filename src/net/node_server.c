/* node_server.c - the node (include/moontail/node.h): loads a shard,
 * listens, runs a thread per connection that reads and decodes requests
 * (answering INFO itself and handing the rest to node_jobs.c, which checks
 * and queues them for the worker, node_worker.c), and starts and stops it
 * all. Threads and ownership: node_internal.h. */
#include "moontail/clock.h"
#include "moontail/shard.h"
#include "moontail/transport.h"
#include "node_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static bool is_request(uint16_t type) {
    return type == MT_PROTO_INFO || type == MT_PROTO_STAGE_FORWARD || type == MT_PROTO_EXPERT_RUN ||
           type == MT_PROTO_SESSION_END || type == MT_PROTO_STAGE_AWAIT ||
           type == MT_PROTO_CHAIN_ABORT;
}

/* One frame from a client: decode, validate, answer or queue. */
static void handle_frame(node_client *c, void *buf, size_t len) {
    mt_node *n = c->node;
    mt_error err = {{0}};
    mt_proto_msg m;
    pthread_mutex_lock(&n->lock);
    n->stats.requests++;
    pthread_mutex_unlock(&n->lock);
    int rc = mt_proto_decode(buf, len, &m, &err);
    free(buf);
    if (rc) {
        bool unknown =
            len >= MT_PROTO_HEADER_BYTES && strcmp(mt_proto_type_name(m.type), "unknown") == 0;
        node_send_error(c, m.request_id,
                        unknown ? MT_PROTO_ERR_UNKNOWN_TYPE : MT_PROTO_ERR_BAD_REQUEST, "%s",
                        err.msg);
        return;
    }
    if (!is_request(m.type)) {
        node_send_error(c, m.request_id, MT_PROTO_ERR_UNKNOWN_TYPE,
                        "%s is a reply, not a request; this node serves INFO, STAGE_FORWARD,"
                        " EXPERT_RUN, SESSION_END, STAGE_AWAIT and CHAIN_ABORT",
                        mt_proto_type_name(m.type));
        mt_proto_msg_free(&m);
        return;
    }
    if (m.type == MT_PROTO_INFO) {
        mt_proto_msg r = {.type = MT_PROTO_INFO_REPLY, .request_id = m.request_id, .info = n->info};
        node_send_msg(c, &r);
        return;
    }
    /* a one-way pass names its origin, whose sessions it runs on every stage: only the
     * origin itself, or a stage passing the pass on, may name it */
    if ((m.oneway || m.type == MT_PROTO_CHAIN_ABORT) && !c->forwards &&
        memcmp(m.origin.pk, c->pk, MT_KEYS_PUBLIC_BYTES) != 0) {
        node_send_error(c, m.request_id, MT_PROTO_ERR_BAD_REQUEST,
                        "%s: the origin key is not this connection's; only a stage (this node's"
                        " own key, or a node certificate) passes on another requester's one-way"
                        " pass",
                        mt_proto_type_name(m.type));
        mt_proto_msg_free(&m);
        return;
    }
    if (m.type == MT_PROTO_STAGE_AWAIT) {
        node_oneway_await(c, &m);
        return;
    }
    if (m.type == MT_PROTO_CHAIN_ABORT) {
        node_oneway_abort(c, &m);
        return;
    }
    uint32_t code;
    if (node_check_request(n, &m, &code, &err)) {
        if (m.oneway) /* no reply: the pass's last stage hears of it */
            node_oneway_fail(n, &m, code, "%s: %s", mt_proto_type_name(m.type), err.msg);
        else
            node_send_error(c, m.request_id, code, "%s: %s", mt_proto_type_name(m.type), err.msg);
        mt_proto_msg_free(&m);
        return;
    }
    if (!node_enqueue(c, &m) && m.oneway) {
        node_oneway_fail(n, &m, MT_PROTO_ERR_BUSY,
                         "cannot queue the request (out of memory, or the node is stopping)");
        mt_proto_msg_free(&m);
    }
}

/* Whether a configuration holds a listening socket (0 and MT_SOCK_NONE: none). */
static bool given(mt_sock s) {
    return s != 0 && s != MT_SOCK_NONE;
}

static bool stopping(mt_node *n) {
    pthread_mutex_lock(&n->lock);
    bool s = n->stop;
    pthread_mutex_unlock(&n->lock);
    return s;
}

static void *reader_main(void *arg) {
    node_client *c = arg;
    mt_node *n = c->node;
    mt_error err = {{0}};
    mt_keys me;
    node_identity(n, &me);
    mt_conn *conn = mt_conn_server(c->fd, &me, n->authorized, n->cfg.timeout_ms, &err);
    uint8_t own_pk[MT_KEYS_PUBLIC_BYTES];
    memcpy(own_pk, me.pk, sizeof own_pk);
    mt_keys_wipe(&me);
    pthread_mutex_lock(&n->lock);
    c->fd = MT_SOCK_NONE; /* owned (or closed) by the transport now */
    c->conn = conn;
    if (conn) n->stats.connections++;
    pthread_mutex_unlock(&n->lock);
    if (!conn) {
        if (!stopping(n))
            mt_log_as(&n->log, MT_LOG_WARN, "connection from %s refused: %s", c->peer, err.msg);
    } else {
        char ip[64];
        snprintf(ip, sizeof ip, "%.63s", c->peer);
        snprintf(c->peer, sizeof c->peer, "%.80s (%s)", mt_conn_peer_name(conn), ip);
        memcpy(c->pk, mt_conn_peer_key(conn), MT_KEYS_PUBLIC_BYTES);
        const mt_cert *pc = mt_conn_peer_cert(conn);
        c->forwards = memcmp(c->pk, own_pk, MT_KEYS_PUBLIC_BYTES) == 0 ||
                      (pc && pc->role == MT_CERT_ROLE_NODE);
        if (pc) {
            c->has_cert = true;
            c->cert = *pc;
        } else if (mt_conn_peer_cert_note(conn)[0]) {
            mt_log_as(&n->log, MT_LOG_WARN,
                      "%s is admitted by its authorized key; its certificate is not: %s", c->peer,
                      mt_conn_peer_cert_note(conn));
        }
        for (;;) {
            void *buf;
            size_t len;
            int rc = mt_conn_recv(conn, &buf, &len, &err);
            if (rc == 1) break;
            if (rc < 0) {
                if (mt_conn_is_open(conn) && !stopping(n)) continue; /* idle */
                if (!stopping(n))
                    mt_log_as(&n->log, MT_LOG_INFO, "closing connection from %s: %s", c->peer,
                              err.msg);
                break;
            }
            handle_frame(c, buf, len);
        }
    }
    pthread_mutex_lock(&n->lock);
    if (conn) n->stats.connections--;
    n->n_readers--;
    pthread_cond_broadcast(&n->done_cv);
    node_client_unref_locked(c);
    pthread_mutex_unlock(&n->lock);
    return NULL;
}

static void *accept_main(void *arg) {
    mt_node *n = arg;
    while (!stopping(n)) {
        mt_pollfd p[2] = {{.fd = n->listen_fd, .events = MT_POLLIN},
                          {.fd = mt_wake_sock(&n->wake), .events = MT_POLLIN}};
        int pr = mt_poll(p, 2, -1);
        if (pr < 0 && errno != EINTR) {
            mt_log_as(&n->log, MT_LOG_ERROR, "waiting for connections: poll: %s",
                      mt_sock_strerror(errno));
            mt_sleep_ms(100);
        }
        if (pr <= 0 || p[1].revents) continue; /* woken: the loop checks stop */
        mt_error err = {{0}};
        char peer[64];
        mt_sock fd = mt_accept_tcp(n->listen_fd, 50, peer, sizeof peer, &err);
        if (fd == MT_SOCK_NONE && errno == ETIMEDOUT) continue; /* the client gave up meanwhile */
        if (fd == MT_SOCK_NONE) {
            mt_log_as(&n->log, MT_LOG_ERROR, "accept: %s", err.msg);
            mt_sleep_ms(100);
            continue;
        }
        node_client *c = calloc(1, sizeof *c);
        pthread_mutex_lock(&n->lock);
        bool full = n->n_readers >= NODE_MAX_CLIENTS || n->stop || !c;
        pthread_mutex_unlock(&n->lock);
        if (full) {
            mt_log_as(&n->log, MT_LOG_WARN, "connection from %s refused: %d connections already",
                      peer, NODE_MAX_CLIENTS);
            free(c);
            mt_sock_close(fd);
            continue;
        }
        c->node = n;
        c->fd = fd;
        c->wake_fd = mt_sock_dup(fd);
        c->refs = 1;
        snprintf(c->peer, sizeof c->peer, "%s", peer);
        pthread_mutex_init(&c->send_lock, NULL);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_mutex_lock(&n->lock);
        c->next = n->clients;
        if (n->clients) n->clients->prev = c;
        n->clients = c;
        n->n_readers++;
        pthread_t th;
        if (pthread_create(&th, &attr, reader_main, c) != 0) {
            n->n_readers--;
            node_client_unref_locked(c); /* closes wake_fd; fd is still ours */
            mt_sock_close(fd);
            mt_log_as(&n->log, MT_LOG_ERROR, "connection from %s dropped: cannot start a thread",
                      peer);
        }
        pthread_mutex_unlock(&n->lock);
        pthread_attr_destroy(&attr);
    }
    return NULL;
}

/* ---- start / stop --------------------------------------------------------------------- */

static int fill_info(mt_node *n, mt_error *err) {
    const mt_model *m = n->model;
    mt_proto_info *in = &n->info;
    if (strlen(m->hp.arch_name) > MT_PROTO_ARCH_MAX)
        return mt_error_set(err, "architecture name '%s' is too long", m->hp.arch_name);
    snprintf(in->arch, sizeof in->arch, "%s", m->hp.arch_name);
    in->n_embd = m->hp.n_embd;
    in->n_layer = m->hp.n_layer;
    in->n_expert = m->hp.n_expert > 0 ? m->hp.n_expert : 0;
    in->n_expert_used = in->n_expert ? m->hp.n_expert_used : 0;
    in->res_block = m->hp.attn_res_block > 0 ? m->hp.attn_res_block : 0;
    in->n_embd_exp = m->hp.n_embd_exp;
    in->layer_begin = m->layer_begin;
    in->layer_end = m->layer_end;
    in->attention = m->has_attention;
    in->head = m->has_head;
    in->experts = m->has_experts && in->n_expert > 0 && m->layer_begin < m->layer_end;
    in->n_ctx = n->cfg.n_ctx;
    in->max_sessions = n->cfg.max_sessions;
    if (in->n_embd > MT_PROTO_MAX_EMBD || in->n_layer > MT_PROTO_MAX_LAYERS ||
        in->n_expert > MT_PROTO_MAX_EXPERTS || in->n_embd_exp > MT_PROTO_MAX_EMBD ||
        (int64_t)in->n_embd * (1 + m->hp.n_res_bank) > MT_PROTO_MAX_COLS)
        return mt_error_set(err, "the model is larger than the protocol's limits");
    if (in->experts) {
        in->held = malloc((size_t)in->n_expert * sizeof(int32_t));
        if (!in->held) return mt_error_set(err, "out of memory");
        for (int32_t e = 0; e < in->n_expert; e++)
            if (mt_model_expert_slot(m, e) >= 0) in->held[in->n_held++] = e;
    }
    mt_shard_info si;
    int rc = mt_shard_info_read(m->gguf, &si, err);
    if (rc == 0) {
        memcpy(in->source_id, si.source_id, sizeof in->source_id);
        mt_shard_info_free(&si);
    } else if (rc == MT_SHARD_NOT_A_SHARD) {
        if (mt_shard_source_id(m->gguf, in->source_id, NULL, err)) return -1;
    } else {
        return -1;
    }
    return 0;
}

/* Sessions and context from the memory offered (mt_node_size_sessions). */
static int size_sessions(mt_node *n, mt_error *err) {
    const mt_model *m = n->model;
    uint64_t fixed = 0, per_position = 0, weights = 0;
    if (m->has_attention && mt_kv_type_check(&m->hp, n->cfg.kv_type, err)) return -1;
    for (int32_t il = m->layer_begin; m->has_attention && il < m->layer_end; il++) {
        uint64_t f, p;
        mt_kv_layer_bytes(&m->hp, m->layers[il].is_kda, n->cfg.kv_type, &f, &p);
        fixed += f;
        per_position += p;
    }
    for (uint32_t i = 0; i < m->gguf->n_parts; i++) weights += m->gguf->parts[i].size;
    /* 0: no limit given (the commands pass 70% of the RAM available) */
    uint64_t memory = n->cfg.memory_bytes ? n->cfg.memory_bytes : UINT64_MAX / 2;
    bool capped = n->cfg.max_sessions > 0;
    if (mt_node_size_sessions(memory, weights, fixed, per_position, m->hp.n_ctx_train,
                              &n->cfg.n_ctx, &n->cfg.max_sessions, &n->kv_budget, err))
        return -1;
    n->kv_fixed = fixed;
    n->kv_per_position = per_position;
    n->stats.kv_budget = n->kv_budget;
    int typical = n->cfg.n_ctx < 4096 ? n->cfg.n_ctx : 4096;
    char count[96];
    if (capped)
        snprintf(count, sizeof count, "at most %d sessions (--max-sessions)", n->cfg.max_sessions);
    else
        snprintf(count, sizeof count, "room for %d sessions of %d positions (more when shorter)",
                 n->cfg.max_sessions, typical);
    mt_log_as(&n->log, MT_LOG_INFO,
              "context of %d positions, %s; %s KV cache %llu bytes a position (+%llu a session),"
              " %.1f MB for sessions after %.1f MB of weights",
              n->cfg.n_ctx, count, mt_kv_type_name(n->cfg.kv_type),
              (unsigned long long)per_position, (unsigned long long)fixed,
              (double)n->kv_budget / 1e6, (double)weights / 1e6);
    return 0;
}

mt_node *mt_node_start(const mt_node_config *cfg, mt_error *err) {
    if (!cfg->shard_path || !cfg->keys || !cfg->authorized) {
        if (given(cfg->listen_fd)) mt_sock_close(cfg->listen_fd); /* ours from the call on */
        mt_error_set(err, "node: a shard, a key and an authorized-keys set are required");
        return NULL;
    }
    mt_node *n = calloc(1, sizeof *n);
    if (!n) {
        if (given(cfg->listen_fd)) mt_sock_close(cfg->listen_fd);
        mt_error_set(err, "out of memory");
        return NULL;
    }
    n->cfg = *cfg;
    n->cfg.partners = NULL;
    n->cfg.shard_path = NULL;
    n->cfg.listen = NULL;
    n->keys = *cfg->keys;
    pthread_mutex_init(&n->id_lock, NULL);
    n->authorized = cfg->authorized;
    n->listen_fd =
        given(cfg->listen_fd) ? cfg->listen_fd : MT_SOCK_NONE; /* closed by mt_node_stop */
    n->wake = MT_WAKE_NONE;
    pthread_mutex_init(&n->lock, NULL);
    /* the worker's timed waits (session expiry, re-checks) measure the monotonic clock */
    mt_cond_init_mono(&n->work_cv);
    mt_cond_init_mono(&n->recheck_cv);
    pthread_cond_init(&n->client_cv, NULL);
    pthread_cond_init(&n->done_cv, NULL);
    snprintf(n->addr, sizeof n->addr, "(starting)");
    mt_log_source_init(&n->log, "node", n->addr, n->cfg.quiet);
    if (n->cfg.max_batch_tokens <= 0) n->cfg.max_batch_tokens = 4096;
    if (n->cfg.step_tokens <= 0) n->cfg.step_tokens = 32;
    if (n->cfg.prefill_chunk <= 0) n->cfg.prefill_chunk = 4;
    if (n->cfg.timeout_ms <= 0) n->cfg.timeout_ms = 30000;
    if (n->cfg.session_idle_ms <= 0) n->cfg.session_idle_ms = 600000;
    if (n->cfg.max_sessions > NODE_MAX_SESSIONS) {
        mt_error_set(err, "node: at most 2^20 sessions (--max-sessions)");
        goto fail;
    }
    /* given: a cap on the count; else memory alone decides (kv_make_room) */
    n->session_cap = n->cfg.max_sessions > 0 ? n->cfg.max_sessions : NODE_MAX_SESSIONS;
    if (!(n->cfg.corrupt_rate >= 0 && n->cfg.corrupt_rate <= 1)) {
        mt_error_set(err, "node: the corrupt-output rate must be in [0, 1]");
        goto fail;
    }
    if (!(n->model = mt_model_load(cfg->shard_path, err))) goto fail;
    if (node_verify_shard(n, cfg->shard_path, err)) goto fail;
    const mt_model *m = n->model;
    if (size_sessions(n, err)) goto fail;
    if (n->cfg.n_ctx > (1 << 24)) {
        mt_error_set(err, "node: a context of %d positions is over 2^24", n->cfg.n_ctx);
        goto fail;
    }
    if (m->layer_begin >= m->layer_end || (!m->has_attention && !m->has_experts)) {
        mt_error_set(err,
                     "%s holds no layers to serve (a head-only shard stays with the requester)",
                     cfg->shard_path);
        goto fail;
    }
    if (fill_info(n, err)) goto fail;
    if (!(n->pool = mt_pool_create(cfg->threads))) {
        mt_error_set(err, "cannot start %d compute threads", cfg->threads);
        goto fail;
    }
    if (node_sessions_init(&n->sessions)) {
        mt_error_set(err, "out of memory");
        goto fail;
    }
    if (node_passes_init(n, err)) goto fail;
    if (node_setup_experts(n, cfg, err)) goto fail;
    const char *listen = cfg->listen ? cfg->listen : "127.0.0.1:0";
    if (n->listen_fd == MT_SOCK_NONE && (n->listen_fd = mt_listen_tcp(listen, err)) == MT_SOCK_NONE)
        goto fail;
    if (mt_wake_init(&n->wake) != 0) {
        mt_error_set(err, "cannot make the accept thread's wake: %s", mt_sock_strerror(errno));
        goto fail;
    }
    const char *colon = strrchr(listen, ':');
    int hl = colon ? (int)(colon - listen) : 0;
    snprintf(n->addr, sizeof n->addr, "%.*s:%d", hl ? hl : 9, hl ? listen : "127.0.0.1",
             mt_listen_port(n->listen_fd));
    mt_log_source_init(&n->log, "node", n->addr, n->cfg.quiet);
    if (pthread_create(&n->worker_thread, NULL, node_worker_main, n) != 0) {
        mt_error_set(err, "cannot start the worker thread");
        goto fail;
    }
    n->worker_started = true;
    if (pthread_create(&n->accept_thread, NULL, accept_main, n) != 0) {
        mt_error_set(err, "cannot start the accept thread");
        goto fail;
    }
    n->accept_started = true;
    if (node_recheck_start(n, err)) goto fail;
    return n;
fail:
    mt_error_prefix(err, "node");
    mt_node_stop(n);
    return NULL;
}

void mt_node_stop(mt_node *n) {
    if (!n) return;
    pthread_mutex_lock(&n->lock);
    n->stop = true;
    pthread_cond_broadcast(&n->work_cv);
    pthread_cond_broadcast(&n->client_cv);
    pthread_mutex_unlock(&n->lock);
    mt_wake_signal(&n->wake);
    if (n->accept_started) pthread_join(n->accept_thread, NULL);
    if (n->worker_started) pthread_join(n->worker_thread, NULL);
    node_recheck_stop(n);
    if (n->worker_started) {
        mt_node_stats st;
        mt_node_get_stats(n, &st);
        const mt_node_stats *s = &st;
        mt_log_as(&n->log, MT_LOG_INFO,
                  "stopping: %llu tokens in %llu stage batches (at most %d requests in one),"
                  " %llu expert batches (at most %d requests in one); sessions: %d held,"
                  " %llu expired unused, %llu evicted",
                  (unsigned long long)s->served_tokens, (unsigned long long)s->stage_batches,
                  s->max_stage_requests, (unsigned long long)s->expert_batches,
                  s->max_expert_requests, s->sessions, (unsigned long long)s->expired,
                  (unsigned long long)s->evictions);
    }
    pthread_mutex_lock(&n->lock);
    for (node_client *c = n->clients; c; c = c->next)
        if (c->wake_fd != MT_SOCK_NONE) mt_sock_shutdown(c->wake_fd, MT_SHUT_RDWR);
    while (n->n_readers > 0) pthread_cond_wait(&n->done_cv, &n->lock);
    pthread_mutex_unlock(&n->lock);
    if (n->listen_fd != MT_SOCK_NONE) mt_sock_close(n->listen_fd);
    mt_wake_destroy(&n->wake);
    node_sessions_free(&n->sessions);
    free(n->pace_due);
    if (n->use_dispatch) mt_expert_dispatch_free(&n->dispatch); /* its threads, then partners */
    node_partners_free(n);
    node_hops_free(n);
    free(n->info.held);
    mt_pool_free(n->pool);
    mt_model_free(n->model);
    mt_keys_wipe(&n->keys);
    pthread_mutex_destroy(&n->id_lock);
    pthread_cond_destroy(&n->work_cv);
    pthread_cond_destroy(&n->recheck_cv);
    pthread_cond_destroy(&n->client_cv);
    pthread_cond_destroy(&n->done_cv);
    pthread_mutex_destroy(&n->lock);
    free(n);
}

const char *mt_node_addr(const mt_node *n) {
    return n->addr;
}
const mt_proto_info *mt_node_info(const mt_node *n) {
    return &n->info;
}

void mt_node_get_stats(mt_node *n, mt_node_stats *s) {
    pthread_mutex_lock(&n->lock);
    *s = n->stats;
    pthread_mutex_unlock(&n->lock);
}

int mt_node_set_cert(mt_node *n, const uint8_t *cert, size_t len, mt_error *err) {
    pthread_mutex_lock(&n->id_lock);
    int rc = mt_keys_set_cert(&n->keys, cert, len, err);
    pthread_mutex_unlock(&n->id_lock);
    if (rc) {
        mt_error_prefix(err, "node: the new certificate is refused (the old one stays)");
        return -1;
    }
    mt_cert c;
    if (cert && len && mt_cert_decode(cert, len, &c, NULL) == 0) {
        char until[32];
        mt_cert_time_str(c.not_after, until);
        mt_log_as(&n->log, MT_LOG_INFO, "certificate replaced: serial %llu, valid until %s",
                  (unsigned long long)c.serial, until);
    } else {
        mt_log_as(&n->log, MT_LOG_INFO, "certificate removed");
    }
    return 0;
}

void mt_node_hold(mt_node *n, bool hold) {
    pthread_mutex_lock(&n->lock);
    n->held = hold;
    pthread_cond_broadcast(&n->work_cv);
    pthread_mutex_unlock(&n->lock);
}

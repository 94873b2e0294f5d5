/* route.c - the requester's route executor (route.h): the head and an
 * optional backbone run locally, remote stages run the other layers, remote
 * expert servers run the backbone's routed experts (called concurrently,
 * each reconnected once when its connection broke: expert_remote.h);
 * sessions keep their token history so a stage that lost them can be
 * replayed from position 0; sampled stages are spot-checked on a replica
 * (route_check.h). Route files are read in route_file.c. */
#include "moontail/route.h"
#include "expert_remote.h"
#include "route_check.h"
#include "moontail/clock.h"
#include "route_test_pause.h"
#include "moontail/expert_dispatch.h"
#include "moontail/remote.h"
#include "moontail/shard.h"

#include <jansson.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- structures ------------------------------------------------------------------- */

typedef struct route_stage {
    mt_route_peer peer;
    mt_remote *r;
    int32_t layer_begin, layer_end;
    bool failed; /* the last call through it failed (also with an ERROR reply) */
    /* the slowest replies seen (slowly forgotten): a one-token step, and a prompt pass per
     * token; 0 until one was seen (route_call_timeout) */
    double step_ms, pass_ms_per_token;
} route_stage;

/* How long a call through a stage may wait for its reply: ADAPT_FACTOR times the slowest
 * such call seen so far plus ADAPT_SLACK_MS, at least ADAPT_FLOOR_MS and at most the
 * configured call timeout, which also applies until a call of that kind was seen. A node
 * that hangs (SIGSTOP, a frozen machine) then costs a user a few seconds, not the whole
 * configured wait, and the request fails over as after any other broken call. */
#define ADAPT_FACTOR   5.0
#define ADAPT_SLACK_MS 1000.0
#define ADAPT_FLOOR_MS 3000.0
#define ADAPT_FORGET   0.95 /* each new observation keeps 95% of the old maximum */

struct mt_route {
    mt_keys keys;
    mt_proto_dtype wire;
    int ubatch, timeout_ms, call_timeout_ms;
    bool fixed_call_timeout;
    mt_kv_type kv_type; /* the backbone's cache */
    mt_model *head;
    bool head_borrowed; /* cfg->head_model: the caller frees it */
    mt_model *backbone; /* == head when the same file; NULL: none */
    int32_t local_end;  /* the backbone runs layers [0, local_end) */
    char source_id[MT_SHARD_HASH_HEX];
    route_stage *stages;
    int n_stages;
    expert_remote *experts; /* (n_experts) expert servers, reconnected once when broken */
    int n_experts;
    mt_expert_dispatch dispatch;
    bool use_dispatch;
    mt_pool *pool;
    int32_t max_ctx;
    int replays;
    bool chain;
    bool no_reconnect;
    mt_proto_hop *hops;         /* (n_stages - 1) the later stages, when chain */
    mt_route_checker *checkers; /* (n_checkers) nodes that can check a stage */
    int n_checkers;
    double check_rate;
    mt_route_check_stats *check_stats; /* the caller's, or own_stats */
    mt_route_check_stats own_stats;
    bool has_mismatch;
    mt_route_mismatch mismatch; /* the last one */
    pthread_mutex_t lock;
};

struct mt_route_session {
    uint64_t id;
    int32_t n_ctx;
    int32_t n_past;
    int32_t *tokens;      /* (n_ctx) history */
    mt_kv_cache *kv;      /* the backbone's layers; NULL without one */
    route_check **checks; /* (n_stages) the stage's spot-check, NULL: not checked */
    int32_t step;         /* mt_route_eval calls so far */
    bool speculative;     /* the pass being sent is MT_PROTO_FLAG_SPECULATIVE */
};

/* ---- opening a route ------------------------------------------------------------------ */

static int model_source_id(const mt_model *m, char out[MT_SHARD_HASH_HEX], mt_error *err) {
    mt_shard_info si;
    int rc = mt_shard_info_read(m->gguf, &si, err);
    if (rc == 0) {
        memcpy(out, si.source_id, MT_SHARD_HASH_HEX);
        mt_shard_info_free(&si);
        return 0;
    }
    if (rc == MT_SHARD_NOT_A_SHARD) return mt_shard_source_id(m->gguf, out, NULL, err);
    return -1;
}

/* A node's INFO must describe the same model as the head. */
static int check_node(const mt_route *r, mt_remote *rem, const char *role, mt_error *err) {
    const mt_proto_info *in = mt_remote_info(rem);
    const mt_hparams *hp = &r->head->hp;
    if (strcmp(in->source_id, r->source_id) != 0)
        return mt_error_set(err,
                            "%s %s holds another model (source_id %.16s..., the head's is"
                            " %.16s...)",
                            role, mt_remote_addr(rem), in->source_id, r->source_id);
    if (in->n_embd != hp->n_embd || in->n_layer != hp->n_layer ||
        mt_proto_hidden_width(in) != hp->n_hidden || in->n_embd_exp != hp->n_embd_exp)
        return mt_error_set(err,
                            "%s %s: n_embd %d / %d layers / hidden width %d / expert width %d"
                            " differ from the head's %d / %d / %d / %d",
                            role, mt_remote_addr(rem), in->n_embd, in->n_layer,
                            mt_proto_hidden_width(in), in->n_embd_exp, hp->n_embd, hp->n_layer,
                            hp->n_hidden, hp->n_embd_exp);
    return 0;
}

/* (Re)connects a stage; handshake_ms (<= 0: the route's connect timeout) bounds the
 * connect and handshake. */
static int connect_stage(mt_route *r, route_stage *st, int handshake_ms, mt_error *err) {
    mt_remote *rem =
        mt_remote_connect(st->peer.addr, st->peer.pk, &r->keys,
                          handshake_ms > 0 ? handshake_ms : r->timeout_ms, r->call_timeout_ms, err);
    if (!rem) return -1;
    const mt_proto_info *in = mt_remote_info(rem);
    int rc = check_node(r, rem, "stage", err);
    if (rc == 0 && !in->attention)
        rc = mt_error_set(err, "stage %s holds no attention part: it is an expert server",
                          st->peer.addr);
    if (rc == 0 && st->r && (in->layer_begin != st->layer_begin || in->layer_end != st->layer_end))
        rc = mt_error_set(err, "stage %s came back holding layers [%d, %d) instead of [%d, %d)",
                          st->peer.addr, in->layer_begin, in->layer_end, st->layer_begin,
                          st->layer_end);
    if (rc) {
        mt_remote_close(rem);
        return -1;
    }
    mt_remote_close(st->r);
    st->r = rem;
    st->layer_begin = in->layer_begin;
    st->layer_end = in->layer_end;
    return 0;
}

/* The backbone's routed experts: its own, plus the expert servers'. */
static int setup_experts(mt_route *r, const mt_route_config *cfg, mt_error *err) {
    const mt_model *bb = r->backbone;
    bool moe = false;
    for (int32_t il = 0; bb && il < r->local_end; il++) moe |= bb->layers[il].is_moe;
    if (cfg->n_experts > 0 && !moe)
        return mt_error_set(err, "expert servers are given but the route has no local MoE layers"
                                 " (give a backbone shard)");
    for (int i = 0; i < cfg->n_experts; i++) {
        const mt_route_peer *pe = &cfg->experts[i];
        bool some_layers = pe->layer_end > pe->layer_begin;
        if (some_layers && (pe->layer_begin < 0 || pe->layer_end > r->local_end))
            return mt_error_set(err,
                                "expert server %s: layers [%d, %d) are outside the backbone's"
                                " [0, %d)",
                                pe->addr, pe->layer_begin, pe->layer_end, r->local_end);
        expert_remote_config xc = {.role = "expert server",
                                   .addr = pe->addr,
                                   .pk = pe->pk,
                                   .keys = &r->keys,
                                   .timeout_ms = r->timeout_ms,
                                   .call_timeout_ms = r->call_timeout_ms,
                                   .wire = r->wire,
                                   .source_id = r->source_id,
                                   .n_embd = r->head->hp.n_embd,
                                   .n_embd_exp = r->head->hp.n_embd_exp,
                                   .n_layer = r->head->hp.n_layer,
                                   .layer_begin = some_layers ? pe->layer_begin : 0,
                                   .layer_end = some_layers ? pe->layer_end : r->local_end,
                                   .no_reconnect = cfg->no_reconnect};
        if (expert_remote_open(&r->experts[i], &xc, err)) {
            if (cfg->failed_addr) snprintf(cfg->failed_addr, 128, "%s", pe->addr);
            return -1;
        }
        r->n_experts++;
    }
    if (!moe) return 0;
    if (cfg->n_experts == 0 && bb->has_experts && bb->n_local_experts == bb->hp.n_expert) return 0;
    if (mt_expert_dispatch_init(&r->dispatch, &bb->hp, err)) return -1;
    r->use_dispatch = true;
    if (bb->has_experts && mt_expert_dispatch_add_model(&r->dispatch, bb, err)) return -1;
    for (int i = 0; i < r->n_experts; i++) {
        expert_remote *x = &r->experts[i];
        const mt_route_peer *pe = &cfg->experts[i];
        /* the experts to use it for: what it holds, within the peer's range if one is given */
        int32_t *ids = malloc((size_t)(x->n_held > 0 ? x->n_held : 1) * sizeof *ids), n = 0;
        if (!ids) return mt_error_set(err, "out of memory");
        for (int32_t k = 0; k < x->n_held; k++)
            if (pe->expert_end <= pe->expert_begin ||
                (x->held[k] >= pe->expert_begin && x->held[k] < pe->expert_end))
                ids[n++] = x->held[k];
        int rc = mt_expert_dispatch_add_layers(&r->dispatch, expert_remote_backend(x),
                                               x->layer_begin, x->layer_end, ids, n, err);
        free(ids);
        if (rc) {
            mt_error_prefix(err, "expert server %s", x->addr);
            return -1;
        }
    }
    for (int32_t il = 0; il < r->local_end; il++) {
        if (!bb->layers[il].is_moe) continue;
        for (int32_t e = 0; e < r->dispatch.n_expert; e++)
            if (mt_expert_dispatch_owner(&r->dispatch, il, e) < 0)
                return mt_error_set(err,
                                    "routed expert %d of layer %d is held neither by the"
                                    " backbone nor by an expert server",
                                    e, il);
    }
    return 0;
}

mt_route *mt_route_open(const mt_route_config *cfg, mt_error *err) {
    if (!cfg->head || !cfg->keys) {
        mt_error_set(err, "route: a head shard and the requester's key are required");
        return NULL;
    }
    mt_route *r = calloc(1, sizeof *r);
    if (!r) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&r->lock, NULL);
    r->keys = *cfg->keys;
    r->wire = cfg->wire;
    r->ubatch = cfg->ubatch > 0 ? cfg->ubatch : 512;
    r->kv_type = cfg->kv_type;
    r->timeout_ms = cfg->timeout_ms;
    r->no_reconnect = cfg->no_reconnect;
    r->call_timeout_ms = cfg->call_timeout_ms > 0 ? cfg->call_timeout_ms : 120000;
    r->fixed_call_timeout = cfg->fixed_call_timeout;
    if (cfg->wire != MT_PROTO_F32 && cfg->wire != MT_PROTO_BF16) {
        mt_error_set(err, "unknown wire dtype %d", (int)cfg->wire);
        goto fail;
    }
    if (cfg->head_model) {
        r->head = (mt_model *)cfg->head_model; /* borrowed: never freed here */
        r->head_borrowed = true;
    } else if (!(r->head = mt_model_load(cfg->head, err))) {
        goto fail;
    }
    if (!r->head->has_head) {
        mt_error_set(err, "%s does not hold the head (token embeddings and output)", cfg->head);
        goto fail;
    }
    if (model_source_id(r->head, r->source_id, err)) goto fail;
    if (cfg->backbone) {
        if (strcmp(cfg->backbone, cfg->head) == 0) {
            r->backbone = r->head;
        } else if (!(r->backbone = mt_model_load(cfg->backbone, err))) {
            goto fail;
        } else {
            char sid[MT_SHARD_HASH_HEX];
            if (model_source_id(r->backbone, sid, err)) goto fail;
            if (strcmp(sid, r->source_id) != 0) {
                mt_error_set(err, "backbone %s is another model than head %s", cfg->backbone,
                             cfg->head);
                goto fail;
            }
        }
        if (!r->backbone->has_attention || r->backbone->layer_begin != 0 ||
            r->backbone->layer_end <= 0) {
            mt_error_set(err,
                         "backbone %s must hold the attention parts of layers [0, a)"
                         " (it holds %s of layers [%d, %d))",
                         cfg->backbone, r->backbone->has_attention ? "attention" : "no attention",
                         r->backbone->layer_begin, r->backbone->layer_end);
            goto fail;
        }
        r->local_end = r->backbone->layer_end;
    }
    if (!(r->pool = mt_pool_create(cfg->threads))) {
        mt_error_set(err, "cannot start %d threads", cfg->threads);
        goto fail;
    }
    r->max_ctx = r->head->hp.n_ctx_train > 0 ? r->head->hp.n_ctx_train : 4096;
    if ((cfg->n_experts && !(r->experts = calloc((size_t)cfg->n_experts, sizeof *r->experts))) ||
        (cfg->n_stages && !(r->stages = calloc((size_t)cfg->n_stages, sizeof *r->stages)))) {
        mt_error_set(err, "out of memory");
        goto fail;
    }
    if (setup_experts(r, cfg, err)) goto fail;
    r->check_stats = cfg->check_stats ? cfg->check_stats : &r->own_stats;
    r->check_rate = cfg->check_rate;
    if (!(r->check_rate >= 0 && r->check_rate <= 1)) {
        mt_error_set(err, "the spot-check rate %g is not a fraction in [0, 1]", cfg->check_rate);
        goto fail;
    }
    if (cfg->n_checkers > 0) {
        if (!(r->checkers = calloc((size_t)cfg->n_checkers, sizeof *r->checkers))) {
            mt_error_set(err, "out of memory");
            goto fail;
        }
        for (int i = 0; i < cfg->n_checkers; i++) {
            if (cfg->checkers[i].stage < 0 || cfg->checkers[i].stage >= cfg->n_stages) {
                mt_error_set(err, "checker %s is for stage %d, but the route has %d stages",
                             cfg->checkers[i].peer.addr, cfg->checkers[i].stage, cfg->n_stages);
                goto fail;
            }
            r->checkers[r->n_checkers++] = cfg->checkers[i];
        }
    }
    r->chain = cfg->chain;
    if (r->chain && cfg->n_stages > 1) {
        if (cfg->n_stages - 1 > MT_PROTO_MAX_HOPS) {
            mt_error_set(err, "a chain of %d stages has more than %d next hops", cfg->n_stages,
                         MT_PROTO_MAX_HOPS);
            goto fail;
        }
        for (int i = 1; i < cfg->n_stages; i++)
            if (strlen(cfg->stages[i].addr) > MT_PROTO_HOP_ADDR_MAX) {
                mt_error_set(err, "stage %d: address %s is too long to be a next hop", i,
                             cfg->stages[i].addr);
                goto fail;
            }
        if (!(r->hops = calloc((size_t)cfg->n_stages - 1, sizeof *r->hops))) {
            mt_error_set(err, "out of memory");
            goto fail;
        }
    }
    int32_t next = r->local_end;
    for (int i = 0; i < cfg->n_stages; i++) {
        route_stage *st = &r->stages[i];
        st->peer = cfg->stages[i];
        r->n_stages++;
        if (connect_stage(r, st, 0, err)) {
            if (cfg->failed_addr) snprintf(cfg->failed_addr, 128, "%s", st->peer.addr);
            goto fail;
        }
        if (st->layer_begin != next) {
            mt_error_set(err,
                         "stage %d (%s) holds layers [%d, %d) but layer %d comes next;"
                         " list stages in layer order without gaps or overlaps",
                         i, st->peer.addr, st->layer_begin, st->layer_end, next);
            goto fail;
        }
        next = st->layer_end;
        int32_t nc = mt_remote_info(st->r)->n_ctx;
        if (nc < r->max_ctx) r->max_ctx = nc;
    }
    if (next != r->head->hp.n_layer) {
        mt_error_set(err, "layers [%d, %d) are not covered by any stage", next,
                     r->head->hp.n_layer);
        goto fail;
    }
    return r;
fail:
    mt_error_prefix(err, "route");
    mt_route_close(r);
    return NULL;
}

void mt_route_close(mt_route *r) {
    if (!r) return;
    if (r->use_dispatch) mt_expert_dispatch_free(&r->dispatch); /* its threads, then servers */
    for (int i = 0; i < r->n_stages; i++) mt_remote_close(r->stages[i].r);
    for (int i = 0; i < r->n_experts; i++) expert_remote_close(&r->experts[i]);
    free(r->stages);
    free(r->experts);
    free(r->hops);
    free(r->checkers);
    mt_pool_free(r->pool);
    if (r->backbone != r->head) mt_model_free(r->backbone);
    if (!r->head_borrowed) mt_model_free(r->head);
    mt_keys_wipe(&r->keys);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

const mt_model *mt_route_head(const mt_route *r) {
    return r->head;
}
int32_t mt_route_max_ctx(const mt_route *r) {
    return r->max_ctx;
}
int mt_route_replays(const mt_route *r) {
    return r->replays;
}

void mt_route_set_check_rate(mt_route *r, double rate) {
    pthread_mutex_lock(&r->lock);
    if (rate >= 0 && rate <= 1) r->check_rate = rate;
    pthread_mutex_unlock(&r->lock);
}

bool mt_route_last_mismatch(const mt_route *r, mt_route_mismatch *out) {
    if (r->has_mismatch && out) *out = r->mismatch;
    return r->has_mismatch;
}

int mt_route_failed_peers(const mt_route *r, char (*addrs)[128], int max) {
    int n = 0;
    for (int i = 0; i < r->n_stages && n < max; i++)
        if (!r->stages[i].r || !mt_remote_is_open(r->stages[i].r) || r->stages[i].failed)
            snprintf(addrs[n++], 128, "%s", r->stages[i].peer.addr);
    for (int i = 0; i < r->n_experts && n < max; i++)
        if (!r->experts[i].r || !mt_remote_is_open(r->experts[i].r))
            snprintf(addrs[n++], 128, "%s", r->experts[i].addr);
    return n;
}

/* ---- sessions --------------------------------------------------------------------------- */

/* Gives each stage that has checkers, with probability check_rate, a shadow
 * session on one of them picked at random (route_check.h). A check that
 * cannot start is counted as dropped; the session goes on unchecked there. */
static void sample_checks(mt_route *r, mt_route_session *s) {
    if (!(s->checks = calloc((size_t)r->n_stages, sizeof *s->checks))) return;
    for (int i = 0; i < r->n_stages; i++) {
        int n = 0;
        for (int k = 0; k < r->n_checkers; k++) n += r->checkers[k].stage == i;
        if (n == 0) continue;
        const uint32_t scale = 1u << 30;
        if (r->check_rate < 1 && randombytes_uniform(scale) >= r->check_rate * scale) continue;
        uint32_t pick = randombytes_uniform((uint32_t)n);
        const mt_route_checker *c = NULL;
        for (int k = 0; k < r->n_checkers && !c; k++)
            if (r->checkers[k].stage == i && pick-- == 0) c = &r->checkers[k];
        route_check_config cc = {.peer = c->peer,
                                 .keys = &r->keys,
                                 .layer_begin = r->stages[i].layer_begin,
                                 .layer_end = r->stages[i].layer_end,
                                 .width = r->head->hp.n_hidden,
                                 .wire = r->wire,
                                 .timeout_ms = r->timeout_ms > 0 ? r->timeout_ms : 10000,
                                 .call_timeout_ms = r->call_timeout_ms};
        mt_error e = {{0}};
        if ((s->checks[i] = route_check_start(&cc, &e))) {
            r->check_stats->checks++;
        } else {
            r->check_stats->dropped++;
            snprintf(r->check_stats->last_dropped, sizeof r->check_stats->last_dropped, "%.399s",
                     e.msg);
        }
    }
}

mt_route_session *mt_route_session_new(mt_route *r, int32_t n_ctx, mt_error *err) {
    if (n_ctx <= 0) n_ctx = r->max_ctx;
    if (n_ctx > r->max_ctx) {
        mt_error_set(err, "a context of %d positions is more than the route allows (%d)", n_ctx,
                     r->max_ctx);
        return NULL;
    }
    mt_route_session *s = calloc(1, sizeof *s);
    if (!s || !(s->tokens = malloc((size_t)n_ctx * sizeof(int32_t)))) {
        free(s);
        mt_error_set(err, "out of memory");
        return NULL;
    }
    randombytes_buf(&s->id, sizeof s->id);
    s->n_ctx = n_ctx;
    if (r->backbone &&
        !(s->kv = mt_kv_cache_new(r->backbone, 0, r->local_end, n_ctx, r->kv_type, err))) {
        free(s->tokens);
        free(s);
        return NULL;
    }
    if (r->n_checkers > 0 && r->check_rate > 0 && !(r->chain && r->n_stages > 1))
        sample_checks(r, s);
    return s;
}

void mt_route_session_end(mt_route *r, mt_route_session *s) {
    if (!s) return;
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->n_stages; i++)
        if (r->stages[i].r) mt_remote_session_end(r->stages[i].r, s->id, NULL, NULL);
    pthread_mutex_unlock(&r->lock);
    for (int i = 0; s->checks && i < r->n_stages; i++) route_check_end(s->checks[i]);
    free(s->checks);
    mt_kv_cache_free(s->kv);
    free(s->tokens);
    free(s);
}

const int32_t *mt_route_session_tokens(const mt_route_session *s, int32_t *n_past) {
    if (n_past) *n_past = s->n_past;
    return s->tokens;
}
uint64_t mt_route_session_id(const mt_route_session *s) {
    return s->id;
}

/* ---- evaluation -------------------------------------------------------------------------- */

enum { PASS_OK = 0, PASS_FAIL = -1, PASS_REPLAY = 1 };

/* After a pass: waits for the spot-checks it sent (sent[i]: stage i's) and
 * compares. The checkers had the pass's whole duration to answer; they get
 * 2 s plus that duration again, then their check is dropped (a slow checker
 * must not hold the generation up for long). A difference fails the pass
 * (when it had not failed already) and is kept for mt_route_last_mismatch. */
static int finish_checks(mt_route *r, mt_route_session *s, const bool *sent,
                         const int64_t *reply_ms, int32_t p0, int32_t n, double t_start, int rc,
                         mt_error *err) {
    const double now = mt_mono_ms_frac(), deadline = now + 2000 + (now - t_start);
    mt_route_check_stats *st = r->check_stats;
    for (int i = 0; i < r->n_stages; i++) {
        if (!sent[i]) continue;
        route_check_result res;
        route_check_outcome o = route_check_wait(s->checks[i], deadline, &res);
        if (o == ROUTE_CHECK_LOST) {
            st->dropped++;
            snprintf(st->last_dropped, sizeof st->last_dropped,
                     "the check of layers [%d, %d) on %.128s was dropped: %.200s",
                     r->stages[i].layer_begin, r->stages[i].layer_end,
                     route_check_addr(s->checks[i]), res.why);
            route_check_end(s->checks[i]);
            s->checks[i] = NULL;
            continue;
        }
        if (rc != PASS_OK) continue; /* the stage's output is not used anyway */
        if (o == ROUTE_CHECK_SAME) {
            st->compared++;
            continue;
        }
        st->mismatches++;
        mt_route_mismatch *m = &r->mismatch;
        memset(m, 0, sizeof *m);
        m->stage = i;
        snprintf(m->checked_addr, sizeof m->checked_addr, "%s", r->stages[i].peer.addr);
        snprintf(m->checker_addr, sizeof m->checker_addr, "%s", route_check_addr(s->checks[i]));
        memcpy(m->checked_pk, r->stages[i].peer.pk, sizeof m->checked_pk);
        memcpy(m->checker_pk, route_check_pk(s->checks[i]), sizeof m->checker_pk);
        m->layer_begin = r->stages[i].layer_begin;
        m->layer_end = r->stages[i].layer_end;
        m->pos = p0;
        m->n = n;
        m->session = s->id;
        m->step = s->step;
        memcpy(m->checked_hash, res.main_hash, sizeof m->checked_hash);
        memcpy(m->checker_hash, res.check_hash, sizeof m->checker_hash);
        m->reply_unix_ms = reply_ms[i];
        m->detected_unix_ms = mt_wall_ms();
        r->has_mismatch = true;
        rc = mt_error_set(err,
                          "spot check: stage %s and checker %s computed layers [%d, %d) of"
                          " positions [%d, %d) differently",
                          m->checked_addr, m->checker_addr, m->layer_begin, m->layer_end, p0,
                          p0 + n);
    }
    return rc;
}

/* One pass of tokens [p0, p0 + n) (token ids in `tokens`) through the route;
 * hidden receives the last layer's output. PASS_REPLAY when a stage lost the
 * session or its connection (and came back): the caller replays from 0.
 * Stages with a spot-check get the same input rows on their checker, whose
 * output is compared with theirs once the pass is through (finish_checks). */
static int route_call_timeout(const mt_route *r, const route_stage *st, int32_t n) {
    const double cap = r->call_timeout_ms;
    if (r->fixed_call_timeout) return (int)cap;
    double expect = n == 1 ? st->step_ms : st->pass_ms_per_token * n;
    if (n > 1 && expect > 0 && st->step_ms > expect) expect = st->step_ms;
    if (expect <= 0) return (int)cap;
    double t = ADAPT_FACTOR * expect + ADAPT_SLACK_MS;
    t = t < ADAPT_FLOOR_MS ? ADAPT_FLOOR_MS : t > cap ? cap : t;
    return (int)t;
}

static void route_call_seen(route_stage *st, int32_t n, double ms) {
    if (n == 1)
        st->step_ms = ms > ADAPT_FORGET * st->step_ms ? ms : ADAPT_FORGET * st->step_ms;
    else if (n > 1) {
        double per = ms / n;
        st->pass_ms_per_token =
            per > ADAPT_FORGET * st->pass_ms_per_token ? per : ADAPT_FORGET * st->pass_ms_per_token;
    }
}

/* ---- one-way passes (route.h mt_route_config.chain; proto.h) -------------------------- */

typedef struct probe_job {
    mt_route *r;
    route_stage *st;
    bool alive;
    char why[300];
} probe_job;

/* Whether a stage answers an INFO within PROBE_MS (its connection, or a new
 * one when that broke: a new one replaces it). */
enum { PROBE_MS = 2000 };

static void *probe_main(void *arg) {
    probe_job *p = arg;
    route_stage *st = p->st;
    mt_error err = {{0}};
    if (st->r && mt_remote_is_open(st->r)) {
        mt_remote_set_call_timeout(st->r, PROBE_MS);
        mt_proto_msg req = {.type = MT_PROTO_INFO}, reply;
        p->alive = mt_remote_call(st->r, &req, &reply, NULL, &err) == 0;
        mt_proto_msg_free(&reply);
        if (p->alive) mt_remote_set_call_timeout(st->r, p->r->call_timeout_ms);
    } else {
        p->alive = connect_stage(p->r, st, PROBE_MS, &err) == 0;
    }
    if (!p->alive) snprintf(p->why, sizeof p->why, "%.290s", err.msg);
    return NULL;
}

/* After an AWAIT that got no answer: asks every stage at once whether it is
 * there; the ones that are not are marked failed (mt_route_failed_peers) and
 * named in err after `first`. Returns how many were not there. */
static int probe_stages(mt_route *r, const char *first, mt_error *err) {
    probe_job *jobs = calloc((size_t)r->n_stages, sizeof *jobs);
    pthread_t *th = calloc((size_t)r->n_stages, sizeof *th);
    bool *started = calloc((size_t)r->n_stages, sizeof *started);
    int dead = 0;
    if (!jobs || !th || !started) {
        free(jobs), free(th), free(started);
        return 0;
    }
    for (int i = 0; i < r->n_stages; i++) {
        jobs[i] = (probe_job){.r = r, .st = &r->stages[i]};
        started[i] = pthread_create(&th[i], NULL, probe_main, &jobs[i]) == 0;
        if (!started[i]) probe_main(&jobs[i]);
    }
    char names[400] = "";
    for (int i = 0; i < r->n_stages; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        if (jobs[i].alive) continue;
        r->stages[i].failed = true;
        if (dead++ == 0)
            snprintf(names, sizeof names, "stage %d (%.128s): %.200s", i, r->stages[i].peer.addr,
                     jobs[i].why);
    }
    if (dead)
        mt_error_set(err, "%.300s; %d stage%s did not answer: %.300s", first, dead,
                     dead == 1 ? "" : "s", names);
    free(jobs), free(th), free(started);
    return dead;
}

/* One pass through the stages as a one-way pass: the rows go to stage 0,
 * which passes them on (with the later stages as hops), and the last stage
 * answers an AWAIT. An error names the stage that failed: from a
 * CHAIN_ABORT's stage (a field of the AWAIT's ERROR), or, when the AWAIT timed out or
 * its connection broke, from probing every stage. */
static int route_pass_oneway(mt_route *r, mt_route_session *s, int32_t p0, int32_t n, float *hidden,
                             const int32_t *pos, mt_error *err) {
    const int S = r->n_stages;
    route_stage *st0 = &r->stages[0], *last = &r->stages[S - 1];
    const size_t W = (size_t)r->head->hp.n_hidden;
    for (int k = 0; k < S - 1; k++) { /* the hops as they are now (after reconnects) */
        route_stage *h = &r->stages[k + 1];
        snprintf(r->hops[k].addr, sizeof r->hops[k].addr, "%s", h->peer.addr);
        memcpy(r->hops[k].pk, h->peer.pk, sizeof r->hops[k].pk);
        r->hops[k].layer_begin = h->layer_begin;
        r->hops[k].layer_end = h->layer_end;
    }
    /* the AWAIT's reply is one message: a pass longer than that is several passes */
    const int32_t most = mt_proto_max_rows(MT_PROTO_STAGE_FORWARD, r->head->hp.n_embd, r->wire);
    for (int32_t off = 0; off < n; off += most) {
        const int32_t k = n - off < most ? n - off : most;
        mt_proto_origin o = {.pass_end = p0 + off + k};
        memcpy(o.pk, r->keys.pk, sizeof o.pk);
        randombytes_buf(&o.pass_id, sizeof o.pass_id);
        float *h = hidden + (size_t)off * W;
        for (int i = 0; i < S; i++) r->stages[i].failed = false;
        if (mt_remote_stage_send(st0->r, s->id, st0->layer_begin, st0->layer_end, r->hops, S - 1,
                                 &o, s->speculative, pos + off, k, h, r->wire, err)) {
            st0->failed = true;
            if (r->no_reconnect) return PASS_FAIL;
            mt_error e2 = {{0}};
            if (connect_stage(r, st0, 0, &e2) == 0) return PASS_REPLAY;
            char first[sizeof err->msg];
            snprintf(first, sizeof first, "%s", err->msg);
            mt_error_set(err, "%.300s; reconnecting failed too: %.200s", first, e2.msg);
            return PASS_FAIL;
        }
        uint32_t code = 0;
        int32_t back = -1;
        const int wait_ms = route_call_timeout(r, last, k);
        mt_remote_set_call_timeout(last->r, wait_ms);
        const double t_call = mt_mono_ms_frac();
        if (mt_remote_stage_await(last->r, s->id, o.pass_id, p0 + off, p0 + off + k,
                                  r->stages[S - 2].peer.pk, h, r->wire, &code, &back, err) == 0) {
            route_call_seen(last, k, mt_mono_ms_frac() - t_call);
            continue;
        }
        if (code != 0) { /* a stage aborted the pass, or the last stage failed it (or the
                            AWAIT: no stage named) */
            if (back < 0 || back > S - 1) back = 0;
            if (code == MT_PROTO_ERR_UNKNOWN_SESSION && p0 > 0) return PASS_REPLAY;
            route_stage *bad = &r->stages[S - 1 - back];
            bad->failed = true;
            char first[sizeof err->msg];
            snprintf(first, sizeof first, "%s", err->msg);
            mt_error_set(err, "stage %d (%s, layers [%d, %d)) failed the pass: %.380s",
                         S - 1 - back, bad->peer.addr, bad->layer_begin, bad->layer_end, first);
            return PASS_FAIL;
        }
        /* no answer: someone on the way is gone or hung; find out who */
        char first[sizeof err->msg];
        snprintf(first, sizeof first, "%s", err->msg);
        if (wait_ms < r->call_timeout_ms && mt_mono_ms_frac() - t_call >= wait_ms - 50)
            snprintf(first, sizeof first,
                     "%.380s (no reply within %d ms: %.0fx the slowest such pass so far plus %.0f"
                     " ms)",
                     err->msg, wait_ms, ADAPT_FACTOR, ADAPT_SLACK_MS);
        if (probe_stages(r, first, err) > 0 || r->no_reconnect) return PASS_FAIL;
        return PASS_REPLAY; /* every stage is there (reconnected): the pass again from 0 */
    }
    return PASS_OK;
}

static int route_pass(mt_route *r, mt_route_session *s, const int32_t *tokens, int32_t p0,
                      int32_t n, float *hidden, int32_t *pos, mt_error *err) {
    for (int32_t i = 0; i < n; i++) pos[i] = p0 + i;
    if (mt_model_embed(r->head, tokens, n, hidden, err)) return PASS_FAIL;
    if (r->backbone) {
        mt_expert_backend be = mt_expert_dispatch_backend(&r->dispatch);
        if (mt_model_forward_layers(r->backbone, s->kv, 0, r->local_end, pos, n, hidden,
                                    r->use_dispatch ? &be : NULL, r->pool, err))
            return PASS_FAIL;
    }
    if (r->chain && r->n_stages > 1) return route_pass_oneway(r, s, p0, n, hidden, pos, err);
    const int n_calls = r->n_stages;
    const bool checking = s->checks != NULL;
    bool *sent = NULL; /* per stage, only when checking */
    int64_t *reply_ms = NULL;
    if (checking && (!(sent = calloc((size_t)r->n_stages, sizeof *sent)) ||
                     !(reply_ms = calloc((size_t)r->n_stages, sizeof *reply_ms)))) {
        free(sent);
        mt_error_set(err, "out of memory for the spot-checks of %d stages", r->n_stages);
        return PASS_FAIL;
    }
    const double t_start = mt_mono_ms_frac();
    int rc = PASS_OK;
    for (int i = 0; i < n_calls && rc == PASS_OK; i++) {
        route_stage *st = &r->stages[i];
        uint32_t code = 0;
        if (checking) {
            sent[i] = s->checks[i] != NULL;
            if (sent[i]) route_check_send(s->checks[i], pos, n, hidden, s->speculative);
        }
        st->failed = false;
        const int wait_ms = route_call_timeout(r, st, n);
        mt_remote_set_call_timeout(st->r, wait_ms);
        const double t_call = mt_mono_ms_frac();
        if (mt_remote_stage_forward_as(st->r, s->id, st->layer_begin, st->layer_end, s->speculative,
                                       pos, n, hidden, r->wire, &code, err) == 0) {
            route_call_seen(st, n, mt_mono_ms_frac() - t_call);
            if (checking && sent[i]) {
                reply_ms[i] = mt_wall_ms();
                route_check_keep_main(s->checks[i], hidden);
            }
            continue;
        }
        if (code == 0 && wait_ms < r->call_timeout_ms &&
            mt_mono_ms_frac() - t_call >= wait_ms - 50) {
            char first[sizeof err->msg];
            snprintf(first, sizeof first, "%s", err->msg);
            mt_error_set(err,
                         "%.380s (no reply within %d ms: %.0fx the slowest such call so far plus"
                         " %.0f ms, instead of the whole call timeout of %d ms)",
                         first, wait_ms, ADAPT_FACTOR, ADAPT_SLACK_MS, r->call_timeout_ms);
        }
        /* a node that cannot compute (e.g. its paired partner is gone) is as good as lost
         * for this route; an unknown session is only a replay away */
        st->failed = code != MT_PROTO_ERR_UNKNOWN_SESSION;
        rc = PASS_FAIL;
        if (code == MT_PROTO_ERR_UNKNOWN_SESSION && p0 > 0) {
            rc = PASS_REPLAY;
        } else if (code == 0 && !r->no_reconnect && !mt_remote_is_open(st->r)) {
            /* the connection broke: reconnect once */
            mt_error e2 = {{0}};
            /* a node that let an adaptive wait run out is likely hung: the reconnect gets
             * no longer than that wait either */
            if (connect_stage(r, st, wait_ms < r->call_timeout_ms ? wait_ms : 0, &e2) == 0) {
                rc = PASS_REPLAY;
            } else {
                char first[sizeof err->msg];
                snprintf(first, sizeof first, "%s", err->msg);
                mt_error_set(err, "%.300s; reconnecting failed too: %.200s", first, e2.msg);
            }
        }
        for (int k = i + 1; checking && k < r->n_stages; k++) sent[k] = false;
    }
    if (checking) rc = finish_checks(r, s, sent, reply_ms, p0, n, t_start, rc, err);
    free(sent);
    free(reply_ms);
    return rc;
}

/* logits of n tokens' final hidden states (stride n_hidden). When the last
 * layer ran on a stage of a kimi-k3 route, the stream's place already holds
 * the head's input (proto.h: the last stage mixes the checkpoints). */
static void route_head(mt_route *r, const float *hidden, int32_t n, float *logits) {
    const mt_hparams *hp = &r->head->hp;
    if (!(r->n_stages > 0 && hp->attn_res_block > 0)) {
        mt_model_head(r->head, hidden, n, logits, r->pool);
        return;
    }
    const size_t E = (size_t)hp->n_embd, W = (size_t)hp->n_hidden;
    float *x = malloc((size_t)n * E * sizeof(float));
    if (!x) abort(); /* the logits buffer is far larger */
    for (size_t t = 0; t < (size_t)n; t++) memcpy(x + t * E, hidden + t * W, E * sizeof(float));
    mt_model_head_from_input(r->head, x, n, logits, r->pool);
    free(x);
}

/* Runs tokens [p0, p0 + n) of `all` in micro-batches; the last `want` rows of
 * logits (or only the last row) are written. */
static int route_run(mt_route *r, mt_route_session *s, const int32_t *all, int32_t p0, int32_t n,
                     int32_t first_logit, bool all_logits, float *logits, mt_error *err) {
    const size_t E = (size_t)r->head->hp.n_hidden, V = (size_t)r->head->hp.n_vocab;
    /* a speculative pass goes whole: the nodes keep the snapshots of one request */
    const int32_t ub = s->speculative && n > r->ubatch ? n : r->ubatch;
    float *hidden = calloc((size_t)(n < ub ? n : ub) * E, sizeof(float));
    int32_t *pos = malloc((size_t)(n < ub ? n : ub) * sizeof(int32_t));
    int rc = PASS_OK;
    if (!hidden || !pos) rc = mt_error_set(err, "out of memory for a batch of %d tokens", ub);
    for (int32_t b = 0; rc == PASS_OK && b < n; b += ub) {
        int32_t nb = n - b < ub ? n - b : ub;
        rc = route_pass(r, s, all + p0 + b, p0 + b, nb, hidden, pos, err);
        if (rc != PASS_OK) break;
        /* logits of positions >= first_logit in this micro-batch */
        int32_t lo = p0 + b, hi = p0 + b + nb;
        if (all_logits) {
            int32_t from = lo > first_logit ? lo : first_logit;
            if (from < hi)
                route_head(r, hidden + (size_t)(from - lo) * E, hi - from,
                           logits + (size_t)(from - first_logit) * V);
        } else if (b + nb == n) {
            route_head(r, hidden + (size_t)(nb - 1) * E, 1, logits);
        }
    }
    free(hidden);
    free(pos);
    return rc;
}

/* mt_route_eval and mt_route_eval_speculative. */
static int route_eval(mt_route *r, mt_route_session *s, const int32_t *tokens, int32_t n,
                      bool all_logits, bool speculative, float *logits, mt_error *err) {
    if (n <= 0) return mt_error_set(err, "nothing to evaluate: the token list is empty");
    if ((int64_t)s->n_past + n > s->n_ctx)
        return mt_error_set(err,
                            "%d tokens after %d already in the session exceed its context of %d", n,
                            s->n_past, s->n_ctx);
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= r->head->hp.n_vocab)
            return mt_error_set(err, "token id %d at index %d is outside the vocabulary [0, %d)",
                                tokens[i], i, r->head->hp.n_vocab);
    pthread_mutex_lock(&r->lock);
    r->has_mismatch = false;
    const int32_t p0 = s->n_past;
    memcpy(s->tokens + p0, tokens, (size_t)n * sizeof(int32_t)); /* committed on success */
    /* the backbone's KDA states after each token of a speculative pass */
    int rc = s->kv && mt_kv_snap_begin(s->kv, p0, speculative ? n : 0, err) ? PASS_FAIL : PASS_OK;
    s->speculative = speculative;
    if (rc == PASS_OK) rc = route_run(r, s, s->tokens, p0, n, p0, all_logits, logits, err);
    if (rc == PASS_REPLAY && speculative && p0 > 0) {
        /* a stage lost the session: the history kept, then this pass as it was sent */
        r->replays++;
        s->speculative = false;
        rc = route_run(r, s, s->tokens, 0, p0, p0, false, logits, err);
        s->speculative = true;
        if (rc == PASS_OK) rc = route_run(r, s, s->tokens, p0, n, p0, all_logits, logits, err);
        if (rc == PASS_REPLAY)
            rc = mt_error_set(err, "the route lost the session again during"
                                   " its replay; giving up");
    } else if (rc == PASS_REPLAY) { /* a stage lost the session: the whole history again */
        r->replays++;
        rc = route_run(r, s, s->tokens, 0, p0 + n, p0, all_logits, logits, err);
        if (rc == PASS_REPLAY)
            rc = mt_error_set(err, "the route lost the session again during"
                                   " its replay; giving up");
    }
    if (rc == PASS_OK) s->n_past = p0 + n;
    s->step++;
    pthread_mutex_unlock(&r->lock);
    if (rc == PASS_OK) route_test_pause(p0, p0 + n);
    return rc == PASS_OK ? 0 : -1;
}

int mt_route_eval(mt_route *r, mt_route_session *s, const int32_t *tokens, int32_t n,
                  bool all_logits, float *logits, mt_error *err) {
    return route_eval(r, s, tokens, n, all_logits, false, logits, err);
}

int mt_route_eval_speculative(mt_route *r, mt_route_session *s, const int32_t *tokens, int32_t n,
                              float *logits, mt_error *err) {
    return route_eval(r, s, tokens, n, true, true, logits, err);
}

int mt_route_rewind(mt_route *r, mt_route_session *s, int32_t n_past, mt_error *err) {
    if (n_past < 0 || n_past > s->n_past)
        return mt_error_set(err, "cannot rewind to %d tokens: the session has %d", n_past,
                            s->n_past);
    pthread_mutex_lock(&r->lock);
    int rc = s->kv ? mt_kv_rewind(s->kv, n_past, err) : 0;
    if (rc == 0) s->n_past = n_past; /* the nodes go back when the next pass starts there */
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* node.h - `moontail node`: a server that holds one shard and computes for
 * requesters over the data plane (proto.h on transport.h).
 *
 * A node loads its shard, listens (loopback unless told otherwise), and runs
 * one thread per connection that proves the client's identity against the
 * authorized set (its key is listed, or it presents a certificate from one of
 * the set's authorities: keys.h, cert.h) and reads its requests, plus ONE
 * worker thread that computes.
 *
 * Identity: the node's keys may carry a certificate (mt_keys.cert), presented
 * in every handshake, incoming and outgoing (partners, next hops). It can be
 * replaced while the node runs (mt_node_set_cert, for renewal): connections
 * made after the call present the new one; open connections keep theirs.
 *
 * Continuous batching: the worker never waits for a batch to fill. Each step
 * looks at every request that is waiting and
 *   - runs all STAGE_FORWARD requests for the same layer range as ONE
 *     mt_model_forward_batch call, each token with its own session's KV cache,
 *   - runs all EXPERT_RUN requests for the same layer as ONE
 *     mt_model_run_experts call,
 * then replies to each request it finished. Since every token and every
 * expert row is computed exactly as it would be alone, batching never
 * changes a result.
 *
 * Step order, so that a long prompt never starves decoding sessions:
 *   1. EXPERT_RUN and SESSION_END requests (an expert request sits on another
 *      stage's critical path);
 *   2. every decode: a STAGE_FORWARD continuing a session (first position
 *      > 0) of at most MT_NODE_DECODE_MAX_TOKENS tokens (or speculative), not
 *      marked MT_PROTO_FLAG_PROMPT (the chunks a one-way stage passes on of a
 *      prompt it cut up), whole;
 *   3. prompts (the other STAGE_FORWARDs) in arrival order, each cut to a
 *      chunk of at most prefill_chunk tokens, until the step holds
 *      step_tokens tokens (at least one prompt token per step) and, while
 *      decodes wait, no more prompt tokens than decode tokens. A prompt's
 *      later chunks run in later steps, and it is answered once its last
 *      chunk is done. Chunking a session's tokens is micro-batching, so
 *      results stay bit-identical.
 * A decoding session so waits at most one step of twice its decodes' tokens
 * behind any prompt. Decode pacing (unless no_pacing) shortens that wait:
 * the node learns each decoding session's rhythm (the time between its last
 * two decodes' arrivals) and does not start a step of prompt chunks alone
 * that would still run when a session's next decode is due (the step's time
 * on the line through the recent steps' times, mt_node_pace_step_ms): it
 * takes only the prompt tokens that end before the decode is due
 * (mt_node_pace_fit), or, when not one does, waits for that decode, a little
 * past its due time at most (mt_node_pace_hold). And a step of decodes takes
 * no prompt tokens when a step of prompt chunks alone fits between its end
 * (the recent decode steps' time) and the next decode due, at most 2 steps
 * in a row while prompts wait (then it takes them as above), so that prompts
 * always advance. A decode then waits behind a prompt only when its arrival
 * comes off its rhythm. A step takes at most one request per session (later
 * ones wait until it is answered, so a session's requests run in order) and
 * at most max_batch_tokens tokens of decodes.
 *
 * Sessions: a session is named by the client's public key and its u64 id
 * (two requesters cannot touch each other's sessions). It is created by a
 * request starting at position 0 and holds a KV cache for the layer range of
 * that request. A request must start at a position in [0, n_past]: n_past
 * continues the session, an earlier one restarts it from there (a retry, a
 * replay, or speculative decoding taking back guesses); a gap is refused, as
 * is a different layer range unless the request starts at 0. KDA layers
 * cannot drop tokens: an earlier start works for them at 0, or inside the
 * session's last MT_PROTO_FLAG_SPECULATIVE request (after its first token),
 * whose KDA states after each token the node keeps (counted in the session's
 * bytes) until the next request; other starts get ERROR
 * MT_PROTO_ERR_POSITION. Sessions are limited by memory, not by a count: a
 * request is admitted while the bytes every session's cache holds (state
 * plus positions written, plus what this step's requests will write) fit the
 * KV budget; only when they do not are the least recently used sessions
 * evicted, one at a time until they do (never a session of the same step).
 * An explicit max_sessions also caps the count (a new session then evicts
 * the least recently used one). A request for an unknown (evicted) session
 * that does not start at 0 gets ERROR MT_PROTO_ERR_UNKNOWN_SESSION: the
 * requester replays the session's tokens from position 0. A session that
 * gets no request for session_idle_ms expires: its KV cache is freed, as
 * SESSION_END would (a requester that was killed never sends one). A
 * requester that comes back later is told the session is unknown and
 * replays, so expiry costs time, never a result.
 *
 * Paired layers: a node holding the attention part but only some of the
 * routed experts runs the others on its partners (expert_dispatch.h over
 * remote.h connections, f32 so results stay bit-identical). Partners must
 * authorize this node's key. EXPERT_RUN requests are only ever served from the
 * node's own experts.
 *
 * Every request is validated (proto.h decoding, then layers, experts,
 * sessions and positions against what this node holds); a bad request gets
 * an ERROR reply naming the problem and the connection goes on. Only a broken
 * transport ends a connection, and never the server. */
#ifndef MOONTAIL_NODE_H
#define MOONTAIL_NODE_H

#include "moontail/keys.h"
#include "moontail/model.h"
#include "moontail/proto.h"
#include "moontail/sock.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mt_node mt_node;

/* A STAGE_FORWARD of at most this many tokens continuing a session is a
 * decode (it covers speculative passes): it runs whole, before prompts. */
#define MT_NODE_DECODE_MAX_TOKENS 16

/* One-way passes (proto.h) one origin key may keep waiting on a last stage at
 * once (of the 65,536 it keeps for all): a STAGE_AWAIT beyond it gets ERROR
 * BUSY, so that one requester cannot take the room of the others. A one-way
 * message may name an origin other than its connection's key only when that
 * connection is a stage: it has the node's own key or a node certificate. */
#define MT_NODE_PASSES_PER_ORIGIN 4096

typedef struct mt_node_partner {
    const char *addr;                 /* "host:port" */
    uint8_t pk[MT_KEYS_PUBLIC_BYTES]; /* its identity */
} mt_node_partner;

typedef struct mt_node_config {
    const char *shard_path;               /* a shard or a whole model (GGUF) */
    const mt_keys *keys;                  /* this node's identity (and certificate), copied */
    const mt_keys_authorized *authorized; /* who may connect: keys and authorities (kept, not
                                             copied; may be added to while the node runs) */
    const char *listen;                   /* NULL: "127.0.0.1:0" */
    mt_sock listen_fd; /* not 0 or MT_SOCK_NONE: a listening socket (mt_listen_tcp) on `listen`'s
                      host to serve on instead of binding `listen`; the node owns it from the call
                      on (it is closed when the node stops or fails to start) */
    const mt_node_partner *partners; /* paired layers: holders of the other experts */
    int n_partners;
    int max_sessions;      /* > 0: at most this many sessions at once (besides memory);
                              <= 0: memory alone limits them (the figure reported is
                              mt_node_size_sessions') */
    int n_ctx;             /* positions per session; <= 0: derived from memory_bytes */
    uint64_t memory_bytes; /* memory offered for the weights and the sessions' caches; 0: no
                              limit (the commands pass 70% of the RAM available) */
    mt_kv_type kv_type;    /* the sessions' caches (0: f16); every replica of a layer and
                              the registry's spot-checks must use the same */
    int threads;           /* compute threads; <= 0: all CPUs */
    int max_batch_tokens;  /* tokens per step at most (decodes alone may fill it); <= 0: 4096 */
    /* The step's token budget and a prompt's chunk (see "Step order" above); <= 0: 32 and 4.
     * Measured with cellsim (docs/cellsim.md, 200 machines, Kimi K3): chunks of 4 serve
     * 25% more than chunks of 8 at 256 users with one-way hops (11% in turn) and bring a
     * prompt's first token sooner; the budget (8 to 64) changed little, 32 stays. */
    int step_tokens;
    int prefill_chunk;
    bool no_pacing;      /* start prompt steps whenever decodes are not waiting ("Step order") */
    int timeout_ms;      /* handshake and each send/recv wait; <= 0: 30000 */
    int session_idle_ms; /* a session unused this long expires; <= 0: 600000 (10 min) */
    bool quiet;          /* no log lines on stderr */
    /* FOR TESTS ONLY (`moontail node --misbehave corrupt-output[:RATE]`): the fraction of
     * STAGE_FORWARD replies whose output rows get bits flipped, to test spot-checking
     * (docs/spot-checking.md). 0: an honest node. */
    double corrupt_rate;
    /* Shard checks (node_verify.c). Before serving, every tensor of a shard is hashed (on
     * `threads` threads) and compared with the hash the shard stores; a mismatch refuses to
     * start, naming the tensor and the file. shard_verified skips that when the caller has
     * just proved the file's bytes another way (the agent: the whole file against the
     * registry's manifest). A whole model stores no hashes: nothing to check. */
    bool shard_verified;
    void (*verify_progress)(void *ctx, const char *what, uint64_t done, uint64_t total);
    void *verify_progress_ctx; /* progress of the start-up check (NULL: none) */
    /* While serving, one tensor of the shard is hashed again every recheck_ms (0: 10000;
     * < 0: never), round robin from a random one, at most recheck_rate bytes/s (0: 64 MB/s)
     * on one low-priority thread. A mismatch (the file changed on disk under the node) stops
     * the node computing: every request gets ERROR BUSY, and mt_node_shard_error says why. */
    int recheck_ms;
    uint64_t recheck_rate;
} mt_node_config;

/* Counters for tests and the status page. */
typedef struct mt_node_stats {
    uint64_t steps;               /* worker steps that did work */
    uint64_t requests;            /* requests received (decoded or not) */
    uint64_t errors;              /* ERROR replies sent */
    uint64_t stage_batches;       /* mt_model_forward_batch calls */
    uint64_t expert_batches;      /* mt_model_run_experts calls */
    int32_t max_stage_requests;   /* most STAGE_FORWARD requests in one call */
    int32_t max_expert_requests;  /* most EXPERT_RUN requests in one call */
    uint64_t evictions;           /* sessions evicted for room */
    uint64_t expired;             /* sessions dropped after session_idle_ms unused */
    int32_t sessions;             /* sessions held now */
    uint64_t kv_bytes;            /* bytes their KV caches reserve now (mt_kv_cache_bytes) */
    uint64_t kv_budget;           /* bytes the sessions' caches may fill (mt_node_size_sessions) */
    uint64_t kv_used;             /* bytes they hold now (written, and asked for by this step's
                                     requests): kept within kv_budget by evictions */
    int32_t queued;               /* requests waiting for the worker now */
    int32_t connections;          /* open connections now */
    uint64_t served_tokens;       /* tokens computed by stage requests (not failed) */
    uint64_t served_token_layers; /* ... times the layers each ran through */
    uint64_t served_expert_rows;  /* expert rows computed for EXPERT_RUN requests */
    uint64_t prefill_chunks;      /* prompt chunks computed that did not end their request */
    uint64_t paced_holds;         /* times a prompt step was held for a decode due (pacing) */
    uint64_t hop_messages;        /* one-way chunks sent on to a next hop (proto.h) */
    uint64_t passes_answered;     /* one-way passes whose STAGE_AWAIT got their rows (last stage) */
    int32_t hops;                 /* next hops kept now (each a connection and a sender thread) */
    int32_t hop_queued;           /* one-way messages waiting for their next hop's sender now */
    uint64_t hop_connects;        /* connections to next hops tried */
    uint64_t hop_failed;          /* one-way messages a next hop could not be sent */
} mt_node_stats;

/* Decode pacing ("Step order"): a decoding session's last decode arrived at
 * at_ms and the one before it period_ms earlier (0: not known). */
typedef struct mt_node_pace_decode {
    double at_ms, period_ms;
} mt_node_pace_decode;

/* A decoding session's rhythm is forgotten past this gap between its decodes,
 * and a step of decodes goes without the prompts waiting at most this many
 * times in a row. */
#define MT_NODE_PACE_MAX_PERIOD_MS 10000.0
#define MT_NODE_PACE_MAX_SKIPS     2

/* A session's request arrived at arrived_ms and is in this step: a decode
 * records its arrival and the gap since the last one (p->period_ms; 0 past
 * MT_NODE_PACE_MAX_PERIOD_MS), anything else ends its decoding (*p zeroed). */
void mt_node_pace_note(mt_node_pace_decode *p, double arrived_ms, bool decode);

/* Whether a step of prompt chunks alone, starting at now_ms and taking about
 * step_ms (0: not measured yet), should wait for a decode: one of d[0..n) is
 * due (at_ms + period_ms) before the step would end, and is not later than
 * its slack (half its period, at most step_ms, at least 0.5 ms) past due.
 * Returns the time to wait until (the earliest such due time plus its slack;
 * the decode's arrival ends the wait sooner), or 0: start the step.
 * *due_ms (when not NULL) gets the earliest due time of those (0: none), so
 * that a smaller step that ends before it may run instead. */
double mt_node_pace_hold(const mt_node_pace_decode *d, int n, double now_ms, double step_ms,
                         double *due_ms);

/* What the node's recent steps took (moving averages, recent ones weighing
 * most): steps of prompt chunks alone and steps of decodes alone, their
 * time and tokens. */
typedef struct mt_node_pace_costs {
    double prompt_ms, prompt_tok, decode_ms, decode_tok;
} mt_node_pace_costs;
/* A step of that kind took ms for tokens. */
void mt_node_pace_measured(mt_node_pace_costs *c, bool prompt, double ms, double tokens);
/* What a step of `tokens` will take, on the line through the two kinds of
 * step (a fixed part and a part per token; with one kind only, the prompt
 * steps' time per token); 0 before any prompt step is measured. */
double mt_node_pace_step_ms(const mt_node_pace_costs *c, double tokens);
/* The most tokens whose step takes at most ms on that line (0: none). */
int mt_node_pace_fit(const mt_node_pace_costs *c, double ms);

/* Pacing's decision for one step ("Step order"), made the same way by the
 * node and by bench/cellsim: the step has decode_tokens decodes and could
 * take `planned` prompt tokens; d[0..n) are the decoding sessions. Returns
 * the most prompt tokens it takes: planned; fewer, those that end before the
 * next decode due; or 0, either because a step of prompts alone waits for
 * that decode (*hold_until: until when, else 0) or because a step of decodes
 * goes without them, the prompt step fitting in the gap after it (*skips
 * counts those steps in a row; at MT_NODE_PACE_MAX_SKIPS the prompts join
 * the decodes; the caller sets it to 0 when prompt tokens ran). */
double mt_node_pace_plan(const mt_node_pace_costs *c, const mt_node_pace_decode *d, int n,
                         double now_ms, double decode_tokens, double planned, int *skips,
                         double *hold_until);

/* How many sessions of how many positions a node offers, from the memory it
 * offers. The weights take weight_bytes of memory_bytes; the rest is the KV
 * budget. A session of c positions keeps fixed + c * per_position bytes
 * (mt_kv_layer_bytes summed over the node's layers). Caches are mapped
 * lazily, so a session only costs what it has written; the node evicts
 * least recently used sessions when the budget is full (node_worker.c).
 *   n_ctx (when *n_ctx <= 0): the longest context ONE session can fill in the
 *     budget, at most n_ctx_train, rounded down to a multiple of 256;
 *   max_sessions (when *max_sessions <= 0): as many sessions as the budget
 *     holds at min(n_ctx, 4096) positions each, between 1 and 2^20. This is
 *     the figure the node reports; it keeps more sessions when they are
 *     shorter, since only the bytes they hold are limited (node_worker.c).
 * Given values are kept. A budget with room for fewer than
 * min(n_ctx_train, 256) positions, or a given n_ctx larger than the budget
 * holds, is an error naming the figures and the fix. *budget gets the KV
 * budget in bytes. */
int mt_node_size_sessions(uint64_t memory_bytes, uint64_t weight_bytes, uint64_t fixed,
                          uint64_t per_position, int32_t n_ctx_train, int *n_ctx, int *max_sessions,
                          uint64_t *budget, mt_error *err);

/* Loads the shard, connects to partners, listens and starts the threads.
 * Returns NULL with err naming the problem (e.g. a paired layer whose
 * experts nobody holds). */
mt_node *mt_node_start(const mt_node_config *cfg, mt_error *err);

/* Stops accepting, ends every connection, finishes the worker (waiting
 * requests get ERROR MT_PROTO_ERR_BUSY) and frees everything. */
void mt_node_stop(mt_node *n);

/* "127.0.0.1:PORT" as bound (the real port when listening on port 0). */
const char *mt_node_addr(const mt_node *n);
const mt_proto_info *mt_node_info(const mt_node *n);
void mt_node_get_stats(mt_node *n, mt_node_stats *s);

/* Replaces the node's certificate (renewal): cert[0..len) must be a
 * certificate for the node's key (mt_keys_set_cert); NULL removes it.
 * Connections made after the call, incoming and outgoing, present it. On
 * error the old certificate stays. Thread-safe. */
int mt_node_set_cert(mt_node *n, const uint8_t *cert, size_t len, mt_error *err);

/* Whether a background re-check found the shard changed on disk: false while it passes;
 * true with the error (file, tensor, fix) in buf once one failed, after which the node
 * computes nothing more. Thread-safe. */
bool mt_node_shard_error(mt_node *n, char *buf, size_t cap);
/* Tensors the background re-check has hashed so far (tests, logs). */
uint64_t mt_node_rechecked(mt_node *n);

/* While held, the worker takes no requests (they wait in the queue). For
 * tests that need several requests in one step, and for maintenance. */
void mt_node_hold(mt_node *n, bool hold);

#endif

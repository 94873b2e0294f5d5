/* api.h - `moontail serve`: an OpenAI-compatible HTTP API (docs/api.md) in
 * front of a model computed in this process or a cell / swarm reached
 * through its registry.
 *
 * Endpoints: GET /v1/models, POST /v1/completions, POST /v1/chat/completions
 * (whole answers or server-sent events), GET /v1/usage (the caller's key),
 * GET /health, and with a batch directory the Files and Batches endpoints
 * (POST /v1/files, GET /v1/files/ID[/content], POST and GET /v1/batches,
 * GET /v1/batches/ID, POST /v1/batches/ID/cancel). Clients authenticate with API keys
 * (Authorization: Bearer); each key has a token bucket of requests (the rate limit) and counts of
 * the requests and tokens it used. Bad requests get OpenAI-shaped 4xx errors and never stop the
 * server. */
#ifndef MOONTAIL_API_H
#define MOONTAIL_API_H

#include "moontail/error.h"
#include "moontail/http.h"
#include "moontail/model.h"
#include "moontail/proto.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct mt_api_config {
    const char *listen; /* "host:port" (default 127.0.0.1:8080; port 0 picks one) */
    /* the backend: exactly one of */
    const char *model_path; /* a GGUF file computed here */
    const char *registry;   /* "http://host:port" of a registry, with: */
    const char *token;      /*   the account token */
    const char *key_path;   /*   the requester identity (created if missing) */
    const char *cache_dir;  /*   where the head shard is kept */
    mt_proto_dtype wire;    /*   hidden states on the network */
    double spot_check;      /*   fraction of stages checked on a replica (requester.h) */
    bool chain;             /*   chained cell routes (requester.h) */

    const char *model_name; /* the id in /v1/models (default: the file's stem, or the
                               model's general.name through a registry) */
    const char *api_keys;   /* file: one key per line, optional name after a space */
    bool no_auth;           /* no keys: only allowed on a loopback address */
    double rate_per_min;    /* requests per minute per key (token bucket; 0: no limit) */
    int parallel;           /* requests computed at once (<= 0: 4) */
    int queue;              /* requests that may wait for a slot (< 0: 16) */
    int threads;            /* local compute threads (<= 0: all CPUs) */
    int ubatch;             /* prompt tokens per evaluation (<= 0: 512) */
    mt_kv_type kv_type;     /* the cache of whatever attention runs here (0: f16): the local
                               model's, or the backbone's of a swarm */
    int ctx;                /* most positions per request (<= 0: the model's context) */
    int chat_max_tokens;    /* chat's default max_tokens (<= 0: 1024) */
    size_t max_body;        /* request body limit in bytes (0: 1 MiB) */
    mt_http_limits limits;  /* connections, deadlines, requests in flight (0: http.h's) */
    bool quiet;             /* no log lines */
    bool no_http;           /* no HTTP server: batch work only (mt_api_batch_run) */
    int batch_parallel;     /* batch requests computed at once, in slots of their own (<= 0: 16) */
    const char *batch_dir;  /* /v1/files and /v1/batches keep their state here (NULL: off) */
    size_t max_file;        /* largest upload to /v1/files in bytes (0: 100 MiB) */
    int draft_k;            /* exact speculative decoding with the n-gram drafter (draft.h),
                               this many guesses a pass, in every slot (0: off); the text is
                               plain decoding's */
} mt_api_config;

typedef struct mt_api_server mt_api_server;

/* Loads the model (or reaches the registry), reads the keys and starts
 * listening. Returns NULL with err filled on any problem. */
mt_api_server *mt_api_server_start(const mt_api_config *c, mt_error *err);
/* "http://host:port" as bound. */
const char *mt_api_server_url(const mt_api_server *s);
/* `moontail batch`: a JSONL file of requests in OpenAI's batch format, run on this server's
 * model through slots of their own (docs/api.md, "Batches"). */
typedef struct mt_api_batch_config {
    const char *input;     /* the requests (JSONL) */
    const char *output;    /* the results, in the input's order, written when all are done */
    const char *state_dir; /* input copy, results as they finish, state (resumable) */
    int parallel;          /* requests in flight (<= 0: the server's batch_parallel) */
    const bool *stop;      /* turns true: start no more (optional) */
    /* after each result, under a lock (optional): done of total, failed, this run's
     * completion tokens and seconds */
    void (*progress)(void *ctx, long long done, long long total, long long failed, long long tokens,
                     double seconds);
    void *ctx;
} mt_api_batch_config;

/* Runs the batch: checks the input (refused whole, naming the line, when a line is not a
 * request), skips the custom_ids whose results the state directory already holds, runs the
 * rest and writes the output. Returns 0 when all requests have a result (some may be
 * errors), 1 when stopped first (run again to resume), -1 with err filled. */
int mt_api_batch_run(mt_api_server *s, const mt_api_batch_config *c, mt_error *err);

/* Stops listening, ends the requests in flight, frees everything. */
void mt_api_server_stop(mt_api_server *s);

#endif

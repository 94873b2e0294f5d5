/* api.h - `moontail serve`: an OpenAI-compatible HTTP API (docs/api.md) in
 * front of a model computed in this process or a cell / swarm reached
 * through its registry.
 *
 * Endpoints: GET /v1/models, POST /v1/completions, POST /v1/chat/completions
 * (whole answers or server-sent events), GET /v1/usage (the caller's key),
 * GET /health. Clients authenticate with API keys (Authorization: Bearer);
 * each key has a token bucket of requests (the rate limit) and counts of the
 * requests and tokens it used. Bad requests get OpenAI-shaped 4xx errors
 * and never stop the server. */
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
} mt_api_config;

typedef struct mt_api_server mt_api_server;

/* Loads the model (or reaches the registry), reads the keys and starts
 * listening. Returns NULL with err filled on any problem. */
mt_api_server *mt_api_server_start(const mt_api_config *c, mt_error *err);
/* "http://host:port" as bound. */
const char *mt_api_server_url(const mt_api_server *s);
/* Stops listening, ends the requests in flight, frees everything. */
void mt_api_server_stop(mt_api_server *s);

#endif

/* api_keys.h - who may use `moontail serve`: API keys read from a file, a
 * token bucket of requests per key (the rate limit), and per-key counts of
 * requests and tokens (GET /v1/usage).
 *
 * Key file: one key per line, optionally followed by a space and a name
 * (shown in logs and /v1/usage; default "key<line number>"); blank lines
 * and lines starting with '#' are skipped. A key is 8 to 256 printable
 * ASCII characters without spaces. The server keeps only a hash of each key
 * and compares hashes in constant time. */
#ifndef MOONTAIL_API_KEYS_H
#define MOONTAIL_API_KEYS_H

#include "moontail/error.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct api_key {
    char name[65];
    uint8_t hash[32]; /* BLAKE2b-256 of the key */
    double bucket;    /* requests available now (token bucket) */
    double bucket_at; /* when bucket was last filled, seconds (monotonic) */
    int64_t requests, prompt_tokens, completion_tokens, rate_limited;
} api_key;

typedef struct api_keys {
    api_key *keys;
    int n;
    bool open;           /* --no-auth: one anonymous key that every request uses */
    double rate_per_min; /* 0: no limit */
    pthread_mutex_t mu;  /* guards buckets and counts */
} api_keys;

/* Reads the key file (path NULL: no authentication, one anonymous key).
 * Errors name the file, the line and the problem. */
int api_keys_load(api_keys *k, const char *path, double rate_per_min, mt_error *err);
void api_keys_free(api_keys *k);

/* The key whose text is token (NULL token: the anonymous key when open),
 * or NULL. */
api_key *api_keys_find(api_keys *k, const char *token);

/* The key named name (the first of that name), or NULL: a batch's owner. */
api_key *api_keys_named(api_keys *k, const char *name);

/* Takes one request from the key's bucket at time now (seconds). Returns 0,
 * or the whole seconds until a request is available again (the key's
 * rate_limited count goes up). */
int api_keys_take(api_keys *k, api_key *key, double now);
/* The same for a request that waits for its turn instead of being refused
 * (a batch's): rate_limited is not counted. */
int api_keys_take_waiting(api_keys *k, api_key *key, double now);

/* Adds an accepted request, or the tokens a finished one used. */
void api_keys_count_request(api_keys *k, api_key *key);
void api_keys_count_tokens(api_keys *k, api_key *key, int64_t prompt, int64_t completion);

/* {"object": "usage", "key", "requests", "prompt_tokens", "completion_tokens",
 *  "total_tokens", "rate_limited", "rate_limit": {...} or null} at time now. */
json_t *api_keys_usage_json(api_keys *k, api_key *key, double now);

#endif

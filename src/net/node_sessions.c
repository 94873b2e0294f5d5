/* node_sessions.c - the node's session table (node_internal.h): a hash on
 * (client key, session id) so that a lookup costs the same with thousands of
 * sessions as with one, a list from the most to the least recently used (the
 * eviction and expiry order), and the running total of the bytes the
 * sessions' caches hold. Worker only. */
#include "node_internal.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

enum { SESSIONS_FIRST_BUCKETS = 64 };

_Static_assert(sizeof((node_sessions *)0)->hash_key == crypto_shorthash_KEYBYTES,
               "node_sessions.hash_key is crypto_shorthash's key");

/* Keyed (SipHash, a random key per node) so that a client choosing its
 * session ids cannot pile them into one bucket. */
uint64_t node_sessions_hash(const node_sessions *t, const uint8_t *owner, uint64_t id) {
    uint8_t in[MT_KEYS_PUBLIC_BYTES + 8], h[crypto_shorthash_BYTES];
    memcpy(in, owner, MT_KEYS_PUBLIC_BYTES);
    memcpy(in + MT_KEYS_PUBLIC_BYTES, &id, 8);
    crypto_shorthash(h, in, sizeof in, t->hash_key);
    uint64_t v;
    memcpy(&v, h, sizeof v);
    return v;
}

static size_t bucket_of(const node_sessions *t, const uint8_t *owner, uint64_t id) {
    return (size_t)(node_sessions_hash(t, owner, id) & (t->n_buckets - 1));
}

int node_sessions_init(node_sessions *t) {
    memset(t, 0, sizeof *t);
    if (sodium_init() < 0) return -1;
    randombytes_buf(t->hash_key, sizeof t->hash_key);
    t->n_buckets = SESSIONS_FIRST_BUCKETS;
    t->buckets = calloc(t->n_buckets, sizeof *t->buckets);
    return t->buckets ? 0 : -1;
}

void node_sessions_free(node_sessions *t) {
    for (node_session *s = t->newest, *next; s; s = next) {
        next = s->older;
        mt_kv_cache_free(s->kv);
        free(s);
    }
    free(t->buckets);
    memset(t, 0, sizeof *t);
}

node_session *node_session_find(const node_sessions *t, const uint8_t *owner, uint64_t id) {
    if (!t->buckets) return NULL;
    for (node_session *s = t->buckets[bucket_of(t, owner, id)]; s; s = s->hnext)
        if (s->id == id && memcmp(s->owner, owner, MT_KEYS_PUBLIC_BYTES) == 0) return s;
    return NULL;
}

/* Doubles the buckets once there are more sessions than buckets (chains stay
 * short); a failed allocation keeps the old ones (longer chains, still correct). */
static void grow(node_sessions *t) {
    size_t nb = t->n_buckets * 2;
    node_session **b = calloc(nb, sizeof *b);
    if (!b) return;
    node_session **old = t->buckets;
    t->buckets = b;
    t->n_buckets = nb;
    for (node_session *s = t->newest; s; s = s->older) {
        size_t k = bucket_of(t, s->owner, s->id);
        s->hnext = b[k];
        b[k] = s;
    }
    free(old);
}

static void lru_unlink(node_sessions *t, node_session *s) {
    if (s->newer)
        s->newer->older = s->older;
    else
        t->newest = s->older;
    if (s->older)
        s->older->newer = s->newer;
    else
        t->oldest = s->newer;
    s->newer = s->older = NULL;
}

static void lru_push_newest(node_sessions *t, node_session *s) {
    s->older = t->newest;
    s->newer = NULL;
    if (t->newest)
        t->newest->newer = s;
    else
        t->oldest = s;
    t->newest = s;
}

node_session *node_session_add(node_sessions *t, const uint8_t *owner, uint64_t id) {
    node_session *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    memcpy(s->owner, owner, MT_KEYS_PUBLIC_BYTES);
    s->id = id;
    if ((size_t)t->count >= t->n_buckets) grow(t);
    size_t k = bucket_of(t, owner, id);
    s->hnext = t->buckets[k];
    t->buckets[k] = s;
    lru_push_newest(t, s);
    t->count++;
    return s;
}

void node_session_remove(node_sessions *t, node_session *s) {
    node_session **p = &t->buckets[bucket_of(t, s->owner, s->id)];
    while (*p != s) p = &(*p)->hnext;
    *p = s->hnext;
    lru_unlink(t, s);
    t->kv_used -= s->held;
    t->count--;
    mt_kv_cache_free(s->kv);
    free(s);
}

void node_session_touch(node_sessions *t, node_session *s, uint64_t step, int64_t now_ms) {
    s->last_used = step;
    s->last_used_ms = now_ms;
    lru_unlink(t, s);
    lru_push_newest(t, s);
}

void node_session_hold(node_sessions *t, node_session *s, uint64_t bytes) {
    t->kv_used = t->kv_used - s->held + bytes;
    s->held = bytes;
}

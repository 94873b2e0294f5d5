/* api_keys.c - API keys, rate limits and usage counts (api_keys.h). */
#include "api_keys.h"

#include <errno.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KEY_MIN = 8, KEY_MAX = 256 };

static void key_hash(const char *key, size_t len, uint8_t out[32]) {
    crypto_generichash(out, 32, (const uint8_t *)key, len, NULL, 0);
}

/* ---- the key file ------------------------------------------------------------------------- */

static int add_key(api_keys *k, const char *path, int line, const char *key, size_t klen,
                   const char *name, size_t nlen, mt_error *err) {
    if (klen < KEY_MIN || klen > KEY_MAX)
        return mt_error_set(err,
                            "%s line %d: a key must be %d to %d characters long, this one has"
                            " %zu",
                            path, line, KEY_MIN, KEY_MAX, klen);
    for (size_t i = 0; i < klen; i++)
        if (key[i] <= ' ' || key[i] > '~')
            return mt_error_set(err,
                                "%s line %d: a key may hold printable ASCII characters only"
                                " (no spaces)",
                                path, line);
    if (nlen > 64)
        return mt_error_set(err, "%s line %d: the key's name is longer than 64 bytes", path, line);
    for (size_t i = 0; i < nlen; i++)
        if ((unsigned char)name[i] < ' ' || name[i] == 0x7f)
            return mt_error_set(err, "%s line %d: the key's name holds control characters", path,
                                line);
    api_key *nk = realloc(k->keys, (size_t)(k->n + 1) * sizeof *nk);
    if (!nk) return mt_error_set(err, "out of memory");
    k->keys = nk;
    api_key *x = &k->keys[k->n];
    memset(x, 0, sizeof *x);
    key_hash(key, klen, x->hash);
    for (int i = 0; i < k->n; i++)
        if (sodium_memcmp(k->keys[i].hash, x->hash, 32) == 0)
            return mt_error_set(err,
                                "%s line %d: this key is also on an earlier line (%s); give"
                                " every client its own key",
                                path, line, k->keys[i].name);
    if (nlen)
        snprintf(x->name, sizeof x->name, "%.*s", (int)nlen, name);
    else
        snprintf(x->name, sizeof x->name, "key%d", line);
    x->bucket = k->rate_per_min;
    k->n++;
    return 0;
}

int api_keys_load(api_keys *k, const char *path, double rate_per_min, mt_error *err) {
    memset(k, 0, sizeof *k);
    pthread_mutex_init(&k->mu, NULL);
    k->rate_per_min = rate_per_min > 0 ? rate_per_min : 0;
    if (!path) {
        k->open = true;
        if (!(k->keys = calloc(1, sizeof *k->keys))) return mt_error_set(err, "out of memory");
        snprintf(k->keys[0].name, sizeof k->keys[0].name, "anonymous");
        k->keys[0].bucket = k->rate_per_min;
        k->n = 1;
        return 0;
    }
    FILE *f = fopen(path, "r");
    if (!f) return mt_error_set(err, "cannot open the API key file %s: %s", path, strerror(errno));
    char buf[1024];
    int line = 0, rc = 0;
    while (rc == 0 && fgets(buf, sizeof buf, f)) {
        line++;
        size_t len = strlen(buf);
        if (len == sizeof buf - 1 && buf[len - 1] != '\n') {
            rc = mt_error_set(err, "%s line %d: longer than %zu bytes", path, line, sizeof buf - 2);
            break;
        }
        while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ' ||
                       buf[len - 1] == '\t'))
            buf[--len] = 0;
        char *p = buf;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || *p == '#') continue;
        size_t klen = strcspn(p, " \t");
        char *name = p + klen;
        while (*name == ' ' || *name == '\t') name++;
        rc = add_key(k, path, line, p, klen, name, strlen(name), err);
    }
    sodium_memzero(buf, sizeof buf);
    fclose(f);
    if (rc == 0 && k->n == 0)
        rc = mt_error_set(err,
                          "%s holds no API key; put one key per line (for example the"
                          " output of 'openssl rand -hex 24')",
                          path);
    return rc;
}

void api_keys_free(api_keys *k) {
    free(k->keys);
    pthread_mutex_destroy(&k->mu);
    memset(k, 0, sizeof *k);
}

api_key *api_keys_find(api_keys *k, const char *token) {
    if (k->open) return &k->keys[0];
    if (!token) return NULL;
    size_t len = strlen(token);
    if (len < KEY_MIN || len > KEY_MAX) return NULL;
    uint8_t h[32];
    key_hash(token, len, h);
    api_key *found = NULL;
    for (int i = 0; i < k->n; i++) /* every key is compared, in constant time */
        if (sodium_memcmp(k->keys[i].hash, h, 32) == 0) found = &k->keys[i];
    return found;
}

/* ---- rate limits and counts --------------------------------------------------------------- */

/* Refills the bucket: rate_per_min requests per minute, at most rate_per_min saved up. */
static void refill(api_keys *k, api_key *key, double now) {
    if (key->bucket_at > 0 && now > key->bucket_at)
        key->bucket += (now - key->bucket_at) * k->rate_per_min / 60.0;
    if (key->bucket > k->rate_per_min) key->bucket = k->rate_per_min;
    key->bucket_at = now;
}

api_key *api_keys_named(api_keys *k, const char *name) {
    for (int i = 0; i < k->n; i++)
        if (strcmp(k->keys[i].name, name) == 0) return &k->keys[i];
    return NULL;
}

static int take(api_keys *k, api_key *key, double now, bool count_refusal) {
    if (k->rate_per_min <= 0) return 0;
    pthread_mutex_lock(&k->mu);
    refill(k, key, now);
    int wait = 0;
    if (key->bucket >= 1.0) {
        key->bucket -= 1.0;
    } else {
        wait = (int)ceil((1.0 - key->bucket) * 60.0 / k->rate_per_min);
        if (wait < 1) wait = 1;
        key->rate_limited += count_refusal;
    }
    pthread_mutex_unlock(&k->mu);
    return wait;
}

int api_keys_take(api_keys *k, api_key *key, double now) {
    return take(k, key, now, true);
}

int api_keys_take_waiting(api_keys *k, api_key *key, double now) {
    return take(k, key, now, false);
}

void api_keys_count_request(api_keys *k, api_key *key) {
    pthread_mutex_lock(&k->mu);
    key->requests++;
    pthread_mutex_unlock(&k->mu);
}

void api_keys_count_tokens(api_keys *k, api_key *key, int64_t prompt, int64_t completion) {
    pthread_mutex_lock(&k->mu);
    key->prompt_tokens += prompt;
    key->completion_tokens += completion;
    pthread_mutex_unlock(&k->mu);
}

json_t *api_keys_usage_json(api_keys *k, api_key *key, double now) {
    pthread_mutex_lock(&k->mu);
    json_t *limit = json_null();
    if (k->rate_per_min > 0) {
        refill(k, key, now);
        limit = json_pack("{s:f, s:I}", "requests_per_minute", k->rate_per_min, "remaining",
                          (json_int_t)floor(key->bucket));
    }
    json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:o}", "object", "usage", "key",
                          key->name, "requests", (json_int_t)key->requests, "prompt_tokens",
                          (json_int_t)key->prompt_tokens, "completion_tokens",
                          (json_int_t)key->completion_tokens, "total_tokens",
                          (json_int_t)(key->prompt_tokens + key->completion_tokens), "rate_limited",
                          (json_int_t)key->rate_limited, "rate_limit", limit);
    pthread_mutex_unlock(&k->mu);
    return o;
}

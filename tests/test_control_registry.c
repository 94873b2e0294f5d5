/* test_control_registry.c - the registry (registry.h) in this process, on
 * 127.0.0.1:0 with a small synthetic model and its own temporary files,
 * driven through its HTTP API with mt_http_json:
 *   - every endpoint refuses what is missing, mistyped, too long, too large
 *     or badly authorised with the right 4xx and a message naming it, and
 *     goes on serving;
 *   - accounts need the admin token when the registry has one;
 *   - a node that joins again with its key keeps its id (the old token
 *     stops working), and no other account can take that key;
 *   - heartbeat counters become ledger rows (increases only; a counter that
 *     goes down is a restarted node) and credits;
 *   - pause now, resume and schedules change the node's state and drain;
 *   - routes: 503 while nothing serves, a stage route once a node serves,
 *     swarm --require-volunteer refuses accounts until they volunteer;
 *   - a heartbeat's load (sessions, KV cache bytes) shows in /v1/status, and so
 *     does its "problem" (why the node cannot serve) until a heartbeat without one;
 *   - a restart on the same database keeps accounts, nodes, ledger and
 *     credits, and a database of another model or mode is refused; a
 *     database from before a column was added gets it;
 *   - after a restart the nodes alive when the registry stopped stay alive
 *     and keep their shards for dead_after_ms from the start (a node dead
 *     before the stop stays dead, and the downtime is not uptime); then,
 *     unheard, they die;
 *   - a node that lowers its capacity below its shard (a full disk) loses
 *     it to a spare;
 *   - a real node agent (node_agent.h) joins, fetches its shard from the
 *     seed, serves it, and a requester's tokens through it reach the ledger
 *     (tokens x layers); when its key joins again elsewhere it joins again
 *     without being credited twice; it drains when paused and comes back;
 *     under a registry of another model it does not serve the shard of the
 *     same name it kept from the first;
 *   - spot-check reports (docs/spot-checking.md), against in-process nodes
 *     (node.h), one of them corrupting its output: every field and abuse
 *     case refused (401/400/404/409/429 with the field named); the registry
 *     checks both named nodes itself and quarantines only the corrupting one
 *     (state, no role, no route, no credit, kept over a restart and over a
 *     database made before quarantines existed); a claim against two honest
 *     nodes quarantines nobody, and a node found right is not probed again
 *     at once; the admin token releases a node, nothing else does.
 * Stand-in nodes are plain HTTP calls: join, then heartbeats that claim
 * their assigned shard is ready. */
#include "check.h"
#include "moontail/cert.h"
#include "moontail/http.h"
#include "moontail/keys.h"
#include "moontail/node.h"
#include "moontail/node_agent.h"
#include "moontail/registry.h"
#include "moontail/requester.h"
#include "moontail/shard_fetch.h"
#include "moontail/synth_model.h"
#include "moontail/transport.h"

#include <errno.h>
#include <math.h>
#include <sodium.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

static char dir[300], model[400], model2[400];
static char base[200]; /* the registry under test, "http://127.0.0.1:PORT" */
static mt_registry *reg;

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *jstr(const json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static json_int_t jint(const json_t *o, const char *key) {
    return json_integer_value(json_object_get(o, key));
}

/* ---- the registry --------------------------------------------------------------------------- */

typedef struct reg_opts {
    const char *name; /* of the database, key and shard dir in `dir` */
    const char *model;
    mt_registry_mode mode;
    const char *admin;
    bool require_volunteer;
    int replicas;           /* 0: 1 */
    int reports_per_minute; /* 0: the default */
    int spares;             /* (0) */
    int dead_after_ms;      /* (0: 60000, as the stand-ins beat only when told to) */
    int objective;          /* mt_place_objective (0: throughput) */
    double latency_goal_ms; /* (0: none) */
} reg_opts;

static mt_registry *reg_open(const reg_opts *o, mt_error *err) {
    char db[400], key[400], shards[400];
    snprintf(db, sizeof db, "%s/%s.db", dir, o->name);
    snprintf(key, sizeof key, "%s/%s.key", dir, o->name);
    snprintf(shards, sizeof shards, "%s/%s-seed", dir, o->name);
    mt_registry_config c = {.model = o->model ? o->model : model,
                            .db = db,
                            .key = key,
                            .shard_dir = shards,
                            .listen = "127.0.0.1:0",
                            .mode = o->mode,
                            .replicas = o->replicas ? o->replicas : 1,
                            .reports_per_minute = o->reports_per_minute,
                            .spares = o->spares,
                            .objective = o->objective,
                            .latency_goal_ms = o->latency_goal_ms,
                            .heartbeat_ms = 200,
                            .dead_after_ms = o->dead_after_ms > 0 ? o->dead_after_ms : 60000,
                            .admin_token = o->admin,
                            .require_volunteer = o->require_volunteer,
                            .quiet = true};
    mt_registry *r = mt_registry_start(&c, err);
    if (r) snprintf(base, sizeof base, "%s", mt_registry_url(r));
    return r;
}

/* method path with a body given as JSON text (NULL: none). */
static int call(const char *method, const char *path, const char *token, const char *body,
                json_t **out, mt_error *err) {
    char url[600];
    snprintf(url, sizeof url, "%s%s", base, path);
    json_t *b = NULL;
    if (body) {
        json_error_t je;
        b = json_loads(body, 0, &je);
        if (!b) {
            fprintf(stderr, "test bug: body %s: %s\n", body, je.text);
            abort();
        }
    }
    memset(err, 0, sizeof *err);
    int st = mt_http_json(method, url, token, b, 10000, out, err);
    json_decref(b);
    return st;
}

static bool has(const char *msg, const char *sub) {
    return !sub || strstr(msg, sub);
}
static const char *or_empty(const char *s) {
    return s ? s : "";
}

/* A status and (if sub) a message that contains sub. */
#define EXPECT(want, sub, method, path, token, body)                                               \
    do {                                                                                           \
        mt_error e_;                                                                               \
        int st_ = call(method, path, token, body, NULL, &e_);                                      \
        CHECK(st_ == (want) && has(e_.msg, sub), "%s %s %s: %d (want %d and '%s'): %s", method,    \
              path, or_empty(body), st_, want, or_empty(sub), e_.msg);                             \
    } while (0)

/* A raw POST of body bytes that are not JSON (mt_http_json cannot send them). */
static int raw_post(const char *path, const char *body, const char *token) {
    const char *hostport = base + strlen("http://");
    int fd = mt_connect_tcp(hostport, 2000, NULL);
    if (fd < 0) return -1;
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char req[2048];
    int k = snprintf(req, sizeof req,
                     "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n%s%s%s"
                     "Connection: close\r\n\r\n%s",
                     path, strlen(body), token ? "Authorization: Bearer " : "", token ? token : "",
                     token ? "\r\n" : "", body);
    int st = -1;
    char resp[64] = {0};
    if (send(fd, req, (size_t)k, MSG_NOSIGNAL) == k && recv(fd, resp, sizeof resp - 1, 0) > 12)
        st = atoi(resp + 9);
    close(fd);
    return st;
}

static char *new_account(const char *name, const char *admin) {
    char body[200];
    snprintf(body, sizeof body, "{\"name\": \"%s\"}", name);
    json_t *out = NULL;
    mt_error err;
    int st = call("POST", "/v1/accounts", admin, body, &out, &err);
    CHECK(st == 201 && strlen(jstr(out, "token")) == 64, "account %s: %d %s", name, st, err.msg);
    char *tok = strdup(jstr(out, "token"));
    json_decref(out);
    return tok;
}

/* ---- stand-in nodes ---------------------------------------------------------------------------
 */

typedef struct fake_node {
    int64_t id;
    char token[65];
    char pk[MT_KEYS_HEX_SIZE];
    char path[64]; /* "/v1/nodes/ID" */
} fake_node;

/* Joins as a node at addr (its data plane; stand-ins use the discard port). */
static int fake_join_at(const char *account, const char *pk, int64_t capacity, const char *addr,
                        fake_node *n, mt_error *err) {
    char body[600];
    snprintf(body, sizeof body,
             "{\"name\": \"stand-in\", \"pubkey\": \"%s\", \"addr\": \"%s\","
             " \"capacity\": %lld, \"speed\": 1.5, \"hw\": {\"ram\": 8000000000, \"cores\": 4,"
             " \"simd\": \"avx2\", \"gpu\": \"\"}}",
             pk, addr, (long long)capacity);
    json_t *out = NULL;
    int st = call("POST", "/v1/nodes", account, body, &out, err);
    if (st == 201) {
        n->id = jint(out, "node_id");
        snprintf(n->token, sizeof n->token, "%s", jstr(out, "token"));
        snprintf(n->pk, sizeof n->pk, "%s", pk);
        snprintf(n->path, sizeof n->path, "/v1/nodes/%lld", (long long)n->id);
    }
    json_decref(out);
    return st;
}

static int fake_join(const char *account, const char *pk, int64_t capacity, fake_node *n,
                     mt_error *err) {
    /* a loopback address of its own where nothing listens: two live nodes cannot share one */
    static int k = 0;
    char addr[64];
    k++;
    snprintf(addr, sizeof addr, "127.0.%d.%d:9", 9 + k / 250, 1 + k % 250);
    return fake_join_at(account, pk, capacity, addr, n, err);
}

static void new_pk(char pk[MT_KEYS_HEX_SIZE]) {
    mt_keys k;
    mt_keys_generate(&k, NULL);
    mt_keys_pk_to_hex(k.pk, pk);
}

/* A heartbeat with the given ready shard and counters (< 0: not sent). */
static int beat(const fake_node *n, const char *ready, int64_t tl, int64_t er, json_t **out) {
    json_t *served = json_object();
    if (tl >= 0) json_object_set_new(served, "token_layers", json_integer(tl));
    if (er >= 0) json_object_set_new(served, "expert_rows", json_integer(er));
    json_t *body = json_pack("{s:s, s:o}", "ready_shard", ready, "served", served);
    char url[600];
    snprintf(url, sizeof url, "%s%s/heartbeat", base, n->path);
    mt_error err = {{0}};
    int st = mt_http_json("POST", url, n->token, body, 10000, out, &err);
    json_decref(body);
    return st;
}

/* Beats until the node serves its assignment (claiming the shard is ready). */
static bool make_serving(const fake_node *n, char shard[96]) {
    shard[0] = 0;
    for (int i = 0; i < 100; i++) {
        json_t *out = NULL;
        beat(n, shard, -1, -1, &out);
        const char *want = jstr(json_object_get(out, "assignment"), "shard");
        bool serving = strcmp(jstr(out, "state"), "serving") == 0;
        snprintf(shard, 96, "%s", want);
        json_decref(out);
        if (serving) return true;
        sleep_ms(50);
    }
    return false;
}

static json_t *node_status(int64_t id) {
    json_t *st = NULL;
    mt_error err;
    call("GET", "/v1/status", NULL, NULL, &st, &err);
    json_t *nodes = json_object_get(st, "nodes"), *v = NULL;
    for (size_t i = 0; i < json_array_size(nodes); i++)
        if (jint(json_array_get(nodes, i), "node_id") == id) v = json_array_get(nodes, i);
    json_incref(v);
    json_decref(st);
    return v;
}

/* Waits up to ms for the node's status field `key` to be `want`. */
static bool wait_status(int64_t id, const char *key, const char *want, int ms) {
    for (double t0 = now_ms(); now_ms() - t0 < ms; sleep_ms(50)) {
        json_t *n = node_status(id);
        bool yes = strcmp(jstr(n, key), want) == 0;
        json_decref(n);
        if (yes) return true;
    }
    return false;
}

/* ---- accounts ------------------------------------------------------------------------------- */

static void test_accounts(char **alice) {
    EXPECT(400, "\"name\" is required", "POST", "/v1/accounts", NULL, "{}");
    EXPECT(400, "\"name\" must be a string", "POST", "/v1/accounts", NULL, "{\"name\": 5}");
    EXPECT(400, "control characters", "POST", "/v1/accounts", NULL, "{\"name\": \"a\\u0001b\"}");
    EXPECT(400, "at most 63", "POST", "/v1/accounts", NULL,
           "{\"name\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}");
    EXPECT(400, "empty", "POST", "/v1/accounts", NULL, "{\"name\": \"\"}");
    CHECK(raw_post("/v1/accounts", "{nope", NULL) == 400, "malformed JSON");
    CHECK(raw_post("/v1/accounts", "[1, 2]", NULL) == 400, "a JSON array");
    CHECK(raw_post("/v1/accounts", "{\"name\": 99999999999999999999999}", NULL) == 400,
          "a number past 64 bits");
    CHECK(raw_post("/v1/accounts", "{\"name\": \"a\\u0000b\"}", NULL) == 400, "a NUL in a string");

    json_t *out = NULL;
    mt_error err;
    int st = call("POST", "/v1/accounts", NULL, "{\"name\": \"alice\"}", &out, &err);
    const char *tok = jstr(out, "token");
    bool hex = strlen(tok) == 64 && strspn(tok, "0123456789abcdef") == 64;
    CHECK(st == 201 && hex && jint(out, "account_id") > 0 &&
              strcmp(jstr(out, "name"), "alice") == 0,
          "alice: %d %s", st, err.msg);
    *alice = strdup(tok);
    int64_t id = jint(out, "account_id");
    json_decref(out);
    EXPECT(409, "exists already", "POST", "/v1/accounts", NULL, "{\"name\": \"alice\"}");

    EXPECT(401, "missing or unknown account token", "GET", "/v1/accounts/me", NULL, NULL);
    EXPECT(401, "unknown account token", "GET", "/v1/accounts/me", "0123", NULL);
    st = call("GET", "/v1/accounts/me", *alice, NULL, &out, &err);
    json_t *credits = json_object_get(out, "credits");
    CHECK(st == 200 && jint(out, "account_id") == id &&
              json_array_size(json_object_get(out, "nodes")) == 0 &&
              json_real_value(json_object_get(credits, "balance")) == 0 &&
              json_is_false(json_object_get(credits, "volunteered")),
          "me: %d %s", st, err.msg);
    json_decref(out);

    /* a certificate for the requester's key, from the registry's key */
    EXPECT(401, NULL, "POST", "/v1/accounts/me/cert", NULL, "{}");
    EXPECT(400, "\"pubkey\" is required", "POST", "/v1/accounts/me/cert", *alice, "{}");
    EXPECT(400, "64 hex", "POST", "/v1/accounts/me/cert", *alice, "{\"pubkey\": \"zz\"}");
    EXPECT(400, "at most 64", "POST", "/v1/accounts/me/cert", *alice,
           "{\"pubkey\": \"00000000000000000000000000000000000000000000000000000000000000000\"}");
    mt_keys k;
    mt_keys_generate(&k, NULL);
    char pk[MT_KEYS_HEX_SIZE], body[200];
    mt_keys_pk_to_hex(k.pk, pk);
    snprintf(body, sizeof body, "{\"pubkey\": \"%s\"}", pk);
    st = call("POST", "/v1/accounts/me/cert", *alice, body, &out, &err);
    uint8_t cert[MT_CERT_BYTES], rk[32];
    size_t n = 0;
    mt_cert c;
    const char *hexcert = jstr(out, "cert");
    bool decoded =
        sodium_hex2bin(cert, sizeof cert, hexcert, strlen(hexcert), NULL, &n, NULL) == 0 &&
        n == MT_CERT_BYTES && mt_keys_pk_from_hex(rk, mt_registry_pubkey_hex(reg), NULL) == 0;
    CHECK(st == 200 && decoded &&
              strcmp(jstr(out, "registry_key"), mt_registry_pubkey_hex(reg)) == 0,
          "cert: %d %s", st, err.msg);
    CHECK(decoded &&
              mt_cert_verify(cert, n, (const uint8_t(*)[32])rk, 1, k.pk, mt_cert_now(), 0, &c,
                             &err) == 0 &&
              c.role == MT_CERT_ROLE_REQUESTER && c.account == (uint64_t)id,
          "the requester's certificate: %s", err.msg);
    json_decref(out);
}

/* ---- nodes: join and heartbeat validation ------------------------------------------------------
 */

static void test_node_validation(const char *alice, const char *bob) {
    char pk[MT_KEYS_HEX_SIZE], body[700];
    new_pk(pk);
#define JOIN(extra)                                                                                \
    (snprintf(body, sizeof body,                                                                   \
              "{\"name\": \"n\", \"pubkey\": \"%s\", \"addr\": \"127.0.0.1:7000\", \"capacity\":"  \
              " 1000000%s}",                                                                       \
              pk, extra),                                                                          \
     body)
    EXPECT(401, "account token", "POST", "/v1/nodes", NULL, JOIN(""));
    EXPECT(401, "account token", "POST", "/v1/nodes", "nope", JOIN(""));
    EXPECT(400, "\"name\" is required", "POST", "/v1/nodes", alice, "{}");
    EXPECT(400, "\"pubkey\" is required", "POST", "/v1/nodes", alice, "{\"name\": \"n\"}");
    EXPECT(400, "64 hex", "POST", "/v1/nodes", alice,
           "{\"name\": \"n\", \"pubkey\": \"abc\", \"addr\": \"1.2.3.4:5\", \"capacity\": 1}");
    const char *bad_addr[] = {"nohost", "h:0", "h:70000", "h:12x", ":80", "h:"};
    for (size_t i = 0; i < sizeof bad_addr / sizeof *bad_addr; i++) {
        snprintf(body, sizeof body,
                 "{\"name\": \"n\", \"pubkey\": \"%s\", \"addr\": \"%s\", \"capacity\": 1}", pk,
                 bad_addr[i]);
        EXPECT(400, "HOST:PORT", "POST", "/v1/nodes", alice, body);
    }
    EXPECT(400, "HOST:PORT", "POST", "/v1/nodes", alice, JOIN(", \"shard_addr\": \"x\""));
    EXPECT(400, "\"shard_addr\" must be a string", "POST", "/v1/nodes", alice,
           JOIN(", \"shard_addr\": 7"));
    snprintf(body, sizeof body, "{\"name\": \"n\", \"pubkey\": \"%s\", \"addr\": \"h:1\"}", pk);
    EXPECT(400, "\"capacity\" is required", "POST", "/v1/nodes", alice, body);
    snprintf(body, sizeof body,
             "{\"name\": \"n\", \"pubkey\": \"%s\", \"addr\": \"h:1\", \"capacity\": 0}", pk);
    EXPECT(400, "\"capacity\"", "POST", "/v1/nodes", alice, body);
    snprintf(body, sizeof body,
             "{\"name\": \"n\", \"pubkey\": \"%s\", \"addr\": \"h:1\", \"capacity\": \"1G\"}", pk);
    EXPECT(400, "\"capacity\"", "POST", "/v1/nodes", alice, body);
    snprintf(body, sizeof body,
             "{\"name\": \"n\", \"pubkey\": \"%s\", \"addr\": \"h:1\", \"capacity\": "
             "9000000000000000000}",
             pk);
    EXPECT(400, "\"capacity\"", "POST", "/v1/nodes", alice, body);
    snprintf(body, sizeof body,
             "{\"name\": \"n\", \"pubkey\": \"%s\", \"addr\": \"h:1\", \"capacity\": 1e30}", pk);
    EXPECT(400, "\"capacity\"", "POST", "/v1/nodes", alice, body);
    EXPECT(400, "\"hw\" must be an object", "POST", "/v1/nodes", alice, JOIN(", \"hw\": \"x\""));
    EXPECT(400, "\"cores\"", "POST", "/v1/nodes", alice, JOIN(", \"hw\": {\"cores\": -1}"));
    EXPECT(400, "\"ram\"", "POST", "/v1/nodes", alice, JOIN(", \"hw\": {\"ram\": \"8G\"}"));
    EXPECT(400, "\"simd\"", "POST", "/v1/nodes", alice, JOIN(", \"hw\": {\"simd\": 5}"));
    EXPECT(400, "\"gpu\"", "POST", "/v1/nodes", alice, JOIN(", \"hw\": {\"gpu\": \"a\\nb\"}"));
    EXPECT(400, "\"speed\"", "POST", "/v1/nodes", alice, JOIN(", \"speed\": \"fast\""));
    EXPECT(400, "\"speed\"", "POST", "/v1/nodes", alice, JOIN(", \"speed\": 0"));
    EXPECT(400, "\"speed\"", "POST", "/v1/nodes", alice, JOIN(", \"speed\": -2.5"));
    EXPECT(400, "\"name\"", "POST", "/v1/nodes", alice,
           "{\"name\": \"a\\u001bb\", \"pubkey\": \"x\", \"addr\": \"h:1\", \"capacity\": 1}");
#undef JOIN

    /* joins, and joins again with the same key: the same id, a new token */
    fake_node a, again;
    mt_error err;
    /* (too small to be given work: the route tests below need a node of their own) */
    CHECK(fake_join(alice, pk, 1000, &a, &err) == 201 && a.id > 0, "join: %s", err.msg);
    CHECK(fake_join(alice, pk, 2000, &again, &err) == 201 && again.id == a.id &&
              strcmp(again.token, a.token) != 0,
          "join again: id %lld -> %lld: %s", (long long)a.id, (long long)again.id, err.msg);
    CHECK(beat(&a, "", -1, -1, NULL) == 401, "the first token still works after a new join");
    CHECK(beat(&again, "", -1, -1, NULL) == 200, "the new token does not work");
    fake_node stolen;
    CHECK(fake_join(bob, pk, 1000, &stolen, &err) == 409 &&
              strstr(err.msg, "belongs to another account"),
          "another account took the key: %s", err.msg);
    json_t *me = NULL;
    call("GET", "/v1/accounts/me", alice, NULL, &me, &err);
    CHECK(json_array_size(json_object_get(me, "nodes")) == 1, "alice has %zu nodes",
          json_array_size(json_object_get(me, "nodes")));
    json_decref(me);

    /* two live nodes cannot share one data-plane address (a second node on a port another
     * holds never serves): joining there, or moving there, is refused naming the other */
    char pk_at[MT_KEYS_HEX_SIZE], pk_near[MT_KEYS_HEX_SIZE], taken[160], near_hb[120];
    new_pk(pk_at);
    new_pk(pk_near);
    fake_node at, dup, near;
    CHECK(fake_join_at(bob, pk_at, 1000, "127.0.8.1:9", &at, &err) == 201, "join: %s", err.msg);
    CHECK(fake_join_at(bob, pk_near, 1000, "127.0.8.1:9", &dup, &err) == 409 &&
              has(err.msg, "address 127.0.8.1:9 is taken by node") &&
              has(err.msg, "another --listen port"),
          "a second node at one address: %s", err.msg);
    snprintf(taken, sizeof taken, "node %lld 'stand-in'", (long long)at.id);
    CHECK(has(err.msg, taken), "the refusal does not name %s: %s", taken, err.msg);
    CHECK(fake_join_at(bob, pk_near, 1000, "127.0.8.2:9", &near, &err) == 201, "join: %s", err.msg);
    snprintf(near_hb, sizeof near_hb, "%s/heartbeat", near.path);
    EXPECT(409, "is taken by node", "POST", near_hb, near.token, "{\"addr\": \"127.0.8.1:9\"}");
    EXPECT(200, NULL, "POST", near_hb, near.token, "{\"addr\": \"127.0.8.3:9\"}");

    /* heartbeats */
    char hb[100];
    snprintf(hb, sizeof hb, "%s/heartbeat", again.path);
    const char *tok = again.token;
    EXPECT(404, "no such node", "POST", "/v1/nodes/abc/heartbeat", tok, "{}");
    EXPECT(404, "no such node", "POST", "/v1/nodes/0/heartbeat", tok, "{}");
    EXPECT(404, "no such node", "POST", "/v1/nodes/-3/heartbeat", tok, "{}");
    EXPECT(404, "not known", "POST", "/v1/nodes/999999/heartbeat", tok, "{}");
    EXPECT(401, "missing or wrong token", "POST", hb, NULL, "{}");
    EXPECT(401, "missing or wrong token", "POST", hb, "0000", "{}");
    EXPECT(403, "another account", "POST", hb, bob, "{}");
    char extra[120];
    snprintf(extra, sizeof extra, "%s/heartbeat/pause", again.path);
    EXPECT(404, "no endpoint", "POST", extra, tok, "{}");
    snprintf(extra, sizeof extra, "%s/heartbeats", again.path);
    EXPECT(404, "no endpoint", "POST", extra, tok, "{}");
    snprintf(extra, sizeof extra, "%s/x/heartbeat", again.path);
    EXPECT(404, NULL, "POST", extra, tok, "{}");
    EXPECT(404, "no endpoint", "GET", hb, tok, NULL);
    EXPECT(400, "\"served\"", "POST", hb, tok, "{\"served\": 5}");
    EXPECT(400, "\"load\"", "POST", hb, tok, "{\"load\": [1]}");
    EXPECT(400, "\"token_layers\"", "POST", hb, tok, "{\"served\": {\"token_layers\": -1}}");
    EXPECT(400, "\"token_layers\"", "POST", hb, tok, "{\"served\": {\"token_layers\": \"10\"}}");
    EXPECT(400, "\"expert_rows\"", "POST", hb, tok,
           "{\"served\": {\"expert_rows\": 4000000000000000000}}");
    EXPECT(400, "\"queue\"", "POST", hb, tok, "{\"load\": {\"queue\": -1}}");
    EXPECT(400, "\"tok_per_s\"", "POST", hb, tok, "{\"load\": {\"tok_per_s\": \"fast\"}}");
    EXPECT(400, "\"tok_per_s\"", "POST", hb, tok, "{\"load\": {\"tok_per_s\": -1}}");
    EXPECT(400, "\"kv_bytes\"", "POST", hb, tok, "{\"load\": {\"kv_bytes\": -1}}");
    EXPECT(400, "\"kv_bytes\"", "POST", hb, tok, "{\"load\": {\"kv_bytes\": \"1 MB\"}}");
    EXPECT(400, "\"kv_budget\"", "POST", hb, tok, "{\"load\": {\"kv_budget\": -1}}");
    EXPECT(400, "\"kv_used\"", "POST", hb, tok, "{\"load\": {\"kv_used\": 1.5}}");
    EXPECT(400, "\"ready_shard\"", "POST", hb, tok, "{\"ready_shard\": 5}");
    EXPECT(400, "\"ready_shard\"", "POST", hb, tok, "{\"ready_shard\": \"L0\\t1\"}");
    EXPECT(400, "\"cert_expires\"", "POST", hb, tok, "{\"cert_expires\": \"soon\"}");
    EXPECT(400, "\"capacity\"", "POST", hb, tok, "{\"capacity\": 0}");
    EXPECT(400, "\"capacity\"", "POST", hb, tok, "{\"capacity\": \"1 GB\"}");
    EXPECT(400, "\"capacity\"", "POST", hb, tok, "{\"capacity\": 1e9}");
    EXPECT(200, NULL, "POST", hb, tok, "{}");
    EXPECT(200, NULL, "POST", hb, tok, "{\"load\": {\"sessions\": 3, \"kv_bytes\": 12345678}}");
    json_t *load = node_status(again.id);
    CHECK(jint(load, "sessions") == 3 && jint(load, "kv_bytes") == 12345678,
          "status after a heartbeat with 3 sessions and 12345678 KV bytes: %lld, %lld",
          (long long)jint(load, "sessions"), (long long)jint(load, "kv_bytes"));
    json_decref(load);
    EXPECT(200, NULL, "POST", hb, tok, "{\"load\": {\"kv_budget\": 8000000, \"kv_used\": 2500}}");
    load = node_status(again.id);
    CHECK(jint(load, "kv_budget") == 8000000 && jint(load, "kv_used") == 2500,
          "status after a heartbeat with 8000000 bytes of session memory, 2500 used: %lld, %lld",
          (long long)jint(load, "kv_budget"), (long long)jint(load, "kv_used"));
    json_decref(load);
    /* why it cannot serve: one line of at most MT_NODE_PROBLEM_MAX bytes, kept until a
     * heartbeat without it */
    EXPECT(400, "\"problem\"", "POST", hb, tok, "{\"problem\": 7}");
    EXPECT(400, "\"problem\"", "POST", hb, tok, "{\"problem\": \"bad\\nline\"}");
    char big[MT_NODE_PROBLEM_MAX + 40];
    snprintf(big, sizeof big, "{\"problem\": \"%0*d\"}", MT_NODE_PROBLEM_MAX + 1, 0);
    EXPECT(400, "\"problem\"", "POST", hb, tok, big);
    EXPECT(200, NULL, "POST", hb, tok, "{\"problem\": \"cannot serve shard L0-2A: damaged\"}");
    load = node_status(again.id);
    const char *problem = json_string_value(json_object_get(load, "problem"));
    CHECK(problem && strcmp(problem, "cannot serve shard L0-2A: damaged") == 0,
          "status after a heartbeat with a problem: '%s'", problem ? problem : "(none)");
    json_decref(load);
    EXPECT(200, NULL, "POST", hb, tok, "{}");
    load = node_status(again.id);
    CHECK(json_is_string(json_object_get(load, "problem")) &&
              !json_string_value(json_object_get(load, "problem"))[0],
          "the problem stayed after a heartbeat without it");
    json_decref(load);

    /* pause */
    char pp[100];
    snprintf(pp, sizeof pp, "%s/pause", again.path);
    EXPECT(401, NULL, "POST", pp, NULL, "{\"now\": true}");
    EXPECT(403, "another account", "POST", pp, bob, "{\"now\": true}");
    EXPECT(400, "true or false", "POST", pp, tok, "{\"now\": \"yes\"}");
    EXPECT(400, "true or false", "POST", pp, tok, "{\"resume\": 1}");
    EXPECT(400, "\"schedule\"", "POST", pp, tok, "{\"schedule\": 5}");
    EXPECT(400, "'Mon-'", "POST", pp, tok, "{\"schedule\": \"Mon- 09:00-10:00\"}");
    EXPECT(400, "'25:00-26:00'", "POST", pp, tok, "{\"schedule\": \"Mon 25:00-26:00\"}");
    EXPECT(400, "at most 127", "POST", pp, tok,
           "{\"schedule\": \"Mon 09:00-10:00; Mon 09:00-10:00; Mon 09:00-10:00; Mon 09:00-10:00;"
           " Mon 09:00-10:00; Mon 09:00-10:00; Mon 09:00-10:00; Mon 09:00-10:00\"}");
    snprintf(extra, sizeof extra, "%s/pause/now", again.path);
    EXPECT(404, "no endpoint", "POST", extra, tok, "{\"now\": true}");
}

/* ---- shards, routes, usage, ledger, anything else ---------------------------------------------
 */

static void test_other_endpoints(const char *alice) {
    EXPECT(404, "not a shard", "GET", "/v1/shards/bogus/manifest", NULL, NULL);
    EXPECT(404, "not a shard", "GET", "/v1/shards/L0-99A/manifest", NULL, NULL);
    EXPECT(404, "not a shard", "GET", "/v1/shards/L00-2A/manifest", NULL, NULL);
    EXPECT(404, "not a shard", "GET", "/v1/shards/L2-1A/manifest", NULL, NULL);
    EXPECT(404, "not a shard", "GET", "/v1/shards/L0-1A-E0-99/manifest", NULL, NULL);
    /* names give ranges as `moontail status` does, last layer and expert included: 4
     * layers and 8 experts are L0-3, E0-7, and a single one has one spelling */
    EXPECT(404, "not a shard", "GET", "/v1/shards/L0-4A/manifest", NULL, NULL);
    EXPECT(404, "not a shard", "GET", "/v1/shards/L0-3A-E0-8/manifest", NULL, NULL);
    EXPECT(404, "not a shard", "GET", "/v1/shards/L1-1A/manifest", NULL, NULL);
    EXPECT(404, "not a shard", "GET", "/v1/shards/L1A-E2-2/manifest", NULL, NULL);
    EXPECT(404, "no such shard", "GET", "/v1/shards/", NULL, NULL);
    EXPECT(404, "no such shard resource", "GET", "/v1/shards/head/other", NULL, NULL);
    EXPECT(404, "not cut yet", "GET", "/v1/shards/L0A", NULL, NULL);
    json_t *m = NULL;
    mt_error err;
    int st = call("GET", "/v1/shards/L1A-E2-5/manifest", NULL, NULL, &m, &err);
    CHECK(st == 200 && mt_shard_manifest_check(m, &err) == 0 &&
              strcmp(jstr(m, "name"), "L1A-E2-5") == 0,
          "manifest: %d %s", st, err.msg);
    /* the seed bytes match the manifest, piece by piece */
    if (st == 200) {
        char url[300];
        snprintf(url, sizeof url, "%s/v1/shards/L1A-E2-5", base);
        size_t total = (size_t)jint(m, "bytes"), piece = (size_t)jint(m, "piece_bytes");
        uint8_t *buf = malloc(piece);
        int wrong = 0;
        for (size_t i = 0, off = 0; off < total; i++, off += piece) {
            size_t len = total - off < piece ? total - off : piece;
            uint8_t h[32];
            char hex[65];
            if (mt_http_get_range(url, off, len, buf, 5000, &err) != 0) {
                wrong++;
                continue;
            }
            crypto_generichash(h, 32, buf, len, NULL, 0);
            sodium_bin2hex(hex, sizeof hex, h, 32);
            wrong +=
                strcmp(hex, json_string_value(json_array_get(json_object_get(m, "pieces"), i)));
        }
        CHECK(wrong == 0 && total > 0, "seed bytes: %d pieces differ: %s", wrong, err.msg);
        free(buf);
    }
    json_decref(m);

    EXPECT(401, NULL, "POST", "/v1/routes", NULL, "{}");
    EXPECT(400, "\"avoid\"", "POST", "/v1/routes", alice, "{\"avoid\": \"x\"}");
    EXPECT(400, "\"avoid\"", "POST", "/v1/routes", alice, "{\"avoid\": [\"a\"]}");
    json_t *many = json_array();
    for (int i = 0; i < 5000; i++) json_array_append_new(many, json_integer(i));
    json_t *body = json_pack("{s:o}", "avoid", many);
    char *text = json_dumps(body, JSON_COMPACT);
    EXPECT(400, "\"avoid\"", "POST", "/v1/routes", alice, text);
    free(text);
    json_decref(body);
    EXPECT(400, "\"session\"", "POST", "/v1/routes", alice, "{\"session\": -1}");
    EXPECT(400, "\"session\"", "POST", "/v1/routes", alice, "{\"session\": \"s\"}");

    EXPECT(401, NULL, "POST", "/v1/usage", NULL, "{\"tokens\": 1}");
    EXPECT(400, "\"tokens\" is required", "POST", "/v1/usage", alice, "{}");
    EXPECT(400, "\"tokens\"", "POST", "/v1/usage", alice, "{\"tokens\": -1}");
    EXPECT(400, "\"tokens\"", "POST", "/v1/usage", alice, "{\"tokens\": 2199023255553}");
    EXPECT(400, "\"tokens\"", "POST", "/v1/usage", alice, "{\"tokens\": 1.5}");

    EXPECT(404, "no endpoint", "GET", "/v1/nope", NULL, NULL);
    EXPECT(404, "no endpoint", "DELETE", "/v1/accounts", alice, NULL);
    EXPECT(404, "no endpoint", "GET", "/v1/nodes", alice, NULL);
    EXPECT(404, "no endpoint", "GET", "/v1/routes", alice, NULL);
    EXPECT(200, NULL, "GET", "/", NULL, NULL);
    EXPECT(200, NULL, "GET", "/v1/ledger/nodes", NULL, NULL);
    EXPECT(200, NULL, "GET", "/v1/status", NULL, NULL);
}

/* ---- the ledger ----------------------------------------------------------------------------- */

static json_t *ledger_of(int64_t node, int64_t *rows) {
    json_t *l = NULL, *v = NULL;
    mt_error err;
    call("GET", "/v1/ledger/nodes", NULL, NULL, &l, &err);
    *rows = jint(l, "ledger_rows");
    json_t *nodes = json_object_get(l, "nodes");
    for (size_t i = 0; i < json_array_size(nodes); i++)
        if (jint(json_array_get(nodes, i), "node_id") == node) v = json_array_get(nodes, i);
    json_incref(v);
    json_decref(l);
    return v;
}

/* Counters reported, and what the ledger must hold after each (summed by
 * hand: an increase is credited, a decrease means the node restarted and
 * its whole new count is credited). */
static void test_ledger(const char *carol, fake_node *n) {
    char pk[MT_KEYS_HEX_SIZE];
    new_pk(pk);
    mt_error err;
    CHECK(fake_join(carol, pk, 1000, n, &err) == 201, "join: %s", err.msg);
    static const struct {
        int64_t tl, er;   /* reported (-1: not sent) */
        int64_t new_rows; /* ledger rows this heartbeat adds */
        int64_t sum_tl, sum_er;
    } steps[] = {{10, 4, 2, 10, 4},  {25, 4, 1, 25, 4}, {25, 4, 0, 25, 4},
                 {-1, -1, 0, 25, 4}, {7, 2, 2, 32, 6},  {7, 2, 0, 32, 6},
                 {9, -1, 1, 34, 6},  {0, 0, 0, 34, 6},  {1, 1, 2, 35, 7}};
    int64_t rows0;
    json_decref(ledger_of(n->id, &rows0));
    int64_t rows = rows0;
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
        int st = beat(n, "", steps[i].tl, steps[i].er, NULL);
        int64_t now_rows;
        json_t *l = ledger_of(n->id, &now_rows);
        CHECK(st == 200 && now_rows - rows == steps[i].new_rows &&
                  jint(l, "token_layers") == steps[i].sum_tl &&
                  jint(l, "expert_rows") == steps[i].sum_er,
              "step %zu (%lld, %lld): %d, +%lld rows (want %lld), sums %lld %lld (want %lld %lld)",
              i, (long long)steps[i].tl, (long long)steps[i].er, st, (long long)(now_rows - rows),
              (long long)steps[i].new_rows, (long long)jint(l, "token_layers"),
              (long long)jint(l, "expert_rows"), (long long)steps[i].sum_tl,
              (long long)steps[i].sum_er);
        json_decref(l);
        rows = now_rows;
    }
    /* credits: earned = token-layers + expert rows / n_expert_used (2); spent = tokens x n_layer
     * (4) */
    json_t *out = NULL;
    int st = call("POST", "/v1/usage", carol, "{\"tokens\": 3}", &out, &err);
    json_t *c = json_object_get(out, "credits");
    CHECK(st == 200 && jint(c, "served_token_layers") == 35 && jint(c, "served_expert_rows") == 7 &&
              jint(c, "used_tokens") == 3 &&
              json_real_value(json_object_get(c, "earned")) == 35 + 7 / 2.0 &&
              json_real_value(json_object_get(c, "spent")) == 12 &&
              json_real_value(json_object_get(c, "balance")) == 35 + 3.5 - 12 &&
              json_is_true(json_object_get(c, "volunteered")),
          "credits: %d %s", st, err.msg);
    json_decref(out);
}

/* ---- pause, resume, schedules -----------------------------------------------------------------
 */

static void test_pause(const char *dave) {
    fake_node n;
    char pk[MT_KEYS_HEX_SIZE], shard[96], pp[100];
    new_pk(pk);
    mt_error err;
    CHECK(fake_join(dave, pk, 1LL << 40, &n, &err) == 201, "join: %s", err.msg);
    CHECK(make_serving(&n, shard) && shard[0], "the node was given nothing to serve");
    snprintf(pp, sizeof pp, "%s/pause", n.path);

    json_t *out = NULL;
    int st = call("POST", pp, n.token, "{\"now\": true}", &out, &err);
    CHECK(st == 200 && json_is_true(json_object_get(out, "paused")) &&
              (strcmp(jstr(out, "state"), "draining") == 0 ||
               strcmp(jstr(out, "state"), "paused") == 0),
          "pause now: %d %s, state %s", st, err.msg, jstr(out, "state"));
    json_decref(out);
    beat(&n, shard, -1, -1, &out);
    CHECK(json_is_true(json_object_get(out, "drain")), "a paused node is not told to drain");
    json_decref(out);
    CHECK(wait_status(n.id, "role", "none", 5000), "the paused node kept its work");
    CHECK(wait_status(n.id, "state", "paused", 5000), "the paused node is not 'paused'");
    st = call("POST", pp, n.token, "{\"now\": false}", &out, &err); /* changes nothing */
    CHECK(st == 200 && json_is_true(json_object_get(out, "paused")), "now: false resumed");
    json_decref(out);

    st = call("POST", pp, dave, "{\"resume\": true}", &out, &err); /* the account may, too */
    CHECK(st == 200 && json_is_false(json_object_get(out, "paused")), "resume: %d %s", st, err.msg);
    json_decref(out);
    CHECK(make_serving(&n, shard), "the node did not serve again after resume");

    /* a schedule that covers every minute, one that does not cover now, none */
    st = call("POST", pp, n.token, "{\"schedule\": \"daily 00:00-24:00\"}", &out, &err);
    CHECK(st == 200 && json_is_false(json_object_get(out, "paused")) &&
              strcmp(jstr(out, "schedule"), "daily 00:00-24:00") == 0 &&
              strcmp(jstr(out, "state"), "draining") == 0,
          "all-day schedule: %d %s, state %s", st, err.msg, jstr(out, "state"));
    json_decref(out);
    beat(&n, shard, -1, -1, &out);
    CHECK(json_is_true(json_object_get(out, "drain")), "a node in its pause window does not drain");
    json_decref(out);
    CHECK(wait_status(n.id, "role", "none", 5000), "a node in its pause window kept its work");

    static const char *const days[7] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    char body[100]; /* neither today nor yesterday (whose night could reach into today) */
    snprintf(body, sizeof body, "{\"schedule\": \"%s 00:00-01:00\"}", days[(tm.tm_wday + 3) % 7]);
    st = call("POST", pp, n.token, body, &out, &err);
    CHECK(st == 200 && strcmp(jstr(out, "state"), "paused") != 0 &&
              strcmp(jstr(out, "state"), "draining") != 0,
          "schedule for another day: %d %s, state %s", st, err.msg, jstr(out, "state"));
    json_decref(out);
    CHECK(make_serving(&n, shard), "the node did not serve outside its pause window");
    st = call("POST", pp, n.token, "{\"schedule\": \"\"}", &out, &err);
    CHECK(st == 200 && strcmp(jstr(out, "schedule"), "") == 0 &&
              strcmp(jstr(out, "state"), "serving") == 0,
          "no schedule: %d %s", st, err.msg);
    json_decref(out);
}

/* ---- routes ------------------------------------------------------------------------------------
 */

static void test_routes(const char *dave) {
    /* the node of test_pause serves: a route of one stage through it */
    json_t *out = NULL;
    mt_error err;
    int st = call("POST", "/v1/routes", dave, "{\"session\": 7}", &out, &err);
    json_t *stages = json_object_get(out, "stages");
    int64_t id = jint(json_array_get(stages, 0), "node_id");
    CHECK(st == 200 && strcmp(jstr(out, "mode"), "cell") == 0 &&
              strcmp(jstr(out, "head"), "head") == 0 && json_array_size(stages) == 1 && id > 0,
          "route: %d %s", st, err.msg);
    json_decref(out);
    char body[100];
    snprintf(body, sizeof body, "{\"session\": 7, \"avoid\": [%lld]}", (long long)id);
    EXPECT(503, "no route", "POST", "/v1/routes", dave, body);
}

/* ---- a restart, and databases that are not this registry's ----------------------------------- */

static void test_restart(const reg_opts *o, const char *carol, const char *alice,
                         const fake_node *n) {
    json_t *me0 = NULL, *ledger0 = NULL, *status0 = NULL;
    mt_error err;
    call("GET", "/v1/accounts/me", carol, NULL, &me0, &err);
    call("GET", "/v1/ledger/nodes", NULL, NULL, &ledger0, &err);
    call("GET", "/v1/status", NULL, NULL, &status0, &err);
    char key0[65];
    snprintf(key0, sizeof key0, "%s", mt_registry_pubkey_hex(reg));

    mt_registry_stop(reg);
    /* as a registry from before load_kv_bytes existed left it */
    char db[400];
    snprintf(db, sizeof db, "%s/%s.db", dir, o->name);
    sqlite3 *old = NULL;
    char *msg = NULL;
    CHECK(sqlite3_open(db, &old) == SQLITE_OK &&
              sqlite3_exec(old, "ALTER TABLE nodes DROP COLUMN load_kv_bytes", NULL, NULL, &msg) ==
                  SQLITE_OK,
          "dropping a column from %s: %s", db, msg ? msg : sqlite3_errmsg(old));
    sqlite3_free(msg);
    sqlite3_close(old);
    reg = reg_open(o, &err);
    CHECK(reg != NULL, "restart: %s", err.msg);
    if (!reg) return;
    CHECK(strcmp(key0, mt_registry_pubkey_hex(reg)) == 0, "the registry's key changed");
    json_t *me1 = NULL, *ledger1 = NULL, *status1 = NULL;
    int st = call("GET", "/v1/accounts/me", carol, NULL, &me1, &err);
    json_t *c0 = json_object_get(me0, "credits"), *c1 = json_object_get(me1, "credits");
    CHECK(st == 200 && jint(me0, "account_id") == jint(me1, "account_id") &&
              jint(c1, "served_token_layers") == 35 && jint(c1, "served_expert_rows") == 7 &&
              json_equal(c0, c1) &&
              json_equal(json_object_get(me0, "nodes"), json_object_get(me1, "nodes")),
          "carol after a restart: %d %s", st, err.msg);
    call("GET", "/v1/ledger/nodes", NULL, NULL, &ledger1, &err);
    CHECK(json_equal(ledger0, ledger1) && jint(ledger1, "ledger_rows") > 0,
          "the ledger changed across a restart");
    call("GET", "/v1/status", NULL, NULL, &status1, &err);
    CHECK(jint(status1, "nodes_known") == jint(status0, "nodes_known") &&
              jint(status1, "nodes_known") >= 3,
          "nodes known: %lld -> %lld", (long long)jint(status0, "nodes_known"),
          (long long)jint(status1, "nodes_known"));
    EXPECT(200, NULL, "GET", "/v1/accounts/me", alice, NULL);
    /* the node's token still works, and its counters were kept: the same ones add nothing */
    int64_t rows0 = jint(ledger1, "ledger_rows"), rows;
    CHECK(beat(n, "", 1, 1, NULL) == 200, "the node's token after a restart");
    json_t *l = ledger_of(n->id, &rows);
    CHECK(rows == rows0 && jint(l, "token_layers") == 35, "the same counters added %lld rows",
          (long long)(rows - rows0));
    json_decref(l);
    CHECK(beat(n, "", 2, 1, NULL) == 200, "beat");
    char path[100];
    snprintf(path, sizeof path, "%s/heartbeat", n->path);
    EXPECT(
        200, NULL, "POST", path, n->token,
        "{\"served\": {\"token_layers\": 2, \"expert_rows\": 1}, \"load\": {\"kv_bytes\": 4096}}");
    json_t *ns = node_status(n->id);
    CHECK(jint(ns, "kv_bytes") == 4096, "kv_bytes in a database that lacked the column: %lld",
          (long long)jint(ns, "kv_bytes"));
    json_decref(ns);
    l = ledger_of(n->id, &rows);
    CHECK(rows == rows0 + 1 && jint(l, "token_layers") == 36, "one more token-layer: +%lld rows",
          (long long)(rows - rows0));
    json_decref(l);
    json_decref(me0), json_decref(me1), json_decref(ledger0), json_decref(ledger1);
    json_decref(status0), json_decref(status1);

    /* another model, another mode: refused, saying why; the database stays usable */
    mt_registry_stop(reg);
    reg_opts other = *o;
    other.model = model2;
    reg = reg_open(&other, &err);
    CHECK(reg == NULL && strstr(err.msg, "made for another model") &&
              strstr(err.msg, "a new database"),
          "another model: %s", reg ? "started" : err.msg);
    mt_registry_stop(reg);
    other = *o;
    other.mode = MT_REGISTRY_SWARM;
    reg = reg_open(&other, &err);
    CHECK(reg == NULL && strstr(err.msg, "holds a cell") && strstr(err.msg, "--mode cell"),
          "another mode: %s", reg ? "started" : err.msg);
    mt_registry_stop(reg);
    reg = reg_open(o, &err);
    CHECK(reg != NULL, "the database after refused starts: %s", err.msg);
    EXPECT(200, NULL, "GET", "/v1/accounts/me", carol, NULL);
}

/* ---- a restart's grace; a node that shrinks ----------------------------------------------------
 */

static int64_t status_int(int64_t id, const char *key) {
    json_t *n = node_status(id);
    int64_t v = jint(n, key);
    json_decref(n);
    return v;
}

static void test_restart_grace(void) {
    const int dead_ms = 600;
    reg_opts o = {.name = "grace", .dead_after_ms = dead_ms};
    mt_error err;
    reg = reg_open(&o, &err);
    CHECK(reg != NULL, "grace registry: %s", err.msg);
    if (!reg) return;
    char *acct = new_account("erin", NULL), pk[MT_KEYS_HEX_SIZE], shard[96];
    fake_node a, gone;
    new_pk(pk);
    CHECK(fake_join(acct, pk, 100000000, &a, &err) == 201, "join: %s", err.msg);
    CHECK(make_serving(&a, shard), "the node does not serve");
    new_pk(pk);
    CHECK(fake_join(acct, pk, 100000000, &gone, &err) == 201, "join: %s", err.msg);
    beat(&gone, "", -1, -1, NULL);
    /* `gone` falls silent; `a` beats on until the stop */
    for (double t0 = now_ms(); now_ms() - t0 < 2 * dead_ms; sleep_ms(100))
        beat(&a, shard, -1, -1, NULL);
    CHECK(wait_status(gone.id, "state", "dead", 5000), "the silent node is not dead");
    CHECK(beat(&a, shard, -1, -1, NULL) == 200, "beat");
    int64_t uptime0 = status_int(a.id, "uptime_ms");

    mt_registry_stop(reg);
    sleep_ms(2 * dead_ms); /* down for longer than dead_after_ms */
    double t_start = now_ms();
    reg = reg_open(&o, &err);
    CHECK(reg != NULL, "grace registry restart: %s", err.msg);
    if (!reg) {
        free(acct);
        return;
    }
    /* right away: `a` serves its shard and gets routes; `gone` is still dead */
    json_t *na = node_status(a.id), *ng = node_status(gone.id);
    CHECK(strcmp(jstr(na, "state"), "serving") == 0 && strcmp(jstr(na, "shard"), shard) == 0,
          "after a restart the serving node is %s with '%s'", jstr(na, "state"), jstr(na, "shard"));
    CHECK(strcmp(jstr(ng, "state"), "dead") == 0, "the node dead before the stop is %s",
          jstr(ng, "state"));
    json_decref(na), json_decref(ng);
    json_t *out = NULL;
    int st = call("POST", "/v1/routes", acct, "{\"session\": 3}", &out, &err);
    CHECK(st == 200 && jint(json_array_get(json_object_get(out, "stages"), 0), "node_id") == a.id,
          "a route right after the restart: %d %s", st, err.msg);
    json_decref(out);
    /* its first beat after the downtime adds nothing to its uptime */
    CHECK(beat(&a, shard, -1, -1, NULL) == 200, "beat after the restart");
    CHECK(status_int(a.id, "uptime_ms") == uptime0, "the downtime became uptime: %lld -> %lld ms",
          (long long)uptime0, (long long)status_int(a.id, "uptime_ms"));
    /* unheard, it dies dead_after_ms after its beat like any node */
    CHECK(wait_status(a.id, "state", "dead", 5000), "the grace does not end");
    printf("restart grace: the node died %.0f ms after the restart (dead after %d ms)\n",
           now_ms() - t_start, dead_ms);
    free(acct);
    mt_registry_stop(reg);
    reg = NULL;
}

static void test_capacity_shrink(void) {
    reg_opts o = {.name = "shrink", .spares = 1};
    mt_error err;
    reg = reg_open(&o, &err);
    CHECK(reg != NULL, "shrink registry: %s", err.msg);
    if (!reg) return;
    char *acct = new_account("frank", NULL), pk[MT_KEYS_HEX_SIZE], shard[96], spare_shard[96];
    fake_node a, b;
    new_pk(pk);
    CHECK(fake_join(acct, pk, 100000000, &a, &err) == 201, "join: %s", err.msg);
    CHECK(make_serving(&a, shard), "the node does not serve");
    new_pk(pk);
    CHECK(fake_join(acct, pk, 100000000, &b, &err) == 201, "join: %s", err.msg);
    CHECK(wait_status(b.id, "role", "spare", 5000), "the second node is not a spare");
    /* a's disk turns out too small: it offers 1 MB */
    char hb[100], body[200];
    snprintf(hb, sizeof hb, "%s/heartbeat", a.path);
    snprintf(body, sizeof body, "{\"ready_shard\": \"%s\", \"capacity\": 1000000}", shard);
    EXPECT(200, NULL, "POST", hb, a.token, body);
    CHECK(status_int(a.id, "capacity") == 1000000, "capacity %lld after the heartbeat",
          (long long)status_int(a.id, "capacity"));
    CHECK(make_serving(&b, spare_shard) && strcmp(spare_shard, shard) == 0,
          "the spare did not take shard %s (got '%s')", shard, spare_shard);
    json_t *n = node_status(a.id);
    CHECK(strcmp(jstr(n, "state"), "serving") != 0 && strcmp(jstr(n, "shard"), "") == 0,
          "the node that shrank is %s with '%s'", jstr(n, "state"), jstr(n, "shard"));
    json_decref(n);
    free(acct);
    mt_registry_stop(reg);
    reg = NULL;
}

/* Routes spread sessions by the nodes' free session memory: two one-stage pipelines; once
 * one reports its session memory full and the other free, every new session goes to the
 * free one (placement_route.c draws in proportion to the room; a full pipeline weighs 0). */
static void test_route_by_room(void) {
    reg_opts o = {.name = "room", .replicas = 2};
    mt_error err;
    reg = reg_open(&o, &err);
    CHECK(reg != NULL, "room registry: %s", err.msg);
    if (!reg) return;
    char *acct = new_account("gina", NULL), pk[MT_KEYS_HEX_SIZE], shard_a[96], shard_b[96];
    fake_node a, b;
    new_pk(pk);
    CHECK(fake_join(acct, pk, 100000000, &a, &err) == 201, "join: %s", err.msg);
    new_pk(pk);
    CHECK(fake_join(acct, pk, 100000000, &b, &err) == 201, "join: %s", err.msg);
    CHECK(make_serving(&a, shard_a) && make_serving(&b, shard_b), "the nodes do not serve");
    int on_a = 0, on_b = 0;
    for (int pass = 0; pass < 2; pass++) {
        on_a = on_b = 0;
        for (int s = 0; s < 20; s++) {
            char body[64];
            json_t *out = NULL;
            snprintf(body, sizeof body, "{\"session\": %d}", s);
            int st = call("POST", "/v1/routes", acct, body, &out, &err);
            int64_t id =
                st == 200 ? jint(json_array_get(json_object_get(out, "stages"), 0), "node_id") : -1;
            on_a += id == a.id, on_b += id == b.id;
            json_decref(out);
        }
        if (pass == 1) break;
        CHECK(on_a == 10 && on_b == 10, "before any memory figure: %d on a, %d on b (want 10, 10)",
              on_a, on_b);
        char hb[100], body[300];
        snprintf(hb, sizeof hb, "%s/heartbeat", a.path);
        snprintf(body, sizeof body,
                 "{\"ready_shard\": \"%s\", \"load\": {\"kv_budget\": 800000000, "
                 "\"kv_used\": 800000000}}",
                 shard_a);
        EXPECT(200, NULL, "POST", hb, a.token, body);
        snprintf(hb, sizeof hb, "%s/heartbeat", b.path);
        snprintf(body, sizeof body,
                 "{\"ready_shard\": \"%s\", \"load\": {\"kv_budget\": 800000000, "
                 "\"kv_used\": 1000}}",
                 shard_b);
        EXPECT(200, NULL, "POST", hb, b.token, body);
    }
    CHECK(on_a == 0 && on_b == 20, "a full, b free: %d sessions on a, %d on b (want 0, 20)", on_a,
          on_b);
    /* the status shows the objective and each pipeline's estimates */
    json_t *st = NULL;
    call("GET", "/v1/status", NULL, NULL, &st, &err);
    json_t *p0 = json_array_get(json_object_get(st, "pipelines"), 0);
    CHECK(strcmp(jstr(st, "objective"), "throughput") == 0 && jint(p0, "groups") == 1 &&
              jint(p0, "nodes") == 1 && json_real_value(json_object_get(p0, "latency_ms")) > 0 &&
              json_real_value(json_object_get(p0, "slowest_ms")) ==
                  json_real_value(json_object_get(p0, "latency_ms")),
          "status of a 2 x 1-node cell: objective '%s', pipeline 0 %s", jstr(st, "objective"),
          p0 ? json_dumps(p0, 0) : "(none)");
    json_decref(st);
    free(acct);
    mt_registry_stop(reg);
    reg = NULL;
}

/* A latency goal (registry --latency-goal-ms): three nodes that each hold the whole model,
 * one replica asked, no spare. A goal every pipeline meets makes three one-node pipelines
 * (the most the nodes allow); one that none meets leaves the one replica asked and says so.
 * The status gives the goal, whether it is met, and every pipeline's trip (its group time
 * and a hop). A goal below 0 or in swarm mode is refused at the start. */
static void test_latency_goal(void) {
    const double goals[2] = {1e6, 1e-6};
    const int want[2] = {3, 1};
    for (int g = 0; g < 2; g++) {
        reg_opts o = {.name = g ? "goal-missed" : "goal-met", .latency_goal_ms = goals[g]};
        mt_error err;
        reg = reg_open(&o, &err);
        CHECK(reg != NULL, "goal registry: %s", err.msg);
        if (!reg) return;
        char *acct = new_account(g ? "ivan" : "hana", NULL), pk[MT_KEYS_HEX_SIZE];
        fake_node nd[3];
        for (int i = 0; i < 3; i++) {
            new_pk(pk);
            CHECK(fake_join(acct, pk, 100000000, &nd[i], &err) == 201, "join: %s", err.msg);
        }
        json_t *st = NULL, *pipes = NULL;
        for (int tries = 0; tries < 200; tries++) { /* each join re-plans; the last may lag */
            json_decref(st);
            st = NULL;
            call("GET", "/v1/status", NULL, NULL, &st, &err);
            pipes = json_object_get(st, "pipelines");
            size_t planned = 0;
            for (size_t k = 0; k < json_array_size(pipes); k++)
                planned += json_object_get(json_array_get(pipes, k), "trip_ms") != NULL;
            if (planned == (size_t)want[g] && json_object_get(st, "nodes_alive") &&
                jint(st, "nodes_alive") == 3)
                break;
            sleep_ms(50);
        }
        json_t *met = json_object_get(st, "latency_goal_met");
        bool trips = json_array_size(pipes) == (size_t)want[g];
        for (size_t k = 0; trips && k < json_array_size(pipes); k++) {
            json_t *pk2 = json_array_get(pipes, k);
            double lat = json_real_value(json_object_get(pk2, "latency_ms"));
            double trip = json_real_value(json_object_get(pk2, "trip_ms"));
            json_int_t groups = json_integer_value(json_object_get(pk2, "groups"));
            /* a 0.5 ms hop into each group (one group of a whole-model node, or two when the
             * plan was made while only two nodes had joined, and then kept) */
            trips = lat > 0 && groups >= 1 && fabs(trip - (lat + 0.5 * (double)groups)) < 1e-9;
        }
        const char *note = jstr(st, "latency_goal_note");
        CHECK(json_real_value(json_object_get(st, "latency_goal_ms")) == goals[g] &&
                  json_is_boolean(met) && json_is_true(met) == (g == 0) && trips &&
                  (g == 0 ? !json_object_get(st, "latency_goal_note")
                          : strstr(note, "latency goal 1e-06 ms per token missed") &&
                                strstr(note, "--replicas")),
              "goal %g: status %s", goals[g], st ? json_dumps(st, JSON_COMPACT) : "(none)");
        json_decref(st);
        free(acct);
        mt_registry_stop(reg);
        reg = NULL;
    }
    /* refused at the start */
    char db[400], key[400], shards[400];
    snprintf(db, sizeof db, "%s/goal-bad.db", dir);
    snprintf(key, sizeof key, "%s/goal-bad.key", dir);
    snprintf(shards, sizeof shards, "%s/goal-bad-seed", dir);
    const double bad[3] = {-1, NAN, 5};
    for (int k = 0; k < 3; k++) {
        mt_registry_config c = {.model = model,
                                .db = db,
                                .key = key,
                                .shard_dir = shards,
                                .listen = "127.0.0.1:0",
                                .mode = k == 2 ? MT_REGISTRY_SWARM : MT_REGISTRY_CELL,
                                .latency_goal_ms = bad[k],
                                .quiet = true};
        mt_error err = {{0}};
        mt_registry *r = mt_registry_start(&c, &err);
        CHECK(!r && strstr(err.msg, "latency goal") && strstr(err.msg, "cell mode only"),
              "a latency goal of %g (%s mode): %s", bad[k], k == 2 ? "swarm" : "cell",
              r ? "started" : err.msg);
        if (r) mt_registry_stop(r);
    }
}

/* ---- an admin token; swarm mode with --require-volunteer --------------------------------------
 */

static void test_admin(void) {
    reg_opts o = {.name = "admin", .admin = "sesame"};
    mt_error err;
    reg = reg_open(&o, &err);
    CHECK(reg != NULL, "admin registry: %s", err.msg);
    if (!reg) return;
    EXPECT(401, "admin token", "POST", "/v1/accounts", NULL, "{\"name\": \"x\"}");
    EXPECT(403, "admin token", "POST", "/v1/accounts", "sesam", "{\"name\": \"x\"}");
    EXPECT(403, "admin token", "POST", "/v1/accounts", "sesame2", "{\"name\": \"x\"}");
    EXPECT(201, NULL, "POST", "/v1/accounts", "sesame", "{\"name\": \"x\"}");
    EXPECT(401, "admin token", "GET", "/v1/ledger/nodes", NULL, NULL);
    EXPECT(403, "admin token", "GET", "/v1/ledger/nodes", "nope", NULL);
    EXPECT(200, NULL, "GET", "/v1/ledger/nodes", "sesame", NULL);
    mt_registry_stop(reg);
    reg = NULL;
}

static void test_swarm(void) {
    reg_opts o = {.name = "swarm", .mode = MT_REGISTRY_SWARM, .require_volunteer = true};
    mt_error err;
    reg = reg_open(&o, &err);
    CHECK(reg != NULL, "swarm registry: %s", err.msg);
    if (!reg) return;
    char *taker = new_account("taker", NULL), *giver = new_account("giver", NULL),
         *helper = new_account("helper", NULL);
    EXPECT(403, "not volunteered", "POST", "/v1/routes", taker, "{}");
    EXPECT(403, "moontail setup --accept-terms --registry", "POST", "/v1/routes", giver, "{}");
    EXPECT(400, "swarm", "POST", "/v1/reports", taker, "{}");
    fake_node g, h;
    char pk[MT_KEYS_HEX_SIZE], shard[96];
    new_pk(pk);
    CHECK(fake_join(giver, pk, 1LL << 40, &g, &err) == 201, "giver joins: %s", err.msg);
    /* joined but not serving yet: still refused */
    EXPECT(403, "not volunteered", "POST", "/v1/routes", giver, "{}");
    CHECK(make_serving(&g, shard), "the giver's node does not serve");
    json_t *out = NULL;
    int st = call("POST", "/v1/routes", giver, "{\"session\": 1}", &out, &err);
    json_t *experts = json_object_get(out, "experts");
    CHECK(st == 200 && strcmp(jstr(out, "mode"), "swarm") == 0 &&
              strcmp(jstr(out, "head"), "backbone") == 0 && json_array_size(experts) >= 1 &&
              jint(json_array_get(experts, 0), "node_id") == g.id,
          "giver's route: %d %s", st, err.msg);
    json_decref(out);
    EXPECT(403, "not volunteered", "POST", "/v1/routes", taker, "{}");
    /* a node that claims a shard it was not given does not count */
    char *cheat = new_account("cheat", NULL);
    fake_node ch;
    new_pk(pk);
    CHECK(fake_join(cheat, pk, 1000, &ch, &err) == 201, "cheat joins: %s", err.msg);
    CHECK(beat(&ch, shard, -1, -1, NULL) == 200 && beat(&ch, "L0-1A", -1, -1, NULL) == 200,
          "cheat beats");
    EXPECT(403, "not volunteered", "POST", "/v1/routes", cheat, "{}");
    free(cheat);
    /* a node that holds nothing but served something counts */
    new_pk(pk);
    CHECK(fake_join(helper, pk, 1000, &h, &err) == 201, "helper joins: %s", err.msg);
    EXPECT(403, "not volunteered", "POST", "/v1/routes", helper, "{}");
    CHECK(beat(&h, "", 5, 0, NULL) == 200, "helper beats");
    EXPECT(200, NULL, "POST", "/v1/routes", helper, "{}");
    free(taker), free(giver), free(helper);
    mt_registry_stop(reg);
    reg = NULL;
}

/* ---- a real node agent
 * --------------------------------------------------------------------------- */

static bool wait_agent(mt_agent *a, bool serving, int ms, mt_agent_state *s) {
    for (double t0 = now_ms(); now_ms() - t0 < ms; sleep_ms(50)) {
        mt_agent_get_state(a, s);
        if ((s->shard[0] != 0) == serving) return true;
    }
    return false;
}

/* Token-layers the ledger holds for a node. */
static int64_t ledger_token_layers(int64_t node) {
    int64_t rows;
    json_t *l = ledger_of(node, &rows);
    int64_t v = jint(l, "token_layers");
    json_decref(l);
    return v;
}

static bool wait_ledger(int64_t node, int64_t want, int ms) {
    for (double t0 = now_ms(); now_ms() - t0 < ms; sleep_ms(50))
        if (ledger_token_layers(node) == want) return true;
    return false;
}

/* A requester on this registry with the test's key and cache (NULL with err). */
static mt_requester *open_requester(const char *tok, mt_error *err) {
    char key[400], cache[400];
    snprintf(key, sizeof key, "%s/requester.key", dir);
    snprintf(cache, sizeof cache, "%s/requester-cache", dir);
    mt_requester_config c = {.registry = base,
                             .token = tok,
                             .key_path = key,
                             .cache_dir = cache,
                             .threads = 1,
                             .quiet = true};
    return mt_requester_open(&c, err);
}

/* Evaluates n tokens through the registry's route (a fresh session). */
static bool generate(const char *tok, int n) {
    mt_error err = {{0}};
    mt_requester *q = open_requester(tok, &err);
    bool ok = q && mt_requester_begin(q, 32, &err) == 0;
    float *logits = ok ? malloc((size_t)mt_requester_head(q)->hp.n_vocab * sizeof *logits) : NULL;
    static const int32_t ids[8] = {5, 77, 3, 190, 42, 8, 130, 64};
    ok = ok && logits && mt_requester_eval(q, ids, n, logits, &err) == 0;
    CHECK(ok, "generation through the registry: %s", err.msg);
    free(logits);
    mt_requester_close(q);
    return ok;
}

/* Speculative passes through the registry's route (mt_requester_eval_speculative): a pass
 * whose third token is a wrong guess, taken back (mt_requester_rewind), then the right
 * tokens: the last row has the bits of the same tokens evaluated plainly. */
static void check_speculative(const char *tok) {
    mt_error err = {{0}};
    mt_requester *q = open_requester(tok, &err);
    const int32_t V = q ? mt_requester_head(q)->hp.n_vocab : 0;
    float *want = q ? malloc((size_t)V * sizeof *want) : NULL;
    float *rows = q ? malloc(4 * (size_t)V * sizeof *rows) : NULL;
    static const int32_t ids[6] = {5, 77, 3, 190, 42, 8};
    const int32_t pass1[4] = {ids[2], ids[3], (ids[4] + 1) % (V ? V : 1), 7};
    bool ok = want && rows && mt_requester_begin(q, 32, &err) == 0 &&
              mt_requester_eval(q, ids, 6, want, &err) == 0 &&
              mt_requester_begin(q, 32, &err) == 0 &&
              mt_requester_eval(q, ids, 2, rows, &err) == 0 &&
              mt_requester_eval_speculative(q, pass1, 4, rows, &err) == 0 &&
              mt_requester_rewind(q, 4, &err) == 0 &&
              mt_requester_eval_speculative(q, ids + 4, 2, rows, &err) == 0;
    CHECK(ok, "speculative passes through the registry: %s", err.msg);
    CHECK(ok && memcmp(rows + V, want, (size_t)V * sizeof *want) == 0,
          "after a rewind the logits differ from a plain evaluation of the same tokens");
    free(want), free(rows);
    mt_requester_close(q);
}

static mt_agent *agent_start(const char *tok, mt_error *err) {
    char key[400], data[400];
    snprintf(key, sizeof key, "%s/agent.key", dir);
    snprintf(data, sizeof data, "%s/agent-data", dir);
    mt_agent_config c = {.registry = base,
                         .token = tok,
                         .key_path = key,
                         .name = "pc1",
                         .listen = "127.0.0.1:0",
                         .data_dir = data,
                         .capacity = 1LL << 30,
                         .speed = 1,
                         .threads = 1,
                         .quiet = true};
    return mt_agent_start(&c, err);
}

/* The shard the agent serves is the registry's, byte for byte. */
static bool holds_registry_shard(const mt_agent_state *s) {
    char url[300], path[600];
    snprintf(url, sizeof url, "/v1/shards/%s/manifest", s->shard);
    snprintf(path, sizeof path, "%s/agent-data/%s.gguf", dir, s->shard);
    json_t *m = NULL;
    mt_error err;
    call("GET", url, NULL, NULL, &m, &err);
    bool same = m && mt_shard_file_matches(path, m);
    json_decref(m);
    return same;
}

static void test_agent(void) {
    reg_opts o = {.name = "agents"};
    mt_error err;
    reg = reg_open(&o, &err);
    CHECK(reg != NULL, "registry for agents: %s", err.msg);
    if (!reg) return;
    char *tok = new_account("cafe", NULL);
    mt_agent *a = agent_start(tok, &err);
    CHECK(a != NULL, "agent: %s", err.msg);
    if (!a) goto out;
    mt_agent_state s;
    CHECK(wait_agent(a, true, 30000, &s), "the agent does not serve: %s", s.last_error);
    CHECK(wait_status(s.node_id, "state", "serving", 5000), "the registry does not see it serve");
    CHECK(holds_registry_shard(&s), "the agent's shard is not the seed's");

    /* work through it reaches the ledger: 5 tokens x 4 layers */
    if (generate(tok, 5))
        CHECK(wait_ledger(s.node_id, 5 * 4, 5000), "ledger: %lld token-layers, want 20",
              (long long)ledger_token_layers(s.node_id));
    /* its key joins again elsewhere: the agent's token stops working, it joins again,
     * and the work it was credited for is not credited twice */
    char key[400], pk[MT_KEYS_HEX_SIZE];
    snprintf(key, sizeof key, "%s/agent.key", dir);
    mt_keys k;
    fake_node imp;
    CHECK(mt_keys_load(&k, key, &err) == 0, "agent key: %s", err.msg);
    mt_keys_pk_to_hex(k.pk, pk);
    CHECK(fake_join(tok, pk, 1000, &imp, &err) == 201 && imp.id == s.node_id, "impostor: %s",
          err.msg);
    int beats = s.heartbeats;
    for (int i = 0; i < 100 && (s.heartbeats < beats + 4 || s.heartbeat_failures == 0); i++)
        sleep_ms(50), mt_agent_get_state(a, &s);
    CHECK(s.heartbeat_failures >= 1 && s.heartbeats >= beats + 4,
          "the agent did not notice its token was replaced (%d failures)", s.heartbeat_failures);
    CHECK(beat(&imp, "", -1, -1, NULL) == 401, "the agent did not join again");
    CHECK(ledger_token_layers(s.node_id) == 20, "after joining again: %lld token-layers, want 20",
          (long long)ledger_token_layers(s.node_id));
    CHECK(wait_status(s.node_id, "state", "serving", 5000), "not serving after joining again");
    if (generate(tok, 3))
        CHECK(wait_ledger(s.node_id, 20 + 3 * 4, 5000), "ledger: %lld token-layers, want 32",
              (long long)ledger_token_layers(s.node_id));
    check_speculative(tok);

    /* paused: it drains and stops serving; resumed: it serves again, from what it holds */
    char pp[100];
    snprintf(pp, sizeof pp, "/v1/nodes/%lld/pause", (long long)s.node_id);
    EXPECT(200, NULL, "POST", pp, tok, "{\"now\": true}");
    CHECK(wait_agent(a, false, 10000, &s), "a paused agent keeps serving");
    CHECK(wait_status(s.node_id, "state", "paused", 5000), "the agent is not 'paused'");
    EXPECT(503, "no route", "POST", "/v1/routes", tok, "{}");
    EXPECT(200, NULL, "POST", pp, tok, "{\"resume\": true}");
    CHECK(wait_agent(a, true, 10000, &s), "a resumed agent does not serve: %s", s.last_error);
    CHECK(wait_status(s.node_id, "state", "serving", 5000), "the resumed agent is not serving");
    mt_agent_stop(a);
    mt_registry_stop(reg);
    free(tok);

    /* the same machine under a registry of another model: a shard of the same
     * name is in its data directory, but it must fetch the new model's */
    o = (reg_opts){.name = "agents-other", .model = model2};
    reg = reg_open(&o, &err);
    CHECK(reg != NULL, "registry of the other model: %s", err.msg);
    if (!reg) return;
    tok = new_account("cafe", NULL);
    a = agent_start(tok, &err);
    CHECK(a != NULL, "agent: %s", err.msg);
    if (a) {
        CHECK(wait_agent(a, true, 30000, &s), "the agent does not serve: %s", s.last_error);
        CHECK(holds_registry_shard(&s), "the agent serves shard %s of the model it held before",
              s.shard);
        CHECK(wait_status(s.node_id, "state", "serving", 5000), "the registry does not see it");
        generate(tok, 2);
        mt_agent_stop(a);
    }
out:
    free(tok);
    mt_registry_stop(reg);
    reg = NULL;
}

/* ---- spot-check reports and quarantine --------------------------------------------------------
 */

/* An in-process node serving the whole model (so it holds any stage's layers),
 * admitting what the registry certifies; corrupt_rate 1: every output wrong. */
typedef struct real_node {
    mt_node *node;
    mt_keys_authorized *auth;
    fake_node f; /* its row at the registry */
    char shard[96];
} real_node;

static bool real_node_start(real_node *rn, const char *account, double corrupt_rate) {
    memset(rn, 0, sizeof *rn);
    mt_keys k;
    mt_error err = {{0}};
    uint8_t reg_pk[MT_KEYS_PUBLIC_BYTES];
    rn->auth = mt_keys_authorized_new();
    if (mt_keys_generate(&k, &err) || !rn->auth ||
        mt_keys_pk_from_hex(reg_pk, mt_registry_pubkey_hex(reg), &err) ||
        mt_keys_authorized_add_authority(rn->auth, reg_pk, "registry", &err)) {
        CHECK(false, "node identity: %s", err.msg);
        return false;
    }
    mt_node_config c = {.shard_path = model,
                        .keys = &k,
                        .authorized = rn->auth,
                        .listen = "127.0.0.1:0",
                        .threads = 1,
                        .quiet = true,
                        .corrupt_rate = corrupt_rate};
    rn->node = mt_node_start(&c, &err);
    char pk[MT_KEYS_HEX_SIZE];
    mt_keys_pk_to_hex(k.pk, pk);
    mt_keys_wipe(&k);
    CHECK(rn->node != NULL, "node: %s", err.msg);
    if (!rn->node) return false;
    int st = fake_join_at(account, pk, 1LL << 40, mt_node_addr(rn->node), &rn->f, &err);
    CHECK(st == 201, "the node joins: %d %s", st, err.msg);
    return st == 201;
}

static void real_node_stop(real_node *rn) {
    mt_node_stop(rn->node);
    mt_keys_authorized_free(rn->auth);
    rn->node = NULL, rn->auth = NULL;
}

/* POST /v1/reports about nodes a (checked) and b (checker), layers [0, 4). */
static int report(const char *tok, int64_t a, int64_t b, json_t **out, mt_error *err) {
    char body[400];
    snprintf(body, sizeof body,
             "{\"nodes\": [%lld, %lld], \"layers\": [0, 4], \"position\": 9, \"tokens\": 1,"
             " \"hashes\": [\"%064d\", \"%063d1\"]}",
             (long long)a, (long long)b, 0, 0);
    return call("POST", "/v1/reports", tok, body, out, err);
}

/* The result the report answer gives for node id ("" when absent). */
static const char *result_of(const json_t *out, int64_t id) {
    json_t *nodes = json_object_get(out, "nodes");
    for (size_t i = 0; i < json_array_size(nodes); i++)
        if (jint(json_array_get(nodes, i), "node_id") == id)
            return jstr(json_array_get(nodes, i), "result");
    return "";
}

static void test_report_fields(const char *tok, const real_node *a, const real_node *spare) {
    char body[600], ok_hashes[200];
    snprintf(ok_hashes, sizeof ok_hashes, "\"hashes\": [\"%064d\", \"%063d1\"]", 0, 0);
    const long long A = a->f.id, S = spare->f.id;
    EXPECT(401, "account token", "POST", "/v1/reports", NULL, "{}");
    EXPECT(401, "account token", "POST", "/v1/reports", "nope", "{}");
    EXPECT(401, "account token", "POST", "/v1/reports", a->f.token, "{}"); /* a node's token */
    static const struct {
        const char *fields; /* the body without the hashes */
        const char *why;
    } bad[] = {
        {"\"layers\": [0, 4], \"position\": 0, \"tokens\": 1", "\"nodes\""},
        {"\"nodes\": [1], \"layers\": [0, 4], \"position\": 0, \"tokens\": 1", "\"nodes\""},
        {"\"nodes\": [1, 2, 3], \"layers\": [0, 4], \"position\": 0, \"tokens\": 1", "\"nodes\""},
        {"\"nodes\": [\"1\", 2], \"layers\": [0, 4], \"position\": 0, \"tokens\": 1", "\"nodes\""},
        {"\"nodes\": [0, 2], \"layers\": [0, 4], \"position\": 0, \"tokens\": 1", "\"nodes\""},
        {"\"nodes\": [2, 2], \"layers\": [0, 4], \"position\": 0, \"tokens\": 1", "twice"},
        {"\"nodes\": [1, 2], \"position\": 0, \"tokens\": 1", "\"layers\""},
        {"\"nodes\": [1, 2], \"layers\": [2, 1], \"position\": 0, \"tokens\": 1", "\"layers\""},
        {"\"nodes\": [1, 2], \"layers\": [0, 5], \"position\": 0, \"tokens\": 1", "\"layers\""},
        {"\"nodes\": [1, 2], \"layers\": [-1, 2], \"position\": 0, \"tokens\": 1", "\"layers\""},
        {"\"nodes\": [1, 2], \"layers\": [0, 2.5], \"position\": 0, \"tokens\": 1", "\"layers\""},
        {"\"nodes\": [1, 2], \"layers\": [0, 4], \"tokens\": 1", "\"position\""},
        {"\"nodes\": [1, 2], \"layers\": [0, 4], \"position\": -1, \"tokens\": 1", "\"position\""},
        {"\"nodes\": [1, 2], \"layers\": [0, 4], \"position\": 99999999, \"tokens\": 1",
         "\"position\""},
        {"\"nodes\": [1, 2], \"layers\": [0, 4], \"position\": 0, \"tokens\": 0", "\"tokens\""},
        {"\"nodes\": [1, 2], \"layers\": [0, 4], \"position\": 0", "\"tokens\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(body, sizeof body, "{%s, %s}", bad[i].fields, ok_hashes);
        EXPECT(400, bad[i].why, "POST", "/v1/reports", tok, body);
    }
    static const char *const bad_hashes[] = {
        "",
        "\"hashes\": \"ab\"",
        "\"hashes\": [\"00\", \"11\"]",
        "\"hashes\": [1, 2]",
        "\"hashes\": [\"000000000000000000000000000000000000000000000000000000000000000X\","
        " \"0000000000000000000000000000000000000000000000000000000000000001\"]",
        "\"hashes\": [\"ABCD000000000000000000000000000000000000000000000000000000000000\","
        " \"0000000000000000000000000000000000000000000000000000000000000001\"]",
    };
    for (size_t i = 0; i < sizeof bad_hashes / sizeof *bad_hashes; i++) {
        snprintf(body, sizeof body,
                 "{\"nodes\": [1, 2], \"layers\": [0, 4], \"position\": 0, \"tokens\": 1%s%s}",
                 bad_hashes[i][0] ? ", " : "", bad_hashes[i]);
        EXPECT(400, "\"hashes\"", "POST", "/v1/reports", tok, body);
    }
    snprintf(body, sizeof body,
             "{\"nodes\": [1, 2], \"layers\": [0, 4], \"position\": 0, \"tokens\": 1, \"hashes\":"
             " [\"%064d\", \"%064d\"]}",
             0, 0);
    EXPECT(400, "nothing to report", "POST", "/v1/reports", tok, body);
    /* nodes that do not exist, or are not stages of the layers named */
    snprintf(body, sizeof body,
             "{\"nodes\": [%lld, 999], \"layers\": [0, 4], \"position\": 0, \"tokens\": 1, %s}", A,
             ok_hashes);
    EXPECT(404, "node 999", "POST", "/v1/reports", tok, body);
    snprintf(body, sizeof body,
             "{\"nodes\": [%lld, %lld], \"layers\": [0, 4], \"position\": 0, \"tokens\": 1, %s}", A,
             S, ok_hashes);
    EXPECT(409, "not a stage", "POST", "/v1/reports", tok, body);
    snprintf(body, sizeof body,
             "{\"nodes\": [%lld, %lld], \"layers\": [0, 2], \"position\": 0, \"tokens\": 1, %s}", A,
             S, ok_hashes);
    EXPECT(409, "layers [0, 2)", "POST", "/v1/reports", tok, body);
    json_t *st = NULL;
    mt_error err;
    call("GET", "/v1/status", NULL, NULL, &st, &err);
    json_t *reports = json_object_get(st, "reports");
    CHECK(jint(reports, "total") == 0 && jint(st, "nodes_quarantined") == 0,
          "refused reports were counted: %lld", (long long)jint(reports, "total"));
    json_decref(st);
}

/* Token-layers the ledger credits node with (the registry has admin token `admin`). */
static int64_t credited(int64_t node, const char *admin) {
    json_t *l = NULL;
    mt_error err;
    int st = call("GET", "/v1/ledger/nodes", admin, NULL, &l, &err);
    CHECK(st == 200, "ledger: %d %s", st, err.msg);
    int64_t v = -1;
    json_t *nodes = json_object_get(l, "nodes");
    for (size_t i = 0; i < json_array_size(nodes); i++)
        if (jint(json_array_get(nodes, i), "node_id") == node)
            v = jint(json_array_get(nodes, i), "token_layers");
    json_decref(l);
    return v;
}

static void test_reports(void) {
    reg_opts o = {.name = "reports", .admin = "opensesame", .replicas = 2, .reports_per_minute = 4};
    mt_error err;
    reg = reg_open(&o, &err);
    CHECK(reg != NULL, "registry for reports: %s", err.msg);
    if (!reg) return;
    char *tok = new_account("reporter", "opensesame"), *other = new_account("other", "opensesame");
    real_node a, b, c; /* honest, corrupting, honest (the spare) */
    bool up = real_node_start(&a, tok, 0) && real_node_start(&b, tok, 1) &&
              make_serving(&a.f, a.shard) && make_serving(&b.f, b.shard) &&
              real_node_start(&c, tok, 0);
    CHECK(up && strcmp(a.shard, "L0-3A-E0-7") == 0 && strcmp(b.shard, "L0-3A-E0-7") == 0,
          "two pipelines of one stage each: %s %s", a.shard, b.shard);
    if (!up) goto out;
    CHECK(beat(&c.f, "", -1, -1, NULL) == 200 && wait_status(c.f.id, "state", "spare", 5000),
          "the third node is not a spare");

    /* routes name the other pipeline's stage as the stage's checker */
    for (int session = 0; session < 2; session++) {
        json_t *out = NULL;
        char body[64];
        snprintf(body, sizeof body, "{\"session\": %d}", session);
        call("POST", "/v1/routes", tok, body, &out, &err);
        json_t *stage = json_array_get(json_object_get(out, "stages"), 0);
        json_t *checkers = json_object_get(stage, "checkers");
        int64_t on = jint(stage, "node_id"), by = jint(json_array_get(checkers, 0), "node_id");
        CHECK(json_array_size(checkers) == 1 && on != by && (on == a.f.id || on == b.f.id) &&
                  (by == a.f.id || by == b.f.id) &&
                  strcmp(jstr(json_array_get(checkers, 0), "key"),
                         on == a.f.id ? b.f.pk : a.f.pk) == 0,
              "route %d: stage %lld, checkers %s", session, (long long)on, json_dumps(checkers, 0));
        json_decref(out);
    }

    test_report_fields(tok, &a, &c);

    CHECK(beat(&b.f, b.shard, 7, 0, NULL) == 200 && credited(b.f.id, "opensesame") == 7,
          "the node is not credited before its quarantine");

    /* a is checked, b disagrees: the registry's own check finds b wrong */
    json_t *out = NULL;
    int st = report(tok, a.f.id, b.f.id, &out, &err);
    CHECK(st == 200 && strcmp(jstr(out, "verdict"), "confirmed") == 0 &&
              strcmp(result_of(out, a.f.id), "right") == 0 &&
              strcmp(result_of(out, b.f.id), "wrong") == 0 &&
              json_array_size(json_object_get(out, "quarantined")) == 1 &&
              json_integer_value(json_array_get(json_object_get(out, "quarantined"), 0)) == b.f.id,
          "report a/b: %d %s %s", st, err.msg, out ? json_dumps(out, 0) : "");
    json_decref(out);
    CHECK(wait_status(b.f.id, "state", "quarantined", 5000), "b is not quarantined");
    CHECK(wait_status(b.f.id, "role", "none", 5000), "b kept its role");
    CHECK(wait_status(a.f.id, "state", "serving", 5000), "a is not serving after the report");
    CHECK(make_serving(&c.f, c.shard) && strcmp(c.shard, b.shard) == 0,
          "the spare did not take the quarantined node's shard: '%s'", c.shard);
    json_t *bs = node_status(b.f.id);
    CHECK(json_is_true(json_object_get(bs, "quarantined")) &&
              strstr(jstr(json_object_get(bs, "quarantine"), "reason"), "layers [0, 4)"),
          "b's status does not say why it is quarantined");
    json_decref(bs);
    /* no route through it, whatever the session; it is nobody's checker either */
    for (int session = 0; session < 4; session++) {
        char body[64];
        snprintf(body, sizeof body, "{\"session\": %d}", session);
        out = NULL;
        call("POST", "/v1/routes", tok, body, &out, &err);
        char *text = out ? json_dumps(out, 0) : NULL;
        char needle[80];
        snprintf(needle, sizeof needle, "\"node_id\": %lld", (long long)b.f.id);
        CHECK(text && !strstr(text, needle), "a route uses the quarantined node: %s",
              text ? text : err.msg);
        free(text);
        json_decref(out);
    }
    /* it is told to drain and earns nothing while quarantined */
    int64_t before = credited(b.f.id, "opensesame");
    out = NULL;
    st = beat(&b.f, "", 1000, 50, &out);
    CHECK(st == 200 && json_is_true(json_object_get(out, "drain")) &&
              strcmp(jstr(out, "state"), "quarantined") == 0,
          "the quarantined node's heartbeat: %d, state %s", st, jstr(out, "state"));
    json_decref(out);
    CHECK(credited(b.f.id, "opensesame") == before, "a quarantined node was credited: %lld -> %lld",
          (long long)before, (long long)credited(b.f.id, "opensesame"));

    /* reported again: no probe of a quarantined node, nor of one found right just now */
    out = NULL;
    st = report(tok, b.f.id, a.f.id, &out, &err);
    CHECK(st == 200 && strcmp(result_of(out, b.f.id), "quarantined") == 0 &&
              strcmp(result_of(out, a.f.id), "right_recently") == 0 &&
              strcmp(jstr(out, "verdict"), "confirmed") == 0,
          "report b/a: %d %s", st, err.msg);
    json_decref(out);
    /* an unsupported claim against two honest nodes quarantines nobody */
    out = NULL;
    st = report(other, c.f.id, a.f.id, &out, &err);
    CHECK(st == 200 && strcmp(jstr(out, "verdict"), "unconfirmed") == 0 &&
              strcmp(result_of(out, c.f.id), "right") == 0 &&
              json_array_size(json_object_get(out, "quarantined")) == 0,
          "report c/a: %d %s %s", st, err.msg, out ? json_dumps(out, 0) : "");
    json_decref(out);
    out = NULL;
    st = report(other, c.f.id, a.f.id, &out, &err);
    CHECK(st == 200 && strcmp(result_of(out, c.f.id), "right_recently") == 0 &&
              strcmp(result_of(out, a.f.id), "right_recently") == 0,
          "c/a again: %d %s", st, err.msg);
    json_decref(out);
    CHECK(wait_status(a.f.id, "state", "serving", 2000) &&
              wait_status(c.f.id, "state", "serving", 2000),
          "an honest node lost its work to a false report");
    /* at most 4 reports a minute per account: `tok` made 2, `other` 2 */
    for (int i = 0; i < 2; i++) {
        st = report(tok, a.f.id, c.f.id, NULL, &err);
        CHECK(st == 200, "report %d within the limit: %d %s", i + 3, st, err.msg);
    }
    EXPECT(429, "at most 4 a minute", "POST", "/v1/reports", tok,
           "{\"nodes\": [1, 2], \"layers\": [0, 4], \"position\": 0, \"tokens\": 1, \"hashes\":"
           " [\"0000000000000000000000000000000000000000000000000000000000000000\","
           " \"0000000000000000000000000000000000000000000000000000000000000001\"]}");
    out = NULL;
    call("GET", "/v1/status", NULL, NULL, &out, &err);
    json_t *reports = json_object_get(out, "reports");
    CHECK(jint(reports, "total") == 6 && jint(reports, "confirmed") == 2 &&
              jint(out, "nodes_quarantined") == 1,
          "status counts %lld reports (%lld confirmed), %lld quarantined; want 6, 2, 1",
          (long long)jint(reports, "total"), (long long)jint(reports, "confirmed"),
          (long long)jint(out, "nodes_quarantined"));
    json_decref(out);

    /* the quarantine outlives a restart */
    mt_registry_stop(reg);
    reg = reg_open(&o, &err);
    CHECK(reg != NULL, "registry again: %s", err.msg);
    if (!reg) goto out;
    CHECK(wait_status(b.f.id, "state", "quarantined", 2000), "a restart released the node");

    /* only the operator releases it */
    char rel[100];
    snprintf(rel, sizeof rel, "%s/release", b.f.path);
    EXPECT(401, "admin token", "POST", rel, NULL, "{}");
    EXPECT(403, "admin token", "POST", rel, b.f.token, "{}");
    EXPECT(403, "admin token", "POST", rel, tok, "{}");
    EXPECT(404, "no such node", "POST", "/v1/nodes/abc/release", "opensesame", "{}");
    EXPECT(404, "no such node", "POST", "/v1/nodes/9999/release", "opensesame", "{}");
    char rel_a[100];
    snprintf(rel_a, sizeof rel_a, "%s/release", a.f.path);
    EXPECT(409, "not quarantined", "POST", rel_a, "opensesame", "{}");
    EXPECT(200, NULL, "POST", rel, "opensesame", "{}");
    EXPECT(409, "not quarantined", "POST", rel, "opensesame", "{}");
    CHECK(beat(&b.f, "", 1010, 50, NULL) == 200 && credited(b.f.id, "opensesame") == before + 10,
          "a released node is not credited again: %lld, want %lld",
          (long long)credited(b.f.id, "opensesame"), (long long)before + 10);
    CHECK(wait_status(b.f.id, "state", "spare", 5000), "the released node is not a spare");

    /* a database from before quarantines existed gets the columns when opened */
    mt_registry_stop(reg);
    reg = NULL;
    char db[400];
    snprintf(db, sizeof db, "%s/%s.db", dir, o.name);
    sqlite3 *h = NULL;
    bool dropped = sqlite3_open(db, &h) == SQLITE_OK &&
                   sqlite3_exec(h,
                                "ALTER TABLE nodes DROP COLUMN quarantined;"
                                " ALTER TABLE nodes DROP COLUMN quarantined_at;"
                                " ALTER TABLE nodes DROP COLUMN quarantine_reason;",
                                NULL, NULL, NULL) == SQLITE_OK;
    sqlite3_close(h);
    CHECK(dropped, "could not make an old database");
    reg = reg_open(&o, &err);
    CHECK(reg != NULL, "registry on an old database: %s", err.msg);
    if (reg) {
        json_t *n = node_status(b.f.id);
        CHECK(n && json_is_false(json_object_get(n, "quarantined")),
              "the old database's node reads wrong");
        json_decref(n);
    }
out:
    real_node_stop(&a), real_node_stop(&b), real_node_stop(&c);
    free(tok), free(other);
    mt_registry_stop(reg);
    reg = NULL;
}

/* ---- main
 * ------------------------------------------------------------------------------------------ */

static bool make_model(const char *path, uint64_t seed) {
    mt_synth_params p = mt_synth_default_params("qwen3moe");
    p.type = MT_TYPE_F32;
    p.seed = seed;
    p.n_layer = 4, p.n_embd = 128, p.head_dim = 32, p.n_ff = 128, p.n_ff_exp = 64;
    p.n_expert = 8, p.n_expert_used = 2;
    mt_error err = {{0}};
    int rc = mt_synth_write(&p, path, &err);
    CHECK(rc == 0, "model: %s", err.msg);
    return rc == 0;
}

int main(void) {
    if (sodium_init() < 0) return 1;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/mt-test-registry-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        CHECK(false, "mkdtemp: %s", strerror(errno));
        return check_report("test_control_registry");
    }
    snprintf(model, sizeof model, "%s/model.gguf", dir);
    snprintf(model2, sizeof model2, "%s/other.gguf", dir);
    if (!make_model(model, 3) || !make_model(model2, 4))
        return check_report("test_control_registry");

    double t0 = now_ms();
    reg_opts cell = {.name = "cell"};
    mt_error err;
    reg = reg_open(&cell, &err);
    CHECK(reg != NULL, "registry: %s", err.msg);
    if (reg) {
        char *alice = NULL, *bob = new_account("bob", NULL), *carol = new_account("carol", NULL),
             *dave = new_account("dave", NULL);
        fake_node ledger_node;
        test_accounts(&alice);
        test_node_validation(alice, bob);
        test_other_endpoints(alice);
        test_ledger(carol, &ledger_node);
        test_pause(dave);
        test_routes(dave);
        EXPECT(403, "has none", "POST", "/v1/nodes/1/release", NULL, "{}"); /* no admin token */
        EXPECT(200, NULL, "GET", "/v1/status", NULL, NULL); /* still serving after all that */
        test_restart(&cell, carol, alice, &ledger_node);
        free(alice), free(bob), free(carol), free(dave);
        mt_registry_stop(reg);
        reg = NULL;
    }
    test_restart_grace();
    test_capacity_shrink();
    test_route_by_room();
    test_latency_goal();
    test_admin();
    test_swarm();
    test_agent();
    test_reports();
    printf("test_control_registry: %.1f s\n", (now_ms() - t0) / 1e3);

    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_report("test_control_registry");
}

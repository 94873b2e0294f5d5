/* fuzz_registry.c - libFuzzer target for the registry's HTTP API
 * (reg_api_handle, src/control/registry_api.c): request bodies parsed with
 * jansson and checked field by field, node paths, shard names, tokens. The
 * registry runs in this process (as in tests/test_control_registry.c) on a
 * tiny synthetic model, with one account and one joined node made at start;
 * requests are handed to the handler directly (no socket), one at a time.
 * Input: a first line "METHOD PATH T" (T: '-' no token, 'a' the admin token,
 * 'u' the account's, 'n' the node's; "@" in PATH is the node's id), then the
 * body. Every answer must have a status of 200..599 (or 0: 200); the registry
 * keeps its state from one input to the next, as a real one does. */
#include "fuzz_target.h"
#include "../src/control/registry_internal.h"
#include "fuzz_util.h"
#include "moontail/http.h"
#include "moontail/keys.h"
#include "moontail/registry.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static mt_registry *reg;
static char account_token[65], node_token[65], node_id[32];
#define ADMIN "fuzz-admin-token"

static json_t *call(const char *method, const char *path, const char *token, const char *body,
                    size_t len, int *status) {
    char auth[200];
    snprintf(auth, sizeof auth, "Bearer %s", token ? token : "");
    const char *headers[] = {"Authorization", auth, NULL};
    mt_http_request req = {method, path, body, len, NULL, token ? headers : NULL, NULL};
    mt_http_response resp;
    memset(&resp, 0, sizeof resp);
    reg_api_handle(reg, &req, &resp);
    if (resp.status != 0 && (resp.status < 200 || resp.status > 599))
        abort();              /* 0 is 200 (http_send_response); no body is {} */
    if (resp.stream) abort(); /* the registry answers at once */
    *status = resp.status;
    free(resp.text), free(resp.file), json_decref(resp.headers);
    return resp.json;
}

static void init_once(void) {
    if (reg) return;
    mt_error err = {0};
    char model[400], db[400], key[400], shards[400];
    snprintf(model, sizeof model, "%s/tiny.gguf", fuzz_dir());
    snprintf(db, sizeof db, "%s/registry.db", fuzz_dir());
    snprintf(key, sizeof key, "%s/registry.key", fuzz_dir());
    snprintf(shards, sizeof shards, "%s/shards", fuzz_dir());
    mt_synth_params p = fuzz_tiny_params();
    if (mt_synth_write(&p, model, &err) != 0) fuzz_die("model", err.msg);
    mt_registry_config c = {.model = model,
                            .db = db,
                            .key = key,
                            .shard_dir = shards,
                            .listen = "127.0.0.1:0",
                            .mode = MT_REGISTRY_CELL,
                            .replicas = 1,
                            .spares = 0,
                            .heartbeat_ms = 200,
                            .dead_after_ms = 60000,
                            .admin_token = ADMIN,
                            .quiet = true};
    reg = mt_registry_start(&c, &err);
    if (!reg) fuzz_die("registry", err.msg);
    int st;
    const char *acc = "{\"name\": \"fuzz\"}";
    json_t *j = call("POST", "/v1/accounts", ADMIN, acc, strlen(acc), &st);
    if (st != 201) fuzz_die("account", "not created");
    snprintf(account_token, sizeof account_token, "%s",
             json_string_value(json_object_get(j, "token")));
    json_decref(j);
    mt_keys k;
    char pk[MT_KEYS_HEX_SIZE], body[600];
    mt_keys_generate(&k, NULL);
    mt_keys_pk_to_hex(k.pk, pk);
    snprintf(body, sizeof body,
             "{\"name\": \"fuzz-node\", \"pubkey\": \"%s\", \"addr\": \"127.0.0.1:9\","
             " \"capacity\": 1000000000, \"speed\": 1.5, \"hw\": {\"ram\": 8000000000,"
             " \"cores\": 4, \"simd\": \"avx2\", \"gpu\": \"\"}}",
             pk);
    j = call("POST", "/v1/nodes", account_token, body, strlen(body), &st);
    if (st != 201) fuzz_die("node", "did not join");
    snprintf(node_token, sizeof node_token, "%s", json_string_value(json_object_get(j, "token")));
    snprintf(node_id, sizeof node_id, "%lld",
             (long long)json_integer_value(json_object_get(j, "node_id")));
    json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init_once();
    const uint8_t *nl = memchr(data, '\n', size);
    if (!nl || nl - data > 300) return 0;
    char line[301], method[16], rawpath[300], t = '-';
    memcpy(line, data, (size_t)(nl - data));
    line[nl - data] = 0;
    if (sscanf(line, "%15s %299s %c", method, rawpath, &t) < 2) return 0;
    char path[400];
    size_t o = 0;
    for (const char *s = rawpath; *s && o + 32 < sizeof path; s++)
        if (*s == '@')
            o += (size_t)snprintf(path + o, sizeof path - o, "%s", node_id);
        else
            path[o++] = *s;
    path[o] = 0;
    const char *token = t == 'a' ? ADMIN : t == 'u' ? account_token : t == 'n' ? node_token : NULL;
    size_t len = size - (size_t)(nl + 1 - data);
    char *body = malloc(len + 1); /* NUL-terminated, as the HTTP server hands it over */
    memcpy(body, nl + 1, len);
    body[len] = 0;
    int st;
    json_decref(call(method, path, token, body, len, &st));
    free(body);
    return 0;
}

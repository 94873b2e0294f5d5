/* route_file.c - reading a route file (route.h: mt_route_file_load): the
 * JSON a user or test writes to run `prompt --route` over fixed nodes
 * without a registry. Paths in it are relative to the file's directory;
 * every field is checked and a bad one named with the file. */
#include "moontail/route.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* path relative to the route file's directory (absolute paths unchanged). */
static char *resolve(const char *route_path, const char *p) {
    const char *slash = strrchr(route_path, '/');
    size_t dl = p[0] == '/' || !slash ? 0 : (size_t)(slash - route_path) + 1;
    char *out = malloc(dl + strlen(p) + 1);
    if (!out) return NULL;
    memcpy(out, route_path, dl);
    strcpy(out + dl, p);
    return out;
}

static int load_peers(const char *path, json_t *root, const char *field, mt_route_peer **out,
                      int *n, mt_error *err) {
    json_t *a = json_object_get(root, field);
    *out = NULL;
    *n = 0;
    if (!a) return 0;
    if (!json_is_array(a) || json_array_size(a) > 4096)
        return mt_error_set(err, "%s: \"%s\" must be a list of {\"addr\", \"key\"}", path, field);
    size_t cnt = json_array_size(a);
    if (cnt == 0) return 0;
    if (!(*out = calloc(cnt, sizeof **out))) return mt_error_set(err, "out of memory");
    for (size_t i = 0; i < cnt; i++) {
        json_t *o = json_array_get(a, i), *addr = json_object_get(o, "addr"),
               *key = json_object_get(o, "key");
        if (!json_is_object(o) || !json_is_string(addr) || !json_is_string(key) ||
            json_object_size(o) != 2)
            return mt_error_set(err,
                                "%s: %s[%zu] must be {\"addr\": \"host:port\", \"key\": \"<64 hex"
                                " digits>\"} and nothing else",
                                path, field, i);
        if (strlen(json_string_value(addr)) >= sizeof(*out)[i].addr)
            return mt_error_set(err, "%s: %s[%zu].addr is too long", path, field, i);
        snprintf((*out)[i].addr, sizeof(*out)[i].addr, "%s", json_string_value(addr));
        if (mt_keys_pk_from_hex((*out)[i].pk, json_string_value(key), err)) {
            mt_error_prefix(err, "%s: %s[%zu].key", path, field, i);
            return -1;
        }
        (*n)++;
    }
    return 0;
}

int mt_route_file_load(const char *path, mt_route_file *f, mt_error *err) {
    memset(f, 0, sizeof *f);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return mt_error_set(err, "%s:%d: not a valid route file: %s", path, je.line, je.text);
    int rc = -1;
    static const char *known[] = {"head", "backbone", "wire",    "key",
                                  "cert", "stages",   "experts", "chain"};
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        bool ok = false;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) ok |= strcmp(k, known[i]) == 0;
        if (!ok) {
            mt_error_set(err,
                         "%s: unknown field \"%s\" (a route file has head, backbone, wire, key,"
                         " cert, stages, chain, experts)",
                         path, k);
            goto done;
        }
    }
    json_t *head = json_object_get(root, "head"), *bb = json_object_get(root, "backbone"),
           *wire = json_object_get(root, "wire"), *key = json_object_get(root, "key"),
           *cert = json_object_get(root, "cert");
    if (!json_is_string(head) || !json_is_string(key) || (bb && !json_is_string(bb)) ||
        (wire && !json_is_string(wire)) || (cert && !json_is_string(cert))) {
        mt_error_set(err,
                     "%s: \"head\" and \"key\" (file paths) are required; \"backbone\","
                     " \"cert\" and \"wire\" must be strings",
                     path);
        goto done;
    }
    json_t *chain = json_object_get(root, "chain");
    if (chain && !json_is_boolean(chain)) {
        mt_error_set(err, "%s: \"chain\" must be true or false", path);
        goto done;
    }
    f->cfg.chain = chain && json_is_true(chain);
    f->cfg.wire = MT_PROTO_F32;
    if (wire) {
        int d = mt_proto_dtype_from_name(json_string_value(wire));
        if (d < 0) {
            mt_error_set(err, "%s: wire \"%s\" is unknown; use \"f32\" (exact) or \"bf16\"", path,
                         json_string_value(wire));
            goto done;
        }
        f->cfg.wire = (mt_proto_dtype)d;
    }
    char *keyfile = resolve(path, json_string_value(key));
    int krc = keyfile ? mt_keys_load(&f->keys, keyfile, err) : mt_error_set(err, "out of memory");
    free(keyfile);
    if (krc) goto done;
    if (cert) { /* the requester's certificate, presented to every node */
        char *certfile = resolve(path, json_string_value(cert));
        uint8_t bytes[MT_CERT_BYTES];
        int crc = certfile ? mt_cert_load(certfile, bytes, NULL, err)
                           : mt_error_set(err, "out of memory");
        if (crc == 0 && mt_keys_set_cert(&f->keys, bytes, sizeof bytes, err)) {
            mt_error_prefix(err, "%s: \"cert\" %s", path, certfile);
            crc = -1;
        }
        free(certfile);
        if (crc) goto done;
    }
    if (!(f->head = resolve(path, json_string_value(head))) ||
        (bb && !(f->backbone = resolve(path, json_string_value(bb))))) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    if (load_peers(path, root, "stages", &f->stages, &f->cfg.n_stages, err) ||
        load_peers(path, root, "experts", &f->experts, &f->cfg.n_experts, err))
        goto done;
    f->cfg.head = f->head;
    f->cfg.backbone = f->backbone;
    f->cfg.keys = &f->keys;
    f->cfg.stages = f->stages;
    f->cfg.experts = f->experts;
    rc = 0;
done:
    json_decref(root);
    if (rc) mt_route_file_free(f);
    return rc;
}

void mt_route_file_free(mt_route_file *f) {
    free(f->head);
    free(f->backbone);
    free(f->stages);
    free(f->experts);
    mt_keys_wipe(&f->keys);
    memset(f, 0, sizeof *f);
}

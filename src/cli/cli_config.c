/* cli_config.c - this machine's MoonTail home: ~/.moontail (or
 * $MOONTAIL_HOME), made by `moontail setup`. It holds
 *   config.json     {"registry": URL, "listen": ADDR, "name": NAME,
 *                    "capacity_mb": N, "registry_pin": "sha256//...",
 *                    "ca_file": FILE} - what setup was told (the last two
 *                    only for an https:// registry, cli_trust.c)
 *   token           the account token (0600)
 *   node.key        the node's identity (0600)
 *   requester.key   the requester's identity (0600)
 *   data/, cache/   shards this node holds; the head shard prompts use
 *   node.pid, node.log   the background node (when not a systemd service)
 * Commands take their defaults from it, so that after setup `moontail
 * prompt "..."` and `moontail status` need no options. */
#include "cli_config.h"
#include "moontail/sysinfo.h"
#include "moontail/file.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_home(char *out, size_t cap) {
    return mt_sys_home_dir(out, cap);
}

void cli_home_path(const char *home, const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", home, name);
}

int cli_config_load(cli_config *c) {
    memset(c, 0, sizeof *c);
    if (cli_home(c->home, sizeof c->home)) return -1;
    cli_home_path(c->home, "token", c->token_file, sizeof c->token_file);
    cli_home_path(c->home, "node.key", c->node_key, sizeof c->node_key);
    cli_home_path(c->home, "requester.key", c->requester_key, sizeof c->requester_key);
    cli_home_path(c->home, "data", c->data_dir, sizeof c->data_dir);
    cli_home_path(c->home, "cache", c->cache_dir, sizeof c->cache_dir);
    mt_file_info sb;
    c->has_token = mt_file_stat(c->token_file, &sb) == 0;
    char path[700];
    cli_home_path(c->home, "config.json", path, sizeof path);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) return errno == ENOENT || strstr(je.text, "unable to open") ? 1 : -1;
    const char *reg = json_string_value(json_object_get(j, "registry"));
    const char *listen = json_string_value(json_object_get(j, "listen"));
    const char *name = json_string_value(json_object_get(j, "name"));
    if (reg) snprintf(c->registry, sizeof c->registry, "%s", reg);
    if (listen) snprintf(c->listen, sizeof c->listen, "%s", listen);
    if (name) snprintf(c->name, sizeof c->name, "%s", name);
    const char *pin = json_string_value(json_object_get(j, "registry_pin"));
    const char *ca = json_string_value(json_object_get(j, "ca_file"));
    if (pin) snprintf(c->registry_pin, sizeof c->registry_pin, "%s", pin);
    if (ca) snprintf(c->ca_file, sizeof c->ca_file, "%s", ca);
    c->capacity_mb = json_integer_value(json_object_get(j, "capacity_mb"));
    json_decref(j);
    c->loaded = true;
    return 0;
}

int cli_config_save(const cli_config *c) {
    json_t *j = json_pack("{s:s, s:s, s:s, s:I}", "registry", c->registry, "listen", c->listen,
                          "name", c->name, "capacity_mb", (json_int_t)c->capacity_mb);
    if (c->registry_pin[0]) json_object_set_new(j, "registry_pin", json_string(c->registry_pin));
    if (c->ca_file[0]) json_object_set_new(j, "ca_file", json_string(c->ca_file));
    char path[700], tmp[720];
    cli_home_path(c->home, "config.json", path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.part", path);
    int rc =
        json_dump_file(j, tmp, JSON_INDENT(2)) == 0 && mt_file_replace(tmp, path) == 0 ? 0 : -1;
    json_decref(j);
    return rc;
}

void cli_requester_paths(cli_config *c, const char **key, const char **cache) {
    if (cli_config_load(c) < 0 || !c->home[0]) return; /* no home: keep the defaults */
    bool dkey = strcmp(*key, CLI_DEFAULT_REQUESTER_KEY) == 0,
         dcache = strcmp(*cache, CLI_DEFAULT_CACHE) == 0;
    if (!dkey && !dcache) return;
    if (mt_dir_make(c->home, true) != 0 && errno != EEXIST) return;
    if (dkey) *key = c->requester_key;
    if (dcache) *cache = c->cache_dir;
}

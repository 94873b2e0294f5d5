/* cli_config.h - this machine's MoonTail home and config (see cli_config.c). */
#ifndef MOONTAIL_CLI_CONFIG_H
#define MOONTAIL_CLI_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cli_config {
    bool loaded;    /* config.json was there */
    bool has_token; /* the token file is there */
    char home[512];
    char registry[256], listen[160], name[64];
    /* how the registry's https:// URL is trusted (cli_trust.c): its pinned
     * key "sha256//..." (setup's --registry-pin, or the key it saw first), or
     * a CA file; both "" for an http:// registry or the system's CAs */
    char registry_pin[64], ca_file[600];
    int64_t capacity_mb;
    char token_file[600], node_key[600], requester_key[600], data_dir[600], cache_dir[600];
} cli_config;

/* The home directory: $MOONTAIL_HOME, else ~/.moontail. 0, or -1 without HOME. */
int cli_home(char *out, size_t cap);
void cli_home_path(const char *home, const char *name, char *out, size_t cap);

/* Reads config.json. 0 when loaded, 1 when there is none (c->home is set
 * either way), -1 when it cannot be read or parsed. */
int cli_config_load(cli_config *c);
/* What a requester uses when not told: its key and head-shard cache in the
 * home ($MOONTAIL_HOME or ~/.moontail, made 0700 if missing), not in the
 * current directory. *key / *cache are replaced only while they still hold
 * these defaults. */
#define CLI_DEFAULT_REQUESTER_KEY "requester.key"
#define CLI_DEFAULT_CACHE         "moontail-cache"
void cli_requester_paths(cli_config *c, const char **key, const char **cache);

/* Writes config.json atomically. */
int cli_config_save(const cli_config *c);

#endif

/* cmd_registry.c - `moontail registry`: runs the control plane
 * (registry.h), and with --relay-listen the relay for nodes behind NAT
 * (relay.h), until SIGINT or SIGTERM. Prints "TLS certificate PIN (...)"
 * (with TLS), "relay on HOST:PORT" (with a relay) and "listening on URL" on
 * stdout once it answers; placement changes and joins go to stderr. */
#include "cli.h"
#include "moontail/log.h"
#include "moontail/placement.h"
#include "moontail/registry.h"
#include "moontail/tls_cert.h"
#include "moontail/transport.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: moontail registry --model MODEL.gguf [options]\n"
    "\n"
    "Runs the registry of a cell or swarm: nodes join it, it places shards on them\n"
    "(2 replicas by default), hands requesters routes, meters work, and serves the\n"
    "seed copy of every shard it assigns. State lives in an SQLite database.\n"
    "\n"
    "  --model FILE          the model to place\n"
    "  --mode cell|swarm     cell: nodes hold whole layers in pipelines (default);\n"
    "                        swarm: requesters keep the backbone, nodes hold experts\n"
    "  --db FILE             database (default registry.db; created if missing)\n"
    "  --key FILE            the registry's identity (default registry.key; created)\n"
    "  --shards DIR          seed copies of the shards (default registry-shards)\n"
    "  --listen ADDR         HTTP address (default 127.0.0.1:8470; :0 picks a port)\n"
    "  --tls                 serve HTTPS on a loopback address too (elsewhere it is the\n"
    "                        default): with --tls-cert/--tls-key, or a self-signed\n"
    "                        certificate made once and kept beside --key (KEY.tls.pem,\n"
    "                        KEY.tls.key); its fingerprint is printed at start for\n"
    "                        clients' --registry-pin (docs/operators.md, TLS)\n"
    "  --tls-cert FILE       the certificate (PEM, chain after it) to serve HTTPS with\n"
    "  --tls-key FILE        its private key (PEM, unencrypted)\n"
    "  --no-tls              plain HTTP (the default on loopback); refused elsewhere\n"
    "                        without --insecure-http\n"
    "  --insecure-http       allow plain HTTP off loopback (and use it): account and\n"
    "                        node tokens then cross the network in clear\n"
    "  --replicas N          copies of every layer or expert (default 2)\n"
    "  --spares N            hot spares to keep (default 1 in a cell, 0 in a swarm)\n"
    "  --objective O         cell: what each pipeline is laid out for: throughput\n"
    "                        (default: its slowest stage as fast as possible), latency\n"
    "                        (one token's trip shortest: wider stage groups whose\n"
    "                        partners read a layer's experts at once) or balanced (the\n"
    "                        shortest trip whose slowest stage stays within 1.25x)\n"
    "  --latency-goal-ms T   cell: a per-user goal, ms per token through a pipeline\n"
    "                        (placement's estimate); --replicas becomes the fewest\n"
    "                        pipelines and a fresh plan makes as many as meet it\n"
    "                        (default 0: no goal, --replicas pipelines)\n"
    "  --sessions N          cell: room a stage keeps for N sessions' KV cache and\n"
    "                        recurrent state besides its shard, as nodes run them\n"
    "                        (`node --max-sessions`, 64; default 0: shard bytes only)\n"
    "  --ctx N               positions of each of those sessions (default: the node\n"
    "                        default, min(context_length, 4096))\n"
    "  --kv-type T           the KV cache type of every node of the cell: f16 (default),\n"
    "                        bf16, q8_0 (about half of f16's memory) or f32\n"
    "  --heartbeat-ms N      how often nodes report (default 1000)\n"
    "  --dead-after-ms N     silence after which a node is dead (default 5000)\n"
    "  --cert-minutes N      validity of issued certificates (default 60)\n"
    "  --admin-token-file F  creating accounts needs this token (default: anyone may)\n"
    "  --require-volunteer   swarm: only accounts that served may get routes\n"
    "  --max-active N        requests running at once; more wait in line, told their\n"
    "                        place (default 0: no limit)\n"
    "  --reports-per-minute N  spot-check reports one account may make a minute; each\n"
    "                        makes the registry check the two nodes named (default 6)\n"
    "  --relay-listen ADDR   run a relay for nodes behind NAT (`node --relay`): they\n"
    "                        connect here, e.g. 0.0.0.0:8471\n"
    "  --relay-ports LO-HI   public ports handed to relayed nodes, one each (default:\n"
    "                        any free port); open them in the firewall\n"
    "  --relay-host NAME     the name or address nodes and peers reach this machine at\n"
    "                        (default: the host of --relay-listen; needed with 0.0.0.0)\n"
    "  --relay-max-conns N   relayed connections per node (default 64)\n"
    "  --hash-cache FILE     the model's hashes kept between starts (default\n"
    "                        hashes.sqlite beside --db; 'none': hash at every start)\n"
    "  --rehash              read and hash the whole model again, ignoring the "
    "cache\n" CLI_HTTP_LIMIT_USAGE "  --quiet               no log lines\n" CLI_LOG_USAGE;

/* The self-signed pair's files, kept beside the registry's key:
 * KEY.tls.pem and KEY.tls.key. False when the key's path is too long. */
typedef struct tls_paths {
    char cert[4200], key[4200];
} tls_paths;

static bool tls_paths_of(tls_paths *p, const char *key) {
    return snprintf(p->cert, sizeof p->cert, "%s.tls.pem", key) < (int)sizeof p->cert &&
           snprintf(p->key, sizeof p->key, "%s.tls.key", key) < (int)sizeof p->key;
}

/* The certificate to serve: the operator's (cert and key given), else the
 * self-signed pair at `pair` (made at the first start). 0, or 1 after
 * saying what is wrong. */
static int registry_tls(mt_tls_identity *id, const char *listen, const tls_paths *pair,
                        const char *cert, const char *cert_key) {
    mt_error err = {{0}};
    if (cert) {
        if (mt_tls_identity_load(id, cert, cert_key, &err) == 0) return 0;
        fprintf(stderr, "moontail registry: %s\n", err.msg);
        return 1;
    }
    /* the listen host for the certificate's names: "[::1]:80" -> ::1, ":80" -> 127.0.0.1 */
    char host[300];
    const char *colon = strrchr(listen, ':');
    size_t hl = colon ? (size_t)(colon - listen) : strlen(listen);
    const char *h = listen;
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') h++, hl -= 2;
    snprintf(host, sizeof host, "%.*s", (int)(hl < sizeof host ? hl : sizeof host - 1), h);
    if (!host[0]) snprintf(host, sizeof host, "127.0.0.1");
    if (mt_tls_identity_self_signed(id, pair->cert, pair->key, host, &err) == 0) return 0;
    fprintf(stderr, "moontail registry: %s\n", err.msg);
    return 1;
}

int cmd_registry(int argc, char **argv) {
    const char *model = NULL, *mode = "cell", *db = "registry.db", *key = "registry.key",
               *shards = "registry-shards", *listen = "127.0.0.1:8470", *admin_file = NULL;
    int64_t replicas = 2, spares = -1, hb = 1000, dead = 5000, cert_minutes = 60, max_active = 0,
            reports_per_minute = 6;
    const char *relay_listen = NULL, *relay_ports = NULL, *relay_host = NULL;
    int64_t relay_max_conns = 64, sessions = 0, ctx = 0;
    const char *hash_cache = NULL, *kv_name = NULL, *objective_name = "throughput";
    float latency_goal = 0;
    bool require_volunteer = false, quiet = false, rehash = false;
    int64_t http_limits[5] = {0};
    const char *tls_cert = NULL, *tls_key = NULL;
    bool tls = false, no_tls = false, insecure_http = false;
    cli_log_opts log_opts = {0};
    const cli_opt opts[] = {
        CLI_HTTP_LIMIT_OPTS(http_limits),
        CLI_LOG_OPTS(log_opts),
        {"--model", CLI_STRING, &model, 0, 0},
        {"--mode", CLI_STRING, &mode, 0, 0},
        {"--db", CLI_STRING, &db, 0, 0},
        {"--key", CLI_STRING, &key, 0, 0},
        {"--shards", CLI_STRING, &shards, 0, 0},
        {"--listen", CLI_STRING, &listen, 0, 0},
        {"--replicas", CLI_INT, &replicas, 1, 16},
        {"--spares", CLI_INT, &spares, 0, 1000},
        {"--objective", CLI_STRING, &objective_name, 0, 0},
        {"--latency-goal-ms", CLI_FLOAT, &latency_goal, 0, 0},
        {"--sessions", CLI_INT, &sessions, 0, 1 << 20},
        {"--kv-type", CLI_STRING, &kv_name, 0, 0},
        {"--ctx", CLI_INT, &ctx, 1, 1 << 24},
        {"--heartbeat-ms", CLI_INT, &hb, 50, 60000},
        {"--dead-after-ms", CLI_INT, &dead, 200, 3600000},
        {"--cert-minutes", CLI_INT, &cert_minutes, 1, 60 * 24 * 365},
        {"--admin-token-file", CLI_STRING, &admin_file, 0, 0},
        {"--require-volunteer", CLI_FLAG, &require_volunteer, 0, 0},
        {"--max-active", CLI_INT, &max_active, 0, 1 << 20},
        {"--reports-per-minute", CLI_INT, &reports_per_minute, 1, 100000},
        {"--relay-listen", CLI_STRING, &relay_listen, 0, 0},
        {"--relay-ports", CLI_STRING, &relay_ports, 0, 0},
        {"--relay-host", CLI_STRING, &relay_host, 0, 0},
        {"--relay-max-conns", CLI_INT, &relay_max_conns, 1, 4096},
        {"--hash-cache", CLI_STRING, &hash_cache, 0, 0},
        {"--rehash", CLI_FLAG, &rehash, 0, 0},
        {"--quiet", CLI_FLAG, &quiet, 0, 0},
        {"--tls", CLI_FLAG, &tls, 0, 0},
        {"--tls-cert", CLI_STRING, &tls_cert, 0, 0},
        {"--tls-key", CLI_STRING, &tls_key, 0, 0},
        {"--no-tls", CLI_FLAG, &no_tls, 0, 0},
        {"--insecure-http", CLI_FLAG, &insecure_http, 0, 0},
        {NULL, CLI_FLAG, NULL, 0, 0},
    };
    int prc = cli_parse("registry", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    if (!cli_log_setup("registry", &log_opts)) return 2;
    mt_place_objective objective;
    if (mt_place_objective_parse(objective_name, &objective)) {
        fprintf(stderr,
                "moontail registry: --objective must be throughput, latency or balanced, not "
                "'%s'\n",
                objective_name);
        return 2;
    }
    mt_kv_type kv_type;
    if (!cli_kv_type("registry", kv_name, &kv_type)) return 2;
    if (!model) {
        fprintf(stderr, "moontail registry: --model FILE is required\n");
        return 2;
    }
    if (strcmp(mode, "cell") != 0 && strcmp(mode, "swarm") != 0) {
        fprintf(stderr, "moontail registry: --mode must be cell or swarm, not '%s'\n", mode);
        return 2;
    }
    if (!(latency_goal >= 0) || latency_goal > 1e9f) {
        fprintf(stderr,
                "moontail registry: --latency-goal-ms must be in 0..1e9 ms per token (0: no goal),"
                " not %g\n",
                (double)latency_goal);
        return 2;
    }
    if (latency_goal > 0 && strcmp(mode, "cell") != 0) {
        fprintf(stderr, "moontail registry: --latency-goal-ms applies to --mode cell only (a"
                        " swarm's requesters choose no pipelines)\n");
        return 2;
    }
    if (dead <= hb) {
        fprintf(stderr, "moontail registry: --dead-after-ms must exceed --heartbeat-ms\n");
        return 2;
    }
    int port_lo = 0, port_hi = 0;
    if ((relay_ports || relay_host) && !relay_listen) {
        fprintf(stderr, "moontail registry: --relay-ports and --relay-host need --relay-listen\n");
        return 2;
    }
    if (relay_ports) {
        char tail = 0;
        if (sscanf(relay_ports, "%d-%d%c", &port_lo, &port_hi, &tail) != 2 || port_lo < 1 ||
            port_hi > 65535 || port_lo > port_hi) {
            fprintf(stderr,
                    "moontail registry: --relay-ports expects LO-HI with 1 <= LO <= HI <= 65535"
                    " (e.g. 47000-47999), got '%s'\n",
                    relay_ports);
            return 2;
        }
    }
    if (!tls_cert != !tls_key) {
        fprintf(stderr, "moontail registry: --tls-cert and --tls-key go together (the"
                        " certificate and its private key)\n");
        return 2;
    }
    if ((no_tls || insecure_http) && (tls || tls_cert)) {
        fprintf(stderr, "moontail registry: %s asks for plain HTTP and cannot go with %s\n",
                no_tls ? "--no-tls" : "--insecure-http", tls ? "--tls" : "--tls-cert");
        return 2;
    }
    /* TLS when asked for, and by default off loopback (plain there only with --insecure-http) */
    bool use_tls = tls || tls_cert || (!mt_addr_loopback(listen) && !insecure_http && !no_tls);
    tls_paths pair = {"", ""};
    if (use_tls && !tls_cert && !tls_paths_of(&pair, key)) {
        fprintf(stderr, "moontail registry: --key path too long\n");
        return 1;
    }
    /* every check that can fail before a self-signed certificate is made, so that a start
     * refused for them leaves no new files */
    char *admin = NULL;
    if (admin_file &&
        !(admin = cli_secret_file("registry", "--admin-token-file", admin_file,
                                  "the admin token that creating accounts will need")))
        return 2;
    mt_tls_identity id = {0};
    if (use_tls && registry_tls(&id, listen, &pair, tls_cert, tls_key)) {
        free(admin);
        return 1;
    }
    char pin[MT_TLS_PIN_SIZE] = "", cert_what[4300] = "";
    if (use_tls) {
        snprintf(pin, sizeof pin, "%s", id.pin);
        if (tls_cert)
            snprintf(cert_what, sizeof cert_what, "from %s", tls_cert);
        else
            snprintf(cert_what, sizeof cert_what, "self-signed, %s %s",
                     id.generated ? "made now:" : "kept in", pair.cert);
    }
    mt_stop_catch(log_opts.file != NULL);
    mt_registry_config c = {.model = model,
                            .db = db,
                            .key = key,
                            .shard_dir = shards,
                            .listen = listen,
                            .mode =
                                strcmp(mode, "swarm") == 0 ? MT_REGISTRY_SWARM : MT_REGISTRY_CELL,
                            .replicas = (int)replicas,
                            .spares = (int)spares,
                            .objective = (int)objective,
                            .latency_goal_ms = latency_goal,
                            .heartbeat_ms = (int)hb,
                            .dead_after_ms = (int)dead,
                            .cert_minutes = (int)cert_minutes,
                            .admin_token = admin,
                            .require_volunteer = require_volunteer,
                            .max_active = (int)max_active,
                            .reports_per_minute = (int)reports_per_minute,
                            .relay_listen = relay_listen,
                            .relay_host = relay_host,
                            .relay_port_lo = port_lo,
                            .relay_port_hi = port_hi,
                            .relay_max_conns = (int)relay_max_conns,
                            .sessions = (int)sessions,
                            .n_ctx = (int)ctx,
                            .kv_type = kv_type,
                            .hash_cache = hash_cache,
                            .rehash = rehash,
                            .quiet = quiet,
                            .http_limits = cli_http_limits(http_limits),

                            .tls_cert_pem = id.cert_pem,
                            .tls_key_pem = id.key_pem,
                            .tls_pin = use_tls ? pin : NULL,
                            .insecure_http = insecure_http};
    mt_error err = {{0}};
    mt_registry *r = mt_registry_start(&c, &err);
    free(admin);
    bool tls_made = id.generated;
    mt_tls_identity_free(&id);
    if (!r) {
        fprintf(stderr, "moontail registry: %s\n", err.msg);
        if (tls_made) { /* made for this start, which failed: like the key, not kept */
            unlink(pair.cert);
            unlink(pair.key);
        }
        return 1;
    }
    char goal_text[64] = "";
    if (latency_goal > 0)
        snprintf(goal_text, sizeof goal_text, ", latency goal %g ms", (double)latency_goal);
    if (!quiet)
        mt_log(MT_LOG_INFO, "registry", "%s mode, %s%lld replicas, %s objective%s, key %s", mode,
               latency_goal > 0 ? "at least " : "", (long long)replicas,
               mt_place_objective_name(objective), goal_text, mt_registry_pubkey_hex(r));
    if (use_tls)
        printf("TLS certificate %s (%s; clients: --registry-pin %s)\n", pin, cert_what, pin);
    if (mt_registry_relay_addr(r)) printf("relay on %s\n", mt_registry_relay_addr(r));
    printf("listening on %s\n", mt_registry_url(r));
    fflush(stdout);
    mt_stop_why why = cli_wait_stop("registry");
    if (!quiet) mt_log(MT_LOG_INFO, "registry", "%s, stopping", mt_stop_name(why));
    mt_registry_stop(r);
    return 0;
}

/* cmd_node_agent.c - `moontail node --registry URL`: a node that joins a
 * registry and serves whatever shard it is assigned (node_agent.h), until
 * SIGINT or SIGTERM. Prints "listening on ADDR" (the data plane as peers
 * reach it: with --tunnel or --relay the public address) on stdout once
 * joined; progress and changes go to stderr. */
#include "cli.h"
#include "moontail/log.h"
#include "moontail/node_agent.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: moontail node --registry URL --token-file FILE [options]\n"
    "\n"
    "Joins the registry, gets a shard assigned, fetches it from peers (the registry's\n"
    "seed copy last) and serves it; heartbeats every second. Admits exactly the\n"
    "requesters and nodes the registry vouches for.\n"
    "\n"
    "  --registry URL        the registry, e.g. http://192.168.1.10:8470\n"
    "  --token-file FILE     the account token (or MOONTAIL_TOKEN, or --token T)\n"
    "  --key KEYFILE         this node's identity (default ./node.key; created if missing)\n"
    "  --data DIR            where shards are kept (default ./moontail-data)\n"
    "  --listen ADDR         data plane address peers reach (default 127.0.0.1:7411;\n"
    "                        :0 picks a port once); with --tunnel or --relay, where the\n"
    "                        node's own server listens on loopback\n"
    "  --tunnel \"COMMAND\"    behind NAT: run COMMAND (/bin/sh -c; {port} and {host} become\n"
    "                        the loopback data-plane port and host), register the public\n"
    "                        address it prints, restart it with backoff when it exits,\n"
    "                        e.g. --tunnel \"bore local {port} --to bore.pub\"\n"
    "  --tunnel-pattern RE   the line giving the address: a PCRE2 regular expression whose\n"
    "                        first capture group is HOST:PORT (default: a HOST:PORT or\n"
    "                        tcp://HOST:PORT standing on its own)\n"
    "  --tunnel-wait-s N     how long to wait for the first address (default 60)\n"
    "  --relay               behind NAT without a tunnel program: peers reach this node\n"
    "                        through the registry's relay (it must run --relay-listen)\n"
    "  --shard-listen ADDR   where peers fetch shards from (default: same host, any port)\n"
    "  --name NAME           shown in status (default: the host name and 4 hex digits of\n"
    "                        the node's key, e.g. pc7-3fa9)\n"
    "  --capacity-mb N       shard bytes offered (default 70% of available RAM)\n"
    "  --speed X             skip the self-benchmark (1.0 = 10 GB/s of memory reads)\n"
    "  --memory-mb N --max-sessions N --ctx N --threads N   as for a node without a\n"
    "                        registry\n"
    "  --session-idle-s N    a session unused for N seconds expires (default 600)\n"
    "  --step-tokens N --prefill-chunk N   as for a node without a registry\n"
    "  --recheck-s N         while serving, hash one tensor of the shard again every N\n"
    "                        seconds (default 10; 0: never); a mismatch stops serving it\n"
    "                        and is reported to the registry (moontail status)\n"
    "  --quiet               no log lines\n" CLI_LOG_USAGE;

int cmd_node_agent(int argc, char **argv) {
    const char *registry = NULL, *token = NULL, *token_file = NULL, *key = "node.key",
               *data = "moontail-data", *listen = "127.0.0.1:7411", *shard_listen = NULL,
               *name = NULL;
    int64_t memory_mb = 0, capacity_mb = 0, max_sessions = 0, ctx = 0, threads = 0,
            session_idle_s = 0, recheck_s = 10, step_tokens = 0, prefill_chunk = 0;
    float speed = 0;
    const char *tunnel = NULL, *tunnel_pattern = NULL;
    int64_t tunnel_wait_s = 60;
    bool quiet = false, relay = false;
    const char *misbehave = NULL; /* testing only, not in the usage (docs/testing.md) */
    cli_log_opts log_opts = {0};
    const cli_opt opts[] = {
        {"--registry", CLI_STRING, &registry, 0, 0},
        {"--token", CLI_STRING, &token, 0, 0},
        {"--token-file", CLI_STRING, &token_file, 0, 0},
        {"--key", CLI_STRING, &key, 0, 0},
        {"--data", CLI_STRING, &data, 0, 0},
        {"--listen", CLI_STRING, &listen, 0, 0},
        {"--shard-listen", CLI_STRING, &shard_listen, 0, 0},
        {"--name", CLI_STRING, &name, 0, 0},
        {"--capacity-mb", CLI_INT, &capacity_mb, 1, 1LL << 32},
        {"--speed", CLI_FLOAT, &speed, 0, 0},
        {"--max-sessions", CLI_INT, &max_sessions, 1, 1 << 20},
        {"--session-idle-s", CLI_INT, &session_idle_s, 1, 7 * 86400},
        {"--ctx", CLI_INT, &ctx, 1, 1 << 24},
        {"--memory-mb", CLI_INT, &memory_mb, 1, 1LL << 40},
        {"--threads", CLI_INT, &threads, 1, 1024},
        {"--step-tokens", CLI_INT, &step_tokens, 1, 1 << 20},
        {"--prefill-chunk", CLI_INT, &prefill_chunk, 1, 1 << 20},
        {"--recheck-s", CLI_INT, &recheck_s, 0, 86400},
        {"--tunnel", CLI_STRING, &tunnel, 0, 0},
        {"--tunnel-pattern", CLI_STRING, &tunnel_pattern, 0, 0},
        {"--tunnel-wait-s", CLI_INT, &tunnel_wait_s, 1, 3600},
        {"--relay", CLI_FLAG, &relay, 0, 0},
        {"--quiet", CLI_FLAG, &quiet, 0, 0},
        {"--misbehave", CLI_STRING, &misbehave, 0, 0},
        CLI_LOG_OPTS(log_opts),
        {NULL, CLI_FLAG, NULL, 0, 0},
    };
    int prc = cli_parse("node", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    if (!cli_log_setup("node", &log_opts)) return 2;
    double corrupt_rate = 0;
    if (misbehave && !cli_misbehave("node", misbehave, &corrupt_rate)) return 2;
    if (!registry) {
        fprintf(stderr, "moontail node: --registry URL is required here\n");
        return 2;
    }
    if (tunnel && relay) {
        fprintf(stderr, "moontail node: --tunnel and --relay: choose one\n");
        return 2;
    }
    if (tunnel_pattern && !tunnel) {
        fprintf(stderr, "moontail node: --tunnel-pattern needs --tunnel \"COMMAND\"\n");
        return 2;
    }
    if (speed < 0) {
        fprintf(stderr, "moontail node: --speed must be positive\n");
        return 2;
    }
    char *tok = cli_token("node", token, token_file);
    if (!tok) return 2;
    mt_stop_catch(log_opts.file != NULL);
    mt_agent_config c = {.registry = registry,
                         .token = tok,
                         .key_path = key,
                         .name = name,
                         .listen = listen,
                         .shard_listen = shard_listen,
                         .data_dir = data,
                         .capacity = capacity_mb * 1000000,
                         .speed = speed,
                         .threads = (int)threads,
                         .max_sessions = (int)max_sessions,
                         .n_ctx = (int)ctx,
                         .memory_bytes = cli_memory_offered(memory_mb),
                         .session_idle_ms = (int)session_idle_s * 1000,
                         .step_tokens = (int)step_tokens,
                         .prefill_chunk = (int)prefill_chunk,
                         .tunnel = tunnel,
                         .tunnel_pattern = tunnel_pattern,
                         .tunnel_wait_ms = (int)tunnel_wait_s * 1000,
                         .relay = relay,
                         .quiet = quiet,
                         .corrupt_rate = corrupt_rate,
                         .recheck_ms = recheck_s > 0 ? (int)recheck_s * 1000 : -1};
    mt_error err = {{0}};
    mt_agent *a = mt_agent_start(&c, &err);
    free(tok);
    if (!a) {
        fprintf(stderr, "moontail node: %s\n", err.msg);
        return 1;
    }
    mt_agent_state st;
    mt_agent_get_state(a, &st);
    printf("listening on %s\n", st.addr);
    fflush(stdout);
    mt_stop_why why = cli_wait_stop("node");
    if (!quiet) mt_log(MT_LOG_INFO, "node", "%s, leaving", mt_stop_name(why));
    mt_agent_stop(a);
    mt_stop_done(); /* a console closing (Windows) waits for this clean stop */
    return 0;
}

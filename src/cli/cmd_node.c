/* cmd_node.c - `moontail node`: serves one shard over the data plane (see
 * moontail/node.h) until SIGINT or SIGTERM. Prints "listening on ADDR" on
 * stdout once it accepts connections (with --listen HOST:0 that line tells
 * the port the system picked); everything else goes to stderr. */
#include "cli.h"
#include "moontail/keys.h"
#include "moontail/node.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: moontail node --shard FILE --key KEYFILE --authorized FILE [options]\n"
    "\n"
    "Serves a shard to requesters (and to paired nodes) until SIGINT or SIGTERM.\n"
    "\n"
    "  --shard FILE          the shard (or whole model) to serve\n"
    "  --key KEYFILE         this node's secret key file (moontail keygen)\n"
    "  --authorized FILE     authorized-keys file: who may connect\n"
    "  --listen ADDR         where to listen (default 127.0.0.1:7411; :0 picks a free port;\n"
    "                        all interfaces only when asked: 0.0.0.0:PORT or [::]:PORT)\n"
    "  --partner ADDR=KEY    a node holding the other routed experts of a paired layer\n"
    "                        (its address and 64-hex-digit public key); repeatable\n"
    "  --max-sessions N      sessions kept at once, least recently used evicted (default 64)\n"
    "  --ctx N               positions per session (default min(model context, 4096))\n"
    "  --max-batch N         tokens computed per step (default 4096)\n"
    "  --threads N           compute threads (default: all CPUs)\n"
    "  --quiet               no log lines on stderr\n";

/* Takes every "--partner ADDR=KEY" out of argv (compacting it). Returns the
 * number of partners, or -1 after printing what is wrong. */
static int take_partners(int *argc, char **argv, mt_node_partner **out, char ***addrs) {
    int n = 0, k = 1;
    *out = calloc((size_t)*argc, sizeof **out);
    *addrs = calloc((size_t)*argc, sizeof **addrs);
    if (!*out || !*addrs) return -1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--partner") != 0) {
            argv[k++] = argv[i];
            continue;
        }
        const char *v = cli_value(*argc, argv, &i);
        if (!v) return -1;
        const char *eq = strrchr(v, '=');
        mt_error err = {{0}};
        if (!eq || eq == v) {
            fprintf(stderr,
                    "moontail node: --partner expects ADDR=KEY (e.g. 10.0.0.5:7411=<64 hex"
                    " digits>), got '%s'\n",
                    v);
            return -1;
        }
        if (mt_keys_pk_from_hex((*out)[n].pk, eq + 1, &err)) {
            fprintf(stderr, "moontail node: --partner %s: %s\n", v, err.msg);
            return -1;
        }
        (*addrs)[n] = strndup(v, (size_t)(eq - v));
        if (!(*addrs)[n]) return -1;
        (*out)[n].addr = (*addrs)[n];
        n++;
    }
    *argc = k;
    return n;
}

int cmd_node(int argc, char **argv) {
    const char *shard = NULL, *key = NULL, *authorized = NULL, *listen = "127.0.0.1:7411";
    int64_t max_sessions = 0, ctx = 0, max_batch = 0, threads = 0;
    bool quiet = false;
    mt_node_partner *partners = NULL;
    char **addrs = NULL;
    int rc = 2;
    int n_partners = take_partners(&argc, argv, &partners, &addrs);
    const cli_opt opts[] = {
        {"--shard", CLI_STRING, &shard, 0, 0},
        {"--key", CLI_STRING, &key, 0, 0},
        {"--authorized", CLI_STRING, &authorized, 0, 0},
        {"--listen", CLI_STRING, &listen, 0, 0},
        {"--max-sessions", CLI_INT, &max_sessions, 1, 1 << 20},
        {"--ctx", CLI_INT, &ctx, 1, 1 << 24},
        {"--max-batch", CLI_INT, &max_batch, 1, 1 << 20},
        {"--threads", CLI_INT, &threads, 1, 1024},
        {"--quiet", CLI_FLAG, &quiet, 0, 0},
        {NULL, CLI_FLAG, NULL, 0, 0},
    };
    int prc = n_partners < 0 ? -1 : cli_parse("node", argc, argv, opts, usage);
    if (prc) {
        rc = prc > 0 ? 0 : 2;
        goto out;
    }
    if (!shard || !key || !authorized) {
        fprintf(stderr, "moontail node: --shard, --key and --authorized are required; see"
                        " 'moontail node --help'\n");
        goto out;
    }
    rc = 1;
    mt_error err = {{0}};
    mt_keys keys;
    if (mt_keys_load(&keys, key, &err)) {
        fprintf(stderr, "moontail node: %s\n", err.msg);
        goto out;
    }
    mt_keys_authorized *auth = mt_keys_authorized_load(authorized, &err);
    if (!auth) {
        fprintf(stderr, "moontail node: %s\n", err.msg);
        mt_keys_wipe(&keys);
        goto out;
    }
    /* SIGINT/SIGTERM are taken with sigwait below: block them before any thread starts */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    mt_node_config cfg = {.shard_path = shard,
                          .keys = &keys,
                          .authorized = auth,
                          .listen = listen,
                          .partners = partners,
                          .n_partners = n_partners,
                          .max_sessions = (int)max_sessions,
                          .n_ctx = (int)ctx,
                          .threads = (int)threads,
                          .max_batch_tokens = (int)max_batch,
                          .quiet = quiet};
    mt_node *node = mt_node_start(&cfg, &err);
    mt_keys_wipe(&keys);
    if (!node) {
        fprintf(stderr, "moontail node: %s\n", err.msg);
        mt_keys_authorized_free(auth);
        goto out;
    }
    const mt_proto_info *in = mt_node_info(node);
    if (!quiet)
        fprintf(stderr,
                "moontail node: %s, layers [%d, %d)%s, %d of %d routed experts, %d sessions of %d"
                " positions\n",
                shard, in->layer_begin, in->layer_end, in->attention ? " with attention" : "",
                in->n_held, in->n_expert, in->max_sessions, in->n_ctx);
    printf("listening on %s\n", mt_node_addr(node));
    fflush(stdout);
    int sig = 0;
    sigwait(&sigs, &sig);
    if (!quiet)
        fprintf(stderr, "moontail node: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    mt_node_stop(node);
    mt_keys_authorized_free(auth);
    rc = 0;
out:
    for (int i = 0; addrs && addrs[i]; i++) free(addrs[i]);
    free(addrs);
    free(partners);
    return rc;
}

/* cmd_node.c - `moontail node`: serves one shard over the data plane (see
 * moontail/node.h) until SIGINT or SIGTERM. Prints "listening on ADDR" on
 * stdout once it accepts connections (with --listen HOST:0 that line tells
 * the port the system picked); everything else goes to stderr. Who may
 * connect: the keys of an authorized-keys file and/or every key certified by
 * a trusted authority (cert.h); SIGHUP rereads the node's own --cert file
 * (renewal without a restart). */
#include "cli.h"
#include "cli_shard_io.h"
#include "moontail/cert.h"
#include "moontail/keys.h"
#include "moontail/log.h"
#include "moontail/node.h"
#include "moontail/progress.h"
#include "moontail/compat.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage[] =
    "usage: moontail node --shard FILE --key KEYFILE (--authorized FILE | --authority KEY)\n"
    "                     [options]\n"
    "\n"
    "       moontail node --registry URL --token-file FILE [options]   (see --registry --help)\n"
    "\n"
    "Serves a shard to requesters (and to paired nodes) until SIGINT or SIGTERM.\n"
    "\n"
    "  --shard FILE          the shard (or whole model) to serve\n"
    "  --key KEYFILE         this node's secret key file (moontail keygen)\n"
    "  --authorized FILE     authorized-keys file: who may connect (peer keys, and\n"
    "                        'authority <hex> [name]' lines)\n"
    "  --authority KEY       trust certificates from this authority (the registry): its\n"
    "                        public key as 64 hex digits, or a file holding them;\n"
    "                        repeatable. --authorized, --authority or both are required\n"
    "  --cert FILE           this node's certificate (moontail cert issue), presented to\n"
    "                        every peer; SIGHUP rereads the file (renewal)\n"
    "  --listen ADDR         where to listen (default 127.0.0.1:7411; :0 picks a free port;\n"
    "                        all interfaces only when asked: 0.0.0.0:PORT or [::]:PORT)\n"
    "  --partner ADDR=KEY    a node holding the other routed experts of a paired layer\n"
    "                        (its address and 64-hex-digit public key); repeatable\n"
    "  --kv-type T           KV cache type: f16 (default), bf16, q8_0 (about half of f16's\n"
    "                        memory) or f32; every replica of a layer must use the same\n"
    "                        (under a registry, the registry's --kv-type decides)\n"
    "  --memory-mb N         memory offered for the weights and the sessions' caches\n"
    "                        (default 70% of the RAM available at start); sets the\n"
    "                        default of --ctx; sessions are kept while their caches fit\n"
    "                        in what the weights leave, the least recently used evicted\n"
    "  --max-sessions N      also keep at most N sessions at once (default: no count,\n"
    "                        only memory; at most 2^20)\n"
    "  --session-idle-s N    a session unused for N seconds expires, its KV cache freed\n"
    "                        (a requester that died never ends it; default 600)\n"
    "  --ctx N               positions per session (default: the longest one session can\n"
    "                        fill in the memory left after the weights, at most the\n"
    "                        model's context; caches grow as they are used)\n"
    "  --max-batch N         tokens computed per step at most (default 4096)\n"
    "  --step-tokens N       a step's tokens: every waiting decode first, then chunks\n"
    "                        of prompts up to N tokens (default 32)\n"
    "  --prefill-chunk N     tokens of a prompt computed per step at most (default 4)\n"
    "  --no-pacing           start a step of prompt chunks even when a decoding session's\n"
    "                        next token is due before it would end (default: wait for it)\n"
    "  --threads N           compute threads (default: all CPUs); a shard is hashed on as\n"
    "                        many before it is served (its stored hashes must match)\n"
    "  --recheck-s N         while serving, hash one tensor of the shard again every N\n"
    "                        seconds (default 10; 0: never); a mismatch stops the node\n"
    "  --quiet               no log lines\n" CLI_LOG_USAGE;

/* The partners of the --partner ADDR=KEY options (out and addrs have room
 * for l->n, addrs ends with a NULL). Returns 0, or -1 after printing what is
 * wrong. */
static int parse_partners(const cli_list *l, mt_node_partner *out, char **addrs) {
    for (int n = 0; n < l->n; n++) {
        const char *v = l->v[n];
        const char *eq = strrchr(v, '=');
        mt_error err = {{0}};
        if (!eq || eq == v) {
            fprintf(stderr,
                    "moontail node: --partner expects ADDR=KEY (e.g. 10.0.0.5:7411=<64 hex"
                    " digits>), got '%s'\n",
                    v);
            return -1;
        }
        if (mt_keys_pk_from_hex(out[n].pk, eq + 1, &err)) {
            fprintf(stderr, "moontail node: --partner %s: %s\n", v, err.msg);
            return -1;
        }
        addrs[n] = mt_strndup(v, (size_t)(eq - v));
        if (!addrs[n]) return -1;
        out[n].addr = addrs[n];
    }
    return 0;
}

/* An authority's public key from "--authority HEX_OR_FILE": 64 hex digits,
 * or a file holding them (what `moontail keygen` prints, e.g. registry.pub). */
static int parse_authority(const char *v, uint8_t pk[MT_KEYS_PUBLIC_BYTES]) {
    mt_error err = {{0}};
    if (strlen(v) == 2 * MT_KEYS_PUBLIC_BYTES && mt_keys_pk_from_hex(pk, v, NULL) == 0) return 0;
    FILE *f = fopen(v, "r");
    if (!f) {
        fprintf(stderr,
                "moontail node: --authority %s: neither 64 hex digits nor a readable file (%s)\n",
                v, strerror(errno));
        return -1;
    }
    char text[256] = {0};
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ')) n--;
    text[n] = 0;
    if (mt_keys_pk_from_hex(pk, text, &err)) {
        fprintf(stderr,
                "moontail node: --authority %s: the file must hold only the authority's public "
                "key (64 hex digits, as printed by 'moontail keygen'): %s\n",
                v, err.msg);
        return -1;
    }
    return 0;
}

/* Loads a certificate file for keys (checked to be for its key); warns
 * when it is not valid at this moment (peers will refuse it). */
static int load_cert(const char *path, mt_keys *keys, uint8_t cert[MT_CERT_BYTES]) {
    mt_error err = {{0}};
    mt_cert c;
    if (mt_cert_load(path, cert, &c, &err) || mt_keys_set_cert(keys, cert, MT_CERT_BYTES, &err)) {
        if (!strstr(err.msg, path)) mt_error_prefix(&err, "%s", path);
        fprintf(stderr, "moontail node: --cert %s\n", err.msg);
        return -1;
    }
    if (mt_cert_check_time(&c, mt_cert_now(), 0, &err))
        fprintf(stderr, "moontail node: warning: %s: %s; peers will refuse it\n", path, err.msg);
    return 0;
}

int cmd_node(int argc, char **argv) {
    for (int i = 1; i < argc; i++) /* a node run by a registry: node_agent.h */
        if (strcmp(argv[i], "--registry") == 0) return cmd_node_agent(argc, argv);
    const char *shard = NULL, *key = NULL, *authorized = NULL, *listen = "127.0.0.1:7411",
               *cert_path = NULL;
    const char *misbehave = NULL; /* testing only, not in the usage (docs/testing.md) */
    const char *kv_name = NULL;
    double corrupt_rate = 0;
    int64_t max_sessions = 0, ctx = 0, max_batch = 0, step_tokens = 0, prefill_chunk = 0,
            threads = 0, session_idle_s = 0, memory_mb = 0, recheck_s = 10;
    bool quiet = false, no_pacing = false;
    cli_log_opts log_opts = {0};
    mt_node_partner *partners = NULL;
    char **addrs = NULL;
    int rc = 2;
    /* each option's value takes two arguments, so argc bounds their number */
    const char **partner_args = calloc((size_t)argc, sizeof *partner_args);
    const char **authorities = calloc((size_t)argc, sizeof *authorities);
    partners = calloc((size_t)argc, sizeof *partners);
    addrs = calloc((size_t)argc, sizeof *addrs);
    cli_list partner_list = {partner_args, 0, argc}, authority_list = {authorities, 0, argc};
    const cli_opt opts[] = {
        {"--shard", CLI_STRING, &shard, 0, 0},
        {"--key", CLI_STRING, &key, 0, 0},
        {"--authorized", CLI_STRING, &authorized, 0, 0},
        {"--cert", CLI_STRING, &cert_path, 0, 0},
        {"--listen", CLI_STRING, &listen, 0, 0},
        {"--max-sessions", CLI_INT, &max_sessions, 1, 1 << 20},
        {"--session-idle-s", CLI_INT, &session_idle_s, 1, 7 * 86400},
        {"--ctx", CLI_INT, &ctx, 1, 1 << 24},
        {"--memory-mb", CLI_INT, &memory_mb, 1, 1LL << 40},
        {"--kv-type", CLI_STRING, &kv_name, 0, 0},
        {"--max-batch", CLI_INT, &max_batch, 1, 1 << 20},
        {"--step-tokens", CLI_INT, &step_tokens, 1, 1 << 20},
        {"--prefill-chunk", CLI_INT, &prefill_chunk, 1, 1 << 20},
        {"--no-pacing", CLI_FLAG, &no_pacing, 0, 0},
        {"--threads", CLI_INT, &threads, 1, 1024},
        {"--recheck-s", CLI_INT, &recheck_s, 0, 86400},
        {"--quiet", CLI_FLAG, &quiet, 0, 0},
        {"--misbehave", CLI_STRING, &misbehave, 0, 0},
        {"--partner", CLI_LIST, &partner_list, 0, 0},
        {"--authority", CLI_LIST, &authority_list, 0, 0},
        CLI_LOG_OPTS(log_opts),
        {NULL, CLI_FLAG, NULL, 0, 0},
    };
    if (!partner_args || !authorities || !partners || !addrs) {
        fprintf(stderr, "moontail node: out of memory\n");
        goto out;
    }
    int prc = cli_parse("node", argc, argv, opts, usage);
    if (prc) {
        rc = prc > 0 ? 0 : 2;
        goto out;
    }
    int n_partners = partner_list.n, n_authorities = authority_list.n;
    if (parse_partners(&partner_list, partners, addrs)) goto out;
    if (!cli_log_setup("node", &log_opts)) goto out;
    if (misbehave && !cli_misbehave("node", misbehave, &corrupt_rate)) goto out;
    mt_kv_type kv_type;
    if (!cli_kv_type("node", kv_name, &kv_type)) goto out;
    if (!shard || !key || (!authorized && n_authorities == 0)) {
        fprintf(stderr, "moontail node: --shard, --key and at least one of --authorized and"
                        " --authority are required; see 'moontail node --help'\n");
        goto out;
    }
    uint8_t(*auth_pk)[MT_KEYS_PUBLIC_BYTES] = calloc((size_t)n_authorities + 1, sizeof *auth_pk);
    if (!auth_pk) goto out;
    for (int i = 0; i < n_authorities; i++)
        if (parse_authority(authorities[i], auth_pk[i])) goto out_pk;
    rc = 1;
    mt_error err = {{0}};
    mt_keys keys;
    uint8_t cert[MT_CERT_BYTES];
    if (mt_keys_load(&keys, key, &err)) {
        fprintf(stderr, "moontail node: %s\n", err.msg);
        goto out_pk;
    }
    if (cert_path && load_cert(cert_path, &keys, cert)) {
        mt_keys_wipe(&keys);
        goto out_pk;
    }
    mt_keys_authorized *auth =
        authorized ? mt_keys_authorized_load(authorized, &err) : mt_keys_authorized_new();
    for (int i = 0; auth && i < n_authorities; i++) {
        /* the same key also in the file (or given twice) is fine */
        if (mt_keys_authorized_find_authority(auth, auth_pk[i])) continue;
        if (mt_keys_authorized_add_authority(auth, auth_pk[i], NULL, &err)) {
            mt_error_prefix(&err, "--authority %s", authorities[i]);
            mt_keys_authorized_free(auth);
            auth = NULL;
        }
    }
    if (!auth) {
        fprintf(stderr, "moontail node: %s\n", err.msg[0] ? err.msg : "out of memory");
        mt_keys_wipe(&keys);
        goto out_pk;
    }
    /* SIGINT/SIGTERM (stop) and SIGHUP (reread --cert) are waited for below: caught
     * before any thread starts */
    mt_stop_catch(true);
    mt_progress_preload(shard, stderr);
    cli_shard_io vio; /* progress of the shard's hash check */
    cli_shard_io_open(&vio, "node", "none", false, (int)threads);
    mt_node_config cfg = {.shard_path = shard,
                          .keys = &keys,
                          .authorized = auth,
                          .listen = listen,
                          .partners = partners,
                          .n_partners = n_partners,
                          .max_sessions = (int)max_sessions,
                          .n_ctx = (int)ctx,
                          .memory_bytes = cli_memory_offered(memory_mb),
                          .kv_type = kv_type,
                          .threads = (int)threads,
                          .max_batch_tokens = (int)max_batch,
                          .step_tokens = (int)step_tokens,
                          .prefill_chunk = (int)prefill_chunk,
                          .no_pacing = no_pacing,
                          .session_idle_ms = (int)session_idle_s * 1000,
                          .quiet = quiet,
                          .corrupt_rate = corrupt_rate,
                          .verify_progress = quiet ? NULL : vio.io.progress,
                          .verify_progress_ctx = &vio,
                          .recheck_ms = recheck_s > 0 ? (int)recheck_s * 1000 : -1};
    mt_node *node = mt_node_start(&cfg, &err);
    cli_shard_io_close(&vio);
    uint8_t my_pk[MT_KEYS_PUBLIC_BYTES]; /* to check a reread certificate against */
    memcpy(my_pk, keys.pk, sizeof my_pk);
    mt_keys_wipe(&keys);
    if (!node) {
        fprintf(stderr, "moontail node: %s\n", err.msg);
        mt_keys_authorized_free(auth);
        goto out_pk;
    }
    const mt_proto_info *in = mt_node_info(node);
    if (!quiet)
        mt_log(MT_LOG_INFO, "node",
               "%s, layers [%d, %d)%s, %d of %d routed experts, a context of %d positions", shard,
               in->layer_begin, in->layer_end, in->attention ? " with attention" : "", in->n_held,
               in->n_expert, in->n_ctx);
    printf("listening on %s\n", mt_node_addr(node));
    fflush(stdout);
    mt_stop_why why = MT_STOP_NONE;
    char bad[512];
    for (;;) {
        /* each second: has the background check found the shard changed on disk? */
        why = mt_stop_wait(1000);
        if (why == MT_STOP_NONE && mt_node_shard_error(node, bad, sizeof bad)) break;
        if (why == MT_STOP_NONE) continue;
        if (why != MT_STOP_RELOAD) break;
        cli_log_reopen("node");
        if (!cert_path) {
            if (!quiet && !log_opts.file)
                mt_log(MT_LOG_INFO, "node", "SIGHUP: no --cert to reread");
            continue;
        }
        mt_keys k2 = {.has_cert = false}; /* public half only: for the checks of load_cert */
        memcpy(k2.pk, my_pk, sizeof my_pk);
        if (load_cert(cert_path, &k2, cert) == 0 &&
            mt_node_set_cert(node, cert, MT_CERT_BYTES, &err) != 0)
            mt_log(MT_LOG_ERROR, "node", "SIGHUP: %s", err.msg);
        mt_keys_wipe(&k2);
    }
    if (why == MT_STOP_NONE)
        mt_log(MT_LOG_ERROR, "node", "stopping: the shard changed on disk while served: %s", bad);
    else if (!quiet)
        mt_log(MT_LOG_INFO, "node", "%s, stopping", mt_stop_name(why));
    mt_node_stop(node);
    mt_stop_done(); /* a console closing (Windows) waits for this clean stop */
    mt_keys_authorized_free(auth);
    rc = why == MT_STOP_NONE ? 1 : 0;
out_pk:
    free(auth_pk);
out:
    free(partner_args);
    free(authorities);
    for (int i = 0; addrs && addrs[i]; i++) free(addrs[i]);
    free(addrs);
    free(partners);
    return rc;
}

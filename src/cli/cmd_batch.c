/* cmd_batch.c - `moontail batch`: a JSONL file of requests in OpenAI's batch format run on a
 * cell (through its registry) or a local model, many at once, results to a JSONL file
 * (docs/api.md, "Batches"). The work is serve's (api.h: the same checks, the same
 * generation, its batch slots) without the HTTP server; the state directory makes a
 * killed run resumable: the same command again skips the custom_ids already done.
 * Progress (done/total, failed, tokens/s) goes to stderr. SIGINT or SIGTERM starts no more
 * requests, lets those in flight finish, and exits 1 (run again to resume). */
#include "cli.h"
#include "cli_api_backend.h"
#include "moontail/api.h"
#include "moontail/log.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char usage[] =
    "usage: moontail batch --registry URL --token-file FILE -i IN.jsonl -o OUT.jsonl [options]\n"
    "       moontail batch --model FILE -i IN.jsonl -o OUT.jsonl [options]\n"
    "\n"
    "Runs every request of IN.jsonl (OpenAI's batch format: one {\"custom_id\", \"method\":\n"
    "\"POST\", \"url\": \"/v1/chat/completions\" or \"/v1/completions\", \"body\"} a line) and\n"
    "writes one result a line to OUT.jsonl, in the input's order. A killed run resumes:\n"
    "the same command again skips the requests already done. See docs/api.md.\n"
    "\n"
    "  -i FILE               the requests (JSONL)\n"
    "  -o FILE               the results (JSONL), written when all are done\n"
    "  --state DIR           the state of the run: a copy of the input, the results as they\n"
    "                        finish, resumable (default OUT.state; removed after success)\n"
    "  --parallel N          requests in flight (default 16)\n"
    "  --model FILE          compute a GGUF model in this process\n"
    "  --registry URL        or run every request through this registry's cell or swarm\n"
    "  --token-file FILE     the registry account token (or MOONTAIL_TOKEN, or --token T)\n"
    "  --key KEYFILE         requester identity for the registry (default in ~/.moontail)\n"
    "  --cache DIR           where the head shard is kept (default ~/.moontail/cache)\n"
    "  --wire f32|bf16       hidden states on the network (default f32: exact)\n"
    "  --spot-check RATE     with --registry: the fraction of stages checked on a replica\n"
    "                        (default 0.05; 0: off; docs/spot-checking.md)\n"
    "  --chain               with --registry: chained routes\n"
    "  --model-name NAME     the model the requests' bodies name (default: the file's stem,\n"
    "                        or the model's general.name through a registry)\n"
    "  -t N                  compute threads (default: all CPUs)\n"
    "  --ctx N               most tokens per request (default: the model's context length)\n"
    "  --ubatch N            prompt tokens per evaluation (default 512)\n" CLI_KV_TYPE_HELP
    "  --chat-max-tokens N   max_tokens of a chat request that gives none (default 1024)\n"
    "  --quiet               no progress lines\n" CLI_LOG_USAGE;

static bool stop_flag;

typedef struct progress_state {
    double last; /* when the last line was printed (monotonic s) */
} progress_state;

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* At most one line a second, and the last one. */
static void progress(void *ctx, long long done, long long total, long long failed, long long tokens,
                     double seconds) {
    progress_state *ps = ctx;
    double now = mono();
    if (done < total && now - ps->last < 1.0) return;
    ps->last = now;
    fprintf(stderr, "moontail batch: %lld/%lld done, %lld failed, %.1f tokens/s\n", done, total,
            failed, seconds > 0 ? (double)tokens / seconds : 0.0);
}

static void *signal_thread(void *arg) {
    (void)arg;
    mt_stop_why why = mt_stop_wait(-1);
    __atomic_store_n(&stop_flag, true, __ATOMIC_RELAXED);
    fprintf(stderr, "moontail batch: %s: no more requests start; those in flight finish\n",
            mt_stop_name(why));
    return NULL;
}

/* Removes the default state directory after a finished run. */
static void remove_state(const char *dir) {
    const char *names[] = {"input.jsonl", "output.jsonl", "state.json"};
    char p[4200];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, names[i]) < sizeof p) unlink(p);
    rmdir(dir);
}

int cmd_batch(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *state = NULL;
    int64_t parallel = 16;
    bool quiet = false;
    cli_api_backend be;
    cli_api_backend_init(&be);
    cli_log_opts log_opts = {0};
    const cli_opt opts[] = {
        {"-i", CLI_STRING, &in, 0, 0},
        {"-o", CLI_STRING, &out, 0, 0},
        {"--state", CLI_STRING, &state, 0, 0},
        {"--parallel", CLI_INT, &parallel, 1, 4096},
        CLI_API_BACKEND_OPTS(be),
        {"--quiet", CLI_FLAG, &quiet, 0, 0},
        CLI_LOG_OPTS(log_opts),
        {NULL, CLI_FLAG, NULL, 0, 0},
    };
    int prc = cli_parse("batch", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    if (!cli_log_setup("batch", &log_opts)) return 2;
    if (!in || !out) {
        fprintf(stderr, "moontail batch: give the requests (-i FILE) and where the results go"
                        " (-o FILE); see 'moontail batch --help'\n");
        return 2;
    }
    char default_state[4096];
    if (!state) {
        if ((size_t)snprintf(default_state, sizeof default_state, "%s.state", out) >=
            sizeof default_state) {
            fprintf(stderr, "moontail batch: -o %s: the path is too long\n", out);
            return 2;
        }
    }
    mt_api_config c = {.no_auth = true,
                       .listen = "127.0.0.1:0",
                       .parallel = 1,
                       .queue = 0,
                       .quiet = true,
                       .no_http = true,
                       .batch_parallel = (int)parallel};
    if (!cli_api_backend_apply("batch", &be, &c)) return 2;
    mt_stop_catch(false);
    mt_error err = {{0}};
    mt_api_server *s = mt_api_server_start(&c, &err);
    cli_api_backend_free(&be);
    if (!s) {
        fprintf(stderr, "moontail batch: %s\n", err.msg);
        return 1;
    }
    pthread_t sig_thread;
    pthread_create(&sig_thread, NULL, signal_thread, NULL);
    pthread_detach(sig_thread);
    progress_state ps = {0};
    mt_api_batch_config bc = {.input = in,
                              .output = out,
                              .state_dir = state ? state : default_state,
                              .parallel = (int)parallel,
                              .stop = &stop_flag,
                              .progress = quiet ? NULL : progress,
                              .ctx = &ps};
    int rc = mt_api_batch_run(s, &bc, &err);
    mt_api_server_stop(s);
    if (rc < 0) {
        fprintf(stderr, "moontail batch: %s\n", err.msg);
        return 1;
    }
    if (rc > 0) {
        fprintf(stderr,
                "moontail batch: stopped before the end; the same command again resumes from"
                " %s\n",
                bc.state_dir);
        return 1;
    }
    if (!state) remove_state(default_state);
    if (!quiet) fprintf(stderr, "moontail batch: results in %s\n", out);
    return 0;
}

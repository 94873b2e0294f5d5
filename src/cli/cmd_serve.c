/* cmd_serve.c - `moontail serve`: the OpenAI-compatible HTTP API (api.h,
 * docs/api.md) until SIGINT or SIGTERM. Prints "listening on URL" on
 * stdout once it answers; one log line per request goes to stderr. */
#include "cli.h"
#include "cli_api_backend.h"
#include "generate.h"
#include "moontail/api.h"
#include "moontail/log.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: moontail serve --model FILE --api-keys FILE [options]\n"
    "       moontail serve --registry URL --token-file FILE --api-keys FILE [options]\n"
    "\n"
    "Serves an OpenAI-compatible API: GET /v1/models, POST /v1/completions,\n"
    "POST /v1/chat/completions (\"stream\": true for server-sent events), GET /v1/usage;\n"
    "with --batch-dir, OpenAI's Files and Batches endpoints.\n"
    "See docs/api.md.\n"
    "\n"
    "  --model FILE          compute a GGUF model in this process\n"
    "  --registry URL        or run every request through this registry's cell or swarm\n"
    "  --token-file FILE     the registry account token (or MOONTAIL_TOKEN, or --token T)\n"
    "  --key KEYFILE         requester identity for the registry (default in ~/.moontail)\n"
    "  --cache DIR           where the head shard is kept (default ~/.moontail/cache)\n"
    "  --wire f32|bf16       hidden states on the network (default f32: exact)\n"
    "  --spot-check RATE     with --registry: the fraction of stages per request computed\n"
    "                        twice and compared (default 0.05; 0: off; docs/spot-checking.md)\n"
    "  --chain               with --registry: one-way passes (each stage sends a pass\n"
    "                        straight on, the last answers; far fewer bytes from here,\n"
    "                        prompts pipelined; no spot-checks)\n"
    "  --listen ADDR         HTTP address (default 127.0.0.1:8080; :0 picks a port)\n"
    "  --model-name NAME     the model's id in the API (default: the file's stem, or the\n"
    "                        model's general.name through a registry)\n"
    "  --api-keys FILE       API keys, one per line, optional name after a space\n"
    "  --no-auth             serve without keys (only on a loopback address)\n"
    "  --rate-limit N/min    requests per minute per key (token bucket; default: none)\n"
    "  --parallel N          requests computed at once (default 4)\n"
    "  --queue N             requests that may wait for a free slot (default 16; more: 503)\n"
    "  -t N                  compute threads (default: all CPUs)\n"
    "  --ctx N               most tokens per request, prompt + completion (default: the\n"
    "                        model's context length)\n"
    "  --ubatch N            prompt tokens per evaluation (default 512)\n" CLI_KV_TYPE_HELP
    "  --chat-max-tokens N   max_tokens of a chat request that gives none (default 1024)\n"
    "  --max-body-kb N       largest request body (default 1024 KiB; larger: "
    "413)\n"
    "  --draft ngram         exact speculative decoding in every slot: guesses from n-grams\n"
    "                        of the text so far, checked in one pass (same text)\n"
    "  --draft-k K           guesses checked per pass (default 4, at most 32)\n"
    "  --batch-dir DIR       take files and batches (POST /v1/files, /v1/batches) and keep\n"
    "                        them here (created 0700); unfinished batches resume at start\n"
    "  --batch-parallel N    batch requests computed at once, in slots of their own behind\n"
    "                        the interactive ones (default 16)\n"
    "  --max-file-mb N       largest upload to /v1/files (default 100 MiB)\n" CLI_HTTP_LIMIT_USAGE
    "  --quiet               no log lines\n" CLI_LOG_USAGE;

/* "N/min" -> N. */
static bool parse_rate(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || strcmp(end, "/min") != 0 || !(v > 0) || v > 1e7) {
        fprintf(stderr,
                "moontail serve: --rate-limit expects N/min with N > 0, e.g. 60/min;"
                " got '%s'\n",
                s);
        return false;
    }
    *out = v;
    return true;
}

int cmd_serve(int argc, char **argv) {
    const char *listen = "127.0.0.1:8080", *api_keys = NULL, *rate = NULL, *batch_dir = NULL,
               *draft = NULL;
    int64_t parallel = 4, queue = 16, max_body_kb = 1024, batch_parallel = 16, max_file_mb = 100,
            draft_k = CLI_DRAFT_K_DEFAULT;
    bool no_auth = false, quiet = false;
    int64_t http_limits[5] = {0};
    cli_api_backend be;
    cli_api_backend_init(&be);
    cli_log_opts log_opts = {0};
    const cli_opt opts[] = {
        CLI_API_BACKEND_OPTS(be),
        {"--listen", CLI_STRING, &listen, 0, 0},
        {"--api-keys", CLI_STRING, &api_keys, 0, 0},
        {"--no-auth", CLI_FLAG, &no_auth, 0, 0},
        {"--rate-limit", CLI_STRING, &rate, 0, 0},
        {"--parallel", CLI_INT, &parallel, 1, 256},
        {"--queue", CLI_INT, &queue, 0, 100000},
        {"--max-body-kb", CLI_INT, &max_body_kb, 1, 1 << 20},
        {"--draft", CLI_STRING, &draft, 0, 0},
        {"--draft-k", CLI_INT, &draft_k, 1, MT_GEN_MAX_DRAFT},
        {"--batch-dir", CLI_STRING, &batch_dir, 0, 0},
        {"--batch-parallel", CLI_INT, &batch_parallel, 1, 4096},
        {"--max-file-mb", CLI_INT, &max_file_mb, 1, 4096},
        {"--quiet", CLI_FLAG, &quiet, 0, 0},
        CLI_HTTP_LIMIT_OPTS(http_limits),
        CLI_LOG_OPTS(log_opts),
        {NULL, CLI_FLAG, NULL, 0, 0},
    };
    int prc = cli_parse("serve", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    if (!cli_log_setup("serve", &log_opts)) return 2;
    if (draft && strcmp(draft, "ngram") != 0) {
        fprintf(stderr,
                "moontail serve: --draft takes 'ngram' (a draft model for every slot is not"
                " supported; `moontail run --draft FILE` takes one), not '%s'\n",
                draft);
        return 2;
    }
    double rate_per_min = 0;
    if (rate && !parse_rate(rate, &rate_per_min)) return 2;
    mt_api_config c = {.listen = listen,
                       .api_keys = api_keys,
                       .no_auth = no_auth,
                       .rate_per_min = rate_per_min,
                       .parallel = (int)parallel,
                       .queue = (int)queue,
                       .max_body = (size_t)max_body_kb * 1024,
                       .limits = cli_http_limits(http_limits),
                       .quiet = quiet,
                       .batch_dir = batch_dir,
                       .batch_parallel = (int)batch_parallel,
                       .max_file = (size_t)max_file_mb << 20,
                       .draft_k = draft ? (int)draft_k : 0};
    if (!cli_api_backend_apply("serve", &be, &c)) return 2;
    mt_stop_catch(log_opts.file != NULL);
    mt_error err = {{0}};
    mt_api_server *s = mt_api_server_start(&c, &err);
    cli_api_backend_free(&be);
    if (!s) {
        fprintf(stderr, "moontail serve: %s\n", err.msg);
        return 1;
    }
    printf("listening on %s\n", mt_api_server_url(s));
    fflush(stdout);
    mt_stop_why why = cli_wait_stop("serve");
    if (!quiet) mt_log(MT_LOG_INFO, "serve", "%s, stopping", mt_stop_name(why));
    mt_api_server_stop(s);
    return 0;
}

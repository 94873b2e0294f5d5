/* cli.h - shared pieces of the `moontail` subcommands: argument helpers and
 * the entry point of each subcommand. */
#ifndef MOONTAIL_CLI_H
#define MOONTAIL_CLI_H

#include "moontail/http.h"
#include "moontail/model.h"
#include "moontail/proc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
int cmd_split(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_node(int argc, char **argv);
int cmd_prompt(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_cert(int argc, char **argv);
int cmd_node_agent(int argc, char **argv);
int cmd_registry(int argc, char **argv);
int cmd_account(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_cell(int argc, char **argv);
int cmd_pause(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_setup(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_batch(int argc, char **argv);
int cmd_shell(int argc, char **argv);
int cmd_template(int argc, char **argv);

/* The median of v[0..n) (n > 0); sorts v (cmd_bench.c). */
double bench_median(double *v, int n);

/* `moontail bench --layer-times` (bench_layers.c): per-layer time of batched
 * decode steps for the batch sizes in `batches` ("1,2,4"), prefill steps for
 * `prefills`, sessions holding ctx positions, runs timed steps each. Returns
 * the exit status. */
struct mt_model;
int bench_layer_times(const struct mt_model *m, const char *model_path, int threads,
                      const char *batches, const char *prefills, int32_t ctx, int runs, bool json);

/* One command-line option: a flag (bool), a string, a whole number in
 * [lo, hi] (int64_t) or a finite number (float). CLI_LIST: a repeatable
 * string option (a cli_list: each use adds its value, more than cap uses is
 * an error). CLI_POSITIONAL: the one argument that is not an option nor an
 * option's value, anywhere among them (a const char *; its name says what
 * it is, e.g. "the prompt"). */
typedef enum cli_opt_kind {
    CLI_FLAG,
    CLI_STRING,
    CLI_INT,
    CLI_FLOAT,
    CLI_LIST,
    CLI_POSITIONAL
} cli_opt_kind;
typedef struct cli_opt {
    const char *name;
    cli_opt_kind kind;
    void *dst; /* bool *, const char **, int64_t *, float *, cli_list * */
    int64_t lo, hi;
} cli_opt;

/* The values of a CLI_LIST option, in the order given (they point into argv). */
typedef struct cli_list {
    const char **v; /* room for cap */
    int n, cap;
} cli_list;

/* Parses argv[1..argc) against opts (terminated by a NULL name). --help/-h
 * prints usage and returns 1; an unknown option, a missing or bad value
 * prints what is wrong and returns -1; success returns 0. */
int cli_parse(const char *cmd, int argc, char **argv, const cli_opt *opts, const char *usage);

/* Parses a whole decimal integer in [lo, hi] from the value of option opt;
 * prints a clear message and returns false otherwise. */
bool cli_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);
bool cli_float(const char *opt, const char *s, float *out);
/* The value after option argv[*i], advancing *i; NULL (with a message) if missing. */
const char *cli_value(int argc, char **argv, int *i);
/* Takes every "NAME VALUE" pair out of argv[1..*argc) (compacting argv and
 * *argc) for a repeatable option; out (room for *argc entries) receives the
 * values. Returns how many, or -1 (with a message) if one lacks its value. */
int cli_take_all(int *argc, char **argv, const char *name, const char **out);
/* Reads a whole file into a NUL-terminated heap buffer; NULL with a message on error. */
char *cli_read_file(const char *path, size_t *len);

/* Replaces "--config FILE" in argv by the options the file holds (see
 * cli_config_file.c), before the command line's own. 0, or -1 after saying
 * what is wrong with the file. */
int cli_expand_config(int *argc, char ***argv);
/* For an argv string that came from a --config file: " (FILE, line N)", to
 * end a message about it; "" for one from the command line. */
const char *cli_config_where(const char *arg);

/* Takes --registry-pin PIN and --ca-file FILE (each at most once) out of
 * argv[1..*argc), whatever the command, and sets how this process trusts
 * https:// registries (cli_trust.c): that pin or CA file, else what
 * config.json keeps for the configured registry; checks that every
 * --registry is a base URL (http.h). 0, or -1 after saying what is wrong. */
int cli_registry_trust(int *argc, char **argv);
/* The --registry-pin / --ca-file the command line gave (NULL: none). */
const char *cli_registry_pin_arg(void);
const char *cli_ca_file_arg(void);

/* Memory a node offers (mt_node_config.memory_bytes) for --memory-mb N: N MB, or when N
 * is 0, 70% of the RAM available now. */
uint64_t cli_memory_offered(int64_t memory_mb);

/* --kv-type NAME (f32, f16, bf16, q8_0; NULL: the default, f16) into *t;
 * false after saying what is wrong. */
bool cli_kv_type(const char *cmd, const char *name, mt_kv_type *t);

/* The HTTP server's limits (http.h) as options of a server command, into
 * int64_t v[5] (0: the default), and their usage lines. */
#define CLI_HTTP_LIMIT_OPTS(v)                                                                     \
    {"--max-conns", CLI_INT, &(v)[0], 16, 1 << 20},                                                \
        {"--max-conns-per-addr", CLI_INT, &(v)[1], 1, 1 << 20},                                    \
        {"--max-inflight-per-token", CLI_INT, &(v)[2], 1, 1 << 20},                                \
        {"--header-timeout-s", CLI_INT, &(v)[3], 1, 3600}, {                                       \
        "--body-timeout-s", CLI_INT, &(v)[4], 1, 86400                                             \
    }
#define CLI_HTTP_LIMIT_USAGE                                                                       \
    "  --max-conns N         HTTP connections open at once from addresses not reserved\n"          \
    "                        (default 1024; known nodes get 512 more of their own)\n"              \
    "  --max-conns-per-addr N  open at once from one address (default 64)\n"                       \
    "  --max-inflight-per-token N  requests at once from one address, and per token;\n"            \
    "                        more get 429 (default 64)\n"                                          \
    "  --header-timeout-s N  a request's headers must be in within N s (default 10)\n"             \
    "  --body-timeout-s N    and its body within N s more (default 30)\n"
mt_http_limits cli_http_limits(const int64_t v[5]);
/* The log options of the long-running commands (moontail/log.h), parsed
 * into a cli_log_opts (NULL: not given) and applied by cli_log_setup once the
 * command line is read. */
typedef struct cli_log_opts {
    const char *level, *file, *format;
} cli_log_opts;
#define CLI_LOG_OPTS(o)                                                                            \
    {"--log-level", CLI_STRING, &(o).level, 0, 0}, {"--log-file", CLI_STRING, &(o).file, 0, 0}, {  \
        "--log-format", CLI_STRING, &(o).format, 0, 0                                              \
    }
#define CLI_LOG_USAGE                                                                              \
    "  --log-level LEVEL     error, warn, info (default) or debug\n"                               \
    "  --log-file PATH       append the log to PATH (created with mode 0600) instead of\n"         \
    "                        stderr; registry, node and serve open it again on SIGHUP\n"           \
    "                        (after logrotate moved it)\n"                                         \
    "  --log-format F        text (default): 'TIME LEVEL COMPONENT: MESSAGE', or json: one\n"      \
    "                        {\"ts\", \"level\", \"component\", \"msg\"} object per line\n"
/* Sets the process log from o; false after saying what is wrong. */
bool cli_log_setup(const char *cmd, const cli_log_opts *o);
/* Waits for a stop request (mt_stop_catch, before any thread starts) and
 * returns it; a reload request opens the log file again (logged as
 * component) and waits on. */
mt_stop_why cli_wait_stop(const char *component);
/* Opens the log file again (SIGHUP), saying so in the log as component. */
void cli_log_reopen(const char *component);

#define CLI_KV_TYPE_HELP                                                                           \
    "  --kv-type T           KV cache type: f16 (default), bf16, q8_0 (half of f16's memory)"      \
    " or f32\n"

/* FOR TESTS ONLY: `moontail node --misbehave corrupt-output[:RATE]` (docs/testing.md) as the
 * fraction of replies to corrupt (RATE in (0, 1], default 1); false after saying what is
 * wrong. */
bool cli_misbehave(const char *cmd, const char *spec, double *rate);

/* --spot-check RATE of the requesters: the fraction of (session, stage) pairs checked on a
 * replica, in [0, 1]; false after saying what is wrong. */
#define CLI_SPOT_CHECK_DEFAULT 0.05
bool cli_spot_check(const char *cmd, float value, double *rate);

/* The account token from --token-file, MOONTAIL_TOKEN or --token (heap; NULL
 * with a message saying how to get one). */
char *cli_token(const char *cmd, const char *token, const char *token_file);

/* The first line of a secret file given as `option path` (heap), or NULL after saying
 * which file, what is wrong with it, and that it should hold `what`. */
char *cli_secret_file(const char *cmd, const char *option, const char *path, const char *what);

/* What an --admin-token-file holds, for cli_secret_file's messages. */
#define CLI_ADMIN_TOKEN                                                                            \
    "the registry's admin token (the file its operator gives 'moontail registry"                   \
    " --admin-token-file')"

#endif

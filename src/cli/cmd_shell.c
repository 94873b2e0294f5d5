/* cmd_shell.c - `moontail` with no arguments (or `moontail shell`): a chat
 * in the terminal. Each line you type is a user turn; the model's answer
 * streams back. The conversation is rendered with the model's chat template
 * (src/api/api_template.h: its own Jinja, or a built-in format) and generated
 * by the same engine as `moontail serve` (src/api/api_engine.h), on the cell
 * of `moontail setup`'s registry, a registry given with --registry, a model
 * file (-m), or without any of those the built-in model. Line editing and
 * history (libedit) on a terminal; plain lines otherwise, so scripts can
 * drive it. Ctrl-C stops an answer, Ctrl-D or /quit leaves. */
#include "../api/api_chat.h"
#include "moontail/clock.h"
#include "../api/api_engine.h"
#include "../api/api_template.h"
#include "cli.h"
#include "cli_config.h"
#include "model_source.h"
#include "moontail/gguf.h"
#include "moontail/http.h"

#include <editline/readline.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char usage[] =
    "usage: moontail [shell] [-m MODEL | --registry URL --token-file F] [options]\n"
    "\n"
    "A chat with the model: type a message, the answer streams back. Without -m or\n"
    "--registry it uses the registry of 'moontail setup', or else the built-in model.\n"
    "\n"
    "  -m MODEL            a GGUF model computed on this machine\n"
    "  --registry URL      a cell or swarm (with --token-file F or MOONTAIL_TOKEN)\n"
    "  --system TEXT       a system message at the start of the conversation\n"
    "  -n N                most tokens per answer (default 256)\n"
    "  --temp T            temperature (default 0.7; 0 = greedy)\n"
    "  --seed N            sampling seed\n"
    "  -t N                threads for a local model\n"
    "  --kv-type T         KV cache type: f16 (default), bf16, q8_0 or f32\n"
    "  --spot-check RATE   with a registry: the fraction of stages per answer computed\n"
    "                      twice and compared (default 0.05; 0: off; docs/spot-checking.md)\n"
    "\n"
    "in the shell: /help, /reset (forget the conversation), /status, /quit\n";

static const char shell_help[] = "  type a message and press Enter; the answer streams back\n"
                                 "  /reset    forget the conversation and start again\n"
                                 "  /status   where the model runs (and the cell's state)\n"
                                 "  /help     this text\n"
                                 "  /quit     leave (or Ctrl-D); Ctrl-C stops an answer\n";

static volatile sig_atomic_t stop_answer;
static void on_sigint(int sig) {
    (void)sig;
    stop_answer = 1;
}

/* ---- one answer ------------------------------------------------------------------------ */

typedef struct answer {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    char *text;
    size_t len, cap;
    api_gen_result result;
} answer;

static int on_text(void *ctx, const char *s, size_t n) {
    answer *a = ctx;
    if (stop_answer) return -1;
    fwrite(s, 1, n, stdout);
    fflush(stdout);
    if (a->len + n + 1 > a->cap) {
        size_t cap = (a->len + n + 1) * 2;
        char *p = realloc(a->text, cap);
        if (!p) return -1;
        a->text = p, a->cap = cap;
    }
    memcpy(a->text + a->len, s, n);
    a->len += n;
    a->text[a->len] = 0;
    return 0;
}

static void on_done(void *ctx, const api_gen_result *r) {
    answer *a = ctx;
    pthread_mutex_lock(&a->lock);
    a->result = *r;
    a->done = true;
    pthread_cond_signal(&a->cond);
    pthread_mutex_unlock(&a->lock);
}

/* The chat template's notes (why the model's own template cannot run, ...). */
static void shell_log(void *ctx, const char *msg) {
    (void)ctx;
    fprintf(stderr, "moontail shell: %s\n", msg);
}

/* ---- the conversation -------------------------------------------------------------------- */

typedef struct chat {
    api_chat_message *m;
    char **owned;
    int n, cap;
} chat;

static int chat_add(chat *c, api_chat_role role, const char *text, size_t len) {
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        api_chat_message *m = realloc(c->m, (size_t)cap * sizeof *m);
        char **o = realloc(c->owned, (size_t)cap * sizeof *o);
        if (m) c->m = m;
        if (o) c->owned = o;
        if (!m || !o) return -1;
        c->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, text, len);
    copy[len] = 0;
    c->owned[c->n] = copy;
    c->m[c->n++] = (api_chat_message){.role = role, .text = copy, .len = len};
    return 0;
}

static void chat_reset(chat *c, bool keep_system) {
    int k = 0;
    for (int i = 0; i < c->n; i++) {
        if (keep_system && c->m[i].role == API_ROLE_SYSTEM) {
            c->m[k] = c->m[i];
            c->owned[k++] = c->owned[i];
        } else {
            free(c->owned[i]);
        }
    }
    c->n = k;
}

/* A line from the terminal (libedit) or stdin; NULL at the end. */
static char *read_line(bool tty) {
    if (tty) return readline("you> ");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    line[strcspn(line, "\r\n")] = 0;
    return line;
}

int cmd_shell(int argc, char **argv) {
    const char *model = NULL, *registry = NULL, *token = NULL, *token_file = NULL, *system = NULL,
               *kv_name = NULL;
    int64_t n_predict = 256, seed = -1, threads = 0;
    float temp = 0.7f, spot_check_opt = (float)CLI_SPOT_CHECK_DEFAULT;
    const cli_opt opts[] = {{"-m", CLI_STRING, &model, 0, 0},
                            {"--registry", CLI_STRING, &registry, 0, 0},
                            {"--token", CLI_STRING, &token, 0, 0},
                            {"--token-file", CLI_STRING, &token_file, 0, 0},
                            {"--system", CLI_STRING, &system, 0, 0},
                            {"-n", CLI_INT, &n_predict, 1, 1 << 20},
                            {"--temp", CLI_FLOAT, &temp, 0, 0},
                            {"--seed", CLI_INT, &seed, 0, UINT32_MAX},
                            {"-t", CLI_INT, &threads, 1, 1024},
                            {"--kv-type", CLI_STRING, &kv_name, 0, 0},
                            {"--spot-check", CLI_FLOAT, &spot_check_opt, 0, 0},
                            {NULL, CLI_FLAG, NULL, 0, 0}};
    int prc = cli_parse("shell", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    double spot_check = 0;
    mt_kv_type kv_type;
    if (!cli_spot_check("shell", spot_check_opt, &spot_check) ||
        !cli_kv_type("shell", kv_name, &kv_type))
        return 2;
    if (model && registry) {
        fprintf(stderr, "moontail shell: give -m MODEL or --registry URL, not both\n");
        return 2;
    }
    cli_config conf;
    char key[600] = "requester.key", cache[600] = "moontail-cache";
    if (!model && !registry && cli_config_load(&conf) == 0 && conf.registry[0]) {
        registry = conf.registry;
        if (!token && !token_file && conf.has_token) token_file = conf.token_file;
        snprintf(key, sizeof key, "%s", conf.requester_key);
        snprintf(cache, sizeof cache, "%s", conf.cache_dir);
    }
    mt_error err = {{0}};
    api_backend *b = NULL;
    char builtin[600] = "";
    char *tok = NULL;
    const char *where;
    if (registry) {
        const char *k = key, *ca = cache;
        cli_requester_paths(&conf, &k, &ca);
        /* only what changed: snprintf of a buffer onto itself is undefined (glibc left the
         * cache path empty, so a shell started from setup's config could not open it) */
        if (k != key) snprintf(key, sizeof key, "%s", k);
        if (ca != cache) snprintf(cache, sizeof cache, "%s", ca);
        if (!(tok = cli_token("shell", token, token_file))) return 2;
        mt_requester_config rc = {.registry = registry,
                                  .token = tok,
                                  .key_path = key,
                                  .cache_dir = cache,
                                  .threads = (int)threads,
                                  .kv_type = kv_type,
                                  .spot_check = spot_check,
                                  .quiet = true};
        b = api_backend_registry(&rc, &err);
        where = registry;
    } else {
        if (!model) { /* the built-in model, written to a temporary file */
            const char *dir = getenv("TMPDIR");
            snprintf(builtin, sizeof builtin, "%s/moontail-shell-XXXXXX",
                     dir && *dir ? dir : "/tmp");
            int fd = mkstemp(builtin);
            if (fd < 0 || (close(fd), cli_write_builtin_model(builtin, &err))) {
                fprintf(stderr, "moontail shell: cannot write the built-in model: %s\n",
                        err.msg[0] ? err.msg : "mkstemp failed");
                return 1;
            }
            model = builtin;
        }
        b = api_backend_local(model, (int)threads, 0, kv_type, &err);
        where = builtin[0] ? "the built-in model (random weights: its text means nothing)" : model;
    }
    if (builtin[0]) unlink(builtin); /* the mapping stays valid */
    if (!b) {
        fprintf(stderr, "moontail shell: %s\n", err.msg);
        free(tok);
        return 1;
    }
    mt_vocab *vocab = mt_vocab_load(b->model->gguf, &err);
    char *tmpl = vocab ? gguf_get_string(b->model->gguf, "tokenizer.chat_template", NULL) : NULL;
    api_template *tpl = vocab ? api_template_new(tmpl, vocab, shell_log, NULL) : NULL;
    free(tmpl);
    int32_t end_token = tpl ? api_template_end_token(tpl) : -1;
    int32_t n_vocab = b->n_vocab, max_ctx = b->max_ctx;
    api_engine *e = tpl ? api_engine_start(b, vocab, 1, 1, &err) : NULL;
    if (vocab && !tpl) mt_error_set(&err, "out of memory for the chat template");
    if (!e) {
        fprintf(stderr, "moontail shell: %s\n", err.msg);
        api_template_free(tpl);
        mt_vocab_free(vocab);
        b->destroy(b);
        free(tok);
        return 1;
    }
    (void)n_vocab;
    bool tty = isatty(0) && isatty(1);
    char hist[700] = "";
    if (tty && cli_home(hist, sizeof hist) == 0) {
        strncat(hist, "/history", sizeof hist - strlen(hist) - 1);
        read_history(hist);
    }
    printf("moontail shell: %s, chat template %s; /help for commands\n", where,
           api_template_describe(tpl));
    chat c = {0};
    if (system) chat_add(&c, API_ROLE_SYSTEM, system, strlen(system));
    int rc = 0;
    char *line;
    while ((line = read_line(tty))) {
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (!*s) {
            free(line);
            continue;
        }
        if (tty)
            add_history(s);
        else
            printf("you> %s\n", s); /* a transcript of a piped session reads like a terminal's */
        if (strcmp(s, "/quit") == 0 || strcmp(s, "/exit") == 0) {
            free(line);
            break;
        } else if (strcmp(s, "/help") == 0) {
            fputs(shell_help, stdout);
        } else if (strcmp(s, "/reset") == 0) {
            chat_reset(&c, true);
            printf("(conversation forgotten)\n");
        } else if (strcmp(s, "/status") == 0) {
            printf("model: %s; %d messages in the conversation; context up to %d tokens\n", where,
                   c.n, max_ctx);
            if (registry) {
                char *sargs[] = {"status", "--registry", (char *)registry, NULL};
                cmd_status(3, sargs);
            }
        } else if (s[0] == '/') {
            printf("unknown command %s; /help lists them\n", s);
        } else {
            chat_add(&c, API_ROLE_USER, s, strlen(s));
            api_gen_params p = {.max_tokens = (int32_t)n_predict, .end_token = end_token};
            p.sp = mt_sampler_default_params();
            p.sp.temp = temp;
            if (seed >= 0) p.sp.seed = (uint32_t)seed;
            json_t *msgs = api_template_messages_json(c.m, c.n, NULL);
            api_template_input in = {.messages = msgs, .add_generation_prompt = true};
            api_template_error te = {0};
            int64_t np = msgs ? api_template_tokenize(tpl, &in, &p.prompt, &te) : -1;
            if (!msgs) mt_error_set(&te.err, "out of memory");
            json_decref(msgs);
            if (np < 0 || np + n_predict > max_ctx) {
                printf("(%s)\n", np < 0 ? te.err.msg
                                        : "the conversation is too long for the model's context;"
                                          " /reset to start again");
                free(p.prompt);
                c.n--, free(c.owned[c.n]);
                free(line);
                continue;
            }
            p.n_prompt = (int32_t)np;
            answer a = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
            api_gen_sink sink = {.text = on_text, .done = on_done, .ctx = &a};
            struct sigaction sa = {0}, old;
            sa.sa_handler = on_sigint;
            sigemptyset(&sa.sa_mask);
            stop_answer = 0;
            sigaction(SIGINT, &sa, &old);
            double t0 = mt_mono_s();
            int running, queued;
            if (api_engine_submit(e, &p, &sink, &running, &queued)) {
                api_gen_params_free(&p);
                printf("(busy; try again)\n");
            } else {
                pthread_mutex_lock(&a.lock);
                while (!a.done) pthread_cond_wait(&a.cond, &a.lock);
                pthread_mutex_unlock(&a.lock);
                double dt = mt_mono_s() - t0;
                if (a.result.error_status)
                    printf("\n(failed: %s)\n", a.result.error);
                else
                    printf("\n(%d tokens, %.1f tokens/s%s)\n", a.result.completion_tokens,
                           dt > 0 ? a.result.completion_tokens / dt : 0.0,
                           stop_answer ? ", stopped" : "");
                chat_add(&c, API_ROLE_ASSISTANT, a.text ? a.text : "", a.len);
            }
            sigaction(SIGINT, &old, NULL);
            free(a.text);
        }
        fflush(stdout);
        free(line);
    }
    if (tty && hist[0]) write_history(hist);
    api_engine_stop(e);
    api_template_free(tpl);
    chat_reset(&c, false);
    free(c.m);
    free(c.owned);
    mt_vocab_free(vocab);
    b->destroy(b);
    free(tok);
    return rc;
}

/* cmd_demo.c - `moontail demo`: a whole cell on this machine, as separate
 * processes. It writes a tiny kimi-k3 model, starts a registry and several
 * nodes (each told it has room for about half the model, so the registry
 * has to split it), waits until every layer is served twice, prompts the
 * cell through the registry, prints where each layer ran, and stops
 * everything it started. Logs of every process stay in the demo directory
 * when something fails (and with --keep). */
#include "cli.h"
#include "moontail/clock.h"
#include "generate.h"
#include "model_source.h"
#include "moontail/http.h"
#include "moontail/requester.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char usage[] =
    "usage: moontail demo [--nodes N] [-p PROMPT] [-n N] [--kv-type T] [--keep]\n"
    "\n"
    "Starts a registry and N nodes (default 5) on this machine as separate processes,\n"
    "lets the registry split a tiny kimi-k3 model over them as a cell (2 pipelines when\n"
    "there are 4 nodes or more, and spares), prompts it through the registry, prints\n"
    "where each layer ran, and stops everything it started. Everything listens on\n"
    "127.0.0.1 only.\n"
    "\n"
    "  --nodes N     nodes to start (3-16, default 5)\n"
    "  -p PROMPT     the prompt (default \"The cell\")\n"
    "  -n N          tokens to generate (default 32)\n"
    "  --kv-type T   the cell's KV cache type: f16 (default), bf16, q8_0 or f32\n"
    "  --keep        keep the demo directory (model, shards, logs) and print its path\n";

enum { MAX_NODES = 16 };

typedef struct demo {
    char dir[512];
    char self[512];
    pid_t pids[MAX_NODES + 1];
    int n_pids;
} demo;

static void path_in(const demo *d, char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void path_in(const demo *d, char *out, size_t cap, const char *fmt, ...) {
    int k = snprintf(out, cap, "%s/", d->dir);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + k, cap - (size_t)k, fmt, ap);
    va_end(ap);
}

/* Starts `moontail ARGS...` with stdout to NAME.out and stderr to NAME.log,
 * and waits (up to 30 s) for its "listening on ADDR" line. */
static int spawn(demo *d, const char *name, char *const *args, char *addr, size_t cap) {
    char out[600], log[600];
    path_in(d, out, sizeof out, "%s.out", name);
    path_in(d, log, sizeof log, "%s.log", name);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, d->self, &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        fprintf(stderr, "moontail demo: cannot start %s: %s\n", name, strerror(rc));
        return -1;
    }
    d->pids[d->n_pids++] = pid;
    for (int i = 0; i < 600; i++) {
        FILE *f = fopen(out, "r");
        char line[256] = "";
        if (f) {
            while (fgets(line, sizeof line, f))
                if (strncmp(line, "listening on ", 13) == 0) {
                    line[strcspn(line, "\n")] = 0;
                    snprintf(addr, cap, "%.150s", line + 13);
                    fclose(f);
                    return 0;
                }
            fclose(f);
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            d->pids[--d->n_pids] = 0;
            break;
        }
        mt_sleep_ms(50);
    }
    fprintf(stderr, "moontail demo: %s did not start; its log is %s\n", name, log);
    return -1;
}

static void stop_all(demo *d) {
    for (int i = d->n_pids - 1; i >= 0; i--) kill(d->pids[i], SIGTERM);
    for (int i = d->n_pids - 1; i >= 0; i--) {
        int st;
        for (int k = 0; k < 100 && waitpid(d->pids[i], &st, WNOHANG) == 0; k++) mt_sleep_ms(50);
        if (waitpid(d->pids[i], &st, WNOHANG) == 0) {
            kill(d->pids[i], SIGKILL);
            waitpid(d->pids[i], &st, 0);
        }
    }
    d->n_pids = 0;
}

static void remove_tree(const char *dir) {
    char *args[] = {"rm", "-rf", (char *)dir, NULL};
    pid_t pid;
    if (posix_spawnp(&pid, "rm", NULL, NULL, args, environ) == 0) waitpid(pid, NULL, 0);
}

/* Waits until the registry reports every layer served `want` times. */
static int wait_ready(const char *url, int n_nodes, int want) {
    char u[300];
    snprintf(u, sizeof u, "%s/v1/status", url);
    double t0 = mt_mono_s(), said = 0;
    while (mt_mono_s() - t0 < 120) {
        json_t *s = NULL;
        if (mt_http_json("GET", u, NULL, NULL, 5000, &s, NULL) == 200) {
            long long serving = json_integer_value(json_object_get(s, "nodes_serving"));
            long long alive = json_integer_value(json_object_get(s, "nodes_alive"));
            long long minr = json_integer_value(json_object_get(s, "min_replicas_serving"));
            json_decref(s);
            if (minr >= want) return 0;
            if (mt_mono_s() - said >= 1.0) {
                printf("  waiting: %lld of %d nodes joined, %lld serving their shard, every layer"
                       " served %lld of %d times\n",
                       alive, n_nodes, serving, minr, want);
                fflush(stdout);
                said = mt_mono_s();
            }
        }
        mt_sleep_ms(200);
    }
    return -1;
}

/* Node names by data-plane address, from the registry's status. */
typedef struct names {
    int n;
    char addr[MAX_NODES][160], name[MAX_NODES][64];
} names;

static const char *name_of(const names *nm, const char *addr, size_t len) {
    for (int i = 0; i < nm->n; i++)
        if (strlen(nm->addr[i]) == len && strncmp(nm->addr[i], addr, len) == 0) return nm->name[i];
    return "?";
}

static void print_placement(const char *url, names *nm) {
    char u[300];
    snprintf(u, sizeof u, "%s/v1/status", url);
    json_t *s = NULL;
    nm->n = 0;
    if (mt_http_json("GET", u, NULL, NULL, 5000, &s, NULL) != 200) return;
    json_t *nodes = json_object_get(s, "nodes");
    printf("placement (from the registry):\n");
    for (size_t i = 0; i < json_array_size(nodes); i++) {
        json_t *n = json_array_get(nodes, i);
        const char *role = json_string_value(json_object_get(n, "role"));
        const char *name = json_string_value(json_object_get(n, "name"));
        const char *addr = json_string_value(json_object_get(n, "addr"));
        if (!role || !name || !addr) continue;
        if (nm->n < MAX_NODES) {
            snprintf(nm->addr[nm->n], sizeof nm->addr[0], "%s", addr);
            snprintf(nm->name[nm->n], sizeof nm->name[0], "%s", name);
            nm->n++;
        }
        json_t *l = json_object_get(n, "layers");
        long long a = json_integer_value(json_array_get(l, 0)),
                  b = json_integer_value(json_array_get(l, 1));
        if (strcmp(role, "stage") == 0 && b - a == 1)
            printf("  %-6s %-21s pipeline %lld: layer %lld\n", name, addr,
                   json_integer_value(json_object_get(n, "replica")), a);
        else if (strcmp(role, "stage") == 0)
            printf("  %-6s %-21s pipeline %lld: layers %lld-%lld\n", name, addr,
                   json_integer_value(json_object_get(n, "replica")), a, b - 1);
        else
            printf("  %-6s %-21s %s\n", name, addr, role);
    }
    json_decref(s);
}

/* "addr[a,b) addr[b,c)" -> "layer 0 on pc1, layers 1-2 on pc3" */
static void print_route(const names *nm, const char *route) {
    printf("this request ran");
    const char *p = route;
    bool first = true;
    while (*p) {
        const char *br = strchr(p, '[');
        if (!br) break;
        int a = 0, b = 0;
        if (sscanf(br, "[%d,%d)", &a, &b) != 2) break;
        const char *who = name_of(nm, p, (size_t)(br - p));
        if (b - a == 1)
            printf("%s layer %d on %s", first ? "" : ",", a, who);
        else
            printf("%s layers %d-%d on %s", first ? "" : ",", a, b - 1, who);
        first = false;
        p = strchr(br, ')');
        if (!p) break;
        p++;
        while (*p == ' ') p++;
    }
    printf(" (the head, token ids and text stayed in this process)\n");
}

/* After the text: where each layer of the request ran. */
static void print_where(void *ctx, void *slot) {
    mt_requester_stats st;
    mt_requester_get_stats(mt_requester_of_slot(slot), &st);
    printf("\n");
    print_route(ctx, st.route);
}

/* Generates n tokens greedily through the cell (as `moontail prompt` does),
 * then says where each layer ran. */
static int prompt_cell(demo *d, const names *nm, const char *url, const char *token,
                       const char *prompt, int n_predict) {
    char key[600], cache[600];
    path_in(d, key, sizeof key, "requester.key");
    path_in(d, cache, sizeof cache, "cache");
    mt_requester_config c = {.registry = url,
                             .token = token,
                             .key_path = key,
                             .cache_dir = cache,
                             .threads = 1,
                             .spot_check = CLI_SPOT_CHECK_DEFAULT,
                             .quiet = true};
    mt_error err = {{0}};
    mt_gen_backend *b = mt_requester_backend(&c, "moontail demo", &err);
    int rc = -1;
    if (b) {
        cli_gen g;
        cli_gen_defaults(&g);
        g.prompt = prompt;
        g.n_predict = n_predict;
        g.sp.temp = 0; /* greedy: the same text every time */
        printf("\n%s", prompt);
        fflush(stdout);
        const cli_gen_hooks hooks = {.done = print_where, .ctx = (void *)nm};
        rc = cli_generate(&g, b, mt_mono_ms_frac(), &hooks, &err);
    }
    if (rc) fprintf(stderr, "moontail demo: prompting the cell failed: %s\n", err.msg);
    if (b) b->destroy(b);
    return rc;
}

int cmd_demo(int argc, char **argv) {
    int64_t n_nodes = 5, n_predict = 32;
    const char *prompt = "The cell", *kv_name = NULL;
    bool keep = false;
    const cli_opt opts[] = {
        {"--nodes", CLI_INT, &n_nodes, 3, MAX_NODES}, {"-p", CLI_STRING, &prompt, 0, 0},
        {"-n", CLI_INT, &n_predict, 1, 4096},         {"--keep", CLI_FLAG, &keep, 0, 0},
        {"--kv-type", CLI_STRING, &kv_name, 0, 0},    {NULL, CLI_FLAG, NULL, 0, 0}};
    int prc = cli_parse("demo", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    mt_kv_type kv_type;
    if (!cli_kv_type("demo", kv_name, &kv_type)) return 2;
    demo d = {0};
    ssize_t k = readlink("/proc/self/exe", d.self, sizeof d.self - 1);
    if (k <= 0) {
        fprintf(stderr, "moontail demo: cannot find this program's path\n");
        return 1;
    }
    d.self[k] = 0;
    const char *tmp = getenv("TMPDIR");
    snprintf(d.dir, sizeof d.dir, "%s/moontail-demo-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(d.dir)) {
        fprintf(stderr, "moontail demo: cannot create a directory in %s: %s\n",
                tmp && *tmp ? tmp : "/tmp", strerror(errno));
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    int rc = 1;
    char model[600], url[160], tokpath[600], capmb[32];
    path_in(&d, model, sizeof model, "model.gguf");
    mt_error err = {{0}};
    printf("moontail demo: a cell of %lld nodes on this machine (files in %s)\n",
           (long long)n_nodes, d.dir);
    if (cli_write_demo_model(model, &err)) {
        fprintf(stderr, "moontail demo: %s\n", err.msg);
        goto out;
    }
    struct stat sb;
    stat(model, &sb);
    /* room for a bit over half the model each: the registry must cut it in stages */
    snprintf(capmb, sizeof capmb, "%lld", (long long)(sb.st_size * 6 / 10 / 1000000 + 1));
    /* two nodes make a pipeline: two pipelines when there are nodes enough */
    const int want = n_nodes >= 4 ? 2 : 1;
    char replicas[8];
    snprintf(replicas, sizeof replicas, "%d", want);
    char db[600], rkey[600], shards[600];
    path_in(&d, db, sizeof db, "registry.db");
    path_in(&d, rkey, sizeof rkey, "registry.key");
    path_in(&d, shards, sizeof shards, "seed");
    char *reg_args[] = {"moontail",
                        "registry",
                        "--model",
                        model,
                        "--db",
                        db,
                        "--key",
                        rkey,
                        "--shards",
                        shards,
                        "--listen",
                        "127.0.0.1:0",
                        "--replicas",
                        "2",
                        "--spares",
                        "1",
                        "--heartbeat-ms",
                        "250",
                        "--dead-after-ms",
                        "2000",
                        "--kv-type",
                        (char *)mt_kv_type_name(kv_type),
                        NULL};
    if (spawn(&d, "registry", reg_args, url, sizeof url)) goto out;
    printf("model: a tiny kimi-k3, %.1f MB: 12 layers (KDA; MLA at 3, 7, 11), attention residuals"
           " banked every 3 layers, 896 routed experts (16 per token, MXFP4, latent)\n",
           sb.st_size / 1e6);
    printf("registry: %s (each node offers %s MB)\n", url, capmb);
    char acc[300];
    snprintf(acc, sizeof acc, "%s/v1/accounts", url);
    json_t *body = json_pack("{s:s}", "name", "demo"), *res = NULL;
    int st = mt_http_json("POST", acc, NULL, body, 5000, &res, &err);
    json_decref(body);
    const char *token = json_string_value(json_object_get(res, "token"));
    path_in(&d, tokpath, sizeof tokpath, "demo.token");
    FILE *tf = token ? fopen(tokpath, "w") : NULL;
    if (st != 201 || !tf) {
        fprintf(stderr, "moontail demo: creating an account failed: %s\n", err.msg);
        json_decref(res);
        if (tf) fclose(tf);
        goto out;
    }
    fprintf(tf, "%s\n", token);
    fclose(tf);
    chmod(tokpath, 0600);
    for (int i = 0; i < n_nodes; i++) {
        char name[16], key[600], data[600], addr[160];
        snprintf(name, sizeof name, "pc%d", i + 1);
        path_in(&d, key, sizeof key, "%s.key", name);
        path_in(&d, data, sizeof data, "%s-data", name);
        char *node_args[] = {"moontail", "node",        "--registry", url,         "--token-file",
                             tokpath,    "--key",       key,          "--data",    data,
                             "--listen", "127.0.0.1:0", "--name",     name,        "--capacity-mb",
                             capmb,      "--speed",     "1",          "--threads", "1",
                             NULL};
        if (spawn(&d, name, node_args, addr, sizeof addr)) {
            json_decref(res);
            goto out;
        }
        printf("node %s: %s\n", name, addr);
    }
    fflush(stdout);
    if (wait_ready(url, (int)n_nodes, want)) {
        fprintf(stderr, "moontail demo: the cell did not get ready within 2 minutes; logs in %s\n",
                d.dir);
        keep = true;
        json_decref(res);
        goto out;
    }
    names nm;
    print_placement(url, &nm);
    rc = prompt_cell(&d, &nm, url, token, prompt, (int)n_predict) ? 1 : 0;
    json_decref(res);
    if (rc) keep = true;
out:
    stop_all(&d);
    if (keep)
        printf("demo files and logs kept in %s\n", d.dir);
    else
        remove_tree(d.dir);
    if (rc == 0) printf("stopped the registry and %lld nodes\n", (long long)n_nodes);
    return rc;
}

/* cmd_setup.c - `moontail setup`: the first run on a volunteer's or a cell
 * PC. Shows the terms until they are accepted; then makes this machine's
 * MoonTail home (cli_config.c: identities, token, config; secrets 0600 in a
 * 0700 directory), gets an account token from the registry (or takes the
 * one the operator handed out), and starts volunteering: a systemd user
 * service where systemd runs the user's session, otherwise a background
 * process with a pid file and a log. `--stop` stops the background node.
 * A setup that fails (the registry cannot be reached, the port is taken, the
 * node stops at once) removes what it made in that run, and only that; but
 * for the token of an account the registry made for it, which stays with the
 * account for the next setup. */
#include "cli.h"
#include "cli_config.h"
#include "cli_service.h"
#include "moontail/clock.h"
#include "moontail/http.h"
#include "moontail/keys.h"
#include "moontail/node_agent.h"
#include "moontail/tls_cert.h"
#include "moontail/transport.h"
#include "moontail/sysinfo.h"
#include "moontail/file.h"
#include "moontail/proc.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const char usage[] =
    "usage: moontail setup --accept-terms --registry URL [options]\n"
    "       moontail setup --stop\n"
    "\n"
    "First run on this machine: creates its identity and config in ~/.moontail\n"
    "(or $MOONTAIL_HOME), gets an account token from the registry, and starts\n"
    "volunteering (a systemd user service, or a background process). Without\n"
    "--accept-terms it shows the terms and stops.\n"
    "\n"
    "  --registry URL      the registry to join (kept in the config)\n"
    "  --registry-pin PIN  for an https:// registry: the fingerprint it printed at start\n"
    "                      ('TLS certificate sha256//...'), kept in the config. Without\n"
    "                      it, setup reads the certificate the registry presents now,\n"
    "                      prints its fingerprint for you to compare, and keeps that\n"
    "  --ca-file FILE      for an https:// registry whose certificate a CA signed: that\n"
    "                      CA (PEM; default: the system's), kept in the config\n"
    "  --token-file FILE   an account token from the cell's operator (default: ask the\n"
    "                      registry for a new account)\n"
    "  --name NAME         how this machine is shown (default: its host name and 4 hex\n"
    "                      digits of its node key, e.g. pc7-3fa9)\n"
    "  --listen ADDR       where peers reach this node (default 127.0.0.1:7411; give this\n"
    "                      machine's LAN address, e.g. 192.168.1.20:7411, to serve a cell)\n"
    "  --capacity-mb N     memory offered for shards (default 70% of available RAM)\n"
    "  --no-start          set up, but do not start the node\n"
    "  --foreground        run the node in this terminal instead of the background\n"
    "  --stop              stop the background node\n";

static const char terms[] =
    "MoonTail - before this machine volunteers\n"
    "\n"
    "What you share:\n"
    "  - memory and compute: the registry assigns this machine a shard (some layers or\n"
    "    experts of the model) and it computes them for other people's requests;\n"
    "  - network: it downloads its shard from peers or the registry, serves the shard to\n"
    "    peers that need the same one, and exchanges hidden states with requesters;\n"
    "  - a record: the registry keeps how much this machine served (the ledger), its\n"
    "    hardware summary (RAM, disk, cores, SIMD level, GPU) and its address.\n"
    "What it sees: hidden states (vectors of numbers) for its layers. Never token ids,\n"
    "  text or what is generated; see docs/privacy.md for what can and cannot be\n"
    "  inferred from hidden states.\n"
    "What it runs: the model's weights keep their own licence; by serving them you\n"
    "  accept that licence (the registry's model card says which). MoonTail itself is\n"
    "  MIT-licensed.\n"
    "Stopping: `moontail setup --stop` (or `systemctl --user stop moontail-node`); pause\n"
    "  windows: `moontail pause --schedule \"Mon-Fri 09:00-18:00\"`.\n"
    "\n"
    "To accept and start: moontail setup --accept-terms --registry URL\n";

/* ---- what this run made, so that a failed setup can take it back ---- */

enum { MAX_MADE = 16 };
static struct {
    int n;
    char path[MAX_MADE][700];
    bool dir[MAX_MADE];
    char *old[MAX_MADE]; /* a file that was there: its content to put back (heap) */
} made;

/* Before path is created or overwritten: records how to undo it. */
static void note_made(const char *path, bool dir) {
    if (made.n == MAX_MADE) return;
    mt_file_info sb;
    size_t len = 0;
    char *old = NULL;
    if (mt_file_stat(path, &sb) ==
        0) { /* there before: a directory stays, a file gets its text back */
        if (dir || !(old = cli_read_file(path, &len))) return;
    }
    snprintf(made.path[made.n], sizeof made.path[0], "%s", path);
    made.dir[made.n] = dir;
    made.old[made.n++] = old;
}

/* A failed setup: removes what it made, newest first, and puts back what it overwrote. */
static void undo_made(void) {
    for (int i = made.n - 1; i >= 0; i--) {
        if (made.old[i]) {
            FILE *f = fopen(made.path[i], "w");
            if (f) {
                fputs(made.old[i], f);
                fclose(f);
            }
            free(made.old[i]);
        } else if (made.dir[i]) {
            mt_dir_remove(made.path[i]);
        } else {
            mt_file_remove(made.path[i]);
        }
    }
    made.n = 0;
}

/* What a failed setup keeps after all, written whole in this run. */
static void keep_one_made(const char *path) {
    for (int i = 0; i < made.n; i++)
        if (strcmp(made.path[i], path) == 0) {
            free(made.old[i]);
            made.n--;
            memmove(&made.path[i], &made.path[i + 1], (size_t)(made.n - i) * sizeof made.path[0]);
            memmove(&made.dir[i], &made.dir[i + 1], (size_t)(made.n - i) * sizeof made.dir[0]);
            memmove(&made.old[i], &made.old[i + 1], (size_t)(made.n - i) * sizeof made.old[0]);
            return;
        }
}

static void keep_made(void) {
    for (int i = 0; i < made.n; i++) free(made.old[i]);
    made.n = 0;
}

static int make_dir(const char *path, int mode) {
    note_made(path, true);
    if (mt_dir_make(path, (mode & 077) == 0) != 0 && errno != EEXIST) {
        fprintf(stderr, "moontail setup: cannot create %s: %s\n", path, strerror(errno));
        return -1;
    }
    return mt_path_set_mode(path, mode);
}

static int ensure_key(const char *path) {
    mt_file_info sb;
    if (mt_file_stat(path, &sb) == 0) return 0;
    note_made(path, false);
    mt_keys k;
    mt_error err = {{0}};
    int rc = mt_keys_generate(&k, &err) || mt_keys_save(&k, path, &err) ? -1 : 0;
    mt_keys_wipe(&k);
    if (rc) fprintf(stderr, "moontail setup: %s\n", err.msg);
    return rc;
}

static int write_secret(const char *path, const char *text) {
    note_made(path, false);
    int fd = mt_file_open(path, MT_O_WRITE | MT_O_CREATE | MT_O_TRUNC, 0600);
    size_t n = strlen(text);
    if (fd < 0 || mt_file_write(fd, text, n) != (ssize_t)n || mt_file_write(fd, "\n", 1) != 1) {
        fprintf(stderr, "moontail setup: %s: %s\n", path, strerror(errno));
        if (fd >= 0) mt_file_close(fd);
        return -1;
    }
    mt_file_make_private(fd);
    return mt_file_close(fd);
}

/* How the https:// registry in c is trusted from now on (c->registry_pin /
 * c->ca_file, kept in the config): the --registry-pin or --ca-file given,
 * else the pin kept for this same registry, else the key it presents now
 * (trust on first use: printed for the person to compare). prev_registry:
 * the registry the config named before. 0, -1 (said why), or -2 for a usage
 * error (said why). */
static int registry_trust(cli_config *c, const char *prev_registry) {
    const char *pin = cli_registry_pin_arg(), *ca = cli_ca_file_arg();
    bool https = strncasecmp(c->registry, "https://", 8) == 0;
    if (!https) {
        if (pin || ca) {
            fprintf(stderr,
                    "moontail setup: %s is for an https:// registry, and %s is plain http://;"
                    " use the https:// URL the registry printed ('listening on ...')\n",
                    pin ? "--registry-pin" : "--ca-file", c->registry);
            return -2;
        }
        c->registry_pin[0] = c->ca_file[0] = 0;
        return 0;
    }
    if (pin || ca) { /* checked and applied already (cli_trust.c) */
        /* kept as an absolute path: the node and later commands start in other directories */
        char abs[PATH_MAX];
        if (ca && mt_path_real(ca, abs, sizeof abs) != 0) {
            fprintf(stderr, "moontail setup: --ca-file %s: %s\n", ca, strerror(errno));
            return -1;
        }
        int n = snprintf(c->ca_file, sizeof c->ca_file, "%s", ca ? abs : "");
        if (n < 0 || (size_t)n >= sizeof c->ca_file) {
            fprintf(stderr,
                    "moontail setup: --ca-file %s: its full path is longer than %zu bytes;"
                    " move it to a shorter one\n",
                    abs, sizeof c->ca_file - 1);
            return -1;
        }
        snprintf(c->registry_pin, sizeof c->registry_pin, "%s", pin ? pin : "");
        return 0;
    }
    if (strcmp(prev_registry, c->registry) == 0 && (c->registry_pin[0] || c->ca_file[0])) {
        /* the same registry as before: its pin or CA file stays. Applied here, not by
         * cli_trust.c, when it cannot be used (a CA file since removed): said here, with
         * how to replace it */
        mt_error err = {{0}};
        if (mt_http_client_tls(c->registry_pin[0] ? c->registry_pin : NULL,
                               c->registry_pin[0] ? NULL : c->ca_file, &err)) {
            fprintf(stderr,
                    "moontail setup: %s (kept in config.json for %s); give it again with"
                    " --ca-file FILE, or --registry-pin PIN\n",
                    err.msg, c->registry);
            return -2;
        }
        return 0;
    }
    c->registry_pin[0] = c->ca_file[0] = 0;
    char *pem = NULL;
    mt_error err = {{0}};
    if (mt_http_peer_cert(c->registry, 10000, &pem, &err) ||
        mt_tls_pin_of_pem(pem, strlen(pem), c->registry_pin, &err) ||
        mt_http_client_tls(c->registry_pin, NULL, &err)) {
        fprintf(stderr, "moontail setup: cannot read the registry's TLS certificate: %s\n",
                err.msg);
        free(pem);
        c->registry_pin[0] = 0;
        return -1;
    }
    free(pem);
    printf("the registry at %s presents TLS certificate %s\n"
           "  compare it with the 'TLS certificate' line the registry printed at start (ask its\n"
           "  operator); if they differ, something is impersonating it: run 'moontail setup\n"
           "  --registry %s --registry-pin PIN' with the right one. Pinned: a registry\n"
           "  presenting another certificate is refused from now on.\n",
           c->registry, c->registry_pin, c->registry);
    return 0;
}

/* The account this run created ("" none): its token stays when the run fails, since the
 * account stays on the registry; the next setup takes it (c->has_token) instead of leaving
 * one more account behind. */
static char new_account[128];

/* An account token: the operator's, one kept from an earlier setup, or a new account. */
static int get_token(cli_config *c, const char *token_file) {
    if (token_file) {
        char *t = cli_token("setup", NULL, token_file);
        if (!t) return -1;
        int rc = write_secret(c->token_file, t);
        free(t);
        return rc;
    }
    if (c->has_token) return 0;
    char url[400], who[128], host[64];
    if (mt_sys_host_name(host, sizeof host) != 0) snprintf(host, sizeof host, "host");
    const char *user = getenv("USER");
    snprintf(who, sizeof who, "%s@%s-%lx", user && *user ? user : "volunteer", host,
             (unsigned long)getpid());
    snprintf(url, sizeof url, "%s/v1/accounts", c->registry);
    json_t *body = json_pack("{s:s}", "name", who), *out = NULL;
    mt_error err = {{0}};
    int st = mt_http_json("POST", url, NULL, body, 10000, &out, &err);
    json_decref(body);
    const char *tok = json_string_value(json_object_get(out, "token"));
    int rc = -1;
    if (st == 201 && tok) {
        rc = write_secret(c->token_file, tok);
        if (rc == 0) {
            keep_one_made(c->token_file);
            snprintf(new_account, sizeof new_account, "%s", who);
            printf("created account '%s' on %s\n", who, c->registry);
        }
    } else if (st == 401 || st == 403) { /* the registry opens accounts for its operator only */
        fprintf(stderr,
                "moontail setup: this registry does not open accounts by itself; ask its operator"
                " for a token and pass it with --token-file FILE\n");
    } else {
        fprintf(stderr, "moontail setup: cannot create an account: %s\n", err.msg);
    }
    json_decref(out);
    return rc;
}

/* The last line of the log past byte from that starts with prefix, into line (without its
 * newline); false when there is none. */
static bool log_line(const char *log, int64_t from, const char *prefix, char *line, size_t cap) {
    FILE *f = fopen(log, "rb"); /* byte offsets: no text-mode translation (Windows) */
    if (!f) return false;
    bool found = false;
    char buf[600];
    if (fseeko(f, (off_t)from, SEEK_SET) == 0)
        while (fgets(buf, sizeof buf, f))
            if (strncmp(buf, prefix, strlen(prefix)) == 0) {
                snprintf(line, cap, "%s", buf);
                line[strcspn(line, "\n")] = 0;
                found = true;
            }
    fclose(f);
    return found;
}

static int start_background(const cli_config *c, const char *self) {
    char *argv[24], capmb[32], log[700], pidf[700];
    cli_node_args(c, self, capmb, argv);
    cli_home_path(c->home, "node.log", log, sizeof log);
    cli_home_path(c->home, "node.pid", pidf, sizeof pidf);
    /* a log kept from before stays as it is, and the node appends to it: only what is past
     * its end now is this node's */
    mt_file_info sb;
    int64_t from = 0;
    if (mt_file_stat(log, &sb) == 0)
        from = (int64_t)sb.size;
    else
        note_made(log, false);
    mt_proc *node = mt_proc_detach(argv, log); /* outlives this terminal */
    if (!node) {
        fprintf(stderr, "moontail setup: cannot start the node: %s\n", strerror(errno));
        return -1;
    }
    int pid = mt_proc_id(node);
    char pidtext[32];
    snprintf(pidtext, sizeof pidtext, "%d", pid);
    if (write_secret(pidf, pidtext)) {
        mt_proc_free(node);
        return -1;
    }
    /* it says "listening on" once it has joined; a refusal ends it */
    for (int i = 0; i < 200; i++) {
        int st;
        if (mt_proc_exited(node, &st)) {
            /* why, from its log (which goes too if this run made it) */
            char why[600];
            bool said = log_line(log, from, "moontail node: ", why, sizeof why);
            fprintf(stderr, "moontail setup: the node stopped at once: %s\n",
                    said ? why + 15 : "it said nothing");
            mt_file_remove(pidf);
            mt_proc_free(node);
            return -1;
        }
        char line[600];
        if (log_line(log, from, "listening on ", line, sizeof line)) {
            printf("volunteering: node running in the background (pid %d)\n"
                   "  log: %s   stop: moontail setup --stop\n",
                   pid, log);
            mt_proc_free(node);
            return 0;
        }
        mt_sleep_ms(50);
    }
    printf("volunteering: node started (pid %d) but has not joined yet; see %s\n", pid, log);
    mt_proc_free(node);
    return 0;
}

static int stop_background(void) {
    cli_config c;
    if (cli_config_load(&c) < 0) {
        fprintf(stderr, "moontail setup: cannot read the config in %s\n", c.home);
        return 1;
    }
    char pidf[700];
    cli_home_path(c.home, "node.pid", pidf, sizeof pidf);
    size_t n;
    FILE *f = fopen(pidf, "r");
    if (!f) {
        printf("no background node (no %s)\n", pidf);
        return 0;
    }
    fclose(f);
    char *t = cli_read_file(pidf, &n);
    long pid = t ? strtol(t, NULL, 10) : 0;
    free(t);
    if (pid <= 1) {
        fprintf(stderr, "moontail setup: %s does not hold a pid\n", pidf);
        return 1;
    }
    if (mt_pid_stop((int)pid, 5000) != 0) {
        fprintf(stderr, "moontail setup: cannot stop pid %ld: %s\n", pid, strerror(errno));
        return 1;
    }
    mt_file_remove(pidf);
    printf("stopped the node (pid %ld)\n", pid);
    return 0;
}

/* A background node that an earlier setup started and that still runs (said so). */
static bool node_running(const cli_config *c) {
    char pidf[700];
    cli_home_path(c->home, "node.pid", pidf, sizeof pidf);
    mt_file_info sb;
    if (mt_file_stat(pidf, &sb) != 0) return false;
    char *t = cli_read_file(pidf, NULL);
    long pid = t ? strtol(t, NULL, 10) : 0;
    free(t);
    if (pid <= 1 || !mt_pid_alive((int)pid)) return false;
    fprintf(stderr,
            "moontail setup: a node that setup started still runs here (pid %ld); stop it"
            " first with 'moontail setup --stop', then run setup again\n",
            pid);
    return true;
}

/* Whether another process holds the port the node is to listen on (said so): found now,
 * not by a node that would say "running" and then never serve. */
static bool port_taken(const char *listen) {
    mt_error err = {{0}};
    int rc = mt_listen_probe(listen, &err);
    const char *colon = strrchr(listen, ':'); /* the probe found HOST:PORT when it says 1 */
    if (rc == 1)
        fprintf(stderr,
                "moontail setup: --listen %s: another process holds this port; give another"
                " port (e.g. --listen %.*s:%d), or stop that process\n",
                listen, (int)(colon - listen), listen, atoi(colon + 1) + 1);
    else if (rc < 0)
        fprintf(stderr, "moontail setup: --listen: %s\n", err.msg); /* it names the address */
    return rc != 0;
}

/* The home, its identities and the account token (made or kept); 0, 1 or 2 (said why). */
static int setup_files(cli_config *c, const char *prev_registry, const char *token_file) {
    char sub[700];
    if (make_dir(c->home, 0700)) return 1;
    cli_home_path(c->home, "data", sub, sizeof sub);
    if (make_dir(sub, 0755)) return 1;
    cli_home_path(c->home, "cache", sub, sizeof sub);
    if (make_dir(sub, 0755)) return 1;
    int trc = registry_trust(c, prev_registry);
    if (trc) return trc == -2 ? 2 : 1;
    if (ensure_key(c->node_key) || ensure_key(c->requester_key) || get_token(c, token_file))
        return 1;
    if (!c->name[0]) { /* "pc7-3fa9": the host name and a part of the node's key */
        mt_keys k;
        mt_error err = {{0}};
        if (mt_keys_load(&k, c->node_key, &err)) {
            fprintf(stderr, "moontail setup: %s\n", err.msg);
            return 1;
        }
        mt_agent_default_name(k.pk, c->name, sizeof c->name);
        mt_keys_wipe(&k);
    }
    return 0;
}

/* Starts the node: in this terminal, as a per-user service (systemd; on Windows a
 * logon task and the background), or in the background. 0, or 1 (said why). */
static int start_node(const cli_config *c, bool foreground) {
    printf("set up %s: registry %s, node '%s' listening on %s\n", c->home, c->registry, c->name,
           c->listen);
    char self[4096];
    if (mt_self_exe(self, sizeof self) != 0) {
        fprintf(stderr, "moontail setup: cannot find this program's path\n");
        return 1;
    }
    if (foreground) { /* the node command, in this process (there is no exec on Windows) */
        keep_made();
        fflush(stdout);
        char *args[24], capmb[32];
        cli_node_args(c, self, capmb, args);
        int n = 0;
        while (args[n]) n++;
        return cmd_node(n - 1, args + 1);
    }
    if (cli_service_available()) {
        int sv = cli_service_start(c, self, note_made);
        if (sv <= 0) return sv ? 1 : 0;
    }
    return start_background(c, self) ? 1 : 0;
}

int cmd_setup(int argc, char **argv) {
    const char *registry = NULL, *token_file = NULL, *name = NULL, *listen = NULL;
    int64_t capacity_mb = 0;
    bool accept = false, no_start = false, foreground = false, stop = false;
    const cli_opt opts[] = {{"--accept-terms", CLI_FLAG, &accept, 0, 0},
                            {"--registry", CLI_STRING, &registry, 0, 0},
                            {"--token-file", CLI_STRING, &token_file, 0, 0},
                            {"--name", CLI_STRING, &name, 0, 0},
                            {"--listen", CLI_STRING, &listen, 0, 0},
                            {"--capacity-mb", CLI_INT, &capacity_mb, 1, 1LL << 32},
                            {"--no-start", CLI_FLAG, &no_start, 0, 0},
                            {"--foreground", CLI_FLAG, &foreground, 0, 0},
                            {"--stop", CLI_FLAG, &stop, 0, 0},
                            {NULL, CLI_FLAG, NULL, 0, 0}};
    int prc = cli_parse("setup", argc, argv, opts, usage);
    if (prc) return prc > 0 ? 0 : 2;
    if (stop) return stop_background();
    if (!accept) {
        fputs(terms, stdout);
        return 1;
    }
    cli_config c;
    int lc = cli_config_load(&c);
    if (lc < 0) {
        fprintf(stderr,
                "moontail setup: cannot read the config in %s (set HOME or MOONTAIL_HOME)\n",
                c.home[0] ? c.home : "~/.moontail");
        return 1;
    }
    char prev_registry[sizeof c.registry];
    memcpy(prev_registry, c.registry, sizeof prev_registry);
    if (registry) snprintf(c.registry, sizeof c.registry, "%s", registry);
    if (listen) snprintf(c.listen, sizeof c.listen, "%s", listen);
    if (name) snprintf(c.name, sizeof c.name, "%s", name);
    if (capacity_mb) c.capacity_mb = capacity_mb;
    if (!c.registry[0]) {
        fprintf(stderr, "moontail setup: --registry URL is required the first time (ask the"
                        " cell's operator, or see the swarm's page)\n");
        return 2;
    }
    if (!c.listen[0]) snprintf(c.listen, sizeof c.listen, "127.0.0.1:7411");
    if (!no_start && !foreground && node_running(&c)) return 1;
    if (!no_start && port_taken(c.listen)) return 1;
    int rc = setup_files(&c, prev_registry, token_file);
    char conf[700];
    cli_home_path(c.home, "config.json", conf, sizeof conf);
    if (rc == 0) note_made(conf, false); /* a failed start puts the old one back */
    if (rc == 0 && cli_config_save(&c)) {
        fprintf(stderr, "moontail setup: cannot write %s\n", conf);
        rc = 1;
    }
    if (rc == 0 && !no_start) rc = start_node(&c, foreground);
    if (rc == 0 && !no_start && foreground) return 0; /* the node ran here and has stopped */
    if (rc) {
        undo_made();
        if (new_account[0])
            fprintf(stderr,
                    "moontail setup: kept %s, the token of account '%s' that this run created"
                    " on %s: the next 'moontail setup' uses it\n",
                    c.token_file, new_account, c.registry);
        return rc;
    }
    keep_made();
    if (no_start)
        printf("set up %s: registry %s, node '%s' to listen on %s; not started (--no-start)\n",
               c.home, c.registry, c.name, c.listen);
    else
        printf("next: 'moontail status' to see the cell, 'moontail prompt \"Hello\"' to ask it\n");
    return 0;
}

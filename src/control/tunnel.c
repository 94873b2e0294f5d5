/* tunnel.c - supervising a tunnel program for a node behind NAT
 * (tunnel.h): start it under /bin/sh in its own process group, read what it
 * prints, take the public address from the first matching line, start it
 * again with backoff when it exits, and kill its process group on stop. */
#include "moontail/tunnel.h"
#include "moontail/bg_thread.h"
#include "moontail/clock.h"
#include "moontail/log.h"
#include "moontail/proc.h"
#include "relay_internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* HOST:PORT standing alone (see tunnel.h); group 1 is the address. */
static const char default_pattern[] =
    "(?:^|[\\s\"'=(<,])(?:tcp://)?("
    "(?:\\[[0-9A-Fa-f:.]+\\]|localhost|"
    "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+)"
    ":[0-9]{1,5})(?=$|[\\s\"')>,;]|\\.(?:$|\\s))";

enum { LINE_MAX_BYTES = 4096, KEEP_LINES = 8, KEEP_LINE_BYTES = 200, NO_ADDR_NOTE_MS = 60000 };

struct mt_tunnel {
    mt_tunnel_config cfg;
    char *command, *pattern, *local_host;
    mt_log_source log; /* "tunnel: node NAME: ..." lines */
    pcre2_code *re;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    char addr[160];
    int starts;
    char lines[KEEP_LINES][KEEP_LINE_BYTES]; /* the program's last lines, oldest first */
    int n_lines;
    mt_bg_thread bg; /* the supervising thread */
};

static bool stopping(mt_tunnel *t) {
    return mt_bg_thread_stopping(&t->bg);
}

static void set_addr(mt_tunnel *t, const char *addr) {
    pthread_mutex_lock(&t->lock);
    bool changed = strcmp(t->addr, addr) != 0;
    snprintf(t->addr, sizeof t->addr, "%s", addr);
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
    if (changed && t->cfg.on_change) t->cfg.on_change(t->cfg.ctx);
}

char *mt_tunnel_expand(const char *command, const char *host, int port, mt_error *err) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    size_t cap = 8192, n = 0;
    char *out = malloc(cap);
    if (!out) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    for (const char *p = command; *p;) {
        const char *rep = NULL;
        size_t skip = 1;
        if (strncmp(p, "{port}", 6) == 0) rep = ps, skip = 6;
        if (strncmp(p, "{host}", 6) == 0) rep = host, skip = 6;
        size_t add = rep ? strlen(rep) : 1;
        if (n + add + 1 > cap) {
            free(out);
            mt_error_set(err, "--tunnel: the command is longer than %zu bytes", cap - 1);
            return NULL;
        }
        memcpy(out + n, rep ? rep : p, add);
        n += add;
        p += skip;
    }
    out[n] = 0;
    return out;
}

/* ---- the program's output ---------------------------------------------------------------- */

static bool loopback_host(const char *h, size_t n) {
    return (n >= 4 && strncmp(h, "127.", 4) == 0) || (n == 9 && strncmp(h, "localhost", 9) == 0) ||
           (n == 5 && strncmp(h, "[::1]", 5) == 0);
}

/* The first acceptable address in line, or false. */
static bool find_addr(mt_tunnel *t, const char *line, char *out, size_t size) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!md) return false;
    size_t len = strlen(line), start = 0;
    bool found = false;
    while (!found && start <= len) {
        int rc = pcre2_match(t->re, (PCRE2_SPTR)line, len, start, 0, md, NULL);
        if (rc < 2) break; /* no match, or group 1 did not take part */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[2] == PCRE2_UNSET || ov[3] <= ov[2]) break;
        char cand[160];
        size_t cl = ov[3] - ov[2];
        if (cl < sizeof cand) {
            memcpy(cand, line + ov[2], cl);
            cand[cl] = 0;
            const char *colon = strrchr(cand, ':');
            bool own = colon && atoi(colon + 1) == t->cfg.local_port &&
                       loopback_host(cand, (size_t)(colon - cand));
            if (!relay_addr_ok(cand))
                mt_log_as(&t->log, MT_LOG_WARN,
                          "the pattern matched '%s', which is not HOST:PORT; ignored", cand);
            else if (!own)
                found = true, snprintf(out, size, "%s", cand);
        }
        start = ov[1] > start ? ov[1] : start + 1;
    }
    pcre2_match_data_free(md);
    return found;
}

static void on_line(mt_tunnel *t, char *line, bool *have_addr) {
    for (char *p = line; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
    pthread_mutex_lock(&t->lock);
    if (t->n_lines == KEEP_LINES) {
        memmove(t->lines[0], t->lines[1], sizeof t->lines[0] * (KEEP_LINES - 1));
        t->n_lines--;
    }
    snprintf(t->lines[t->n_lines++], KEEP_LINE_BYTES, "%s", line);
    pthread_mutex_unlock(&t->lock);
    if (*have_addr) return;
    mt_log_as(&t->log, MT_LOG_INFO, "| %.200s", line);
    char addr[160];
    if (find_addr(t, line, addr, sizeof addr)) {
        *have_addr = true;
        mt_log_as(&t->log, MT_LOG_INFO, "public address %s", addr);
        set_addr(t, addr);
    }
}

/* ---- one run of the program -------------------------------------------------------------- */

/* Runs the program until it exits (then reads what it printed last, for up
 * to 1 s) or the tunnel stops; *status as waitpid's. A program that closes
 * its output but keeps running is left running. */
static void run_once(mt_tunnel *t, mt_proc *pr, int *status) {
    char buf[LINE_MAX_BYTES + 1];
    size_t have = 0;
    bool have_addr = false, exited = false, eof = false, noted = false;
    int64_t started = mt_mono_ms(), exited_at = 0;
    *status = 0;
    for (;;) {
        if (stopping(t)) {
            if (!exited) mt_proc_stop(pr, status);
            break;
        }
        mt_pollfd p[2] = {{.fd = eof ? MT_SOCK_NONE : mt_proc_output(pr), .events = MT_POLLIN},
                          {.fd = mt_bg_thread_wake_fd(&t->bg), .events = MT_POLLIN}};
        mt_poll(p, 2, 200);
        while (!eof) {
            ssize_t n = mt_proc_read(pr, buf + have, LINE_MAX_BYTES - have);
            if (n == 0) eof = true;
            if (n <= 0) break;
            have += (size_t)n;
            size_t from = 0;
            for (size_t i = 0; i < have; i++)
                if (buf[i] == '\n') {
                    buf[i] = 0;
                    if (i > from && buf[i - 1] == '\r') buf[i - 1] = 0;
                    on_line(t, buf + from, &have_addr);
                    from = i + 1;
                }
            if (from == 0 && have == LINE_MAX_BYTES) { /* a line too long: take it in parts */
                buf[have] = 0;
                on_line(t, buf, &have_addr);
                from = have;
            }
            memmove(buf, buf + from, have - from);
            have -= from;
        }
        if (!exited && mt_proc_exited(pr, status)) {
            exited = true;
            exited_at = mt_mono_ms();
            mt_proc_end_group(pr); /* what it left behind in its group */
        }
        if (exited && (eof || mt_mono_ms() - exited_at > 1000))
            break; /* or something keeps the pipe */
        if (!have_addr && !noted && mt_mono_ms() - started > NO_ADDR_NOTE_MS) {
            noted = true;
            mt_log_as(&t->log, MT_LOG_WARN,
                      "it has run %d s without printing an address matching %s",
                      NO_ADDR_NOTE_MS / 1000, t->pattern);
        }
    }
    if (have && !stopping(t)) {
        buf[have] = 0;
        on_line(t, buf, &have_addr);
    }
}

static void *tunnel_main(void *arg) {
    mt_tunnel *t = arg;
    int backoff = t->cfg.min_backoff_ms;
    while (!stopping(t)) {
        int64_t started = mt_mono_ms();
        mt_proc *pr = mt_proc_shell(t->command);
        if (!pr) {
            mt_log_as(&t->log, MT_LOG_ERROR,
                      "cannot start the system's shell: %s; trying again in %.0f s",
                      strerror(errno), backoff / 1000.0);
        } else {
            pthread_mutex_lock(&t->lock);
            t->starts++;
            pthread_mutex_unlock(&t->lock);
            mt_log_as(&t->log, MT_LOG_INFO, "started (process group %d): %s", mt_proc_id(pr),
                      t->command);
            int status = 0;
            run_once(t, pr, &status);
            mt_proc_free(pr); /* nothing of this run outlives it (TERM was sent already) */
            set_addr(t, "");
            if (stopping(t)) break;
            int64_t up = mt_mono_ms() - started;
            if (up >= t->cfg.stable_ms) backoff = t->cfg.min_backoff_ms;
            char st[96];
            mt_proc_describe(status, st, sizeof st);
            pthread_mutex_lock(&t->lock);
            char last[KEEP_LINE_BYTES] = "";
            if (t->n_lines) snprintf(last, sizeof last, "%s", t->lines[t->n_lines - 1]);
            pthread_mutex_unlock(&t->lock);
            mt_log_as(
                &t->log, MT_LOG_WARN,
                "the tunnel program ended (%s) after %.1f s%s%s%s; starting it again in %.0f s", st,
                up / 1000.0, last[0] ? " (its last line: '" : "", last, last[0] ? "')" : "",
                backoff / 1000.0);
        }
        mt_bg_thread_sleep_full(&t->bg, backoff);
        backoff = backoff * 2 > t->cfg.max_backoff_ms ? t->cfg.max_backoff_ms : backoff * 2;
    }
    set_addr(t, "");
    return NULL;
}

/* ---- API ------------------------------------------------------------------------------------ */

mt_tunnel *mt_tunnel_start(const mt_tunnel_config *cfg, mt_error *err) {
    if (!cfg->command || !cfg->command[0]) {
        mt_error_set(err, "--tunnel needs a command, e.g. --tunnel \"bore local {port} --to "
                          "bore.pub\"");
        return NULL;
    }
    mt_tunnel *t = calloc(1, sizeof *t);
    if (!t) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    t->cfg = *cfg;
    if (t->cfg.min_backoff_ms <= 0) t->cfg.min_backoff_ms = 1000;
    if (t->cfg.max_backoff_ms <= 0) t->cfg.max_backoff_ms = 60000;
    if (t->cfg.stable_ms <= 0) t->cfg.stable_ms = 30000;
    pthread_mutex_init(&t->lock, NULL);
    mt_cond_init_mono(&t->cond);
    mt_log_source_init(&t->log, "tunnel", cfg->log_name ? cfg->log_name : "node", cfg->quiet);
    if (mt_bg_thread_init(&t->bg, err)) {
        mt_error_prefix(err, "--tunnel");
        goto fail;
    }
    t->local_host = strdup(cfg->local_host ? cfg->local_host : "127.0.0.1");
    t->pattern = strdup(cfg->pattern ? cfg->pattern : default_pattern);
    if (!t->local_host || !t->pattern) {
        mt_error_set(err, "out of memory");
        goto fail;
    }
    t->command = mt_tunnel_expand(cfg->command, t->local_host, cfg->local_port, err);
    if (!t->command) goto fail;
    int ec;
    PCRE2_SIZE eo;
    t->re = pcre2_compile((PCRE2_SPTR)t->pattern, PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        mt_error_set(err,
                     "--tunnel-pattern '%s': %s at offset %zu; give a PCRE2 regular"
                     " expression with one capture group around the address",
                     t->pattern, (const char *)msg, (size_t)eo);
        goto fail;
    }
    uint32_t groups = 0;
    pcre2_pattern_info(t->re, PCRE2_INFO_CAPTURECOUNT, &groups);
    if (groups < 1) {
        mt_error_set(err,
                     "--tunnel-pattern '%s' has no capture group; put the address in one,"
                     " e.g. 'ready at (\\S+:\\d+)'",
                     t->pattern);
        goto fail;
    }
    if (mt_bg_thread_start(&t->bg, tunnel_main, t, err)) {
        mt_error_prefix(err, "--tunnel: the supervising thread");
        goto fail;
    }
    return t;
fail:
    mt_tunnel_stop(t);
    return NULL;
}

void mt_tunnel_stop(mt_tunnel *t) {
    if (!t) return;
    mt_bg_thread_stop(&t->bg);
    pthread_mutex_lock(&t->lock);
    pthread_cond_broadcast(&t->cond); /* a wait for the address ends */
    pthread_mutex_unlock(&t->lock);
    mt_bg_thread_destroy(&t->bg);
    if (t->re) pcre2_code_free(t->re);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    free(t->command);
    free(t->pattern);
    free(t->local_host);
    free(t);
}

void mt_tunnel_addr(mt_tunnel *t, char *out, size_t size) {
    pthread_mutex_lock(&t->lock);
    snprintf(out, size, "%s", t->addr);
    pthread_mutex_unlock(&t->lock);
}

int mt_tunnel_starts(mt_tunnel *t) {
    pthread_mutex_lock(&t->lock);
    int n = t->starts;
    pthread_mutex_unlock(&t->lock);
    return n;
}

int mt_tunnel_wait(mt_tunnel *t, int timeout_ms, char *out, size_t size, mt_error *err) {
    struct timespec ts = mt_mono_after_ms(timeout_ms);
    pthread_mutex_lock(&t->lock);
    int rc = 0;
    while (!t->addr[0] && !stopping(t) && rc == 0) rc = mt_cond_wait_until(&t->cond, &t->lock, &ts);
    snprintf(out, size, "%s", t->addr);
    int ok = t->addr[0] ? 0 : -1;
    if (ok) {
        char tail[3 * 110] = "";
        size_t k = 0;
        for (int i = t->n_lines > 3 ? t->n_lines - 3 : 0; i < t->n_lines && k < sizeof tail; i++)
            k += (size_t)snprintf(tail + k, sizeof tail - k, "%s'%.100s'", k ? " / " : "",
                                  t->lines[i]);
        mt_error_set(err,
                     "the tunnel program printed no public address within %d s (started %d"
                     " time%s; its last lines: %s). Check that `%s` works on its own, or give"
                     " --tunnel-pattern with one capture group around the address",
                     timeout_ms / 1000, t->starts, t->starts == 1 ? "" : "s",
                     t->n_lines ? tail : "(none)", t->command);
    }
    pthread_mutex_unlock(&t->lock);
    return ok;
}

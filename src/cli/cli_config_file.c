/* cli_config_file.c - `--config FILE` for every command: a file of the
 * command's own long options, one per line, so that a service's settings
 * live in a file (e.g. /etc/moontail/registry.conf) instead of a long
 * command line:
 *
 *     # the cell's registry
 *     model = /srv/models/model.gguf
 *     listen = 192.168.1.10:8470
 *     replicas = 2
 *     require-volunteer = true      # a flag: true turns it on, false leaves it off
 *     partner = 10.0.0.5:7411=<key> # repeatable options may appear more than once
 *
 * Each line becomes "--key value" (or "--key" for a flag set to true) placed
 * before the command line's own arguments, so options given on the command
 * line win. Keys are checked by the command like any option (an unknown key
 * is "unknown option '--key'"); this file only checks the form of lines, and
 * remembers the line each option came from, so that the command's messages
 * about it name the file and the line (cli_config_where). */
#include "cli.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

/* The expanded argv lives as long as the process, like the real one; kept
 * here so that it stays reachable (leak checkers see it as in use). */
static char **expanded;

/* Where each option and value made from the file came from: the string made_arg[i] is
 * from line made_line[i] of made_path. Known by the string itself, not by its slot in
 * expanded: commands take options out of argv in place (cli_take_all), which moves the
 * strings after them to other slots. */
static const char *made_path;
static const char **made_arg;
static int n_made, *made_line;

const char *cli_config_where(const char *arg) {
    static char where[700];
    for (int i = 0; arg && i < n_made; i++)
        if (made_arg[i] == arg) {
            snprintf(where, sizeof where, " (%s, line %d)", made_path, made_line[i]);
            return where;
        }
    return "";
}

int cli_expand_config(int *argc, char ***argv) {
    int at = -1;
    for (int i = 1; i < *argc; i++)
        if (strcmp((*argv)[i], "--config") == 0) {
            at = i;
            break;
        }
    if (at < 0) return 0;
    if (at + 1 >= *argc) {
        fprintf(stderr, "moontail: --config needs a FILE\n");
        return -1;
    }
    const char *path = (*argv)[at + 1];
    size_t len;
    char *text = cli_read_file(path, &len);
    if (!text) return -1;
    /* new argv: argv[0..at) (the command), the file's options, then the rest */
    int cap = *argc + 2 * 256 + 1, n = 0;
    char **out = calloc((size_t)cap, sizeof *out);
    if (!out) {
        free(text);
        return -1;
    }
    for (int i = 0; i < at; i++) out[n++] = (*argv)[i];
    const int first_own = n; /* out[first_own..) are strings made here until the command line's */
    int *lines = calloc((size_t)cap, sizeof *lines); /* lines[k]: the line of out[first_own + k] */
    if (!lines) {
        free(out);
        free(text);
        return -1;
    }
    int line_no = 0;
    for (char *line = text, *next; line; line = next) { /* blank lines count as lines too */
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line_no++;
        char *hash = strchr(line, '#');
        if (hash && (hash == line || isspace((unsigned char)hash[-1]))) *hash = 0;
        char *l = trim(line);
        if (!*l) continue;
        char *eq = strchr(l, '=');
        if (!eq) {
            fprintf(stderr, "moontail: %s:%d: expected 'key = value', got '%s'\n", path, line_no,
                    l);
            goto fail;
        }
        *eq = 0;
        char *key = trim(l), *value = trim(eq + 1);
        for (char *k = key; *k; k++)
            if (!(isalnum((unsigned char)*k) || *k == '-' || *k == '_')) {
                fprintf(stderr, "moontail: %s:%d: '%s' is not an option name\n", path, line_no,
                        key);
                goto fail;
            }
        if (!*key || n + 2 >= cap - (*argc - at)) {
            fprintf(stderr, "moontail: %s:%d: %s\n", path, line_no,
                    *key ? "too many options" : "an option name is missing");
            goto fail;
        }
        if (strcmp(value, "false") == 0) continue; /* a flag left off */
        char *opt = malloc(strlen(key) + 3);
        if (!opt) goto fail;
        sprintf(opt, "--%s", key);
        for (char *k = opt; *k; k++)
            if (*k == '_') *k = '-';
        lines[n - first_own] = line_no;
        out[n++] = opt;
        if (strcmp(value, "true") != 0) {
            lines[n - first_own] = line_no;
            if (!(out[n++] = strdup(value))) goto fail;
        }
    }
    /* the strings made here, kept apart from out, whose slots commands reuse */
    made_arg = malloc(((size_t)(n - first_own) + 1) * sizeof *made_arg);
    if (!made_arg) goto fail;
    for (int i = first_own; i < n; i++) made_arg[i - first_own] = out[i];
    free(text);
    made_path = path;
    n_made = n - first_own;
    made_line = lines;
    for (int i = at + 2; i < *argc; i++) out[n++] = (*argv)[i];
    out[n] = NULL;
    *argc = n;
    *argv = expanded = out;
    return 0;
fail:
    for (int i = first_own; i < n; i++) free(out[i]);
    free(out);
    free(lines);
    free(text);
    return -1;
}

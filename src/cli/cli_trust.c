/* cli_trust.c - how a `moontail` process trusts an https:// registry, for
 * every command at once: main.c takes `--registry-pin sha256//...` and
 * `--ca-file FILE` out of any command's arguments before the command parses
 * its own, and hands them to the HTTP client (mt_http_client_tls). Without
 * them, the pin (or CA file) that `setup` kept in config.json applies, as
 * long as the command talks to that configured registry (its --registry is
 * the same URL, or it has none and is one of the commands that then use the
 * configured one). http:// URLs are not affected. Every --registry URL is
 * checked here too: a base URL, not a page of the registry. */
#include "cli.h"
#include "cli_config.h"
#include "moontail/http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *pin_arg, *ca_arg;

const char *cli_registry_pin_arg(void) {
    return pin_arg;
}

const char *cli_ca_file_arg(void) {
    return ca_arg;
}

/* The one value of a repeatable-looking option, taken out of argv; -1 when
 * it is given twice or lacks its value. */
static int take_one(int *argc, char **argv, const char *name, const char **out) {
    const char **vals = calloc((size_t)*argc + 1, sizeof *vals);
    if (!vals) return -1;
    int n = cli_take_all(argc, argv, name, vals);
    if (n > 1) fprintf(stderr, "moontail: %s given %d times; give it once\n", name, n);
    *out = n == 1 ? vals[0] : NULL;
    free(vals);
    return n < 0 || n > 1 ? -1 : 0;
}

/* Whether the command, given no --registry, talks to the registry config.json names (each
 * of these reads it from there); every other command talks to a registry only when given
 * one. The kept trust is no business of a command that talks to none: a CA file since
 * removed must not stop `moontail mkmodel`. */
static bool uses_configured_registry(int argc, char **argv) {
    static const char *const cmds[] = {"status", "prompt", "shell", "pause", "setup"};
    if (argc < 2 || argv[1][0] == '-') return true; /* no command: the chat shell */
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        if (strcmp(argv[1], cmds[i]) == 0) return true;
    return false;
}

int cli_registry_trust(int *argc, char **argv) {
    for (int i = 1; i + 1 < *argc; i++) {
        mt_error err = {{0}};
        if (strcmp(argv[i], "--registry") == 0 &&
            mt_http_check_base_url(argv[i + 1], "--registry", &err)) {
            fprintf(stderr, "moontail: %s\n", err.msg);
            return -1;
        }
        if (strcmp(argv[i], "--registry") == 0) { /* "http://host:port/": its paths follow */
            size_t n = strlen(argv[i + 1]);
            while (n > 0 && argv[i + 1][n - 1] == '/') argv[i + 1][--n] = 0;
        }
    }
    if (take_one(argc, argv, "--registry-pin", &pin_arg) ||
        take_one(argc, argv, "--ca-file", &ca_arg))
        return -1;
    if (pin_arg && ca_arg) {
        fprintf(stderr, "moontail: give either --registry-pin (a registry's own certificate) or"
                        " --ca-file (one a CA signed), not both\n");
        return -1;
    }
    const char *pin = pin_arg, *ca = ca_arg;
    cli_config c;
    if (!pin && !ca && cli_config_load(&c) == 0 && (c.registry_pin[0] || c.ca_file[0])) {
        const char *reg = NULL; /* the command's own --registry, if any */
        for (int i = 1; i + 1 < *argc; i++)
            if (strcmp(argv[i], "--registry") == 0) reg = argv[i + 1];
        if (reg ? strcmp(reg, c.registry) == 0 : uses_configured_registry(*argc, argv)) {
            pin = c.registry_pin[0] ? c.registry_pin : NULL;
            ca = pin || !c.ca_file[0] ? NULL : c.ca_file;
        }
    }
    bool kept = (pin && pin != pin_arg) || (ca && ca != ca_arg); /* from config.json */
    mt_error err = {{0}};
    if (mt_http_client_tls(pin, ca, &err)) {
        /* setup may be about to replace what it kept, or only to stop its node: it checks
         * the kept trust itself where it keeps it (cmd_setup.c) */
        if (kept && *argc >= 2 && strcmp(argv[1], "setup") == 0) return 0;
        fprintf(stderr, "moontail: %s%s\n", err.msg,
                kept ? " (in config.json: run 'moontail setup' again)" : "");
        return -1;
    }
    return 0;
}

/* cli_service_posix.c - cli_service.h on Linux: a systemd --user unit that runs
 * the node, restarts it when it fails and starts it with the user's session. */
#include "cli_service.h"
#include "moontail/file.h"
#include "moontail/proc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cli_service_available(void) {
    if (!getenv("XDG_RUNTIME_DIR") || getenv("MOONTAIL_NO_SYSTEMD")) return false;
    char *args[] = {"systemctl", "--user", "is-system-running", NULL};
    int code = mt_proc_run(args, true);
    /* "running" or "degraded": a user manager is there */
    return code == 0 || code == 1;
}

static int run_cmd(char *const *args) {
    return mt_proc_run(args, false) == 0 ? 0 : -1;
}

int cli_service_start(const cli_config *c, const char *self, cli_note_made note_made) {
    char *argv[24], capmb[32];
    cli_node_args(c, self, capmb, argv);
    const char *home = getenv("HOME");
    char dir[600], unit[700];
    snprintf(dir, sizeof dir, "%s/.config/systemd/user", home ? home : ".");
    char mk[700];
    snprintf(mk, sizeof mk, "%s/.config/systemd", home ? home : ".");
    char parent[600];
    snprintf(parent, sizeof parent, "%s/.config", home ? home : ".");
    note_made(parent, true), mt_dir_make(parent, false);
    note_made(mk, true), mt_dir_make(mk, false);
    note_made(dir, true), mt_dir_make(dir, false);
    snprintf(unit, sizeof unit, "%s/moontail-node.service", dir);
    note_made(unit, false);
    FILE *f = fopen(unit, "w");
    if (!f) {
        fprintf(stderr, "moontail setup: %s: %s\n", unit, strerror(errno));
        return -1;
    }
    fprintf(f,
            "# written by moontail setup\n[Unit]\nDescription=MoonTail node (volunteering "
            "to %s)\nAfter=network-online.target\n\n[Service]\nExecStart=",
            c->registry);
    for (int i = 0; argv[i]; i++) fprintf(f, "%s\"%s\"", i ? " " : "", argv[i]);
    fprintf(f,
            "\nRestart=on-failure\nRestartSec=5\nNice=10\n\n[Install]\nWantedBy=default.target\n");
    fclose(f);
    char *reload[] = {"systemctl", "--user", "daemon-reload", NULL};
    char *enable[] = {"systemctl", "--user", "enable", "--now", "moontail-node.service", NULL};
    if (run_cmd(reload) || run_cmd(enable)) {
        fprintf(stderr, "moontail setup: systemctl --user could not start %s\n", unit);
        return -1;
    }
    printf("volunteering: systemd user service moontail-node (%s)\n"
           "  logs: journalctl --user -u moontail-node   stop: systemctl --user stop "
           "moontail-node\n",
           unit);
    return 0;
}

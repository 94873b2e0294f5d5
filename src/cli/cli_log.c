/* cli_log.c - the log options of the long-running commands (--log-level,
 * --log-file, --log-format; CLI_LOG_OPTS in cli.h) applied to the process
 * log (moontail/log.h), and their wait for a stop signal, which reopens the
 * log file on SIGHUP (logrotate moves the file, then sends SIGHUP). */
#include "cli.h"
#include "moontail/log.h"

#include <stdio.h>

bool cli_log_setup(const char *cmd, const cli_log_opts *o) {
    mt_error err = {{0}};
    mt_log_level level = MT_LOG_INFO;
    mt_log_format format = MT_LOG_TEXT;
    if (o->level && mt_log_parse_level(o->level, &level, &err)) {
        fprintf(stderr, "moontail %s: --log-level: %s\n", cmd, err.msg);
        return false;
    }
    if (o->format && mt_log_parse_format(o->format, &format, &err)) {
        fprintf(stderr, "moontail %s: --log-format: %s\n", cmd, err.msg);
        return false;
    }
    if (o->file && !o->file[0]) {
        fprintf(stderr, "moontail %s: --log-file needs a path\n", cmd);
        return false;
    }
    if (o->file && mt_log_open_file(o->file, &err)) {
        fprintf(stderr, "moontail %s: --log-file: %s\n", cmd, err.msg);
        return false;
    }
    mt_log_set_level(level);
    mt_log_set_format(format);
    return true;
}

/* Nothing to open, and nothing said, when the lines go to stderr. */
void cli_log_reopen(const char *component) {
    if (!mt_log_to_file()) return;
    mt_error err = {{0}};
    if (mt_log_reopen(&err))
        mt_log(MT_LOG_ERROR, component, "SIGHUP: %s; the log goes on in the old file", err.msg);
    else
        mt_log(MT_LOG_INFO, component, "SIGHUP: log file opened again");
}

mt_stop_why cli_wait_stop(const char *component) {
    for (;;) {
        mt_stop_why why = mt_stop_wait(-1);
        if (why != MT_STOP_RELOAD) return why;
        cli_log_reopen(component);
    }
}

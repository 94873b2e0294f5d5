/* cli_service.h - how `moontail setup` keeps a node running for this user: a
 * systemd --user unit on Linux (cli_service_posix.c); on Windows a task that
 * starts it again at each logon, or the user's Run key where the task cannot
 * be made (cli_service_win32.c). */
#ifndef MOONTAIL_CLI_SERVICE_H
#define MOONTAIL_CLI_SERVICE_H

#include "cli_config.h"

#include <stdbool.h>

/* Records a file or directory setup is about to make, so that a failed setup
 * removes it (cmd_setup.c). */
typedef void (*cli_note_made)(const char *path, bool dir);

/* The node's command line for c: argv[0] = self, then "node" and its options
 * (capmb holds the --capacity-mb value); NULL-terminated, 24 entries at most. */
void cli_node_args(const cli_config *c, const char *self, char capmb[32], char **argv);
/* Whether this machine has such a service manager. */
bool cli_service_available(void);
/* Sets the service up for the node of c (self: this program's path): 0 when
 * it runs the node now (said so), 1 when it starts the node at the next logon
 * and the caller starts it now, -1 on failure (said why). */
int cli_service_start(const cli_config *c, const char *self, cli_note_made note);

#endif

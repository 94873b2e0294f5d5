/* cli_node_args.c - the command line of the node that `moontail setup` sets up
 * (cli_service.h): for the background start, the foreground run and the
 * per-user service alike. */
#include "cli_service.h"

#include <stdio.h>

void cli_node_args(const cli_config *c, const char *self, char capmb[32], char **argv) {
    int k = 0;
    argv[k++] = (char *)self;
    argv[k++] = "node";
    argv[k++] = "--registry";
    argv[k++] = (char *)c->registry;
    argv[k++] = "--token-file";
    argv[k++] = (char *)c->token_file;
    argv[k++] = "--key";
    argv[k++] = (char *)c->node_key;
    argv[k++] = "--data";
    argv[k++] = (char *)c->data_dir;
    argv[k++] = "--listen";
    argv[k++] = (char *)c->listen;
    argv[k++] = "--name";
    argv[k++] = (char *)c->name;
    if (c->registry_pin[0]) {
        argv[k++] = "--registry-pin";
        argv[k++] = (char *)c->registry_pin;
    } else if (c->ca_file[0]) {
        argv[k++] = "--ca-file";
        argv[k++] = (char *)c->ca_file;
    }
    if (c->capacity_mb > 0) {
        snprintf(capmb, 32, "%lld", (long long)c->capacity_mb);
        argv[k++] = "--capacity-mb";
        argv[k++] = capmb;
    }
    argv[k] = NULL;
}

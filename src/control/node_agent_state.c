/* node_agent_state.c - helpers on the node agent's state that both its
 * heartbeat thread (node_agent.c) and its fetch thread (node_agent_fetch.c)
 * use: the reason a shard cannot be served, the capacity offered, and where
 * a shard lives on disk. */
#include "node_agent_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void agent_set_problem(mt_agent *a, const char *name, const char *what, const char *why) {
    int n = snprintf(a->problem, sizeof a->problem, "%s shard %s: %s", what, name, why);
    if (n >= (int)sizeof a->problem) { /* drop a last character cut in the middle */
        size_t len = strlen(a->problem), start = len;
        while (start > 0 && ((unsigned char)a->problem[start - 1] & 0xC0) == 0x80) start--;
        unsigned char lead = start > 0 ? (unsigned char)a->problem[start - 1] : 0;
        size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        if (lead >= 0xC0 && len - (start - 1) < want) a->problem[start - 1] = 0;
    }
    for (char *p = a->problem; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
    snprintf(a->problem_shard, sizeof a->problem_shard, "%s", name);
}

int64_t agent_offered_capacity(const mt_agent *a) {
    return a->disk_limit >= 0 && a->disk_limit < a->capacity ? a->disk_limit : a->capacity;
}

char *agent_shard_path(const mt_agent *a, const char *name) {
    size_t n = strlen(a->data_dir) + strlen(name) + 8;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s.gguf", a->data_dir, name);
    return p;
}

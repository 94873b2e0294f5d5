/* api_internal.h - what api_server.c lends the other files of src/api: batch requests
 * checked and run like interactive ones, on the batch slots. Not a public API. */
#ifndef MOONTAIL_API_INTERNAL_H
#define MOONTAIL_API_INTERNAL_H

#include "api_openai.h"
#include "moontail/api.h"

#include <stddef.h>

/* One batch request (an api_batch_submit_fn): the body is checked as POST of its kind would
 * be; a refused one is answered at once through collect (its 4xx and error body). Returns 0
 * (collect is or will be called once), or -1 when the batch slots have no room or stop. */
int api_server_submit_batch(void *server, api_kind kind, const char *body, size_t len,
                            api_reply_collect_fn collect, void *ctx);

/* The batch slots of the server (its batch_parallel). */
int api_server_batch_parallel(const mt_api_server *s);

#endif

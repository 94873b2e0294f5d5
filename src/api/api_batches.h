/* api_batches.h - serve's Files and Batches endpoints (docs/api.md, "Batches"): uploads of
 * batch input files, batches run by the batch runner (api_batch.h) on the server's batch
 * slots one after another, their status, results and cancelling. Not a public API.
 *
 * Everything lives under the batch directory (--batch-dir, mode 0700):
 *   files/file-ID/{meta.json,data}       an uploaded file or a batch's output or errors
 *   batches/batch_ID/batch.json           the batch object and its owner
 *   batches/batch_ID/{input.jsonl,output.jsonl,state.json}   the runner's state
 * IDs are "file-" / "batch_" and 24 random letters and digits (142 bits: unguessable), and
 * a file or batch is seen only with the API key (its name) that made it. A batch in progress
 * when the server stops resumes when it starts again on the same directory.
 *
 * Threads: HTTP threads call api_batches_handle; one thread of its own runs the batches. */
#ifndef MOONTAIL_API_BATCHES_H
#define MOONTAIL_API_BATCHES_H

#include "api_batch.h"
#include "moontail/error.h"
#include "moontail/http.h"
#include "moontail/log.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct api_batches api_batches;

/* Opens dir (created 0700 when missing), loads its batches and starts the thread that runs
 * them through submit(submit_ctx, ...) (serve's batch slots) with up to parallel in flight.
 * max_file: the largest upload in bytes. log is borrowed. */
api_batches *api_batches_start(const char *dir, int64_t max_file, api_batch_submit_fn submit,
                               void *submit_ctx, int parallel, mt_log_source *log, mt_error *err);
/* Tells the running batch to start no more requests (call before stopping the batch slots,
 * so that the requests they cut are not kept as results). */
void api_batches_stopping(api_batches *m);
/* Joins the thread and frees everything (a batch in progress stays so on disk). */
void api_batches_stop(api_batches *m);

/* True when path is one of the endpoints below. */
bool api_batches_path(const char *path);
/* POST /v1/files, GET /v1/files/ID, GET /v1/files/ID/content, POST /v1/batches,
 * GET /v1/batches, GET /v1/batches/ID, POST /v1/batches/ID/cancel, for the key named owner
 * (the caller authenticated it). */
void api_batches_handle(api_batches *m, const char *owner, const mt_http_request *req,
                        mt_http_response *resp);

#endif

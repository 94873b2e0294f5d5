/* api_batch.h - batch work of the API (`moontail batch` and serve's /v1/batches): a JSONL
 * file of requests in OpenAI's batch format in, a JSONL file of results out, computed with
 * many requests in flight and resumable after a crash. Not a public API.
 *
 * Input, one request per line:
 *   {"custom_id": "...", "method": "POST", "url": "/v1/chat/completions" | "/v1/completions",
 *    "body": {... the request body ...}}
 * Every line is checked when the batch opens: not JSON, a missing or extra field, another
 * method or URL, an empty or duplicate custom_id refuse the whole file with the line's
 * number. A body the API refuses (a bad field, the wrong model) becomes an error result for
 * that custom_id.
 *
 * Output, one result per line, as OpenAI writes them:
 *   {"id": "batch_req_...", "custom_id": "...", "response": {"status_code": 200,
 *    "request_id": "req_...", "body": {... the answer, or {"error": {...}}}}, "error": null}
 *
 * The state directory (mode 0700) holds:
 *   input.jsonl   a copy of the input (later runs check theirs against it);
 *   output.jsonl  the results in the order they finished, each written with one write()
 *                 and fsync'd before the next request counts as done;
 *   state.json    {"input_bytes": N, "input_blake2b": "hex", "requests": N}.
 * Opening a directory that has results reads output.jsonl: lines that are complete, parse
 * and name a custom_id of the input not seen before count as done; anything else (a last
 * line cut by a crash, a repeated custom_id) is dropped and the file rewritten without it.
 * So after kill -9 at any moment, a rerun gives each custom_id exactly once.
 *
 * Threads: api_batch_run runs on its caller's thread; results arrive on the engine's
 * workers (the collect callback), which append them under b->mu. */
#ifndef MOONTAIL_API_BATCH_H
#define MOONTAIL_API_BATCH_H

#include "api_openai.h"
#include "moontail/error.h"

#include <stdbool.h>
#include <stdint.h>

#define API_BATCH_MAX_LINES     50000 /* requests per batch (OpenAI's limit) */
#define API_BATCH_MAX_CUSTOM_ID 512   /* bytes of a custom_id */
#define API_BATCH_TRIES         3     /* runs of a request answered 503 before that is its result */

typedef struct api_batch api_batch;

/* How far a batch is. */
typedef struct api_batch_stats {
    int64_t total, done, failed; /* requests; results present; results with status != 200 */
    int64_t run_done;            /* results of this run (api_batch_run) */
    int64_t completion_tokens;   /* of this run's results */
    int64_t retried;             /* 503 answers of this run not kept: run again */
    double seconds;              /* since this run began */
} api_batch_stats;

/* Starts one request (its url's kind, the body's bytes) for the API key named owner (NULL:
 * `moontail batch`'s own, anonymous one); collect(cctx, ...) is called exactly once, perhaps
 * before this returns. Returns 0, or -1 when nothing was started (no room now, the owner's
 * rate limit, or the engine stops; collect is not called). */
typedef int (*api_batch_submit_fn)(void *ctx, const char *owner, api_kind kind, const char *body,
                                   size_t len, api_reply_collect_fn collect, void *cctx);

/* Opens the state directory dir, creating it when missing. input: the JSONL file to copy in
 * when dir holds none, or whose hash must be the state's (refused when it differs: then the
 * input itself is parsed, the copy not read); NULL: dir must hold one. input_name: what
 * errors call the input (a file id for a client who does not know the server's paths;
 * NULL: its path). endpoint: every line's url must equal it (NULL: either). max_bytes: the
 * largest input (0: no limit). The input is read and hashed once. Returns NULL with err
 * filled (the file's problem and its line; problems of dir name its paths). */
api_batch *api_batch_open(const char *dir, const char *input, const char *input_name,
                          const char *endpoint, int64_t max_bytes, mt_error *err);
void api_batch_close(api_batch *b);

/* Runs the requests that have no result yet, each submitted for owner (the API key that
 * made the batch, or NULL), up to `parallel` at once, until all have one
 * or *stop turns true (then no more start; those in flight finish, and results of 503 that
 * arrive then are not kept: they run again next time). A request answered 503 (the backend
 * could not serve it for now) runs again in a second and third pass, 2 and 4 s after the
 * passes before ended; the third 503 is its result. progress (may be NULL) is called after
 * each result, from a worker, under the batch's lock. Returns 0 when all requests have a
 * result, 1 when stopped first, -1 with err filled when a result could not be written. */
int api_batch_run(api_batch *b, api_batch_submit_fn submit, void *submit_ctx, const char *owner,
                  int parallel, const bool *stop,
                  void (*progress)(void *ctx, const api_batch_stats *st), void *progress_ctx,
                  mt_error *err);

/* The counts now (thread-safe). */
api_batch_stats api_batch_get_stats(api_batch *b);

/* Creates dir (mode 0700) or checks that an existing one is a directory only its owner
 * reaches; what names it in errors ("state directory"). 0, or -1 with err filled. */
int api_batch_private_dir(const char *dir, const char *what, mt_error *err);

/* Which results api_batch_write goes through. */
typedef enum api_batch_pick { API_BATCH_ALL, API_BATCH_OK, API_BATCH_FAILED } api_batch_pick;

/* Writes the results present, in the input's order, to path (mt_file_write_atomic, mode
 * 0600). Returns the lines written, or -1 with err filled. */
int64_t api_batch_write(api_batch *b, const char *path, api_batch_pick pick, mt_error *err);

#endif

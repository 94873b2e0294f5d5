/* test_batch_runner.c - the batch runner (src/api/api_batch.c) on a scripted submit function
 * instead of a model: each request's answer is chosen by its prompt ("flaky" is answered 503
 * once, then 200; "dead" always 503; others 200), so what the runner keeps, retries and
 * writes can be checked against counts worked out by hand. Checks: a 503 runs again (flaky
 * ends 200 after 2 calls; dead ends 503 after exactly API_BATCH_TRIES calls), results in the
 * input's order with OpenAI's fields, a reopened state directory with a cut last line keeps
 * the results and rewrites the file whole, a stop before the start runs nothing, refusals
 * naming the lines (a repeated custom_id, another input for a state directory), the input
 * named as the caller says (a file id, not a path); resuming with the input given reads
 * the input only (a damaged copy in the state is not read), without it the damaged copy is
 * refused. */
#include "../src/api/api_batch.h"
#include "check.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int calls_flaky, calls_dead, calls_all;

static int submit(void *ctx, const char *owner, api_kind kind, const char *body, size_t len,
                  api_reply_collect_fn collect, void *cctx) {
    (void)ctx;
    (void)owner;
    json_t *o = json_loadb(body, len, 0, NULL);
    const char *p = json_string_value(json_object_get(o, "prompt"));
    if (kind == API_CHAT) p = "chat";
    int status = 200;
    calls_all++;
    if (p && strcmp(p, "flaky") == 0 && ++calls_flaky == 1) status = 503;
    if (p && strcmp(p, "dead") == 0) {
        calls_dead++;
        status = 503;
    }
    json_t *answer = status == 200 ? json_pack("{s:s, s:{s:i}}", "echo", p ? p : "", "usage",
                                               "completion_tokens", 3)
                                   : json_pack("{s:{s:s}}", "error", "message", "no route");
    json_decref(o);
    collect(cctx, status, answer);
    return 0;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

static const char input[] =
    "{\"custom_id\": \"a\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": "
    "{\"model\": \"m\", \"prompt\": \"a\"}}\n"
    "{\"custom_id\": \"flaky\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": "
    "{\"model\": \"m\", \"prompt\": \"flaky\"}}\n"
    "{\"custom_id\": \"dead\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": "
    "{\"model\": \"m\", \"prompt\": \"dead\"}}\r\n"
    "{\"custom_id\": \"c\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", \"body\": "
    "{\"model\": \"m\", \"messages\": []}}";

int main(void) {
    char dir[256], state[300], in[300], out[300], cmd[400];
    snprintf(dir, sizeof dir, "%s", check_tmp("-batch"));
    mkdir(dir, 0700);
    snprintf(state, sizeof state, "%s/st", dir);
    snprintf(in, sizeof in, "%s/in.jsonl", dir);
    snprintf(out, sizeof out, "%s/out.jsonl", dir);
    write_file(in, input);
    mt_error err = {{0}};

    /* ---- a run with retries */
    api_batch *b = api_batch_open(state, in, NULL, NULL, 0, &err);
    CHECK(b, "open: %s", err.msg);
    if (!b) return check_report("test_batch_runner");
    int rc = api_batch_run(b, submit, NULL, NULL, 2, NULL, NULL, NULL, &err);
    api_batch_stats st = api_batch_get_stats(b);
    CHECK(rc == 0, "run: %d %s", rc, err.msg);
    CHECK(st.total == 4 && st.done == 4 && st.failed == 1, "stats %lld/%lld, %lld failed",
          (long long)st.done, (long long)st.total, (long long)st.failed);
    CHECK(calls_flaky == 2, "flaky was called %d times, wanted 2 (503 then 200)", calls_flaky);
    CHECK(calls_dead == API_BATCH_TRIES, "dead was called %d times, wanted %d", calls_dead,
          API_BATCH_TRIES);
    CHECK(st.retried == 1 + (API_BATCH_TRIES - 1), "%lld retried", (long long)st.retried);
    CHECK(st.completion_tokens == 3 * 3, "%lld tokens, wanted 9", (long long)st.completion_tokens);
    CHECK(api_batch_write(b, out, API_BATCH_ALL, &err) == 4, "write: %s", err.msg);
    api_batch_close(b);
    const char *want_ids[] = {"a", "flaky", "dead", "c"};
    const int want_status[] = {200, 200, 503, 200};
    char *text = read_text(out);
    char *line = text, *next;
    for (int i = 0; i < 4; i++, line = next) {
        next = line ? strchr(line, '\n') : NULL;
        CHECK(next, "output line %d missing", i + 1);
        if (!next) break;
        *next++ = 0;
        json_t *o = json_loads(line, 0, NULL);
        json_t *resp = json_object_get(o, "response");
        CHECK(o && strcmp(json_string_value(json_object_get(o, "custom_id")), want_ids[i]) == 0,
              "line %d: %s", i + 1, line);
        CHECK(json_integer_value(json_object_get(resp, "status_code")) == want_status[i],
              "line %d: status %lld", i + 1,
              (long long)json_integer_value(json_object_get(resp, "status_code")));
        CHECK(strncmp(json_string_value(json_object_get(o, "id")), "batch_req_", 10) == 0 &&
                  strncmp(json_string_value(json_object_get(resp, "request_id")), "req_", 4) == 0 &&
                  json_is_null(json_object_get(o, "error")),
              "line %d: not OpenAI's shape: %s", i + 1, line);
        json_decref(o);
    }

    /* ---- a cut last line: dropped, the file rewritten whole, nothing runs again */
    char so[340];
    snprintf(so, sizeof so, "%s/output.jsonl", state);
    FILE *f = fopen(so, "a");
    fputs("{\"id\": \"batch_req_cut\", \"custom_", f);
    fclose(f);
    calls_all = 0;
    b = api_batch_open(state, in, NULL, NULL, 0, &err);
    CHECK(b, "reopen: %s", err.msg);
    if (b) {
        st = api_batch_get_stats(b);
        CHECK(st.done == 4, "reopened: %lld done, wanted 4", (long long)st.done);
        CHECK(api_batch_run(b, submit, NULL, NULL, 2, NULL, NULL, NULL, &err) == 0 &&
                  calls_all == 0,
              "a finished batch ran %d requests again", calls_all);
        api_batch_close(b);
    }
    text = read_text(so);
    int nl = 0;
    for (char *p = text; p && *p; p++) nl += *p == '\n';
    CHECK(text && nl == 4 && text[strlen(text) - 1] == '\n',
          "output.jsonl after reopening: %d lines, last byte %d", nl,
          text && *text ? text[strlen(text) - 1] : -1);

    /* ---- the input is read and hashed once: given again, its hash is compared with the
     * state's and it is parsed itself, so a damaged copy is not read; without it the copy
     * is, and its damage is refused */
    char copy[340];
    snprintf(copy, sizeof copy, "%s/input.jsonl", state);
    write_file(copy, "{\"damaged\": true}\n");
    b = api_batch_open(state, in, NULL, NULL, 0, &err);
    CHECK(b && api_batch_get_stats(b).done == 4, "resuming with the input read the copy: %s",
          b ? "" : err.msg);
    api_batch_close(b);
    b = api_batch_open(state, NULL, NULL, NULL, 0, &err);
    CHECK(!b && strstr(err.msg, "input.jsonl does not match state.json"), "a damaged copy: %s",
          err.msg);
    api_batch_close(b);

    /* ---- refusals */
    b = api_batch_open(state, out, NULL, NULL, 0, &err);
    CHECK(!b && strstr(err.msg, "holds the state of another input"), "another input: %s", err.msg);
    api_batch_close(b);
    char dup[300];
    snprintf(dup, sizeof dup, "%s/dup.jsonl", dir);
    write_file(dup, "{\"custom_id\": \"x\", \"method\": \"POST\", \"url\": \"/v1/completions\", "
                    "\"body\": {}}\n{\"custom_id\": \"y\", \"method\": \"POST\", \"url\": "
                    "\"/v1/completions\", \"body\": {}}\n{\"custom_id\": \"x\", \"method\": "
                    "\"POST\", \"url\": \"/v1/completions\", \"body\": {}}\n");
    char st2[320];
    snprintf(st2, sizeof st2, "%s/st2", dir);
    b = api_batch_open(st2, dup, NULL, NULL, 0, &err);
    CHECK(!b && strstr(err.msg, "lines 1 and 3: the custom_id 'x' is used twice"), "dup: %s",
          err.msg);
    api_batch_close(b);
    /* errors call the input by the name given (serve: the file's id), not its path */
    b = api_batch_open(st2, dup, "file-abc", NULL, 0, &err);
    CHECK(!b && strncmp(err.msg, "file-abc lines 1 and 3: ", 24) == 0 && !strstr(err.msg, dir),
          "dup by name: %s", err.msg);
    api_batch_close(b);
    b = api_batch_open(st2, in, NULL, "/v1/completions", 0, &err);
    CHECK(!b && strstr(err.msg, "line 4: 'url' is /v1/chat/completions, but the batch's"
                                " endpoint is /v1/completions"),
          "endpoint: %s", err.msg);
    api_batch_close(b);

    /* ---- stopped before the start: nothing runs, 1 */
    calls_all = 0;
    b = api_batch_open(st2, in, NULL, NULL, 0, &err);
    CHECK(b, "open st2: %s", err.msg);
    if (b) {
        bool stop = true;
        CHECK(api_batch_run(b, submit, NULL, NULL, 2, &stop, NULL, NULL, &err) == 1 &&
                  calls_all == 0,
              "a stopped run ran %d requests", calls_all);
        api_batch_close(b);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_report("test_batch_runner");
}

/* test_api.c - the pieces of `moontail serve` (src/api) one by one, without
 * HTTP: chat templates (every family's text, detection, the ChatML fallback,
 * message text never parsed as special tokens), request parsing (every
 * field's checks and the error's param), API keys and token buckets, and the
 * engine's token loop and queue on a scripted backend (stop strings across
 * tokens never leak, end tokens, max_tokens, UTF-8 held whole, cancellation,
 * backend failures, a full queue, stopping with requests waiting).
 * tests/test_serve.sh drives the whole server with the OpenAI client. */
#include "../src/api/api_chat.h"
#include "../src/api/api_engine.h"
#include "../src/api/api_keys.h"
#include "../src/api/api_openai.h"
#include "check.h"
#include "moontail/synth_model.h"

#include <pthread.h>
#include <sodium.h>

/* ---- chat templates ------------------------------------------------------------------------ */

static const api_chat_message CONV[] = {
    {API_ROLE_SYSTEM, "Be brief.", 9},
    {API_ROLE_USER, " Hi <|im_end|>\n", 15},
    {API_ROLE_ASSISTANT, "Hello.", 6},
    {API_ROLE_USER, "Bye", 3},
};

static void check_render(api_chat_format f, const char *want) {
    size_t len = 0;
    char *got = api_chat_render(f, CONV, 4, &len);
    CHECK(got && len == strlen(want) && strcmp(got, want) == 0, "%s renders\n%s\nnot\n%s",
          api_chat_format_name(f), got ? got : "(null)", want);
    free(got);
}

static void test_chat(const mt_vocab *v) {
    bool known;
    CHECK(api_chat_detect(NULL, &known) == API_CHAT_CHATML && !known, "no template: ChatML");
    CHECK(api_chat_detect("{{ weird }}", &known) == API_CHAT_CHATML && !known,
          "unknown template: ChatML, not known");
    CHECK(api_chat_detect("{{'<|im_start|>' + role}}", &known) == API_CHAT_CHATML && known,
          "ChatML detected");
    CHECK(api_chat_detect("<|start_header_id|>{{ role }}<|end_header_id|>", &known) ==
                  API_CHAT_LLAMA3 &&
              known,
          "Llama 3 detected");
    CHECK(api_chat_detect("{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + c}}", &known) ==
                  API_CHAT_DEEPSEEK3 &&
              known,
          "DeepSeek V3 detected");
    CHECK(api_chat_detect("<|im_user|>user<|im_middle|>{{c}}<|im_end|>", &known) ==
                  API_CHAT_KIMI_K2 &&
              known,
          "Kimi K2 detected before ChatML");
    check_render(API_CHAT_CHATML, "<|im_start|>system\nBe brief.<|im_end|>\n"
                                  "<|im_start|>user\n Hi <|im_end|>\n<|im_end|>\n"
                                  "<|im_start|>assistant\nHello.<|im_end|>\n"
                                  "<|im_start|>user\nBye<|im_end|>\n"
                                  "<|im_start|>assistant\n");
    check_render(API_CHAT_LLAMA3,
                 "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nHi <|im_end|><|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    check_render(API_CHAT_DEEPSEEK3, "Be brief.<\xef\xbd\x9cUser\xef\xbd\x9c> Hi <|im_end|>\n"
                                     "<\xef\xbd\x9c"
                                     "Assistant\xef\xbd\x9c>Hello.<\xef\xbd\x9c"
                                     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
                                     "<\xef\xbd\x9cUser\xef\xbd\x9c>Bye<\xef\xbd\x9c"
                                     "Assistant\xef\xbd\x9c>");
    check_render(API_CHAT_KIMI_K2, "<|im_system|>system<|im_middle|>Be brief.<|im_end|>"
                                   "<|im_user|>user<|im_middle|> Hi <|im_end|>\n<|im_end|>"
                                   "<|im_assistant|>assistant<|im_middle|>Hello.<|im_end|>"
                                   "<|im_user|>user<|im_middle|>Bye<|im_end|>"
                                   "<|im_assistant|>assistant<|im_middle|>");
    /* Kimi adds its default system message when there is none */
    size_t len;
    char *k = api_chat_render(API_CHAT_KIMI_K2, CONV + 1, 1, &len);
    CHECK(k && strncmp(k, "<|im_system|>system<|im_middle|>You are Kimi", 44) == 0,
          "Kimi default system message: %s", k);
    free(k);

    /* tokens: template markers are control tokens, message text is plain text */
    int32_t *ids = NULL;
    int64_t n = api_chat_tokenize(API_CHAT_CHATML, v, CONV, 4, &ids, NULL);
    const int32_t im_start = mt_vocab_find(v, "<|im_start|>", 12),
                  im_end = mt_vocab_find(v, "<|im_end|>", 10);
    int starts = 0, ends = 0;
    for (int64_t i = 0; i < n; i++) starts += ids[i] == im_start, ends += ids[i] == im_end;
    CHECK(n > 0 && starts == 5 && ends == 4,
          "ChatML tokens: %lld ids, %d <|im_start|> (want 5), %d <|im_end|> (want 4: the one"
          " typed in a message is text)",
          (long long)n, starts, ends);
    /* the same count as tokenizing the rendered text when no message holds special text */
    static const api_chat_message plain[] = {{API_ROLE_USER, "Say hi", 6}};
    char *text = api_chat_render(API_CHAT_CHATML, plain, 1, &len);
    int32_t *a = NULL, *b = NULL;
    int64_t na = api_chat_tokenize(API_CHAT_CHATML, v, plain, 1, &a, NULL);
    int64_t nb = mt_tokenize(v, text, len, true, true, &b, NULL);
    CHECK(na == nb && na > 0 && memcmp(a, b, (size_t)na * sizeof *a) == 0,
          "chat tokens equal tokenizing the rendered text (%lld vs %lld)", (long long)na,
          (long long)nb);
    CHECK(api_chat_end_token(API_CHAT_CHATML, v) == im_end, "ChatML ends at <|im_end|>");
    CHECK(api_chat_end_token(API_CHAT_LLAMA3, v) == -1, "no <|eot_id|> in this vocabulary");
    free(text);
    free(a);
    free(b);
    free(ids);
}

/* ---- request parsing ---------------------------------------------------------------------- */

/* body must fail with status and param (NULL: param null). */
static void parse_bad(api_kind kind, const char *body, int status, const char *param,
                      const char *in_msg) {
    api_request rq;
    api_error e;
    memset(&e, 0, sizeof e);
    int rc = api_request_parse(kind, body, strlen(body), "tiny", &rq, &e);
    CHECK(rc == -1 && e.status == status && strcmp(e.param, param ? param : "") == 0 &&
              (!in_msg || strstr(e.message, in_msg)),
          "%s: got %d %d param '%s' message '%s'; want %d '%s' '%s'", body, rc, e.status, e.param,
          e.message, status, param ? param : "", in_msg ? in_msg : "");
    api_request_free(&rq);
}

static void test_parse(void) {
    api_request rq;
    api_error e;
    const char *ok =
        "{\"model\":\"tiny\",\"prompt\":[\"Hello\"],\"max_tokens\":7,\"temperature\":0,"
        "\"top_p\":0.5,\"seed\":-3,\"stop\":\"\\n\",\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},\"n\":1,\"user\":\"u\","
        "\"logprobs\":null,\"echo\":false}";
    CHECK(api_request_parse(API_COMPLETIONS, ok, strlen(ok), "tiny", &rq, &e) == 0, "valid: %s",
          e.message);
    CHECK(rq.prompt_len == 5 && memcmp(rq.prompt, "Hello", 5) == 0 && rq.max_tokens == 7 &&
              rq.sp.temp == 0 && rq.sp.top_p == 0.5f && rq.sp.seed == (uint64_t)-3 &&
              rq.n_stop == 1 && strcmp(rq.stop[0], "\n") == 0 && rq.stream && rq.include_usage &&
              rq.sp.top_k == 0 && rq.sp.min_p == 0,
          "fields of a valid completion");
    api_request_free(&rq);
    const char *chat =
        "{\"model\":\"tiny\",\"messages\":[{\"role\":\"developer\",\"content\":\"s\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
        "{\"type\":\"text\",\"text\":\"b\"}],\"name\":\"x\"},"
        "{\"role\":\"assistant\",\"content\":null}],"
        "\"max_completion_tokens\":3,\"tools\":[],\"response_format\":"
        "{\"type\":\"text\"}}";
    CHECK(api_request_parse(API_CHAT, chat, strlen(chat), "tiny", &rq, &e) == 0, "valid chat: %s",
          e.message);
    CHECK(rq.n_messages == 3 && rq.messages[0].role == API_ROLE_SYSTEM && rq.messages[1].len == 3 &&
              memcmp(rq.messages[1].text, "a\nb", 3) == 0 &&
              rq.messages[2].role == API_ROLE_ASSISTANT && rq.messages[2].len == 0 &&
              rq.max_tokens == 3 && rq.sp.temp == 1.0f && !rq.stream,
          "fields of a valid chat");
    api_request_free(&rq);

    parse_bad(API_CHAT, "{nope", 400, NULL, "could not parse");
    parse_bad(API_CHAT, "[]", 400, NULL, "JSON object");
    parse_bad(API_CHAT, "{\"model\":\"tiny\",\"model\":\"x\"}", 400, NULL, "duplicate");
    parse_bad(API_CHAT, "{\"messages\":[]}", 400, "model", "Missing");
    parse_bad(API_CHAT, "{\"model\":5}", 400, "model", "string");
    parse_bad(API_CHAT, "{\"model\":\"gpt-4\",\"messages\":[]}", 400, "model", "gpt-4");
    parse_bad(API_CHAT, "{\"model\":\"tiny\"}", 400, "messages", "Missing");
    parse_bad(API_CHAT, "{\"model\":\"tiny\",\"messages\":{}}", 400, "messages", "array");
    parse_bad(API_CHAT, "{\"model\":\"tiny\",\"messages\":[]}", 400, "messages", "empty");
    parse_bad(API_CHAT, "{\"model\":\"tiny\",\"messages\":[5]}", 400, "messages[0]", "object");
    parse_bad(API_CHAT, "{\"model\":\"tiny\",\"messages\":[{\"content\":\"x\"}]}", 400,
              "messages[0].role", NULL);
    parse_bad(API_CHAT, "{\"model\":\"tiny\",\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}",
              400, "messages[0].role", "'bot'");
    parse_bad(API_CHAT, "{\"model\":\"tiny\",\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}",
              400, "messages[0].role", "not supported");
    parse_bad(API_CHAT, "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\"}]}", 400,
              "messages[0].content", "Missing");
    parse_bad(API_CHAT, "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":null}]}",
              400, "messages[0].content", "assistant");
    parse_bad(API_CHAT,
              "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"x\":1}]}",
              400, "messages[0].x", NULL);
    parse_bad(API_CHAT,
              "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
              "\"image_url\"}]}]}",
              400, "messages[0].content", "image_url");
    const char *m = "\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char body[512];
    static const struct {
        const char *extra, *param, *msg;
    } bad[] = {
        {"\"temperature\":\"hot\"", "temperature", "number"},
        {"\"temperature\":2.5", "temperature", "range"},
        {"\"top_p\":-0.1", "top_p", "range"},
        {"\"n\":2", "n", "n = 1"},
        {"\"n\":\"1\"", "n", "integer"},
        {"\"max_tokens\":-1", "max_tokens", "from 1"},
        {"\"max_tokens\":0", "max_tokens", "from 1"},
        {"\"max_tokens\":2.5", "max_tokens", "integer"},
        {"\"max_tokens\":1,\"max_completion_tokens\":1", "max_tokens", "not both"},
        {"\"seed\":\"x\"", "seed", "integer"},
        {"\"stop\":5", "stop", "string"},
        {"\"stop\":[\"\"]", "stop", "1 to 1000"},
        {"\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]", "stop", "at most 4"},
        {"\"stream\":\"yes\"", "stream", "boolean"},
        {"\"stream_options\":{\"include_usage\":true}", "stream_options", "only allowed"},
        {"\"stream\":true,\"stream_options\":{\"x\":1}", "stream_options", "include_usage"},
        {"\"frequency_penalty\":3", "frequency_penalty", "range"},
        {"\"logit_bias\":{\"1\":5}", "logit_bias", "not supported"},
        {"\"logprobs\":true", "logprobs", "not supported"},
        {"\"tools\":[{}]", "tools", "not supported"},
        {"\"tool_choice\":\"required\"", "tool_choice", "not supported"},
        {"\"response_format\":{\"type\":\"json_object\"}", "response_format", "not supported"},
        {"\"prompt\":\"x\"", "prompt", "/v1/completions"},
        {"\"temprature\":1", "temprature", "Unrecognized"},
        {"\"user\":5", "user", "string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(body, sizeof body, "{%s,%s}", m, bad[i].extra);
        parse_bad(API_CHAT, body, 400, bad[i].param, bad[i].msg);
    }
    parse_bad(API_COMPLETIONS, "{\"model\":\"tiny\"}", 400, "prompt", "Missing");
    parse_bad(API_COMPLETIONS, "{\"model\":\"tiny\",\"prompt\":[]}", 400, "prompt", "empty");
    parse_bad(API_COMPLETIONS, "{\"model\":\"tiny\",\"prompt\":[\"a\",\"b\"]}", 400, "prompt",
              "only one prompt");
    parse_bad(API_COMPLETIONS, "{\"model\":\"tiny\",\"prompt\":[1,2]}", 400, "prompt", "token ids");
    parse_bad(API_COMPLETIONS, "{\"model\":\"tiny\",\"prompt\":{}}", 400, "prompt", "string");
    parse_bad(API_COMPLETIONS, "{\"model\":\"tiny\",\"prompt\":\"x\",\"best_of\":2}", 400,
              "best_of", "not supported");
    parse_bad(API_COMPLETIONS, "{\"model\":\"tiny\",\"prompt\":\"x\",\"echo\":true}", 400, "echo",
              "not supported");
    parse_bad(API_COMPLETIONS, "{\"model\":\"tiny\",\"prompt\":\"x\",\"suffix\":\"y\"}", 400,
              "suffix", "not supported");
    parse_bad(API_COMPLETIONS, "{\"model\":\"tiny\",\"prompt\":\"x\",\"messages\":[]}", 400,
              "messages", "/v1/chat/completions");
    parse_bad(API_COMPLETIONS, "{\"model\":\"tiny\",\"prompt\":\"a\\u0000\"}", 400, NULL, "NUL");

    /* the error's JSON shape */
    api_fail(&e, 429, "requests", NULL, "rate_limit_exceeded", "slow down");
    json_t *j = api_error_json(&e);
    json_t *in = json_object_get(j, "error");
    CHECK(json_is_string(json_object_get(in, "message")) &&
              strcmp(json_string_value(json_object_get(in, "type")), "requests") == 0 &&
              json_is_null(json_object_get(in, "param")) &&
              strcmp(json_string_value(json_object_get(in, "code")), "rate_limit_exceeded") == 0,
          "error JSON shape");
    json_decref(j);
}

/* ---- keys and rate limits ----------------------------------------------------------------- */

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void test_keys(void) {
    const char *path = check_tmp(".keys");
    write_file(path, "# keys\n\n  sk-aaaaaaaaaa   alice smith \nsk-bbbbbbbbbb\r\n");
    api_keys k;
    mt_error err = {{0}};
    CHECK(api_keys_load(&k, path, 2, &err) == 0 && k.n == 2, "key file: %s", err.msg);
    api_key *a = api_keys_find(&k, "sk-aaaaaaaaaa"), *b = api_keys_find(&k, "sk-bbbbbbbbbb");
    CHECK(a && strcmp(a->name, "alice smith") == 0 && b && strcmp(b->name, "key4") == 0,
          "names: '%s' '%s'", a ? a->name : "", b ? b->name : "");
    CHECK(!api_keys_find(&k, "sk-aaaaaaaaab") && !api_keys_find(&k, NULL) &&
              !api_keys_find(&k, "short"),
          "unknown, missing and short keys are refused");
    /* 2 a minute: two now, then one every 30 s */
    CHECK(api_keys_take(&k, a, 100) == 0 && api_keys_take(&k, a, 100) == 0, "burst of 2");
    int w = api_keys_take(&k, a, 100);
    CHECK(w == 30, "third waits 30 s, got %d", w);
    CHECK(api_keys_take(&k, a, 115) == 15, "15 s later: 15 s more");
    CHECK(api_keys_take(&k, a, 130.5) == 0 && api_keys_take(&k, a, 130.5) > 0, "refilled one");
    CHECK(api_keys_take(&k, b, 100) == 0, "keys have their own buckets");
    CHECK(api_keys_take(&k, a, 10000) == 0 && api_keys_take(&k, a, 10000) == 0 &&
              api_keys_take(&k, a, 10000) > 0,
          "a bucket saves up at most the rate");
    api_keys_count_request(&k, a);
    api_keys_count_tokens(&k, a, 5, 7);
    json_t *u = api_keys_usage_json(&k, a, 10000);
    CHECK(json_integer_value(json_object_get(u, "requests")) == 1 &&
              json_integer_value(json_object_get(u, "total_tokens")) == 12 &&
              json_integer_value(json_object_get(u, "rate_limited")) == 4,
          "usage JSON");
    json_decref(u);
    api_keys_free(&k);

    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"short\n", "line 1: a key must be 8"},
        {"sk-aaaaaaaaaa a\nsk-aaaaaaaaaa b\n", "line 2: this key is also on an earlier line (a)"},
        {"# only a comment\n", "holds no API key"},
        {"sk-aaaaa\001aaaa\n", "printable"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(path, bad[i].text);
        err.msg[0] = 0;
        CHECK(api_keys_load(&k, path, 0, &err) == -1 && strstr(err.msg, bad[i].msg) &&
                  strstr(err.msg, path),
              "bad key file %zu: %s", i, err.msg);
        api_keys_free(&k);
    }
    CHECK(api_keys_load(&k, "/nonexistent/keys", 0, &err) == -1 && strstr(err.msg, "cannot open"),
          "missing key file: %s", err.msg);
    api_keys_free(&k);
    CHECK(api_keys_load(&k, NULL, 0, &err) == 0 && api_keys_find(&k, NULL) == &k.keys[0] &&
              api_keys_take(&k, &k.keys[0], 1) == 0,
          "no auth: one anonymous key, no limit");
    api_keys_free(&k);
    unlink(path);
}

/* ---- the engine on a scripted backend ----------------------------------------------------- */

/* A backend whose model "generates" script[] whatever the input: the
 * logits of step i peak at script[i]. */
typedef struct fake {
    api_backend b;
    const mt_vocab *vocab;
    const int32_t *script;
    int n_script;
    int fail_at; /* eval number that fails, or -1 */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool hold; /* evals wait while true */
    int evals_started;
} fake;

typedef struct fake_slot {
    fake *f;
    int step, evals;
} fake_slot;

static void *fake_open(api_backend *b, int index, mt_error *err) {
    (void)index, (void)err;
    fake_slot *s = calloc(1, sizeof *s);
    s->f = b->impl;
    return s;
}
static void fake_close(api_backend *b, void *slot) {
    (void)b;
    free(slot);
}
static int fake_begin(void *slot, int32_t n_ctx, mt_error *err) {
    (void)n_ctx, (void)err;
    fake_slot *s = slot;
    s->step = s->evals = 0;
    return 0;
}
static int fake_eval(void *slot, const int32_t *ids, int32_t n, float *logits, mt_error *err) {
    (void)ids, (void)n;
    fake_slot *s = slot;
    fake *f = s->f;
    pthread_mutex_lock(&f->mu);
    f->evals_started++;
    pthread_cond_broadcast(&f->cv);
    while (f->hold) pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
    if (s->evals++ == f->fail_at) return mt_error_set(err, "node 10.0.0.7 stopped answering");
    for (int i = 0; i < f->b.n_vocab; i++) logits[i] = 0;
    logits[f->script[s->step < f->n_script ? s->step : f->n_script - 1]] = 10;
    s->step++;
    return 0;
}
static void fake_end(void *slot, int64_t evaluated) {
    (void)slot, (void)evaluated;
}

/* What a sink received. */
typedef struct got {
    char text[256];
    size_t len;
    int pieces;
    bool has_o;       /* a piece held an 'o' (stop-string test) */
    int cancel_after; /* text() returns -1 from this piece on (0: never) */
    api_gen_result r;
    bool done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} got;

static int got_text(void *ctx, const char *s, size_t n) {
    got *g = ctx;
    if (g->len + n < sizeof g->text) memcpy(g->text + g->len, s, n), g->len += n;
    g->pieces++;
    if (memchr(s, 'o', n)) g->has_o = true;
    return g->cancel_after && g->pieces >= g->cancel_after ? -1 : 0;
}
static void got_done(void *ctx, const api_gen_result *r) {
    got *g = ctx;
    pthread_mutex_lock(&g->mu);
    g->r = *r;
    g->done = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}
static void got_wait(got *g) {
    pthread_mutex_lock(&g->mu);
    while (!g->done) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}
static void got_init(got *g) {
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
}

static int submit(api_engine *e, got *g, int32_t max_tokens, const char *stop, int32_t end) {
    api_gen_params p = {0};
    p.prompt = malloc(2 * sizeof *p.prompt);
    p.prompt[0] = 'h', p.prompt[1] = 'i';
    p.n_prompt = 2;
    p.max_tokens = max_tokens;
    p.sp = mt_sampler_default_params();
    p.sp.temp = 0;
    p.end_token = end;
    if (stop) p.stop[p.n_stop++] = strdup(stop);
    api_gen_sink sink = {got_text, got_done, g};
    int rc = api_engine_submit(e, &p, &sink, NULL, NULL);
    if (rc) api_gen_params_free(&p);
    return rc;
}

/* Runs one request on a fresh engine over script (bytes, then extra ids). */
static void run_script(fake *f, const char *bytes, const int32_t *extra, int n_extra,
                       int32_t max_tokens, const char *stop, got *g) {
    static int32_t script[64];
    int n = 0;
    for (const char *p = bytes; *p; p++) script[n++] = (uint8_t)*p;
    for (int i = 0; i < n_extra; i++) script[n++] = extra[i];
    f->script = script;
    f->n_script = n;
    api_engine *e = api_engine_start(&f->b, f->vocab, 1, 1, NULL);
    CHECK(e && submit(e, g, max_tokens, stop, 258) == 0, "submit");
    got_wait(g);
    api_engine_stop(e);
}

static void *release_later(void *arg) {
    fake *f = arg;
    usleep(100 * 1000);
    pthread_mutex_lock(&f->mu);
    f->hold = false;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static void test_engine(const mt_model *m, const mt_vocab *v) {
    fake f = {.b = {.kind = "fake",
                    .model = m,
                    .n_vocab = m->hp.n_vocab,
                    .max_ctx = 4096,
                    .fail_status = 503,
                    .slot_open = fake_open,
                    .slot_close = fake_close,
                    .begin = fake_begin,
                    .eval = fake_eval,
                    .end = fake_end},
              .vocab = v,
              .fail_at = -1};
    f.b.impl = &f;
    pthread_mutex_init(&f.mu, NULL);
    pthread_cond_init(&f.cv, NULL);
    got g;

    got_init(&g); /* a stop string that spans tokens: nothing of it leaks */
    run_script(&f, "hello world", NULL, 0, 20, "o w", &g);
    CHECK(g.len == 4 && memcmp(g.text, "hell", 4) == 0 && !g.has_o &&
              strcmp(g.r.finish_reason, "stop") == 0 && g.r.completion_tokens == 7 &&
              g.r.prompt_tokens == 2 && !g.r.error_status,
          "stop string: '%.*s' %s %d tokens", (int)g.len, g.text, g.r.finish_reason,
          g.r.completion_tokens);
    got_init(&g); /* a held-back prefix of a stop string comes out at the end */
    run_script(&f, "abcl", NULL, 0, 4, "lx", &g);
    CHECK(g.len == 4 && memcmp(g.text, "abcl", 4) == 0 && strcmp(g.r.finish_reason, "length") == 0,
          "held-back prefix released: '%.*s' %s", (int)g.len, g.text, g.r.finish_reason);
    got_init(&g); /* max_tokens */
    run_script(&f, "abcdef", NULL, 0, 3, NULL, &g);
    CHECK(g.len == 3 && strcmp(g.r.finish_reason, "length") == 0 && g.r.completion_tokens == 3,
          "max_tokens 3: '%.*s'", (int)g.len, g.text);
    got_init(&g); /* the end-of-generation token ends it, counted, without text */
    const int32_t eos[] = {256, 'z'};
    run_script(&f, "ab", eos, 2, 10, NULL, &g);
    CHECK(g.len == 2 && strcmp(g.r.finish_reason, "stop") == 0 && g.r.completion_tokens == 3,
          "EOG: '%.*s' %s %d", (int)g.len, g.text, g.r.finish_reason, g.r.completion_tokens);
    got_init(&g); /* a two-byte character arrives whole, even as the first token */
    run_script(&f, "\xc3\xa9", NULL, 0, 2, "q", &g);
    CHECK(g.len == 2 && g.pieces == 1, "UTF-8 first: %d pieces", g.pieces);
    got_init(&g);
    run_script(&f, "x\xc3\xa9y", NULL, 0, 4, NULL, &g);
    CHECK(g.len == 4 && memcmp(g.text, "x\xc3\xa9y", 4) == 0 && g.pieces == 3, "UTF-8: %d pieces",
          g.pieces);
    got_init(&g); /* the client goes away */
    g.cancel_after = 2;
    run_script(&f, "abcdefgh", NULL, 0, 8, NULL, &g);
    CHECK(g.r.error_status == 499 && g.pieces == 2, "cancel: status %d after %d pieces",
          g.r.error_status, g.pieces);
    got_init(&g); /* the backend fails */
    f.fail_at = 3;
    run_script(&f, "abcdefgh", NULL, 0, 8, NULL, &g);
    CHECK(g.r.error_status == 503 && strstr(g.r.error, "stopped answering"),
          "backend failure: %d %s", g.r.error_status, g.r.error);
    f.fail_at = -1;

    /* queue: 1 slot, 1 waiting place; a third request is refused; stop answers the waiting */
    static const int32_t loop[] = {'a'};
    f.script = loop;
    f.n_script = 1;
    f.hold = true;
    f.evals_started = 0;
    api_engine *e = api_engine_start(&f.b, f.vocab, 1, 1, NULL);
    got g1, g2, g3;
    got_init(&g1), got_init(&g2), got_init(&g3);
    CHECK(submit(e, &g1, 5, NULL, -1) == 0, "first request");
    pthread_mutex_lock(&f.mu);
    while (f.evals_started == 0) pthread_cond_wait(&f.cv, &f.mu);
    pthread_mutex_unlock(&f.mu);
    CHECK(submit(e, &g2, 5, NULL, -1) == 0, "second request waits");
    int running = -1, queued = -1;
    api_gen_params p = {0};
    api_gen_sink sink = {got_text, got_done, &g3};
    CHECK(api_engine_submit(e, &p, &sink, &running, &queued) == -1 && running == 1 && queued == 1,
          "third refused (running %d, queued %d)", running, queued);
    pthread_mutex_lock(&f.mu);
    f.hold = false;
    pthread_cond_broadcast(&f.cv);
    pthread_mutex_unlock(&f.mu);
    got_wait(&g1);
    got_wait(&g2);
    CHECK(!g1.r.error_status && !g2.r.error_status && g1.len == 5 && g2.len == 5, "both ran: %d %d",
          g1.r.error_status, g2.r.error_status);
    /* stop with one running (held) and one waiting */
    got_init(&g1), got_init(&g2);
    f.hold = true;
    f.evals_started = 0;
    CHECK(submit(e, &g1, 5, NULL, -1) == 0, "request before stop");
    pthread_mutex_lock(&f.mu);
    while (f.evals_started == 0) pthread_cond_wait(&f.cv, &f.mu);
    pthread_mutex_unlock(&f.mu);
    CHECK(submit(e, &g2, 5, NULL, -1) == 0, "waiting request before stop");
    pthread_t t; /* lets the held eval return once api_engine_stop has begun */
    pthread_create(&t, NULL, release_later, &f);
    api_engine_stop(e);
    pthread_join(t, NULL);
    CHECK(g1.done && g2.done && g2.r.error_status == 503,
          "stop answers every request (waiting one: %d)", g2.r.error_status);
    pthread_mutex_destroy(&f.mu);
    pthread_cond_destroy(&f.cv);
}

int main(void) {
    if (sodium_init() < 0) return 1;
    mt_synth_params sp = mt_synth_default_params("qwen3moe");
    sp.n_layer = 1;
    sp.n_embd = 64;
    sp.n_head = 4;
    sp.n_head_kv = 4;
    sp.head_dim = 16;
    sp.n_ff = 64;
    sp.n_ff_exp = 32;
    sp.n_expert = 4;
    sp.n_expert_used = 2;
    const char *path = check_tmp(".gguf");
    mt_error err = {{0}};
    mt_model *m = mt_synth_write(&sp, path, &err) == 0 ? mt_model_load(path, &err) : NULL;
    mt_vocab *v = m ? mt_vocab_load(m->gguf, &err) : NULL;
    CHECK(v, "test model: %s", err.msg);
    if (v) {
        test_chat(v);
        test_engine(m, v);
    }
    test_parse();
    test_keys();
    mt_vocab_free(v);
    mt_model_free(m);
    unlink(path);
    return check_report("test_api");
}

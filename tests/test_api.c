/* test_api.c - the pieces of `moontail serve` (src/api) one by one, without
 * HTTP: chat templates (every family's text, detection, the ChatML fallback,
 * message text never parsed as special tokens), request parsing (every
 * field's checks and the error's param), API keys and token buckets, and the
 * engine in front of the generation loop on a scripted backend (finish
 * reasons, the statuses of a client gone, a failing backend or slot, a full
 * queue, stopping with requests running and waiting), and for
 * models that think: the thinking families' renderings against the real
 * templates, the splitting of replies into reasoning and answer (whole,
 * streamed, split markers, unclosed reasoning), and their request fields.
 * tests/test_serve.sh drives the whole server with the OpenAI client. */
#include "../src/api/api_engine.h"
#include "../src/api/api_keys.h"
#include "../src/api/api_openai.h"
#include "check.h"
#include "moontail/chat_format.h"
#include "moontail/gguf.h"
#include "moontail/synth_model.h"

#include <pthread.h>
#include <sodium.h>

/* ---- chat templates ------------------------------------------------------------------------ */

static const mt_chat_message CONV[] = {
    {MT_CHAT_ROLE_SYSTEM, "Be brief.", 9, NULL, 0},
    {MT_CHAT_ROLE_USER, " Hi <|im_end|>\n", 15, NULL, 0},
    {MT_CHAT_ROLE_ASSISTANT, "Hello.", 6, NULL, 0},
    {MT_CHAT_ROLE_USER, "Bye", 3, NULL, 0},
};

static void check_render(mt_chat_format f, const char *want) {
    size_t len = 0;
    char *got = mt_chat_render(f, CONV, 4, &len);
    CHECK(got && len == strlen(want) && strcmp(got, want) == 0, "%s renders\n%s\nnot\n%s",
          mt_chat_format_name(f), got ? got : "(null)", want);
    free(got);
}

static void test_chat(const mt_vocab *v) {
    bool known;
    CHECK(mt_chat_detect(NULL, &known) == MT_CHAT_CHATML && !known, "no template: ChatML");
    CHECK(mt_chat_detect("{{ weird }}", &known) == MT_CHAT_CHATML && !known,
          "unknown template: ChatML, not known");
    CHECK(mt_chat_detect("{{'<|im_start|>' + role}}", &known) == MT_CHAT_CHATML && known,
          "ChatML detected");
    CHECK(mt_chat_detect("<|start_header_id|>{{ role }}<|end_header_id|>", &known) ==
                  MT_CHAT_LLAMA3 &&
              known,
          "Llama 3 detected");
    CHECK(mt_chat_detect("{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + c}}", &known) == MT_CHAT_DEEPSEEK3 &&
              known,
          "DeepSeek V3 detected");
    CHECK(mt_chat_detect("<|im_user|>user<|im_middle|>{{c}}<|im_end|>", &known) ==
                  MT_CHAT_KIMI_K2 &&
              known,
          "Kimi K2 detected before ChatML");
    check_render(MT_CHAT_CHATML, "<|im_start|>system\nBe brief.<|im_end|>\n"
                                 "<|im_start|>user\n Hi <|im_end|>\n<|im_end|>\n"
                                 "<|im_start|>assistant\nHello.<|im_end|>\n"
                                 "<|im_start|>user\nBye<|im_end|>\n"
                                 "<|im_start|>assistant\n");
    check_render(MT_CHAT_LLAMA3,
                 "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nHi <|im_end|><|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    check_render(MT_CHAT_DEEPSEEK3, "Be brief.<\xef\xbd\x9cUser\xef\xbd\x9c> Hi <|im_end|>\n"
                                    "<\xef\xbd\x9c"
                                    "Assistant\xef\xbd\x9c>Hello.<\xef\xbd\x9c"
                                    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
                                    "<\xef\xbd\x9cUser\xef\xbd\x9c>Bye<\xef\xbd\x9c"
                                    "Assistant\xef\xbd\x9c>");
    check_render(MT_CHAT_KIMI_K2, "<|im_system|>system<|im_middle|>Be brief.<|im_end|>"
                                  "<|im_user|>user<|im_middle|> Hi <|im_end|>\n<|im_end|>"
                                  "<|im_assistant|>assistant<|im_middle|>Hello.<|im_end|>"
                                  "<|im_user|>user<|im_middle|>Bye<|im_end|>"
                                  "<|im_assistant|>assistant<|im_middle|>");
    /* Kimi adds its default system message when there is none */
    size_t len;
    char *k = mt_chat_render(MT_CHAT_KIMI_K2, CONV + 1, 1, &len);
    CHECK(k && strncmp(k, "<|im_system|>system<|im_middle|>You are Kimi", 44) == 0,
          "Kimi default system message: %s", k);
    free(k);

    /* tokens: template markers are control tokens, message text is plain text */
    int32_t *ids = NULL;
    int64_t n = mt_chat_tokenize(MT_CHAT_CHATML, v, CONV, 4, &ids, NULL);
    const int32_t im_start = mt_vocab_find(v, "<|im_start|>", 12),
                  im_end = mt_vocab_find(v, "<|im_end|>", 10);
    int starts = 0, ends = 0;
    for (int64_t i = 0; i < n; i++) starts += ids[i] == im_start, ends += ids[i] == im_end;
    CHECK(n > 0 && starts == 5 && ends == 4,
          "ChatML tokens: %lld ids, %d <|im_start|> (want 5), %d <|im_end|> (want 4: the one"
          " typed in a message is text)",
          (long long)n, starts, ends);
    /* the same count as tokenizing the rendered text when no message holds special text */
    static const mt_chat_message plain[] = {{MT_CHAT_ROLE_USER, "Say hi", 6, NULL, 0}};
    char *text = mt_chat_render(MT_CHAT_CHATML, plain, 1, &len);
    int32_t *a = NULL, *b = NULL;
    int64_t na = mt_chat_tokenize(MT_CHAT_CHATML, v, plain, 1, &a, NULL);
    int64_t nb = mt_tokenize(v, text, len, true, true, &b, NULL);
    CHECK(na == nb && na > 0 && memcmp(a, b, (size_t)na * sizeof *a) == 0,
          "chat tokens equal tokenizing the rendered text (%lld vs %lld)", (long long)na,
          (long long)nb);
    CHECK(mt_chat_end_token(MT_CHAT_CHATML, v) == im_end, "ChatML ends at <|im_end|>");
    CHECK(mt_chat_end_token(MT_CHAT_LLAMA3, v) == -1, "no <|eot_id|> in this vocabulary");
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
    CHECK(rq.n_messages == 3 && rq.messages[0].role == MT_CHAT_ROLE_SYSTEM &&
              rq.messages[1].len == 3 && memcmp(rq.messages[1].text, "a\nb", 3) == 0 &&
              rq.messages[2].role == MT_CHAT_ROLE_ASSISTANT && rq.messages[2].len == 0 &&
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
    mt_gen_backend b;
    const mt_vocab *vocab;
    const int32_t *script;
    int n_script;
    int fail_at; /* eval number that fails, or -1 */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool hold; /* evals wait while true */
    int evals_started;
    bool fail_open; /* slot_open fails */
} fake;

typedef struct fake_slot {
    fake *f;
    int step, evals;
} fake_slot;

static void *fake_open(mt_gen_backend *b, int index, mt_error *err) {
    (void)index;
    if (((fake *)b->impl)->fail_open) {
        mt_error_set(err, "no room for a KV cache");
        return NULL;
    }
    fake_slot *s = calloc(1, sizeof *s);
    s->f = b->impl;
    return s;
}
static void fake_close(mt_gen_backend *b, void *slot) {
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
    char reasoning[256];
    size_t rlen;
    int rpieces;
    bool reasoning_late;        /* reasoning came after some answer text */
    int cancel_reasoning_after; /* reasoning() returns -1 from this piece on (0: never) */
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
static int got_reasoning(void *ctx, const char *s, size_t n) {
    got *g = ctx;
    if (g->rlen + n < sizeof g->reasoning) memcpy(g->reasoning + g->rlen, s, n), g->rlen += n;
    g->rpieces++;
    if (g->len) g->reasoning_late = true;
    return g->cancel_reasoning_after && g->rpieces >= g->cancel_reasoning_after ? -1 : 0;
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
    p.gen.n_prompt = 2;
    p.gen.max_tokens = max_tokens;
    p.gen.sp = mt_sampler_default_params();
    p.gen.sp.temp = 0;
    p.gen.end_token = end;
    if (stop) p.stop[p.gen.n_stop++] = strdup(stop);
    api_gen_sink sink = {.text = got_text, .done = got_done, .ctx = g};
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

/* The engine's own part: the loop's finish as an OpenAI finish_reason, its failures and
 * cancels as HTTP statuses, the queue and stopping. What the loop does with the tokens
 * (stop strings over tokens, UTF-8, held-back text) is test_generate's. */
static void test_engine(const mt_model *m, const mt_vocab *v) {
    fake f = {.b = {.kind = "fake",
                    .model = m,
                    .n_vocab = m->hp.n_vocab,
                    .max_ctx = 4096,
                    .retry_may_succeed = true,
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

    /* finish_reason: a stop string and an end token are "stop", max_tokens "length"; the
     * token counts come through */
    got_init(&g);
    run_script(&f, "hello world", NULL, 0, 20, "o w", &g);
    CHECK(strcmp(g.r.finish_reason, "stop") == 0 && g.r.prompt_tokens == 2 &&
              g.r.completion_tokens == 7 && !g.r.error_status,
          "stop string: %s, %d + %d tokens, status %d", g.r.finish_reason, g.r.prompt_tokens,
          g.r.completion_tokens, g.r.error_status);
    got_init(&g);
    const int32_t turn_end[] = {258, 'z'};
    run_script(&f, "ab", turn_end, 2, 10, NULL, &g);
    CHECK(strcmp(g.r.finish_reason, "stop") == 0 && g.r.completion_tokens == 3 && !g.r.error_status,
          "end token: %s, %d tokens", g.r.finish_reason, g.r.completion_tokens);
    got_init(&g);
    run_script(&f, "abcdef", NULL, 0, 3, NULL, &g);
    CHECK(strcmp(g.r.finish_reason, "length") == 0 && g.r.completion_tokens == 3 &&
              !g.r.error_status,
          "max_tokens: %s, %d tokens", g.r.finish_reason, g.r.completion_tokens);

    got_init(&g); /* the client goes away: 499 */
    g.cancel_after = 2;
    run_script(&f, "abcdefgh", NULL, 0, 8, NULL, &g);
    CHECK(g.r.error_status == 499 && strstr(g.r.error, "went away") && g.pieces == 2,
          "client gone: status %d '%s' after %d pieces", g.r.error_status, g.r.error, g.pieces);

    /* the backend fails: 503 where a retry may pass (nodes lost), else 500 */
    got_init(&g);
    f.fail_at = 3;
    run_script(&f, "abcdefgh", NULL, 0, 8, NULL, &g);
    CHECK(g.r.error_status == 503 && strstr(g.r.error, "failed while generating") &&
              strstr(g.r.error, "stopped answering"),
          "backend failure, retry may pass: %d '%s'", g.r.error_status, g.r.error);
    got_init(&g);
    f.b.retry_may_succeed = false;
    run_script(&f, "abcdefgh", NULL, 0, 8, NULL, &g);
    f.b.retry_may_succeed = true;
    f.fail_at = -1;
    CHECK(g.r.error_status == 500 && strstr(g.r.error, "stopped answering"),
          "backend failure, no retry: %d '%s'", g.r.error_status, g.r.error);
    got_init(&g); /* no slot for the worker: 500 */
    f.fail_open = true;
    run_script(&f, "abc", NULL, 0, 3, NULL, &g);
    f.fail_open = false;
    CHECK(g.r.error_status == 500 && strstr(g.r.error, "cannot set up a worker") &&
              strstr(g.r.error, "no room for a KV cache") && g.len == 0,
          "slot fails: %d '%s'", g.r.error_status, g.r.error);

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
    api_gen_sink sink = {.text = got_text, .done = got_done, .ctx = &g3};
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
    /* stop with one running and one waiting: the running one ends at its next token, both
     * answered 503. The running one would take 2^20 tokens to end by itself. */
    got_init(&g1), got_init(&g2);
    f.evals_started = 0;
    CHECK(submit(e, &g1, 1 << 20, NULL, -1) == 0, "request before stop");
    pthread_mutex_lock(&f.mu);
    while (f.evals_started == 0) pthread_cond_wait(&f.cv, &f.mu);
    pthread_mutex_unlock(&f.mu);
    CHECK(submit(e, &g2, 5, NULL, -1) == 0, "waiting request before stop");
    api_engine_stop(e);
    CHECK(g1.done && g1.r.error_status == 503 && strstr(g1.r.error, "stopping") &&
              g1.r.completion_tokens < 1 << 20 && g2.done && g2.r.error_status == 503,
          "stop answers every request (running: %d '%s' after %d tokens; waiting: %d)",
          g1.r.error_status, g1.r.error, g1.r.completion_tokens, g2.r.error_status);
    pthread_mutex_destroy(&f.mu);
    pthread_cond_destroy(&f.cv);
}

/* ---- thinking models: chat renderings --------------------------------------------------- */

/* The conversations of tools/chat/render_templates.py (CONVS), in its order. */
#define MSG(role, t)                                                                               \
    { role, t, sizeof t - 1, NULL, 0 }
#define ANSWER(t, r)                                                                               \
    { MT_CHAT_ROLE_ASSISTANT, t, sizeof t - 1, r, sizeof r - 1 }
#define SYS(t)  MSG(MT_CHAT_ROLE_SYSTEM, t)
#define USER(t) MSG(MT_CHAT_ROLE_USER, t)
#define ASST(t) MSG(MT_CHAT_ROLE_ASSISTANT, t)

typedef struct think_conv {
    const char *name;
    mt_chat_message m[4];
    int n;
} think_conv;

static const think_conv THINK_CONVS[] = {
    {"one turn", {SYS("Be brief."), USER("Hi")}, 2},
    {"history with reasoning",
     {SYS("Be brief."), USER("Hi"), ANSWER("Hello.", "The user greets."), USER("Bye")},
     4},
    {"reasoning after the last user message",
     {USER("Q1"), ANSWER("A1", "R1"), USER("Q2"), ANSWER("A2", "\nR2\n")},
     4},
    {"think tags in content", {USER("Q"), ASST("<think>\nold\n</think>\n\nA"), USER("Q2")}, 3},
    {"blank reasoning", {USER("Q"), ANSWER("A", " \n"), USER("Q2")}, 3},
    {"two answers after the question", {USER("Q"), ASST("A1"), ANSWER("A2", "R")}, 3},
    {"two system messages", {SYS("S1"), USER("Q"), SYS("S2")}, 3},
    {"think tags in the last answer", {USER("Q"), ASST("x<think>\nold\n</think>\n\nA")}, 2},
};

/* The expected texts: the output of `python3 tools/chat/render_templates.py`, which renders
 * llama.cpp's copies of the real templates (models/templates/Qwen-Qwen3-0.6B.jinja,
 * deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja, deepseek-ai-DeepSeek-V3.1.jinja,
 * Kimi-K2-Thinking.jinja, Kimi-K3.jinja) with Python's jinja2 3.1.6 as transformers'
 * apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
 * loopcontrols), add_generation_prompt true, bos_token "" and the kwargs as variables.
 * Not written from the C code. */
typedef struct think_want {
    mt_chat_format f;
    const char *kwargs; /* JSON object */
    int conv;
    const char *want;
} think_want;

static const think_want THINK_WANT[] = {
    /* qwen3, one turn */
    {MT_CHAT_QWEN3, "{}", 0,
     "<|im_start|>system\nBe brief.<|im_end|>\n"
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    /* qwen3, history with reasoning */
    {MT_CHAT_QWEN3, "{}", 1,
     "<|im_start|>system\nBe brief.<|im_end|>\n"
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
     "Hello.<|im_end|>\n<|im_start|>user\nBye"
     "<|im_end|>\n<|im_start|>assistant\n"},
    /* qwen3, reasoning after the last user message */
    {MT_CHAT_QWEN3, "{}", 2,
     "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n"
     "A1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
     "<|im_start|>assistant\n<think>\nR2\n</think>\n"
     "\nA2<|im_end|>\n<|im_start|>assistant\n"},
    /* qwen3, think tags in content */
    {MT_CHAT_QWEN3, "{}", 3,
     "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
     "A<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
     "<|im_start|>assistant\n"},
    /* qwen3, blank reasoning */
    {MT_CHAT_QWEN3, "{}", 4,
     "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
     "A<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
     "<|im_start|>assistant\n"},
    /* qwen3, two answers after the question */
    {MT_CHAT_QWEN3, "{}", 5,
     "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
     "A1<|im_end|>\n<|im_start|>assistant\n<think>\n"
     "R\n</think>\n\nA2<|im_end|>\n<|im_start|>assistant\n"},
    /* qwen3, two system messages */
    {MT_CHAT_QWEN3, "{}", 6,
     "<|im_start|>system\nS1<|im_end|>\n<|im_start|>user\n"
     "Q<|im_end|>\n<|im_start|>system\nS2<|im_end|>\n"
     "<|im_start|>assistant\n"},
    /* qwen3, think tags in the last answer */
    {MT_CHAT_QWEN3, "{}", 7,
     "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
     "<think>\nold\n</think>\n\nA<|im_end|>\n"
     "<|im_start|>assistant\n"},
    /* qwen3, one turn */
    {MT_CHAT_QWEN3, "{\"enable_thinking\": false}", 0,
     "<|im_start|>system\nBe brief.<|im_end|>\n"
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
     "<think>\n\n</think>\n\n"},
    /* qwen3, reasoning after the last user message */
    {MT_CHAT_QWEN3, "{\"enable_thinking\": false}", 2,
     "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n"
     "A1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
     "<|im_start|>assistant\n<think>\nR2\n</think>\n"
     "\nA2<|im_end|>\n<|im_start|>assistant\n"
     "<think>\n\n</think>\n\n"},
    /* qwen3, one turn */
    {MT_CHAT_QWEN3, "{\"enable_thinking\": true}", 0,
     "<|im_start|>system\nBe brief.<|im_end|>\n"
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    /* qwen3, reasoning after the last user message */
    {MT_CHAT_QWEN3, "{\"enable_thinking\": true}", 2,
     "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n"
     "A1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
     "<|im_start|>assistant\n<think>\nR2\n</think>\n"
     "\nA2<|im_end|>\n<|im_start|>assistant\n"},
    /* deepseek-r1, one turn */
    {MT_CHAT_DEEPSEEK_R1, "{\"enable_thinking\": true}", 0,
     "Be brief.<\xef\xbd\x9cUser\xef\xbd\x9c>Hi"
     "<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c><think>\n"},
    /* deepseek-r1, history with reasoning */
    {MT_CHAT_DEEPSEEK_R1, "{\"enable_thinking\": true}", 1,
     "Be brief.<\xef\xbd\x9cUser\xef\xbd\x9c>Hi"
     "<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>Hello."
     "<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Bye<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think>\n"},
    /* deepseek-r1, reasoning after the last user message */
    {MT_CHAT_DEEPSEEK_R1, "{\"enable_thinking\": true}", 2,
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q1<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>A1"
     "<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q2<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>A2"
     "<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c><think>\n"},
    /* deepseek-r1, think tags in content */
    {MT_CHAT_DEEPSEEK_R1, "{\"enable_thinking\": true}", 3,
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>\n"
     "\nA<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q2<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think>\n"},
    /* deepseek-r1, blank reasoning */
    {MT_CHAT_DEEPSEEK_R1, "{\"enable_thinking\": true}", 4,
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>A"
     "<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q2<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think>\n"},
    /* deepseek-r1, two answers after the question */
    {MT_CHAT_DEEPSEEK_R1, "{\"enable_thinking\": true}", 5,
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>A1"
     "<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>A2"
     "<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c><think>\n"},
    /* deepseek-r1, two system messages */
    {MT_CHAT_DEEPSEEK_R1, "{\"enable_thinking\": true}", 6,
     "S2<\xef\xbd\x9cUser\xef\xbd\x9c>Q<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think>\n"},
    /* deepseek-r1, think tags in the last answer */
    {MT_CHAT_DEEPSEEK_R1, "{\"enable_thinking\": true}", 7,
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>\n"
     "\nA<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c><think>\n"},
    /* deepseek-r1, one turn */
    {MT_CHAT_DEEPSEEK_R1, "{\"enable_thinking\": false}", 0,
     "Be brief.<\xef\xbd\x9cUser\xef\xbd\x9c>Hi"
     "<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c><think>\n"
     "</think>"},
    /* deepseek-r1, reasoning after the last user message */
    {MT_CHAT_DEEPSEEK_R1, "{\"enable_thinking\": false}", 2,
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q1<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>A1"
     "<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q2<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>A2"
     "<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c><think>\n"
     "</think>"},
    /* deepseek-v3.1, one turn */
    {MT_CHAT_DEEPSEEK_V31, "{}", 0,
     "Be brief.<\xef\xbd\x9cUser\xef\xbd\x9c>Hi"
     "<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c><think>"
     "</think>"},
    /* deepseek-v3.1, history with reasoning */
    {MT_CHAT_DEEPSEEK_V31, "{}", 1,
     "Be brief.<\xef\xbd\x9cUser\xef\xbd\x9c>Hi"
     "<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c><think>"
     "</think>Hello.<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Bye<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think></think>"},
    /* deepseek-v3.1, reasoning after the last user message */
    {MT_CHAT_DEEPSEEK_V31, "{}", 2,
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q1<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think></think>A1<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q2<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think></think>A2<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
    /* deepseek-v3.1, think tags in content */
    {MT_CHAT_DEEPSEEK_V31, "{}", 3,
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think></think>\n\nA<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q2<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think></think>"},
    /* deepseek-v3.1, blank reasoning */
    {MT_CHAT_DEEPSEEK_V31, "{}", 4,
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think></think>A<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q2<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think></think>"},
    /* deepseek-v3.1, two answers after the question */
    {MT_CHAT_DEEPSEEK_V31, "{}", 5,
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think></think>A1<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>A2"
     "<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
    /* deepseek-v3.1, two system messages */
    {MT_CHAT_DEEPSEEK_V31, "{}", 6,
     "S1\n\nS2<\xef\xbd\x9cUser\xef\xbd\x9c>Q"
     "<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c><think>"
     "</think>"},
    /* deepseek-v3.1, think tags in the last answer */
    {MT_CHAT_DEEPSEEK_V31, "{}", 7,
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think></think>\n\nA<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
    /* deepseek-v3.1, one turn */
    {MT_CHAT_DEEPSEEK_V31, "{\"thinking\": true}", 0,
     "Be brief.<\xef\xbd\x9cUser\xef\xbd\x9c>Hi"
     "<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c><think>"},
    /* deepseek-v3.1, reasoning after the last user message */
    {MT_CHAT_DEEPSEEK_V31, "{\"thinking\": true}", 2,
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q1<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think></think>A1<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q2<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think></think>A2<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
    /* deepseek-v3.1, one turn */
    {MT_CHAT_DEEPSEEK_V31, "{\"enable_thinking\": true}", 0,
     "Be brief.<\xef\xbd\x9cUser\xef\xbd\x9c>Hi"
     "<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c><think>"},
    /* deepseek-v3.1, reasoning after the last user message */
    {MT_CHAT_DEEPSEEK_V31, "{\"enable_thinking\": true}", 2,
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q1<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think></think>A1<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q2<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think></think>A2<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
    /* deepseek-v3.1, one turn */
    {MT_CHAT_DEEPSEEK_V31, "{\"thinking\": false, \"enable_thinking\": true}", 0,
     "Be brief.<\xef\xbd\x9cUser\xef\xbd\x9c>Hi"
     "<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c><think>"
     "</think>"},
    /* deepseek-v3.1, reasoning after the last user message */
    {MT_CHAT_DEEPSEEK_V31, "{\"thinking\": false, \"enable_thinking\": true}", 2,
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q1<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think></think>A1<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
     "<\xef\xbd\x9cUser\xef\xbd\x9c>Q2<\xef\xbd\x9c"
     "Assistant\xef\xbd\x9c>"
     "<think></think>A2<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
    /* kimi-k2-thinking, one turn */
    {MT_CHAT_KIMI_K2_THINKING, "{}", 0,
     "<|im_system|>system<|im_middle|>Be brief."
     "<|im_end|><|im_user|>user<|im_middle|>Hi"
     "<|im_end|><|im_assistant|>assistant<|im_middle|>"},
    /* kimi-k2-thinking, history with reasoning */
    {MT_CHAT_KIMI_K2_THINKING, "{}", 1,
     "<|im_system|>system<|im_middle|>Be brief."
     "<|im_end|><|im_user|>user<|im_middle|>Hi"
     "<|im_end|><|im_assistant|>assistant<|im_middle|>"
     "<think></think>Hello.<|im_end|><|im_user|>user"
     "<|im_middle|>Bye<|im_end|><|im_assistant|>assistant"
     "<|im_middle|>"},
    /* kimi-k2-thinking, reasoning after the last user message */
    {MT_CHAT_KIMI_K2_THINKING, "{}", 2,
     "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI."
     "<|im_end|><|im_user|>user<|im_middle|>Q1"
     "<|im_end|><|im_assistant|>assistant<|im_middle|>"
     "<think></think>A1<|im_end|><|im_user|>user"
     "<|im_middle|>Q2<|im_end|><|im_assistant|>assistant"
     "<|im_middle|><think>\nR2\n</think>A2<|im_end|>"
     "<|im_assistant|>assistant<|im_middle|>"},
    /* kimi-k2-thinking, think tags in content */
    {MT_CHAT_KIMI_K2_THINKING, "{}", 3,
     "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI."
     "<|im_end|><|im_user|>user<|im_middle|>Q"
     "<|im_end|><|im_assistant|>assistant<|im_middle|>"
     "<think></think><think>\nold\n</think>\n"
     "\nA<|im_end|><|im_user|>user<|im_middle|>Q2"
     "<|im_end|><|im_assistant|>assistant<|im_middle|>"},
    /* kimi-k2-thinking, blank reasoning */
    {MT_CHAT_KIMI_K2_THINKING, "{}", 4,
     "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI."
     "<|im_end|><|im_user|>user<|im_middle|>Q"
     "<|im_end|><|im_assistant|>assistant<|im_middle|>"
     "<think></think>A<|im_end|><|im_user|>user"
     "<|im_middle|>Q2<|im_end|><|im_assistant|>assistant"
     "<|im_middle|>"},
    /* kimi-k2-thinking, two answers after the question */
    {MT_CHAT_KIMI_K2_THINKING, "{}", 5,
     "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI."
     "<|im_end|><|im_user|>user<|im_middle|>Q"
     "<|im_end|><|im_assistant|>assistant<|im_middle|>"
     "<think></think>A1<|im_end|><|im_assistant|>assistant"
     "<|im_middle|><think>R</think>A2<|im_end|>"
     "<|im_assistant|>assistant<|im_middle|>"},
    /* kimi-k2-thinking, two system messages */
    {MT_CHAT_KIMI_K2_THINKING, "{}", 6,
     "<|im_system|>system<|im_middle|>S1<|im_end|>"
     "<|im_user|>user<|im_middle|>Q<|im_end|>"
     "<|im_system|>system<|im_middle|>S2<|im_end|>"
     "<|im_assistant|>assistant<|im_middle|>"},
    /* kimi-k2-thinking, think tags in the last answer */
    {MT_CHAT_KIMI_K2_THINKING, "{}", 7,
     "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI."
     "<|im_end|><|im_user|>user<|im_middle|>Q"
     "<|im_end|><|im_assistant|>assistant<|im_middle|>"
     "<think></think>x<think>\nold\n</think>\n"
     "\nA<|im_end|><|im_assistant|>assistant<|im_middle|>"},
    /* kimi-k3, one turn */
    {MT_CHAT_KIMI_K3, "{}", 0,
     "<|open|>message role=\"system\" type=\"thinking-effort\""
     "<|sep|>`thinking_effort` guides on how much to think in your thinking channel (not includin"
     "g the response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
     "Now the system is invoked with `thinking_effort=max`."
     "<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"system\""
     "<|sep|>Be brief.<|close|>message<|sep|>"
     "<|end_of_msg|><|open|>message role=\"user\""
     "<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|>"},
    /* kimi-k3, history with reasoning */
    {MT_CHAT_KIMI_K3, "{}", 1,
     "<|open|>message role=\"system\" type=\"thinking-effort\""
     "<|sep|>`thinking_effort` guides on how much to think in your thinking channel (not includin"
     "g the response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
     "Now the system is invoked with `thinking_effort=max`."
     "<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"system\""
     "<|sep|>Be brief.<|close|>message<|sep|>"
     "<|end_of_msg|><|open|>message role=\"user\""
     "<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|>The user greets.<|close|>think"
     "<|sep|><|open|>response<|sep|>Hello.<|close|>response"
     "<|sep|><|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"user\"<|sep|>Bye"
     "<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"assistant\""
     "<|sep|><|open|>think<|sep|>"},
    /* kimi-k3, reasoning after the last user message */
    {MT_CHAT_KIMI_K3, "{}", 2,
     "<|open|>message role=\"system\" type=\"thinking-effort\""
     "<|sep|>`thinking_effort` guides on how much to think in your thinking channel (not includin"
     "g the response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
     "Now the system is invoked with `thinking_effort=max`."
     "<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"user\""
     "<|sep|>Q1<|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|>R1<|close|>think<|sep|>"
     "<|open|>response<|sep|>A1<|close|>response"
     "<|sep|><|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"user\"<|sep|>Q2<|close|>message"
     "<|sep|><|end_of_msg|><|open|>message role=\"assistant\""
     "<|sep|><|open|>think<|sep|>\nR2\n<|close|>think"
     "<|sep|><|open|>response<|sep|>A2<|close|>response"
     "<|sep|><|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|>"},
    /* kimi-k3, think tags in content */
    {MT_CHAT_KIMI_K3, "{}", 3,
     "<|open|>message role=\"system\" type=\"thinking-effort\""
     "<|sep|>`thinking_effort` guides on how much to think in your thinking channel (not includin"
     "g the response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
     "Now the system is invoked with `thinking_effort=max`."
     "<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"user\""
     "<|sep|>Q<|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|><|close|>think<|sep|>"
     "<|open|>response<|sep|><think>\nold\n</think>\n"
     "\nA<|close|>response<|sep|><|close|>message"
     "<|sep|><|end_of_msg|><|open|>message role=\"user\""
     "<|sep|>Q2<|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|>"},
    /* kimi-k3, blank reasoning */
    {MT_CHAT_KIMI_K3, "{}", 4,
     "<|open|>message role=\"system\" type=\"thinking-effort\""
     "<|sep|>`thinking_effort` guides on how much to think in your thinking channel (not includin"
     "g the response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
     "Now the system is invoked with `thinking_effort=max`."
     "<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"user\""
     "<|sep|>Q<|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|><|close|>think<|sep|>"
     "<|open|>response<|sep|>A<|close|>response"
     "<|sep|><|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"user\"<|sep|>Q2<|close|>message"
     "<|sep|><|end_of_msg|><|open|>message role=\"assistant\""
     "<|sep|><|open|>think<|sep|>"},
    /* kimi-k3, two answers after the question */
    {MT_CHAT_KIMI_K3, "{}", 5,
     "<|open|>message role=\"system\" type=\"thinking-effort\""
     "<|sep|>`thinking_effort` guides on how much to think in your thinking channel (not includin"
     "g the response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
     "Now the system is invoked with `thinking_effort=max`."
     "<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"user\""
     "<|sep|>Q<|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|><|close|>think<|sep|>"
     "<|open|>response<|sep|>A1<|close|>response"
     "<|sep|><|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|>R<|close|>think<|sep|>"
     "<|open|>response<|sep|>A2<|close|>response"
     "<|sep|><|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|>"},
    /* kimi-k3, two system messages */
    {MT_CHAT_KIMI_K3, "{}", 6,
     "<|open|>message role=\"system\" type=\"thinking-effort\""
     "<|sep|>`thinking_effort` guides on how much to think in your thinking channel (not includin"
     "g the response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
     "Now the system is invoked with `thinking_effort=max`."
     "<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"system\""
     "<|sep|>S1<|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"user\"<|sep|>Q<|close|>message"
     "<|sep|><|end_of_msg|><|open|>message role=\"system\""
     "<|sep|>S2<|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|>"},
    /* kimi-k3, think tags in the last answer */
    {MT_CHAT_KIMI_K3, "{}", 7,
     "<|open|>message role=\"system\" type=\"thinking-effort\""
     "<|sep|>`thinking_effort` guides on how much to think in your thinking channel (not includin"
     "g the response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
     "Now the system is invoked with `thinking_effort=max`."
     "<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"user\""
     "<|sep|>Q<|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|><|close|>think<|sep|>"
     "<|open|>response<|sep|>x<think>\nold\n</think>\n"
     "\nA<|close|>response<|sep|><|close|>message"
     "<|sep|><|end_of_msg|><|open|>message role=\"assistant\""
     "<|sep|><|open|>think<|sep|>"},
    /* kimi-k3, one turn */
    {MT_CHAT_KIMI_K3, "{\"thinking\": false}", 0,
     "<|open|>message role=\"system\"<|sep|>Be brief."
     "<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"user\""
     "<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>response<|sep|>"},
    /* kimi-k3, reasoning after the last user message */
    {MT_CHAT_KIMI_K3, "{\"thinking\": false}", 2,
     "<|open|>message role=\"user\"<|sep|>Q1<|close|>message"
     "<|sep|><|end_of_msg|><|open|>message role=\"assistant\""
     "<|sep|><|open|>response<|sep|>A1<|close|>response"
     "<|sep|><|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"user\"<|sep|>Q2<|close|>message"
     "<|sep|><|end_of_msg|><|open|>message role=\"assistant\""
     "<|sep|><|open|>response<|sep|>A2<|close|>response"
     "<|sep|><|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>response<|sep|>"},
    /* kimi-k3, one turn */
    {MT_CHAT_KIMI_K3, "{\"thinking_effort\": \"low\"}", 0,
     "<|open|>message role=\"system\" type=\"thinking-effort\""
     "<|sep|>`thinking_effort` guides on how much to think in your thinking channel (not includin"
     "g the response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
     "Now the system is invoked with `thinking_effort=low`."
     "<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"system\""
     "<|sep|>Be brief.<|close|>message<|sep|>"
     "<|end_of_msg|><|open|>message role=\"user\""
     "<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|>"},
    /* kimi-k3, reasoning after the last user message */
    {MT_CHAT_KIMI_K3, "{\"thinking_effort\": \"low\"}", 2,
     "<|open|>message role=\"system\" type=\"thinking-effort\""
     "<|sep|>`thinking_effort` guides on how much to think in your thinking channel (not includin"
     "g the response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
     "Now the system is invoked with `thinking_effort=low`."
     "<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"user\""
     "<|sep|>Q1<|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|>R1<|close|>think<|sep|>"
     "<|open|>response<|sep|>A1<|close|>response"
     "<|sep|><|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"user\"<|sep|>Q2<|close|>message"
     "<|sep|><|end_of_msg|><|open|>message role=\"assistant\""
     "<|sep|><|open|>think<|sep|>\nR2\n<|close|>think"
     "<|sep|><|open|>response<|sep|>A2<|close|>response"
     "<|sep|><|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|>"},
    /* kimi-k3, one turn */
    {MT_CHAT_KIMI_K3, "{\"thinking_effort\": null}", 0,
     "<|open|>message role=\"system\"<|sep|>Be brief."
     "<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"user\""
     "<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|>"},
    /* kimi-k3, reasoning after the last user message */
    {MT_CHAT_KIMI_K3, "{\"thinking_effort\": null}", 2,
     "<|open|>message role=\"user\"<|sep|>Q1<|close|>message"
     "<|sep|><|end_of_msg|><|open|>message role=\"assistant\""
     "<|sep|><|open|>think<|sep|>R1<|close|>think"
     "<|sep|><|open|>response<|sep|>A1<|close|>response"
     "<|sep|><|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"user\"<|sep|>Q2<|close|>message"
     "<|sep|><|end_of_msg|><|open|>message role=\"assistant\""
     "<|sep|><|open|>think<|sep|>\nR2\n<|close|>think"
     "<|sep|><|open|>response<|sep|>A2<|close|>response"
     "<|sep|><|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>think<|sep|>"},
    /* kimi-k3, one turn */
    {MT_CHAT_KIMI_K3, "{\"thinking\": false, \"thinking_effort\": \"high\"}", 0,
     "<|open|>message role=\"system\"<|sep|>Be brief."
     "<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"user\""
     "<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>response<|sep|>"},
    /* kimi-k3, reasoning after the last user message */
    {MT_CHAT_KIMI_K3, "{\"thinking\": false, \"thinking_effort\": \"high\"}", 2,
     "<|open|>message role=\"user\"<|sep|>Q1<|close|>message"
     "<|sep|><|end_of_msg|><|open|>message role=\"assistant\""
     "<|sep|><|open|>response<|sep|>A1<|close|>response"
     "<|sep|><|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"user\"<|sep|>Q2<|close|>message"
     "<|sep|><|end_of_msg|><|open|>message role=\"assistant\""
     "<|sep|><|open|>response<|sep|>A2<|close|>response"
     "<|sep|><|close|>message<|sep|><|end_of_msg|>"
     "<|open|>message role=\"assistant\"<|sep|>"
     "<|open|>response<|sep|>"},
};

static void test_think_render(void) {
    for (size_t i = 0; i < sizeof THINK_WANT / sizeof THINK_WANT[0]; i++) {
        const think_want *w = &THINK_WANT[i];
        const think_conv *c = &THINK_CONVS[w->conv];
        json_t *kw = json_loads(w->kwargs, 0, NULL);
        size_t len = 0;
        char *text = mt_chat_render_kw(w->f, c->m, c->n, kw, &len);
        CHECK(text && len == strlen(w->want) && strcmp(text, w->want) == 0,
              "%s %s, %s renders\n%s\nnot\n%s", mt_chat_format_name(w->f), w->kwargs, c->name,
              text ? text : "(null)", w->want);
        free(text);
        json_decref(kw);
    }
    /* without kwargs, R1 opens the reasoning (as with enable_thinking true) */
    const char *want = NULL;
    for (size_t i = 0; i < sizeof THINK_WANT / sizeof THINK_WANT[0]; i++)
        if (THINK_WANT[i].f == MT_CHAT_DEEPSEEK_R1 && THINK_WANT[i].conv == 0 &&
            strstr(THINK_WANT[i].kwargs, "true"))
            want = THINK_WANT[i].want;
    size_t len = 0;
    char *a = mt_chat_render(MT_CHAT_DEEPSEEK_R1, THINK_CONVS[0].m, THINK_CONVS[0].n, &len);
    CHECK(a && want && strcmp(a, want) == 0, "R1 without kwargs: %s", a ? a : "(null)");
    free(a);
}

static void test_think_detect(void) {
    bool known = false;
    static const struct {
        const char *tmpl;
        mt_chat_format f;
    } stand_in[] = {
        {"{{'<|im_start|>' + role}}{% if t %}<think>\n\n</think>\n\n{% endif %}", MT_CHAT_QWEN3},
        {"{{'<|im_start|>' + role}}", MT_CHAT_CHATML},
        {"{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + c}}{{'<\xef\xbd\x9c"
         "Assistant\xef\xbd\x9c><think>\\n'}}",
         MT_CHAT_DEEPSEEK_R1},
        {"{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + c}}{{'<think></think>'}}{{'<think>'}}",
         MT_CHAT_DEEPSEEK_V31},
        {"<|im_user|>user<|im_middle|>{{c}}<|im_end|><think>{{rc}}</think>",
         MT_CHAT_KIMI_K2_THINKING},
    };
    for (size_t i = 0; i < sizeof stand_in / sizeof stand_in[0]; i++)
        CHECK(mt_chat_detect(stand_in[i].tmpl, &known) == stand_in[i].f && known,
              "%s detected as %s", stand_in[i].tmpl,
              mt_chat_format_name(mt_chat_detect(stand_in[i].tmpl, &known)));
    CHECK(mt_chat_thinks(MT_CHAT_QWEN3) && mt_chat_thinks(MT_CHAT_DEEPSEEK_R1) &&
              mt_chat_thinks(MT_CHAT_DEEPSEEK_V31) && mt_chat_thinks(MT_CHAT_KIMI_K2_THINKING) &&
              mt_chat_thinks(MT_CHAT_KIMI_K3) && !mt_chat_thinks(MT_CHAT_CHATML) &&
              !mt_chat_thinks(MT_CHAT_DEEPSEEK3) && !mt_chat_thinks(MT_CHAT_KIMI_K2) &&
              !mt_chat_thinks(MT_CHAT_LLAMA3),
          "the thinking families");
    /* the real template files, when a llama.cpp tree is at hand */
    const char *dir = getenv("MT_LLAMA_CPP");
    if (!dir || !*dir) dir = "/tmp/llref";
    static const struct {
        const char *file;
        mt_chat_format f;
    } real[] = {{"Qwen-Qwen3-0.6B.jinja", MT_CHAT_QWEN3},
                {"Qwen-Qwen2.5-7B-Instruct.jinja", MT_CHAT_CHATML},
                {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", MT_CHAT_DEEPSEEK_R1},
                {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", MT_CHAT_DEEPSEEK_R1},
                {"llama-cpp-deepseek-r1.jinja", MT_CHAT_DEEPSEEK_R1},
                {"deepseek-ai-DeepSeek-V3.1.jinja", MT_CHAT_DEEPSEEK_V31},
                {"Kimi-K2-Thinking.jinja", MT_CHAT_KIMI_K2_THINKING},
                {"Kimi-K2-Instruct.jinja", MT_CHAT_KIMI_K2},
                {"moonshotai-Kimi-K2.jinja", MT_CHAT_KIMI_K2},
                {"Kimi-K3.jinja", MT_CHAT_KIMI_K3}};
    int seen = 0;
    for (size_t i = 0; i < sizeof real / sizeof real[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/models/templates/%s", dir, real[i].file);
        FILE *fp = fopen(path, "rb");
        if (!fp) continue;
        static char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf - 1, fp);
        fclose(fp);
        buf[n] = 0;
        seen++;
        CHECK(mt_chat_detect(buf, &known) == real[i].f && known, "%s detected as %s", path,
              mt_chat_format_name(mt_chat_detect(buf, &known)));
    }
    if (!seen) printf("test_api: no llama.cpp templates under %s; real files not checked\n", dir);
}

/* ---- thinking models: splitting replies ------------------------------------------------- */

/* Vocabularies: 256 bytes, then extra tokens from id 256. */
enum { T_ENDOFTEXT = 256, T_IM_START, T_IM_END, T_THINK, T_UNTHINK, T_DS_EOS }; /* think_vocab */
enum { K_EOS = 256, K_OPEN, K_CLOSE, K_SEP, K_EOM };                            /* k3_vocab */

static mt_vocab *vocab_of(const char *const *toks, const bool *control, int n) {
    gguf_writer *w = gguf_writer_new();
    mt_vocab_write_bytes_typed(w, "default", false, toks, control, n);
    const char *path = check_tmp(".gguf");
    mt_error err = {{0}};
    mt_vocab *v = NULL;
    gguf_file *f = NULL;
    if (gguf_writer_write(w, path, &err) == 0 && (f = gguf_open(path, &err))) {
        v = mt_vocab_load(f, &err);
        gguf_close(f);
    }
    unlink(path);
    gguf_writer_free(w);
    CHECK(v, "test vocabulary: %s", err.msg);
    return v;
}

/* <think> and </think> as user-defined tokens (as in DeepSeek R1's and Qwen3's files), or
 * as control tokens (text cannot show them: only their ids can be matched). */
static mt_vocab *think_vocab(bool control_think) {
    static const char *const toks[] = {"<|endoftext|>",
                                       "<|im_start|>",
                                       "<|im_end|>",
                                       "<think>",
                                       "</think>",
                                       ("<\xef\xbd\x9c"
                                        "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>")};
    const bool control[] = {true, true, true, control_think, control_think, true};
    return vocab_of(toks, control, 6);
}

static mt_vocab *k3_vocab(void) {
    static const char *const toks[] = {"[EOS]", "<|open|>", "<|close|>", "<|sep|>",
                                       "<|end_of_msg|>"};
    static const bool control[] = {true, true, true, true, true};
    return vocab_of(toks, control, 5);
}

/* A splitter's output. */
typedef struct parts {
    char r[256], a[256];
    size_t rn, an;
    bool late; /* reasoning after some answer */
} parts;

static int parts_out(void *ctx, bool reasoning, const char *s, size_t n) {
    parts *p = ctx;
    char *dst = reasoning ? p->r : p->a;
    size_t *len = reasoning ? &p->rn : &p->an;
    if (reasoning && p->an) p->late = true;
    if (*len + n < sizeof p->r) memcpy(dst + *len, s, n), *len += n;
    return 0;
}

/* A stream in the splitter's alphabet: text, with each marker control token written as
 * 0xFF and its code (mt_reasoning.h). */
typedef struct stream {
    char b[256];
    size_t n;
} stream;

static void st_text(stream *s, const char *t) {
    memcpy(s->b + s->n, t, strlen(t));
    s->n += strlen(t);
}
static void st_tok(stream *s, const mt_reasoning *r, int32_t id) {
    s->b[s->n++] = '\xff';
    s->b[s->n++] = (char)mt_reasoning_code(r, id);
}

/* Splits the stream whole, byte by byte, and in two pieces at every point: each time the
 * reasoning and the answer must be want_r and want_a, the reasoning first. */
static void check_split(const char *name, const mt_reasoning *r, const stream *st,
                        const char *want_r, const char *want_a) {
    const size_t n = st->n;
    for (size_t mode = 0; mode <= n + 1; mode++) {
        mt_reasoning_split s;
        parts p = {0};
        mt_reasoning_split_init(&s, r);
        int rc = 0;
        if (mode == 0) {
            rc |= mt_reasoning_split_push(&s, st->b, n, parts_out, &p);
        } else if (mode == 1) {
            for (size_t i = 0; i < n; i++)
                rc |= mt_reasoning_split_push(&s, st->b + i, 1, parts_out, &p);
        } else {
            const size_t k = mode - 2;
            rc |= mt_reasoning_split_push(&s, st->b, k, parts_out, &p);
            rc |= mt_reasoning_split_push(&s, st->b + k, n - k, parts_out, &p);
        }
        rc |= mt_reasoning_split_finish(&s, parts_out, &p);
        mt_reasoning_split_free(&s);
        const bool ok = !rc && !p.late && p.rn == strlen(want_r) && p.an == strlen(want_a) &&
                        memcmp(p.r, want_r, p.rn) == 0 && memcmp(p.a, want_a, p.an) == 0;
        CHECK(ok, "%s (%s): reasoning '%.*s' answer '%.*s'%s; want '%s' '%s'", name,
              mode == 0   ? "whole"
              : mode == 1 ? "byte by byte"
                          : "in two pieces",
              (int)p.rn, p.r, (int)p.an, p.a, p.late ? " (reasoning after answer)" : "", want_r,
              want_a);
        if (!ok) break;
    }
}

/* The markers of a family for a prompt rendered from conv with kwargs. */
static void reasoning_for(mt_chat_format f, const mt_vocab *v, int conv, const char *kwargs,
                          mt_reasoning *r) {
    json_t *kw = kwargs ? json_loads(kwargs, 0, NULL) : NULL;
    int32_t *ids = NULL;
    int64_t n = mt_chat_tokenize_kw(f, v, THINK_CONVS[conv].m, THINK_CONVS[conv].n, kw, &ids, NULL);
    CHECK(n > 0, "%s prompt tokenized", mt_chat_format_name(f));
    mt_chat_reasoning(f, v, ids, n, r);
    free(ids);
    json_decref(kw);
}

static void test_split(void) {
    mt_vocab *tv = think_vocab(false), *cv = think_vocab(true), *kv = k3_vocab();
    if (!tv || !cv || !kv) goto done;
    mt_reasoning r;

    /* where the reply starts: inside the reasoning when the prompt opened it */
    static const struct {
        mt_chat_format f;
        const char *kwargs;
        bool on, starts;
    } starts[] = {
        {MT_CHAT_DEEPSEEK_R1, NULL, true, true},
        {MT_CHAT_DEEPSEEK_R1, "{\"enable_thinking\": false}", true, false},
        {MT_CHAT_QWEN3, NULL, true, false},
        {MT_CHAT_QWEN3, "{\"enable_thinking\": false}", true, false},
        {MT_CHAT_DEEPSEEK_V31, NULL, true, false},
        {MT_CHAT_DEEPSEEK_V31, "{\"thinking\": true}", true, true},
        {MT_CHAT_KIMI_K2_THINKING, NULL, true, false},
        {MT_CHAT_KIMI_K3, NULL, true, true},
        {MT_CHAT_KIMI_K3, "{\"thinking\": false}", true, false},
        {MT_CHAT_CHATML, NULL, false, false},
        {MT_CHAT_DEEPSEEK3, NULL, false, false},
    };
    for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++) {
        /* conversation 1 has a past reasoning (K3 renders it in a think section) and ends
         * with a user message (else V3.1 opens no reply) */
        reasoning_for(starts[i].f, starts[i].f == MT_CHAT_KIMI_K3 ? kv : tv, 1, starts[i].kwargs,
                      &r);
        CHECK(r.on == starts[i].on && r.starts_thinking == starts[i].starts,
              "%s %s: split %d (want %d), starts thinking %d (want %d)",
              mt_chat_format_name(starts[i].f), starts[i].kwargs ? starts[i].kwargs : "", r.on,
              starts[i].on, r.starts_thinking, starts[i].starts);
    }

    /* <think> families, text markers: the prompt opened the reasoning (R1) */
    stream st = {0};
    reasoning_for(MT_CHAT_DEEPSEEK_R1, tv, 0, NULL, &r);
    CHECK(r.n_special == 0 && strcmp(r.open, "<think>") == 0 && strcmp(r.close[0], "</think>") == 0,
          "user-defined <think> markers are text");
    st_text(&st, "Let me see.\n</think>\n\nBlue.");
    check_split("R1", &r, &st, "Let me see.\n", "\n\nBlue.");
    st = (stream){0};
    st_text(&st, "\n<think>\nhmm</think>x"); /* a repeated opener is dropped */
    check_split("R1, opener repeated", &r, &st, "\nhmm", "x");
    st = (stream){0};
    st_text(&st, "never done </thi");
    check_split("R1, unclosed", &r, &st, "never done </thi", "");
    st = (stream){0};
    st_text(&st, "a</think>b</think>c<think>d");
    check_split("R1, markers in the answer are text", &r, &st, "a", "b</think>c<think>d");
    st = (stream){0};
    check_split("R1, nothing", &r, &st, "", "");
    /* Qwen3: the model opens the reasoning itself, or answers at once */
    reasoning_for(MT_CHAT_QWEN3, tv, 0, NULL, &r);
    st = (stream){0};
    st_text(&st, " \n<think>\nStep.\n</think>\n\nBlue.");
    check_split("Qwen3", &r, &st, "\nStep.\n", "\n\nBlue.");
    st = (stream){0};
    st_text(&st, "\n Blue.");
    check_split("Qwen3, no reasoning", &r, &st, "", "\n Blue.");
    st = (stream){0};
    st_text(&st, "<thinking>");
    check_split("Qwen3, a word like the opener", &r, &st, "", "<thinking>");
    st = (stream){0};
    st_text(&st, "<think>all of it");
    check_split("Qwen3, unclosed", &r, &st, "all of it", "");
    st = (stream){0};
    st_text(&st, "\n\n");
    check_split("Qwen3, white space only", &r, &st, "", "\n\n");
    /* control-token markers: matched by id only (their text is never in the stream) */
    reasoning_for(MT_CHAT_DEEPSEEK_R1, cv, 0, NULL, &r);
    CHECK(r.n_special == 2 && mt_reasoning_code(&r, T_THINK) && mt_reasoning_code(&r, T_UNTHINK) &&
              r.starts_thinking,
          "control <think> markers are ids; the R1 prompt opened one");
    st = (stream){0};
    st_text(&st, "r</think>");
    st_tok(&st, &r, T_UNTHINK);
    st_text(&st, "a");
    check_split("R1, control markers", &r, &st, "r</think>", "a");

    /* Kimi K3: think and response sections */
    reasoning_for(MT_CHAT_KIMI_K3, kv, 0, NULL, &r);
    CHECK(r.on && r.starts_thinking && r.n_special == 3, "K3: %d marker tokens", r.n_special);
    st = (stream){0};
    st_text(&st, "Plan.");
    st_tok(&st, &r, K_CLOSE), st_text(&st, "think"), st_tok(&st, &r, K_SEP);
    st_tok(&st, &r, K_OPEN), st_text(&st, "response"), st_tok(&st, &r, K_SEP);
    st_text(&st, "Blue.");
    st_tok(&st, &r, K_CLOSE), st_text(&st, "response"), st_tok(&st, &r, K_SEP);
    st_tok(&st, &r, K_CLOSE), st_text(&st, "message"), st_tok(&st, &r, K_SEP);
    check_split("K3", &r, &st, "Plan.", "Blue.");
    st = (stream){0}; /* the think closer skipped: the response opener ends the reasoning */
    st_text(&st, "think response");
    st_tok(&st, &r, K_OPEN), st_text(&st, "response"), st_tok(&st, &r, K_SEP);
    st_text(&st, "ok");
    check_split("K3, no think closer", &r, &st, "think response", "ok");
    st = (stream){0}; /* unclosed; a marker token that starts no marker has no text */
    st_text(&st, "a");
    st_tok(&st, &r, K_CLOSE), st_text(&st, "thin");
    check_split("K3, unclosed", &r, &st, "athin", "");
    st = (stream){0}; /* after the answer's end, nothing more is answer */
    st_tok(&st, &r, K_CLOSE), st_text(&st, "think"), st_tok(&st, &r, K_SEP);
    st_text(&st, "x");
    st_tok(&st, &r, K_OPEN), st_text(&st, "tools"), st_tok(&st, &r, K_SEP);
    st_text(&st, "call");
    check_split("K3, a tool section ends the answer", &r, &st, "", "x");
    reasoning_for(MT_CHAT_KIMI_K3, kv, 0, "{\"thinking\": false}", &r);
    st = (stream){0}; /* thinking off: the prompt opened the response */
    st_text(&st, "Blue.");
    st_tok(&st, &r, K_CLOSE), st_text(&st, "response"), st_tok(&st, &r, K_SEP);
    check_split("K3, thinking off", &r, &st, "", "Blue.");
done:
    mt_vocab_free(tv);
    mt_vocab_free(cv);
    mt_vocab_free(kv);
}

/* The engine on a scripted backend whose vocabulary has the markers: a thinking reply's
 * reasoning and answer go to their callbacks, whatever the tokens the markers come in. */
static void run_think(const mt_model *m, const mt_vocab *v, const int32_t *script, int n_script,
                      const mt_reasoning *r, int32_t max_tokens, const char *stop, int32_t end,
                      got *g) {
    fake f = {.b = {.kind = "fake",
                    .model = m,
                    .n_vocab = mt_vocab_n_tokens(v),
                    .max_ctx = 4096,
                    .retry_may_succeed = true,
                    .slot_open = fake_open,
                    .slot_close = fake_close,
                    .begin = fake_begin,
                    .eval = fake_eval,
                    .end = fake_end},
              .vocab = v,
              .script = script,
              .n_script = n_script,
              .fail_at = -1};
    f.b.impl = &f;
    pthread_mutex_init(&f.mu, NULL);
    pthread_cond_init(&f.cv, NULL);
    api_gen_params p = {0};
    p.prompt = malloc(sizeof *p.prompt);
    p.prompt[0] = 'q';
    p.gen.n_prompt = 1;
    p.gen.max_tokens = max_tokens;
    p.gen.sp = mt_sampler_default_params();
    p.gen.sp.temp = 0;
    p.gen.end_token = end;
    p.reasoning = *r;
    if (stop) p.stop[p.gen.n_stop++] = strdup(stop);
    api_gen_sink sink = {.text = got_text, .done = got_done, .ctx = g, .reasoning = got_reasoning};
    api_engine *e = api_engine_start(&f.b, v, 1, 1, NULL);
    bool ok = e && api_engine_submit(e, &p, &sink, NULL, NULL) == 0;
    CHECK(ok, "thinking request submitted");
    if (ok)
        got_wait(g);
    else
        api_gen_params_free(&p);
    api_engine_stop(e);
    pthread_mutex_destroy(&f.mu);
    pthread_cond_destroy(&f.cv);
}

/* ids of a text, one byte a token (the byte vocabulary's ids are the bytes) */
static int ids_of(int32_t *out, const char *t) {
    int n = 0;
    for (; *t; t++) out[n++] = (uint8_t)*t;
    return n;
}

static bool got_is(const got *g, const char *r, const char *a) {
    return g->rlen == strlen(r) && memcmp(g->reasoning, r, g->rlen) == 0 && g->len == strlen(a) &&
           memcmp(g->text, a, g->len) == 0 && !g->reasoning_late;
}

static void test_think_engine(const mt_model *m) {
    mt_vocab *tv = think_vocab(false), *cv = think_vocab(true), *kv = k3_vocab();
    if (!tv || !cv || !kv) goto done;
    mt_reasoning r;
    got g;
    int32_t s[64];
    int n;

    /* R1: </think> spelled byte by byte, or as its one token: the same split */
    reasoning_for(MT_CHAT_DEEPSEEK_R1, tv, 0, NULL, &r);
    n = ids_of(s, "ab</think>\nAns");
    got_init(&g);
    run_think(m, tv, s, n, &r, n, NULL, T_DS_EOS, &g);
    CHECK(got_is(&g, "ab", "\nAns") && strcmp(g.r.finish_reason, "length") == 0,
          "R1 spelled: '%.*s' | '%.*s'", (int)g.rlen, g.reasoning, (int)g.len, g.text);
    n = ids_of(s, "ab");
    s[n++] = T_UNTHINK;
    n += ids_of(s + n, "\nAns");
    s[n++] = T_DS_EOS;
    got_init(&g);
    run_think(m, tv, s, n, &r, 20, NULL, T_DS_EOS, &g);
    CHECK(got_is(&g, "ab", "\nAns") && strcmp(g.r.finish_reason, "stop") == 0 &&
              g.r.completion_tokens == 8,
          "R1 token: '%.*s' | '%.*s' %s %d", (int)g.rlen, g.reasoning, (int)g.len, g.text,
          g.r.finish_reason, g.r.completion_tokens);
    /* a stop string in the reasoning does not stop; in the answer it does */
    n = ids_of(s, "xaby</think>zabw");
    got_init(&g);
    run_think(m, tv, s, n, &r, n, "ab", T_DS_EOS, &g);
    CHECK(got_is(&g, "xaby", "z") && strcmp(g.r.finish_reason, "stop") == 0,
          "stop string in the answer only: '%.*s' | '%.*s' %s", (int)g.rlen, g.reasoning,
          (int)g.len, g.text, g.r.finish_reason);
    /* max_tokens inside the reasoning: all of it reasoning */
    n = ids_of(s, "long thought </thi");
    got_init(&g);
    run_think(m, tv, s, n, &r, n, NULL, T_DS_EOS, &g);
    CHECK(got_is(&g, "long thought </thi", "") && strcmp(g.r.finish_reason, "length") == 0,
          "unclosed reasoning: '%.*s' | '%.*s'", (int)g.rlen, g.reasoning, (int)g.len, g.text);
    /* the client goes away during the reasoning */
    n = ids_of(s, "abcdefgh");
    got_init(&g);
    g.cancel_reasoning_after = 2;
    run_think(m, tv, s, n, &r, n, NULL, T_DS_EOS, &g);
    CHECK(g.r.error_status == 499 && g.rpieces == 2, "cancel in the reasoning: %d after %d",
          g.r.error_status, g.rpieces);
    /* Qwen3: the model opens the reasoning with the <think> token */
    reasoning_for(MT_CHAT_QWEN3, tv, 0, NULL, &r);
    s[0] = T_THINK;
    n = 1 + ids_of(s + 1, "\nr");
    s[n++] = T_UNTHINK;
    n += ids_of(s + n, "\n\nHi");
    got_init(&g);
    run_think(m, tv, s, n, &r, n, NULL, T_IM_END, &g);
    CHECK(got_is(&g, "\nr", "\n\nHi"), "Qwen3: '%.*s' | '%.*s'", (int)g.rlen, g.reasoning,
          (int)g.len, g.text);
    n = ids_of(s, "Hi there");
    got_init(&g);
    run_think(m, tv, s, n, &r, n, NULL, T_IM_END, &g);
    CHECK(got_is(&g, "", "Hi there"), "Qwen3 without reasoning: '%.*s' | '%.*s'", (int)g.rlen,
          g.reasoning, (int)g.len, g.text);
    /* control-token markers have no text: only their ids split the reply */
    reasoning_for(MT_CHAT_DEEPSEEK_R1, cv, 0, NULL, &r);
    n = ids_of(s, "r");
    s[n++] = T_UNTHINK;
    n += ids_of(s + n, "a");
    got_init(&g);
    run_think(m, cv, s, n, &r, n, NULL, T_DS_EOS, &g);
    CHECK(got_is(&g, "r", "a"), "control </think>: '%.*s' | '%.*s'", (int)g.rlen, g.reasoning,
          (int)g.len, g.text);
    mt_reasoning off = {0}; /* unsplit (completions, other families): the answer is all */
    got_init(&g);
    run_think(m, cv, s, n, &off, n, NULL, T_DS_EOS, &g);
    CHECK(got_is(&g, "", "ra"), "unsplit: '%.*s' | '%.*s'", (int)g.rlen, g.reasoning, (int)g.len,
          g.text);
    /* Kimi K3: the sections' markers across many tokens, up to <|end_of_msg|> */
    reasoning_for(MT_CHAT_KIMI_K3, kv, 0, NULL, &r);
    n = ids_of(s, "Plan");
    s[n++] = K_CLOSE, n += ids_of(s + n, "think"), s[n++] = K_SEP;
    s[n++] = K_OPEN, n += ids_of(s + n, "response"), s[n++] = K_SEP;
    n += ids_of(s + n, "ok");
    s[n++] = K_CLOSE, n += ids_of(s + n, "response"), s[n++] = K_SEP;
    s[n++] = K_CLOSE, n += ids_of(s + n, "message"), s[n++] = K_SEP;
    s[n++] = K_EOM;
    got_init(&g);
    run_think(m, kv, s, n, &r, 64, NULL, K_EOM, &g);
    CHECK(got_is(&g, "Plan", "ok") && strcmp(g.r.finish_reason, "stop") == 0 &&
              g.r.completion_tokens == n,
          "K3: '%.*s' | '%.*s' %s %d", (int)g.rlen, g.reasoning, (int)g.len, g.text,
          g.r.finish_reason, g.r.completion_tokens);
done:
    mt_vocab_free(tv);
    mt_vocab_free(cv);
    mt_vocab_free(kv);
}

/* ---- thinking models: request fields ---------------------------------------------------- */

static void test_think_parse(void) {
    api_request rq;
    api_error e;
    const char *ok = "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
                     "{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":\"r1\"},"
                     "{\"role\":\"assistant\",\"content\":\"b\",\"reasoning_content\":null},"
                     "{\"role\":\"user\",\"content\":\"q2\"}],"
                     "\"chat_template_kwargs\":{\"enable_thinking\":false,\"thinking\":true,"
                     "\"thinking_effort\":null,\"custom_var\":[1,{\"x\":\"y\"}]}}";
    CHECK(api_request_parse(API_CHAT, ok, strlen(ok), "tiny", &rq, &e) == 0, "valid: %s",
          e.message);
    CHECK(rq.n_messages == 4 && rq.messages[1].reasoning && rq.messages[1].reasoning_len == 2 &&
              memcmp(rq.messages[1].reasoning, "r1", 2) == 0 && !rq.messages[2].reasoning &&
              !rq.messages[0].reasoning,
          "reasoning_content of assistant messages");
    CHECK(rq.chat_kwargs && json_is_false(json_object_get(rq.chat_kwargs, "enable_thinking")) &&
              json_is_array(json_object_get(rq.chat_kwargs, "custom_var")),
          "chat_template_kwargs carried as an object");
    api_request_free(&rq);
    const char *plain = "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],"
                        "\"chat_template_kwargs\":null}";
    CHECK(api_request_parse(API_CHAT, plain, strlen(plain), "tiny", &rq, &e) == 0 &&
              !rq.chat_kwargs,
          "chat_template_kwargs null: none (%s)", e.message);
    api_request_free(&rq);

    const char *m = "\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char body[20000];
    static const struct {
        const char *extra, *param, *msg;
    } bad[] = {
        {"\"chat_template_kwargs\":[]", "chat_template_kwargs", "expected an object"},
        {"\"chat_template_kwargs\":\"x\"", "chat_template_kwargs", "expected an object"},
        {"\"chat_template_kwargs\":{\"enable_thinking\":\"yes\"}",
         "chat_template_kwargs.enable_thinking", "expected a boolean"},
        {"\"chat_template_kwargs\":{\"enable_thinking\":null}",
         "chat_template_kwargs.enable_thinking", "expected a boolean"},
        {"\"chat_template_kwargs\":{\"thinking\":1}", "chat_template_kwargs.thinking",
         "expected a boolean"},
        {"\"chat_template_kwargs\":{\"thinking_effort\":\"medium\"}",
         "chat_template_kwargs.thinking_effort", "'medium'"},
        {"\"chat_template_kwargs\":{\"thinking_effort\":3}", "chat_template_kwargs.thinking_effort",
         "an integer"},
        {"\"chat_template_kwargs\":{\"messages\":[]}", "chat_template_kwargs.messages",
         "sets 'messages' itself"},
        {"\"chat_template_kwargs\":{\"add_generation_prompt\":false}",
         "chat_template_kwargs.add_generation_prompt", "itself"},
        {"\"chat_template_kwargs\":{\"9lives\":1}", "chat_template_kwargs",
         "not a template variable name"},
        {"\"chat_template_kwargs\":{\"a-b\":1}", "chat_template_kwargs", "'a-b'"},
        {"\"chat_template_kwargs\":{\"\":1}", "chat_template_kwargs", "variable name"},
        {"\"chat_template_kwargs\":{\"documents\":[]}", "chat_template_kwargs.documents", "itself"},
        {"\"chat_template_kwargs\":{\"deep\":[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]}",
         "chat_template_kwargs.deep", "more than 16 levels"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(body, sizeof body, "{%s,%s}", m, bad[i].extra);
        parse_bad(API_CHAT, body, 400, bad[i].param, bad[i].msg);
    }
    /* too many variables, too many bytes */
    int k = snprintf(body, sizeof body, "{%s,\"chat_template_kwargs\":{", m);
    for (int i = 0; i < 33; i++)
        k += snprintf(body + k, sizeof body - (size_t)k, "%s\"v%d\":1", i ? "," : "", i);
    snprintf(body + k, sizeof body - (size_t)k, "}}");
    parse_bad(API_CHAT, body, 400, "chat_template_kwargs", "33 variables; at most 32");
    k = snprintf(body, sizeof body, "{%s,\"chat_template_kwargs\":{\"big\":\"", m);
    memset(body + k, 'a', 16400);
    snprintf(body + k + 16400, sizeof body - (size_t)k - 16400, "\"}}");
    parse_bad(API_CHAT, body, 400, "chat_template_kwargs", "at most 16384");
    /* reasoning_content: assistant messages only, a string or null */
    parse_bad(API_CHAT,
              "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\","
              "\"reasoning_content\":\"r\"}]}",
              400, "messages[0].reasoning_content", "only an assistant message");
    parse_bad(API_CHAT,
              "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
              "{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":[\"r\"]}]}",
              400, "messages[1].reasoning_content", "expected a string or null");
    parse_bad(API_COMPLETIONS, "{\"model\":\"tiny\",\"prompt\":\"x\",\"chat_template_kwargs\":{}}",
              400, "chat_template_kwargs", "/v1/chat/completions");
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
        test_think_engine(m);
    }
    test_think_render();
    test_think_detect();
    test_split();
    test_parse();
    test_think_parse();
    test_keys();
    mt_vocab_free(v);
    mt_model_free(m);
    unlink(path);
    return check_report("test_api");
}

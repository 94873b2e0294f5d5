/* test_generate.c - the generation loop (moontail/generate.h) on a scripted
 * backend whose model "generates" a fixed list of tokens whatever it is fed,
 * over a byte vocabulary (token id = byte, then <|endoftext|> as the end of
 * generation and <|turn_end|> as a chat turn's end). The expected texts, token
 * counts and evaluation sizes are worked out by hand from the scripts: a stop
 * string split over tokens never shows, a prefix of one held back comes out
 * at the end, the extra end token and end-of-generation tokens (and
 * ignore_eog), max_tokens, cancelling from either callback, the prompt cut
 * into micro-batches (512 when not given), the context asked of the backend,
 * the backend failing at each stage, UTF-8 characters handed out whole, the
 * earliest of several stop strings, and a thinking reply split into reasoning
 * and answer with stop strings applying to the answer, also to what the
 * splitter held back until the end. */
#include "check.h"
#include "moontail/generate.h"
#include "moontail/gguf.h"

enum { T_EOT = 256, T_TURN_END = 257 };

/* ---- the scripted backend ------------------------------------------------------------------ */

typedef struct fake {
    mt_gen_backend b;
    const int32_t *script; /* what the model "generates", one token per step */
    int n_script;
    int32_t n_prompt;               /* tokens before the first generated one */
    int fail_begin, fail_eval_call; /* 1: begin fails; the eval call (1-based) that fails */
    int32_t calls[64];              /* sizes of the eval calls */
    int n_calls;
    int32_t n_ctx; /* what begin() was asked for */
    int64_t ended; /* evaluated, as end() got it; -1: end() not called */
} fake;

static void *fake_open(mt_gen_backend *b, int index, mt_error *err) {
    (void)index, (void)err;
    return b->impl;
}
static void fake_close(mt_gen_backend *b, void *slot) {
    (void)b, (void)slot;
}
static int fake_begin(void *slot, int32_t n_ctx, mt_error *err) {
    fake *f = slot;
    f->n_ctx = n_ctx;
    f->n_calls = 0;
    return f->fail_begin ? mt_error_set(err, "no route to the cell") : 0;
}
static int fake_eval(void *slot, const int32_t *ids, int32_t n, float *logits, mt_error *err) {
    (void)ids;
    fake *f = slot;
    if (f->n_calls < 64) f->calls[f->n_calls] = n;
    f->n_calls++;
    if (f->n_calls == f->fail_eval_call) return mt_error_set(err, "node 10.0.0.7 went away");
    int32_t done = 0; /* tokens evaluated so far, this call included */
    for (int i = 0; i < f->n_calls && i < 64; i++) done += f->calls[i];
    int step = done - f->n_prompt;
    if (step < 0) step = 0; /* a chunk of the prompt: its logits are not used */
    if (step >= f->n_script) step = f->n_script - 1;
    for (int i = 0; i < f->b.n_vocab; i++) logits[i] = 0;
    logits[f->script[step]] = 10;
    return 0;
}
static void fake_end(void *slot, int64_t evaluated) {
    ((fake *)slot)->ended = evaluated;
}

/* ---- what the sink got --------------------------------------------------------------------- */

typedef struct got {
    char text[256], reasoning[256];
    size_t len, rlen;
    int pieces;
    char last_piece[64];
    bool piece_had_o;    /* a text piece held an 'o' (the stop-string case) */
    int cancel_text_at;  /* text() returns -5 at this piece (0: never) */
    int cancel_token_at; /* token() returns 7 at this token (0: never) */
    int32_t tokens[64];
    int n_tokens;
    mt_gen_result r;
    int rc; /* mt_generate's return */
} got;

static int got_text(void *ctx, const char *s, size_t n) {
    got *g = ctx;
    if (g->len + n < sizeof g->text) memcpy(g->text + g->len, s, n), g->len += n;
    g->pieces++;
    snprintf(g->last_piece, sizeof g->last_piece, "%.*s", (int)n, s);
    if (memchr(s, 'o', n)) g->piece_had_o = true;
    return g->pieces == g->cancel_text_at ? -5 : 0;
}
static int got_reasoning(void *ctx, const char *s, size_t n) {
    got *g = ctx;
    if (g->rlen + n < sizeof g->reasoning) memcpy(g->reasoning + g->rlen, s, n), g->rlen += n;
    return 0;
}
static int got_token(void *ctx, int32_t id) {
    got *g = ctx;
    if (g->n_tokens < 64) g->tokens[g->n_tokens] = id;
    g->n_tokens++;
    return g->n_tokens == g->cancel_token_at ? 7 : 0;
}

static bool text_is(const got *g, const char *want) {
    return g->len == strlen(want) && memcmp(g->text, want, g->len) == 0;
}

/* ---- running one generation ---------------------------------------------------------------- */

typedef struct run {
    const char *script_bytes; /* then `extra` ids */
    const int32_t *extra;
    int n_extra;
    const char *prompt;  /* bytes as token ids (default "hey") */
    int32_t long_prompt; /* instead: this many 'a' tokens */
    int32_t max_tokens, n_ctx, ubatch, end_token;
    const char *stop, *stop2; /* stop2 only with stop */
    bool ignore_eog;
    const mt_reasoning *reasoning;
} run;

static void generate(fake *f, const mt_vocab *v, const run *rn, got *g) {
    static int32_t script[128], prompt[2048];
    int n = 0;
    for (const char *p = rn->script_bytes; *p; p++) script[n++] = (uint8_t)*p;
    for (int i = 0; i < rn->n_extra; i++) script[n++] = rn->extra[i];
    int np = 0;
    for (const char *p = rn->prompt ? rn->prompt : "hey"; *p && !rn->long_prompt; p++)
        prompt[np++] = (uint8_t)*p;
    while (np < rn->long_prompt) prompt[np++] = 'a';
    f->script = script;
    f->n_script = n;
    f->n_prompt = np;
    f->ended = -1;
    const char *stops[2] = {rn->stop, rn->stop2};
    const mt_gen_params p = {.prompt = prompt,
                             .n_prompt = np,
                             .max_tokens = rn->max_tokens,
                             .n_ctx = rn->n_ctx,
                             .ubatch = rn->ubatch,
                             .sp = {.temp = 0, .top_k = 0, .top_p = 1, .seed = 1},
                             .stop = stops,
                             .n_stop = !rn->stop    ? 0
                                       : !rn->stop2 ? 1
                                                    : 2,
                             .end_token = rn->end_token ? rn->end_token : -1,
                             .ignore_eog = rn->ignore_eog,
                             .reasoning = rn->reasoning};
    const mt_gen_sink sink = {got_text, got_reasoning, got_token, g};
    void *slot = f->b.slot_open(&f->b, 0, NULL);
    g->rc = mt_generate(&f->b, slot, v, &p, &sink, &g->r);
    if (g->r.begun) f->b.end(slot, g->r.evaluated);
    f->b.slot_close(&f->b, slot);
}

static void test_stops(fake *f, const mt_vocab *v) {
    got g = {0}; /* "o w" arrives over three tokens: "hell" goes out, no piece holds the 'o' */
    generate(f, v, &(run){.script_bytes = "hello world", .max_tokens = 20, .stop = "o w"}, &g);
    CHECK(text_is(&g, "hell") && !g.piece_had_o && g.r.finish == MT_GEN_STOP_STRING &&
              g.r.completion_tokens == 7 && g.r.prompt_tokens == 3 && g.rc == 0,
          "stop string over tokens: '%.*s' %s %d tokens", (int)g.len, g.text,
          mt_gen_finish_name(g.r.finish), g.r.completion_tokens);
    /* the prompt (3) and 6 generated tokens went through the model; the 7th ended it */
    CHECK(g.r.evaluated == 9 && f->ended == 9, "evaluated %lld, end() got %lld",
          (long long)g.r.evaluated, (long long)f->ended);

    memset(&g, 0, sizeof g); /* "l" may begin "lx": held back, then out at the end */
    generate(f, v, &(run){.script_bytes = "abcl", .max_tokens = 4, .stop = "lx"}, &g);
    CHECK(text_is(&g, "abcl") && g.pieces == 4 && strcmp(g.last_piece, "l") == 0 &&
              g.r.finish == MT_GEN_LENGTH,
          "held-back prefix: '%.*s' in %d pieces (last '%s') %s", (int)g.len, g.text, g.pieces,
          g.last_piece, mt_gen_finish_name(g.r.finish));

    memset(&g, 0, sizeof g); /* the earliest of two stop strings, not the first listed: at "c",
                                "xabc" holds "c" at 3 and "abc" at 1 */
    generate(f, v, &(run){.script_bytes = "xabcd", .max_tokens = 5, .stop = "c", .stop2 = "abc"},
             &g);
    CHECK(text_is(&g, "x") && g.r.finish == MT_GEN_STOP_STRING && g.r.completion_tokens == 4,
          "two stop strings: '%.*s' %s %d tokens", (int)g.len, g.text,
          mt_gen_finish_name(g.r.finish), g.r.completion_tokens);

    memset(&g, 0, sizeof g); /* max_tokens: 3 of 6, the last not evaluated */
    generate(f, v, &(run){.script_bytes = "abcdef", .max_tokens = 3}, &g);
    CHECK(text_is(&g, "abc") && g.r.finish == MT_GEN_LENGTH && g.r.completion_tokens == 3 &&
              g.r.evaluated == 5,
          "max_tokens 3: '%.*s' %d tokens, %lld evaluated", (int)g.len, g.text,
          g.r.completion_tokens, (long long)g.r.evaluated);

    memset(&g, 0, sizeof g); /* max_tokens 0: the prompt only */
    generate(f, v, &(run){.script_bytes = "abc", .max_tokens = 0}, &g);
    CHECK(g.len == 0 && g.r.completion_tokens == 0 && g.r.evaluated == 3 &&
              g.r.finish == MT_GEN_LENGTH,
          "max_tokens 0: %d tokens", g.r.completion_tokens);
}

static void test_end_tokens(fake *f, const mt_vocab *v) {
    const int32_t im_end[] = {T_TURN_END, 'z'}, eot[] = {T_EOT, 'c', 'd'};
    got g = {0}; /* the extra end token: counted, reported, no text */
    generate(f, v,
             &(run){.script_bytes = "ab",
                    .extra = im_end,
                    .n_extra = 2,
                    .max_tokens = 10,
                    .end_token = T_TURN_END},
             &g);
    CHECK(text_is(&g, "ab") && g.r.finish == MT_GEN_END_TOKEN && g.r.completion_tokens == 3 &&
              g.n_tokens == 3 && g.tokens[2] == T_TURN_END,
          "end token: '%.*s' %s %d tokens", (int)g.len, g.text, mt_gen_finish_name(g.r.finish),
          g.r.completion_tokens);

    memset(&g, 0, sizeof g); /* without it, <|turn_end|> is just a token (a control: no text) */
    generate(f, v, &(run){.script_bytes = "ab", .extra = im_end, .n_extra = 2, .max_tokens = 4},
             &g);
    CHECK(text_is(&g, "abz") && g.r.finish == MT_GEN_LENGTH && g.r.completion_tokens == 4,
          "no end token: '%.*s' %s", (int)g.len, g.text, mt_gen_finish_name(g.r.finish));

    memset(&g, 0, sizeof g); /* the vocabulary's end of generation */
    generate(f, v, &(run){.script_bytes = "ab", .extra = eot, .n_extra = 3, .max_tokens = 10}, &g);
    CHECK(text_is(&g, "ab") && g.r.finish == MT_GEN_END_TOKEN && g.r.completion_tokens == 3,
          "end of generation: '%.*s' %s %d", (int)g.len, g.text, mt_gen_finish_name(g.r.finish),
          g.r.completion_tokens);

    memset(&g, 0, sizeof g); /* ignore_eog: on past it (a control token: no text) */
    generate(
        f, v,
        &(run){
            .script_bytes = "ab", .extra = eot, .n_extra = 3, .max_tokens = 5, .ignore_eog = true},
        &g);
    CHECK(text_is(&g, "abcd") && g.r.finish == MT_GEN_LENGTH && g.r.completion_tokens == 5,
          "ignore_eog: '%.*s' %s %d", (int)g.len, g.text, mt_gen_finish_name(g.r.finish),
          g.r.completion_tokens);
}

static void test_cancel(fake *f, const mt_vocab *v) {
    got g = {.cancel_token_at = 3}; /* the token callback: before the 3rd token's text */
    generate(f, v, &(run){.script_bytes = "abcdefgh", .max_tokens = 8}, &g);
    CHECK(g.r.finish == MT_GEN_CANCELLED && g.r.cancel == 7 && text_is(&g, "ab") &&
              g.r.completion_tokens == 3 && g.r.evaluated == 5 && f->ended == 5,
          "cancel by token(): %s %d, '%.*s', %d tokens, %lld evaluated",
          mt_gen_finish_name(g.r.finish), g.r.cancel, (int)g.len, g.text, g.r.completion_tokens,
          (long long)g.r.evaluated);

    memset(&g, 0, sizeof g); /* the text callback (a client that went away) */
    g.cancel_text_at = 2;
    generate(f, v, &(run){.script_bytes = "abcdefgh", .max_tokens = 8}, &g);
    CHECK(g.r.finish == MT_GEN_CANCELLED && g.r.cancel == -5 && g.pieces == 2 &&
              g.r.completion_tokens == 2,
          "cancel by text(): %s %d after %d pieces", mt_gen_finish_name(g.r.finish), g.r.cancel,
          g.pieces);
}

static void test_evaluations(fake *f, const mt_vocab *v) {
    got g = {0}; /* a 5-token prompt in micro-batches of 2, then a token per step */
    generate(f, v, &(run){.script_bytes = "xyz", .prompt = "hello", .max_tokens = 3, .ubatch = 2},
             &g);
    CHECK(f->n_calls == 5 && f->calls[0] == 2 && f->calls[1] == 2 && f->calls[2] == 1 &&
              f->calls[3] == 1 && f->calls[4] == 1 && text_is(&g, "xyz") && g.r.evaluated == 7,
          "ubatch 2: %d calls (%d %d %d ...), '%.*s'", f->n_calls, f->calls[0], f->calls[1],
          f->calls[2], (int)g.len, g.text);
    CHECK(f->n_ctx == 8, "context: prompt 5 + max_tokens 3 = %d", f->n_ctx);

    memset(&g, 0, sizeof g); /* no ubatch: micro-batches of 512 (MT_GEN_UBATCH_DEFAULT) */
    generate(f, v, &(run){.script_bytes = "xyz", .long_prompt = 1100, .max_tokens = 2}, &g);
    CHECK(f->n_calls == 4 && f->calls[0] == 512 && f->calls[1] == 512 && f->calls[2] == 76 &&
              f->calls[3] == 1 && text_is(&g, "xy") && g.r.evaluated == 1101,
          "1100-token prompt, no ubatch: %d calls (%d %d %d ...), '%.*s'", f->n_calls, f->calls[0],
          f->calls[1], f->calls[2], (int)g.len, g.text);

    memset(&g, 0, sizeof g); /* a prompt shorter than that at once, in a larger context */
    generate(f, v, &(run){.script_bytes = "xyz", .prompt = "hello", .max_tokens = 3, .n_ctx = 64},
             &g);
    CHECK(f->n_calls == 3 && f->calls[0] == 5 && f->n_ctx == 64 && text_is(&g, "xyz"),
          "whole prompt: %d calls, first %d, context %d", f->n_calls, f->calls[0], f->n_ctx);

    memset(&g, 0, sizeof g); /* UTF-8: a two-byte character goes out whole */
    generate(f, v, &(run){.script_bytes = "x\xc3\xa9y", .max_tokens = 4}, &g);
    CHECK(text_is(&g, "x\xc3\xa9y") && g.pieces == 3, "UTF-8: %d pieces", g.pieces);
}

static void test_failures(fake *f, const mt_vocab *v) {
    got g = {0};
    f->fail_begin = 1;
    generate(f, v, &(run){.script_bytes = "ab", .max_tokens = 2}, &g);
    f->fail_begin = 0;
    CHECK(g.r.finish == MT_GEN_FAILED && g.r.failure == MT_GEN_FAIL_BEGIN && !g.r.begun &&
              f->ended == -1 && strstr(g.r.err.msg, "no route") && g.rc == -1,
          "begin fails: %s %d '%s'", mt_gen_finish_name(g.r.finish), g.r.failure, g.r.err.msg);

    memset(&g, 0, sizeof g); /* the second chunk of the prompt */
    f->fail_eval_call = 2;
    generate(f, v, &(run){.script_bytes = "ab", .prompt = "hello", .ubatch = 2, .max_tokens = 2},
             &g);
    CHECK(g.r.failure == MT_GEN_FAIL_PROMPT && g.r.begun && g.r.evaluated == 2 && f->ended == 2 &&
              strstr(g.r.err.msg, "went away") && g.rc == -1,
          "prompt fails: %d, %lld evaluated", g.r.failure, (long long)g.r.evaluated);

    memset(&g, 0, sizeof g); /* the second generated token */
    f->fail_eval_call = 3;
    generate(f, v, &(run){.script_bytes = "abcd", .max_tokens = 4}, &g);
    f->fail_eval_call = 0;
    CHECK(g.r.failure == MT_GEN_FAIL_STEP && text_is(&g, "ab") && g.r.evaluated == 4 && g.rc == -1,
          "step fails: %d, '%.*s', %lld evaluated", g.r.failure, (int)g.len, g.text,
          (long long)g.r.evaluated);
}

static void test_reasoning(fake *f, const mt_vocab *v) {
    mt_reasoning r = {0};
    static const char *const open[] = {"<think>", NULL}, *const close[] = {"</think>", NULL};
    CHECK(mt_reasoning_marker(&r, v, open, r.open) == 0 &&
              mt_reasoning_marker(&r, v, close, r.close[0]) == 0,
          "markers");
    r.on = true;
    got g = {0}; /* "b" is in the reasoning only: it does not cut the answer */
    generate(
        f, v,
        &(run){
            .script_bytes = "<think>ab</think>xby", .max_tokens = 20, .stop = "b", .reasoning = &r},
        &g);
    CHECK(g.rlen == 2 && memcmp(g.reasoning, "ab", 2) == 0 && text_is(&g, "x") &&
              g.r.finish == MT_GEN_STOP_STRING,
          "reasoning '%.*s', answer '%.*s' %s", (int)g.rlen, g.reasoning, (int)g.len, g.text,
          mt_gen_finish_name(g.r.finish));

    /* "<th" may still open the reasoning, so the splitter holds it until the output ends; then
     * it is the answer, and the stop string in it is found only in that last flush */
    memset(&g, 0, sizeof g);
    generate(f, v, &(run){.script_bytes = "<th", .max_tokens = 3, .reasoning = &r}, &g);
    CHECK(text_is(&g, "<th") && g.pieces == 1 && g.r.finish == MT_GEN_LENGTH,
          "held to the end, no stop string: '%.*s' in %d pieces %s", (int)g.len, g.text, g.pieces,
          mt_gen_finish_name(g.r.finish));
    memset(&g, 0, sizeof g);
    generate(f, v, &(run){.script_bytes = "<th", .max_tokens = 3, .stop = "th", .reasoning = &r},
             &g);
    CHECK(text_is(&g, "<") && g.rlen == 0 && g.r.finish == MT_GEN_STOP_STRING &&
              g.r.completion_tokens == 3 && g.rc == 0,
          "stop string in the last flush: '%.*s' %s", (int)g.len, g.text,
          mt_gen_finish_name(g.r.finish));
}

static mt_vocab *byte_vocab(void) {
    static const char *const toks[] = {"<|endoftext|>", "<|turn_end|>"};
    gguf_writer *w = gguf_writer_new();
    mt_vocab_write_bytes_with(w, "default", false, toks, 2);
    const char *path = check_tmp(".gguf");
    mt_error err = {{0}};
    mt_vocab *v = NULL;
    gguf_file *gf = NULL;
    if (gguf_writer_write(w, path, &err) == 0 && (gf = gguf_open(path, &err))) {
        v = mt_vocab_load(gf, &err);
        gguf_close(gf);
    }
    unlink(path);
    gguf_writer_free(w);
    CHECK(v, "test vocabulary: %s", err.msg);
    return v;
}

int main(void) {
    mt_vocab *v = byte_vocab();
    if (v) {
        CHECK(mt_vocab_is_eog(v, T_EOT) && !mt_vocab_is_eog(v, T_TURN_END) &&
                  mt_vocab_n_tokens(v) == 258,
              "the vocabulary: <|endoftext|> ends generation, <|turn_end|> does not");
        fake f = {.b = {.kind = "fake",
                        .n_vocab = mt_vocab_n_tokens(v),
                        .max_ctx = 4096,
                        .slot_open = fake_open,
                        .slot_close = fake_close,
                        .begin = fake_begin,
                        .eval = fake_eval,
                        .end = fake_end}};
        f.b.impl = &f;
        test_stops(&f, v);
        test_end_tokens(&f, v);
        test_cancel(&f, v);
        test_evaluations(&f, v);
        test_failures(&f, v);
        test_reasoning(&f, v);
    }
    mt_vocab_free(v);
    return check_report("test_generate");
}

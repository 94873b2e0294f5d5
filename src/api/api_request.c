/* api_request.c - request bodies of /v1/completions and /v1/chat/completions
 * (api_openai.h): parsed and checked field by field.
 *
 * Every field a client may send is known here. Fields this server cannot
 * honour (tools, logprobs, n > 1, ...) are refused with a 400 that names
 * them, rather than silently ignored; fields without effect on the output
 * (user, store, metadata, ...) are accepted. Unknown fields are refused, as
 * OpenAI does ("Unrecognized request argument supplied"). */
#include "api_openai.h"
#include "moontail/compat.h"

#include <math.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- field checks ------------------------------------------------------------------------- */

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "something else";
}

static int bad_request(api_error *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad_request(api_error *e, const char *param, const char *fmt, ...) {
    char msg[sizeof e->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return api_fail(e, 400, "invalid_request_error", param, NULL, "%s", msg);
}

static int unsupported(api_error *e, const char *param, const char *what) {
    return api_fail(e, 400, "invalid_request_error", param, "unsupported_parameter",
                    "'%s': %s is not supported by this server (moontail serve); see docs/api.md",
                    param, what);
}

/* The field, or NULL when absent or null (OpenAI treats both as "not given"). */
static json_t *field(const api_request *rq, const char *name) {
    json_t *v = json_object_get(rq->root, name);
    return v && !json_is_null(v) ? v : NULL;
}

/* A number in [lo, hi] into *out (unchanged when absent). */
static int num_field(const api_request *rq, const char *name, double lo, double hi, float *out,
                     api_error *e) {
    json_t *v = field(rq, name);
    if (!v) return 0;
    if (!json_is_number(v))
        return bad_request(e, name, "Invalid '%s': expected a number from %g to %g, but got %s",
                           name, lo, hi, type_name(v));
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return bad_request(e, name, "Invalid '%s': %g is out of range; it must be from %g to %g",
                           name, d, lo, hi);
    *out = (float)d;
    return 0;
}

/* A whole number in [lo, hi] into *out (unchanged when absent). */
static int int_field(const api_request *rq, const char *name, int64_t lo, int64_t hi, int64_t *out,
                     api_error *e) {
    json_t *v = field(rq, name);
    if (!v) return 0;
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
        fabs(json_real_value(v)) < 9e15) {
        /* 16.0 is a whole number too */
    } else if (!json_is_integer(v)) {
        return bad_request(e, name, "Invalid '%s': expected an integer, but got %s", name,
                           type_name(v));
    }
    int64_t x = json_is_integer(v) ? json_integer_value(v) : (int64_t)json_real_value(v);
    if (x < lo || x > hi) {
        if (hi == INT64_MAX)
            return bad_request(e, name, "Invalid '%s': %lld is out of range; it must be >= %lld",
                               name, (long long)x, (long long)lo);
        return bad_request(e, name,
                           "Invalid '%s': %lld is out of range; it must be from %lld to %lld", name,
                           (long long)x, (long long)lo, (long long)hi);
    }
    *out = x;
    return 0;
}

static int bool_field(const api_request *rq, const char *name, bool *out, api_error *e) {
    json_t *v = field(rq, name);
    if (!v) return 0;
    if (!json_is_boolean(v))
        return bad_request(e, name, "Invalid '%s': expected a boolean, but got %s", name,
                           type_name(v));
    *out = json_is_true(v);
    return 0;
}

static int string_field(const api_request *rq, const char *name, const char **out, api_error *e) {
    json_t *v = field(rq, name);
    if (!v) return 0;
    if (!json_is_string(v))
        return bad_request(e, name, "Invalid '%s': expected a string, but got %s", name,
                           type_name(v));
    *out = json_string_value(v);
    return 0;
}

/* ---- the fields each endpoint knows ------------------------------------------------------- */

static const char *const COMMON_FIELDS[] = {"model",
                                            "max_tokens",
                                            "temperature",
                                            "top_p",
                                            "seed",
                                            "stop",
                                            "stream",
                                            "stream_options",
                                            "n",
                                            "frequency_penalty",
                                            "presence_penalty",
                                            "logit_bias",
                                            "logprobs",
                                            "user",
                                            NULL};
static const char *const COMPLETION_FIELDS[] = {"prompt", "best_of", "echo", "suffix", NULL};
static const char *const CHAT_FIELDS[] = {"messages",
                                          "max_completion_tokens",
                                          "top_logprobs",
                                          "tools",
                                          "tool_choice",
                                          "parallel_tool_calls",
                                          "response_format",
                                          "functions",
                                          "function_call",
                                          "store",
                                          "metadata",
                                          "service_tier",
                                          "modalities",
                                          "audio",
                                          "prediction",
                                          "reasoning_effort",
                                          "web_search_options",
                                          "chat_template_kwargs",
                                          NULL};

static bool listed(const char *const *names, const char *k) {
    for (; *names; names++)
        if (strcmp(*names, k) == 0) return true;
    return false;
}

static int check_known_fields(const api_request *rq, api_error *e) {
    const char *k;
    json_t *v;
    json_object_foreach(rq->root, k, v) {
        (void)v;
        if (listed(COMMON_FIELDS, k) ||
            listed(rq->kind == API_CHAT ? CHAT_FIELDS : COMPLETION_FIELDS, k))
            continue;
        const bool other = listed(rq->kind == API_CHAT ? COMPLETION_FIELDS : CHAT_FIELDS, k);
        return bad_request(e, k, "Unrecognized request argument supplied: '%s'%s", k,
                           other ? rq->kind == API_CHAT ? " (it belongs to /v1/completions)"
                                                        : " (it belongs to /v1/chat/completions)"
                                 : "");
    }
    return 0;
}

/* stop: a string, or an array of up to 4 strings; each non-empty. */
static int parse_stop(api_request *rq, api_error *e) {
    json_t *v = field(rq, "stop");
    if (!v) return 0;
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > MT_GEN_MAX_STOP)
            return bad_request(e, "stop", "Invalid 'stop': at most %d stop strings, got %zu",
                               MT_GEN_MAX_STOP, n);
    } else if (!json_is_string(v)) {
        return bad_request(e, "stop",
                           "Invalid 'stop': expected a string or an array of strings, but got %s",
                           type_name(v));
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(s))
            return bad_request(e, "stop", "Invalid 'stop[%zu]': expected a string, but got %s", i,
                               type_name(s));
        size_t len = json_string_length(s);
        if (len == 0 || len > 1000 || memchr(json_string_value(s), 0, len))
            return bad_request(e, "stop",
                               "Invalid 'stop': each stop string must hold 1 to 1000 bytes"
                               " (and no NUL)");
        if (!(rq->stop[rq->n_stop] = mt_strndup(json_string_value(s), len)))
            return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        rq->n_stop++;
    }
    return 0;
}

static int parse_prompt(api_request *rq, api_error *e) {
    json_t *v = json_object_get(rq->root, "prompt");
    if (!v || json_is_null(v))
        return bad_request(e, "prompt", "Missing required parameter: 'prompt'");
    if (json_is_array(v)) {
        size_t n = json_array_size(v);
        if (n == 0) return bad_request(e, "prompt", "Invalid 'prompt': the array is empty");
        json_t *first = json_array_get(v, 0);
        if (json_is_integer(first) || json_is_array(first))
            return unsupported(e, "prompt", "a prompt of token ids");
        if (n > 1)
            return bad_request(e, "prompt",
                               "Invalid 'prompt': only one prompt per request is supported, got"
                               " %zu; send one request per prompt",
                               n);
        v = first;
    }
    if (!json_is_string(v))
        return bad_request(e, "prompt",
                           "Invalid 'prompt': expected a string or an array of one string, but"
                           " got %s",
                           type_name(v));
    rq->prompt = json_string_value(v);
    rq->prompt_len = json_string_length(v);
    return 0;
}

/* A message's content: a string, or an array of {"type": "text", "text"} parts
 * (joined with newlines into rq->owned[i]). */
static int parse_content(api_request *rq, int i, json_t *c, api_error *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", i);
    mt_chat_message *m = &rq->messages[i];
    if (json_is_string(c)) {
        m->text = json_string_value(c);
        m->len = json_string_length(c);
        return 0;
    }
    if (json_is_null(c)) {
        if (m->role != MT_CHAT_ROLE_ASSISTANT)
            return bad_request(e, param,
                               "Invalid '%s': only an assistant message may have no"
                               " content",
                               param);
        m->text = "";
        m->len = 0;
        return 0;
    }
    if (!json_is_array(c))
        return bad_request(e, param,
                           "Invalid '%s': expected a string or an array of text parts,"
                           " but got %s",
                           param, type_name(c));
    size_t total = 0, k;
    json_t *part;
    json_array_foreach(c, k, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type))
            return bad_request(e, param, "Invalid '%s[%zu]': expected an object with a 'type'",
                               param, k);
        if (strcmp(json_string_value(type), "text") != 0) {
            char what[96];
            snprintf(what, sizeof what, "a content part of type '%.40s'", json_string_value(type));
            return unsupported(e, param, what);
        }
        if (!json_is_string(text))
            return bad_request(e, param, "Invalid '%s[%zu].text': expected a string, but got %s",
                               param, k, text ? type_name(text) : "nothing");
        total += json_string_length(text) + 1;
    }
    char *joined = malloc(total + 1);
    if (!joined) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    size_t n = 0;
    json_array_foreach(c, k, part) {
        json_t *text = json_object_get(part, "text");
        if (k) joined[n++] = '\n';
        memcpy(joined + n, json_string_value(text), json_string_length(text));
        n += json_string_length(text);
    }
    joined[n] = 0;
    rq->owned[i] = joined;
    m->text = joined;
    m->len = n;
    return 0;
}

/* An assistant message's reasoning_content: a string, or null (none). */
static int parse_reasoning(api_request *rq, int i, const json_t *r, api_error *e) {
    if (!r || json_is_null(r)) return 0;
    char param[64];
    snprintf(param, sizeof param, "messages[%d].reasoning_content", i);
    mt_chat_message *m = &rq->messages[i];
    if (m->role != MT_CHAT_ROLE_ASSISTANT)
        return bad_request(e, param,
                           "Invalid '%s': only an assistant message may carry"
                           " reasoning_content",
                           param);
    if (!json_is_string(r))
        return bad_request(e, param, "Invalid '%s': expected a string or null, but got %s", param,
                           type_name(r));
    m->reasoning = json_string_value(r);
    m->reasoning_len = json_string_length(r);
    return 0;
}

static int parse_messages(api_request *rq, api_error *e) {
    json_t *v = json_object_get(rq->root, "messages");
    if (!v || json_is_null(v))
        return bad_request(e, "messages", "Missing required parameter: 'messages'");
    if (!json_is_array(v))
        return bad_request(e, "messages", "Invalid 'messages': expected an array, but got %s",
                           type_name(v));
    size_t n = json_array_size(v);
    if (n == 0)
        return bad_request(e, "messages",
                           "Invalid 'messages': empty array; expected at least"
                           " one message");
    if (n > 100000)
        return bad_request(e, "messages", "Invalid 'messages': %zu messages is too many", n);
    rq->messages = calloc(n, sizeof *rq->messages);
    rq->owned = calloc(n, sizeof *rq->owned);
    if (!rq->messages || !rq->owned)
        return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    rq->n_messages = (int)n;
    for (int i = 0; i < (int)n; i++) {
        json_t *m = json_array_get(v, (size_t)i);
        char param[64];
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!json_is_object(m))
            return bad_request(e, param, "Invalid '%s': expected an object, but got %s", param,
                               type_name(m));
        const char *k;
        json_t *x;
        json_object_foreach(m, k, x) {
            if (strcmp(k, "role") == 0 || strcmp(k, "content") == 0 || strcmp(k, "name") == 0 ||
                strcmp(k, "reasoning_content") == 0)
                continue;
            if (strcmp(k, "refusal") == 0 && json_is_null(x)) continue;
            snprintf(param, sizeof param, "messages[%d].%.40s", i, k);
            if (strcmp(k, "tool_calls") == 0 || strcmp(k, "function_call") == 0 ||
                strcmp(k, "tool_call_id") == 0 || strcmp(k, "audio") == 0)
                return unsupported(e, param, "tool calling and audio");
            return bad_request(e, param, "Unrecognized field '%s' in a message", param);
        }
        json_t *role = json_object_get(m, "role");
        snprintf(param, sizeof param, "messages[%d].role", i);
        if (!json_is_string(role))
            return bad_request(e, param,
                               "Invalid '%s': expected one of 'system', 'developer',"
                               " 'user', 'assistant', but got %s",
                               param, role ? type_name(role) : "nothing");
        const char *r = json_string_value(role);
        if (strcmp(r, "system") == 0 || strcmp(r, "developer") == 0)
            rq->messages[i].role = MT_CHAT_ROLE_SYSTEM;
        else if (strcmp(r, "user") == 0)
            rq->messages[i].role = MT_CHAT_ROLE_USER;
        else if (strcmp(r, "assistant") == 0)
            rq->messages[i].role = MT_CHAT_ROLE_ASSISTANT;
        else if (strcmp(r, "tool") == 0 || strcmp(r, "function") == 0)
            return unsupported(e, param, "the role 'tool' (tool calling)");
        else
            return bad_request(e, param,
                               "Invalid '%s': '%.40s' is not one of 'system',"
                               " 'developer', 'user', 'assistant'",
                               param, r);
        json_t *name = json_object_get(m, "name");
        if (name && !json_is_string(name)) {
            snprintf(param, sizeof param, "messages[%d].name", i);
            return bad_request(e, param, "Invalid '%s': expected a string, but got %s", param,
                               type_name(name));
        }
        json_t *c = json_object_get(m, "content");
        if (!c) {
            snprintf(param, sizeof param, "messages[%d].content", i);
            return bad_request(e, param, "Missing required parameter: '%s'", param);
        }
        if (parse_content(rq, i, c, e)) return -1;
        if (parse_reasoning(rq, i, json_object_get(m, "reasoning_content"), e)) return -1;
    }
    return 0;
}

/* chat_template_kwargs: variables for the chat template. Limited in number and size;
 * names must be template identifiers and not the ones the server sets; the variables the
 * built-in families read must have the types their templates expect. */
enum { KWARGS_MAX = 32, KWARGS_MAX_BYTES = 16384, KWARGS_NAME_MAX = 64, KWARGS_MAX_DEPTH = 16 };

/* How deep a JSON value nests (a scalar: 0), counting at most to limit + 1. */
static int json_depth(const json_t *v, int limit) {
    if (limit < 0 || (!json_is_object(v) && !json_is_array(v))) return 0;
    int deepest = 0;
    size_t i;
    const char *k;
    json_t *x;
    if (json_is_array(v)) {
        json_array_foreach(v, i, x) {
            int d = json_depth(x, limit - 1);
            if (d > deepest) deepest = d;
        }
    } else {
        json_object_foreach((json_t *)v, k, x) {
            int d = json_depth(x, limit - 1);
            if (d > deepest) deepest = d;
        }
    }
    return deepest + 1;
}

static int parse_chat_kwargs(api_request *rq, api_error *e) {
    json_t *v = field(rq, "chat_template_kwargs");
    if (!v) return 0;
    if (!json_is_object(v))
        return bad_request(e, "chat_template_kwargs",
                           "Invalid 'chat_template_kwargs': expected an object of template"
                           " variables, but got %s",
                           type_name(v));
    if (json_object_size(v) > KWARGS_MAX)
        return bad_request(e, "chat_template_kwargs",
                           "Invalid 'chat_template_kwargs': %zu variables; at most %d are"
                           " allowed",
                           json_object_size(v), KWARGS_MAX);
    char *dump = json_dumps(v, JSON_COMPACT);
    const size_t bytes = dump ? strlen(dump) : 0;
    free(dump);
    if (!dump) return api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (bytes > KWARGS_MAX_BYTES)
        return bad_request(e, "chat_template_kwargs",
                           "Invalid 'chat_template_kwargs': %zu bytes of JSON; at most %d are"
                           " allowed",
                           bytes, KWARGS_MAX_BYTES);
    static const char *const reserved[] = {
        "messages", "add_generation_prompt", "tools", "documents", "bos_token", "eos_token", NULL};
    const char *k;
    json_t *x;
    char param[64];
    json_object_foreach(v, k, x) {
        const size_t kl = strlen(k);
        bool ident = kl > 0 && kl <= KWARGS_NAME_MAX && !(k[0] >= '0' && k[0] <= '9');
        for (size_t i = 0; ident && i < kl; i++)
            ident = (k[i] >= 'a' && k[i] <= 'z') || (k[i] >= 'A' && k[i] <= 'Z') ||
                    (k[i] >= '0' && k[i] <= '9') || k[i] == '_';
        if (!ident)
            return bad_request(e, "chat_template_kwargs",
                               "Invalid 'chat_template_kwargs': '%.64s' is not a template"
                               " variable name (1 to %d letters, digits and '_', not starting"
                               " with a digit)",
                               k, KWARGS_NAME_MAX);
        snprintf(param, sizeof param, "chat_template_kwargs.%.40s", k);
        if (listed(reserved, k))
            return bad_request(e, param,
                               "Invalid '%s': the server sets '%s' itself; give it in the"
                               " request's own fields",
                               param, k);
        if (json_depth(x, KWARGS_MAX_DEPTH) > KWARGS_MAX_DEPTH)
            return bad_request(e, param,
                               "Invalid '%s': the value nests more than %d levels of arrays and"
                               " objects",
                               param, KWARGS_MAX_DEPTH);
        if ((strcmp(k, "enable_thinking") == 0 || strcmp(k, "thinking") == 0) &&
            !json_is_boolean(x))
            return bad_request(e, param, "Invalid '%s': expected a boolean, but got %s", param,
                               type_name(x));
        if (strcmp(k, "thinking_effort") == 0) {
            const char *t = json_string_value(x);
            if (!json_is_null(x) &&
                !(t && (!strcmp(t, "low") || !strcmp(t, "high") || !strcmp(t, "max"))))
                return bad_request(e, param,
                                   "Invalid '%s': expected 'low', 'high', 'max' or null (no"
                                   " effort message), but got %s%s%.40s%s",
                                   param, t ? "'" : "", t ? "" : type_name(x), t ? t : "",
                                   t ? "'" : "");
        }
    }
    rq->chat_kwargs = v;
    return 0;
}

/* Fields that only have a neutral value here: anything else is refused. */
static int neutral_fields(api_request *rq, api_error *e) {
    json_t *v;
    int64_t n = 1;
    if (int_field(rq, "n", 1, INT64_MAX, &n, e)) return -1;
    if (n != 1)
        return bad_request(e, "n",
                           "Invalid 'n': only n = 1 (one choice per request) is"
                           " supported, got %lld",
                           (long long)n);
    if ((v = field(rq, "logit_bias")) && !(json_is_object(v) && json_object_size(v) == 0))
        return unsupported(e, "logit_bias", "a logit bias");
    if ((v = field(rq, "logprobs")) && !json_is_false(v) &&
        !(json_is_integer(v) && json_integer_value(v) == 0))
        return unsupported(e, "logprobs", "returning log probabilities");
    const char *user = NULL;
    if (string_field(rq, "user", &user, e)) return -1;
    if (rq->kind == API_COMPLETIONS) {
        int64_t best_of = 1;
        if (int_field(rq, "best_of", 1, INT64_MAX, &best_of, e)) return -1;
        if (best_of != 1) return unsupported(e, "best_of", "best_of > 1");
        if ((v = field(rq, "echo")) && !json_is_false(v))
            return json_is_boolean(v) ? unsupported(e, "echo", "echoing the prompt")
                                      : bad_request(e, "echo",
                                                    "Invalid 'echo': expected a"
                                                    " boolean, but got %s",
                                                    type_name(v));
        if ((v = field(rq, "suffix")) && !(json_is_string(v) && json_string_length(v) == 0))
            return unsupported(e, "suffix", "a suffix (fill-in-the-middle)");
        return 0;
    }
    if ((v = field(rq, "top_logprobs")) && !(json_is_integer(v) && json_integer_value(v) == 0))
        return unsupported(e, "top_logprobs", "returning log probabilities");
    if ((v = field(rq, "tools")) && !(json_is_array(v) && json_array_size(v) == 0))
        return unsupported(e, "tools", "tool calling");
    if ((v = field(rq, "functions")) && !(json_is_array(v) && json_array_size(v) == 0))
        return unsupported(e, "functions", "function calling");
    if ((v = field(rq, "tool_choice")) &&
        !(json_is_string(v) &&
          (strcmp(json_string_value(v), "none") == 0 || strcmp(json_string_value(v), "auto") == 0)))
        return unsupported(e, "tool_choice", "tool calling");
    if ((v = field(rq, "function_call")) &&
        !(json_is_string(v) &&
          (strcmp(json_string_value(v), "none") == 0 || strcmp(json_string_value(v), "auto") == 0)))
        return unsupported(e, "function_call", "function calling");
    bool b = false;
    if (bool_field(rq, "parallel_tool_calls", &b, e) || bool_field(rq, "store", &b, e)) return -1;
    if ((v = field(rq, "response_format"))) {
        json_t *t = json_object_get(v, "type");
        if (!json_is_object(v) || !json_is_string(t))
            return bad_request(e, "response_format",
                               "Invalid 'response_format': expected an"
                               " object with a 'type'");
        if (strcmp(json_string_value(t), "text") != 0)
            return unsupported(e, "response_format", "a response format other than 'text'");
    }
    if ((v = field(rq, "metadata")) && !json_is_object(v))
        return bad_request(e, "metadata", "Invalid 'metadata': expected an object, but got %s",
                           type_name(v));
    const char *s = NULL;
    if (string_field(rq, "service_tier", &s, e) || string_field(rq, "reasoning_effort", &s, e))
        return -1;
    if ((v = field(rq, "modalities"))) {
        if (!json_is_array(v))
            return bad_request(e, "modalities", "Invalid 'modalities': expected an array");
        size_t k;
        json_t *m;
        json_array_foreach(v, k, m) {
            if (!json_is_string(m) || strcmp(json_string_value(m), "text") != 0)
                return unsupported(e, "modalities", "an output modality other than 'text'");
        }
    }
    if (field(rq, "audio")) return unsupported(e, "audio", "audio output");
    if (field(rq, "prediction")) return unsupported(e, "prediction", "predicted outputs");
    if (field(rq, "web_search_options")) return unsupported(e, "web_search_options", "web search");
    return 0;
}

int api_request_parse(api_kind kind, const char *body, size_t len, const char *model_name,
                      api_request *rq, api_error *e) {
    memset(rq, 0, sizeof *rq);
    rq->kind = kind;
    rq->max_tokens = -1;
    /* OpenAI's sampling: temperature and top_p only, llama.cpp's other filters off */
    rq->sp = mt_sampler_default_params();
    rq->sp.temp = 1.0f;
    rq->sp.top_p = 1.0f;
    rq->sp.top_k = 0;
    rq->sp.min_p = 0.0f;
    rq->sp.repeat_last_n = -1; /* frequency and presence penalties see the whole text */
    json_error_t je;
    rq->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!rq->root && strstr(je.text, "\\u0000"))
        return api_fail(e, 400, "invalid_request_error", NULL, "invalid_json",
                        "The JSON body holds \\u0000 (a NUL character) in a string (line %d,"
                        " column %d); text sent to this server must not contain NUL",
                        je.line, je.column);
    if (!rq->root)
        return api_fail(e, 400, "invalid_request_error", NULL, "invalid_json",
                        "We could not parse the JSON body of your request: %s (line %d, column"
                        " %d). The body must be a JSON object, sent with Content-Type:"
                        " application/json",
                        je.text, je.line, je.column);
    if (!json_is_object(rq->root))
        return api_fail(e, 400, "invalid_request_error", NULL, "invalid_json",
                        "The request body must be a JSON object, but it is %s",
                        type_name(rq->root));
    if (check_known_fields(rq, e)) return -1;
    json_t *model = json_object_get(rq->root, "model");
    if (!model || json_is_null(model))
        return bad_request(e, "model",
                           "Missing required parameter: 'model' (this server serves"
                           " '%s')",
                           model_name);
    if (!json_is_string(model))
        return bad_request(e, "model", "Invalid 'model': expected a string, but got %s",
                           type_name(model));
    rq->model = json_string_value(model);
    if (strcmp(rq->model, model_name) != 0)
        return api_fail(e, 400, "invalid_request_error", "model", "model_not_found",
                        "The model '%.200s' does not exist on this server; it serves '%s' (see"
                        " GET /v1/models)",
                        rq->model, model_name);
    if (kind == API_COMPLETIONS ? parse_prompt(rq, e) : parse_messages(rq, e)) return -1;
    if (kind == API_CHAT && parse_chat_kwargs(rq, e)) return -1;
    /* max_completion_tokens is the newer name of max_tokens in chat */
    const char *mt_name = kind == API_CHAT && field(rq, "max_completion_tokens")
                              ? "max_completion_tokens"
                              : "max_tokens";
    if (kind == API_CHAT && field(rq, "max_completion_tokens") && field(rq, "max_tokens"))
        return bad_request(e, "max_tokens",
                           "Give either 'max_tokens' or 'max_completion_tokens',"
                           " not both");
    if (int_field(rq, mt_name, 1, 1 << 24, &rq->max_tokens, e)) return -1;
    int64_t seed = -1;
    if (num_field(rq, "temperature", 0, 2, &rq->sp.temp, e) ||
        num_field(rq, "top_p", 0, 1, &rq->sp.top_p, e) ||
        num_field(rq, "frequency_penalty", -2, 2, &rq->sp.freq_penalty, e) ||
        num_field(rq, "presence_penalty", -2, 2, &rq->sp.presence_penalty, e) ||
        int_field(rq, "seed", INT64_MIN, INT64_MAX, &seed, e))
        return -1;
    if (field(rq, "seed"))
        rq->sp.seed = (uint64_t)seed;
    else
        randombytes_buf(&rq->sp.seed, sizeof rq->sp.seed);
    if (parse_stop(rq, e) || bool_field(rq, "stream", &rq->stream, e)) return -1;
    json_t *so = field(rq, "stream_options");
    if (so) {
        if (!rq->stream)
            return bad_request(e, "stream_options",
                               "The 'stream_options' parameter is only"
                               " allowed when 'stream' is true");
        if (!json_is_object(so))
            return bad_request(e, "stream_options",
                               "Invalid 'stream_options': expected an"
                               " object, but got %s",
                               type_name(so));
        const char *k;
        json_t *x;
        json_object_foreach(so, k, x) {
            if (strcmp(k, "include_usage") == 0 && json_is_boolean(x))
                rq->include_usage = json_is_true(x);
            else if (strcmp(k, "include_obfuscation") == 0 && json_is_boolean(x))
                continue; /* nothing to obfuscate on loopback or a LAN */
            else
                return bad_request(e, "stream_options",
                                   "Invalid 'stream_options.%.40s': only"
                                   " include_usage (a boolean) is known",
                                   k);
        }
    }
    return neutral_fields(rq, e);
}

void api_request_free(api_request *rq) {
    for (int i = 0; rq->owned && i < rq->n_messages; i++) free(rq->owned[i]);
    free(rq->owned);
    free(rq->messages);
    for (int i = 0; i < rq->n_stop; i++) free(rq->stop[i]);
    json_decref(rq->root);
    memset(rq, 0, sizeof *rq);
}

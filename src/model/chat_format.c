/* chat_format.c - chat templates of the common model families (chat_format.h),
 * rendered in C instead of running the GGUF's Jinja template.
 *
 * A conversation becomes a list of segments: the template's own text (its
 * special tokens parsed) and the messages' text (plain). Rendering joins
 * them; tokenizing tokenizes each run of one kind and joins the ids. Both
 * come from the one list, so what the logs show is what the model sees.
 *
 * The thinking families follow their templates (Qwen3, DeepSeek R1 and V3.1,
 * Kimi K2 Thinking, Kimi K3) for plain conversations: where an assistant
 * message's reasoning goes or is dropped, and the variables they read from
 * chat_template_kwargs. tests/test_api.c holds the texts the real templates
 * give (tools/chat/render_templates.py). */
#include "moontail/chat_format.h"
#include "moontail/compat.h"

#include <stdlib.h>
#include <string.h>

/* UTF-8 of the DeepSeek markers: ｜ is U+FF5C, ▁ is U+2581. */
#define DS_BAR  "\xef\xbd\x9c"
#define DS_SP   "\xe2\x96\x81"
#define DS_USER "<" DS_BAR "User" DS_BAR ">"
#define DS_ASST "<" DS_BAR "Assistant" DS_BAR ">"
#define DS_EOS  "<" DS_BAR "end" DS_SP "of" DS_SP "sentence" DS_BAR ">"

/* Kimi K2's template adds this system message when the conversation has none. */
#define KIMI_DEFAULT_SYSTEM "You are Kimi, an AI assistant created by Moonshot AI."

/* Kimi K3 writes XTML tags: a tag opens as <|open|>name attr="value"...<|sep|> and closes as
 * <|close|>name<|sep|>; every message ends with <|end_of_msg|>. Its template's defaults
 * (thinking on, thinking_effort "max") add a system message of type thinking-effort before
 * the conversation, wrap each past assistant message in an empty think section and a
 * response section, and open the new assistant message with its think section. */
#define K3_EOM        "<|end_of_msg|>"
#define K3_MSG_END    "<|close|>message<|sep|>" K3_EOM
#define K3_SYSTEM     "<|open|>message role=\"system\"<|sep|>"
#define K3_USER       "<|open|>message role=\"user\"<|sep|>"
#define K3_ASSISTANT  "<|open|>message role=\"assistant\"<|sep|>"
#define K3_THINK_OPEN "<|open|>think<|sep|>"
#define K3_EFFORT                                                                                  \
    "<|open|>message role=\"system\" type=\"thinking-effort\"<|sep|>"                              \
    "`thinking_effort` guides on how much to think in your thinking channel (not including the"    \
    " response channel), supported values include `low`, `medium`, `high`, and `max`.\n"           \
    "Now the system is invoked with `thinking_effort="

/* ---- detection ---------------------------------------------------------------------------- */

mt_chat_format mt_chat_detect(const char *tmpl, bool *known) {
    *known = true;
    if (tmpl) {
        /* Kimi K3's tag markers (llama.cpp's test: all three), before any other family */
        if (strstr(tmpl, "<|open|>") && strstr(tmpl, "<|close|>") && strstr(tmpl, K3_EOM))
            return MT_CHAT_KIMI_K3;
        /* Kimi K2's markers next: its template also holds <|im_end|> */
        const bool think = strstr(tmpl, "<think>") != NULL;
        if (strstr(tmpl, "<|im_middle|>"))
            return think ? MT_CHAT_KIMI_K2_THINKING : MT_CHAT_KIMI_K2;
        if (strstr(tmpl, "<|im_start|>")) return think ? MT_CHAT_QWEN3 : MT_CHAT_CHATML;
        if (strstr(tmpl, "<|start_header_id|>")) return MT_CHAT_LLAMA3;
        /* V3.1 writes an empty think section before every answer; R1 opens one for the reply */
        if (strstr(tmpl, DS_USER))
            return strstr(tmpl, "<think></think>") ? MT_CHAT_DEEPSEEK_V31
                   : think                         ? MT_CHAT_DEEPSEEK_R1
                                                   : MT_CHAT_DEEPSEEK3;
    }
    *known = false;
    return MT_CHAT_CHATML;
}

const char *mt_chat_format_name(mt_chat_format f) {
    switch (f) {
    case MT_CHAT_CHATML:
        return "chatml";
    case MT_CHAT_LLAMA3:
        return "llama3";
    case MT_CHAT_DEEPSEEK3:
        return "deepseek3";
    case MT_CHAT_KIMI_K2:
        return "kimi-k2";
    case MT_CHAT_KIMI_K3:
        return "kimi-k3";
    case MT_CHAT_QWEN3:
        return "qwen3";
    case MT_CHAT_DEEPSEEK_R1:
        return "deepseek-r1";
    case MT_CHAT_DEEPSEEK_V31:
        return "deepseek-v3.1";
    case MT_CHAT_KIMI_K2_THINKING:
        return "kimi-k2-thinking";
    }
    return "?";
}

int32_t mt_chat_end_token(mt_chat_format f, const mt_vocab *v) {
    const char *t =
        f == MT_CHAT_LLAMA3 ? "<|eot_id|>"
        : f == MT_CHAT_DEEPSEEK3 || f == MT_CHAT_DEEPSEEK_R1 || f == MT_CHAT_DEEPSEEK_V31 ? DS_EOS
        : f == MT_CHAT_KIMI_K3                                                            ? K3_EOM
                               : "<|im_end|>";
    return mt_vocab_find(v, t, strlen(t));
}

/* ---- segments ----------------------------------------------------------------------------- */

typedef struct segment {
    const char *p;
    size_t len;
    bool special; /* template text: its special tokens are parsed */
} segment;

typedef struct seglist {
    segment *s;
    int n, cap;
    bool oom;
} seglist;

static void add(seglist *l, const char *p, size_t len, bool special) {
    if (l->oom || len == 0) return;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 32;
        segment *s = realloc(l->s, (size_t)cap * sizeof *s);
        if (!s) {
            l->oom = true;
            return;
        }
        l->s = s, l->cap = cap;
    }
    l->s[l->n++] = (segment){p, len, special};
}

static void tmpl(seglist *l, const char *t) {
    add(l, t, strlen(t), true);
}

static void text(seglist *l, const mt_chat_message *m) {
    add(l, m->text, m->len, false);
}

static const char *role_name(mt_chat_role r) {
    return r == MT_CHAT_ROLE_SYSTEM ? "system" : r == MT_CHAT_ROLE_USER ? "user" : "assistant";
}

/* Llama 3 trims each message ({{ message['content'] | trim }}). */
static void text_trimmed(seglist *l, const mt_chat_message *m) {
    const char *p = m->text;
    size_t n = m->len;
    while (n && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++, n--;
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\n' || p[n - 1] == '\t' || p[n - 1] == '\r')) n--;
    add(l, p, n, false);
}

/* ---- template variables (chat_template_kwargs) ---------------------------------------------- */

/* A boolean variable, or dflt when it is not given (the API refuses other types). */
static bool kw_bool(const json_t *kw, const char *name, bool dflt) {
    const json_t *v = kw ? json_object_get(kw, name) : NULL;
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static bool kw_given(const json_t *kw, const char *name) {
    return kw && json_object_get(kw, name);
}

/* Kimi K3's thinking_effort: "max" when not given, NULL when null (no effort message). */
static const char *k3_effort(const json_t *kw) {
    const json_t *v = kw ? json_object_get(kw, "thinking_effort") : NULL;
    if (!v) return "max";
    const char *e = json_string_value(v);
    return e && (!strcmp(e, "low") || !strcmp(e, "high") || !strcmp(e, "max")) ? e : NULL;
}

/* ---- the thinking families ---------------------------------------------------------------- */

static void plain(seglist *l, const char *p, size_t n) {
    add(l, p, n, false);
}

/* The first (or last) occurrence of s in p[0..n), or NULL. */
static const char *find(const char *p, size_t n, const char *s, bool last) {
    const size_t sl = strlen(s);
    const char *hit = NULL;
    for (const char *q = p; (q = mt_memmem(q, n - (size_t)(q - p), s, sl)); q++) {
        hit = q;
        if (!last) break;
    }
    return hit;
}

/* Python's str.strip('\n'), lstrip('\n'), rstrip('\n') on p[0..*n). */
static const char *strip_nl(const char *p, size_t *n, bool left, bool right) {
    while (left && *n && *p == '\n') p++, (*n)--;
    while (right && *n && p[*n - 1] == '\n') (*n)--;
    return p;
}

/* Whether p[0..n) is empty or white space only, as Python's str.strip() sees it (Jinja's
 * trim filter): ASCII white space, \x1c-\x1f, and the Unicode spaces. */
static bool blank(const char *p, size_t n) {
    static const char *const wide[] = {"\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80",
                                       "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf",
                                       "\xe2\x81\x9f", "\xe3\x80\x80", NULL};
    size_t i = 0;
    while (i < n) {
        const unsigned char c = (unsigned char)p[i];
        if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) {
            i++;
            continue;
        }
        /* U+2000..U+200A */
        if (i + 3 <= n && c == 0xe2 && (unsigned char)p[i + 1] == 0x80 &&
            (unsigned char)p[i + 2] >= 0x80 && (unsigned char)p[i + 2] <= 0x8a) {
            i += 3;
            continue;
        }
        size_t k = 0;
        for (const char *const *w = wide; *w && !k; w++)
            if (n - i >= strlen(*w) && memcmp(p + i, *w, strlen(*w)) == 0) k = strlen(*w);
        if (!k) return false;
        i += k;
    }
    return true;
}

/* Qwen3: ChatML; an assistant message after the last user query keeps its reasoning in a
 * <think> section (the last message always gets one), earlier ones lose it; content that
 * holds </think> is split into reasoning and answer when no reasoning_content is given;
 * enable_thinking false closes an empty think section in the generation prompt. */
static void qwen3(const mt_chat_message *m, int n, const json_t *kw, seglist *l) {
    if (n > 0 && m[0].role == MT_CHAT_ROLE_SYSTEM) {
        tmpl(l, "<|im_start|>system\n");
        text(l, &m[0]);
        tmpl(l, "<|im_end|>\n");
    }
    /* the last user message that is not a tool response */
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        const char *t = m[i].text;
        const size_t k = m[i].len;
        if (m[i].role == MT_CHAT_ROLE_USER &&
            !(k >= 15 && memcmp(t, "<tool_response>", 15) == 0 && k >= 16 &&
              memcmp(t + k - 16, "</tool_response>", 16) == 0)) {
            last_query = i;
            break;
        }
    }
    for (int i = 0; i < n; i++) {
        if (m[i].role != MT_CHAT_ROLE_ASSISTANT) {
            if (i == 0 && m[i].role == MT_CHAT_ROLE_SYSTEM) continue;
            tmpl(l, "<|im_start|>");
            tmpl(l, role_name(m[i].role));
            tmpl(l, "\n");
            text(l, &m[i]);
            tmpl(l, "<|im_end|>\n");
            continue;
        }
        const char *c = m[i].text, *r = "";
        size_t cn = m[i].len, rn = 0;
        if (m[i].reasoning) {
            r = m[i].reasoning, rn = m[i].reasoning_len;
        } else if (find(c, cn, "</think>", false)) {
            const char *first = find(c, cn, "</think>", false),
                       *last = find(c, cn, "</think>", true);
            r = c, rn = (size_t)(first - c);
            r = strip_nl(r, &rn, false, true);
            const char *open = find(r, rn, "<think>", true);
            if (open) rn -= (size_t)(open + 7 - r), r = open + 7;
            r = strip_nl(r, &rn, true, false);
            cn -= (size_t)(last + 8 - c), c = last + 8;
            c = strip_nl(c, &cn, true, false);
        }
        if (i > last_query && (i == n - 1 || rn > 0)) {
            tmpl(l, "<|im_start|>assistant\n<think>\n");
            r = strip_nl(r, &rn, true, true);
            plain(l, r, rn);
            tmpl(l, "\n</think>\n\n");
            c = strip_nl(c, &cn, true, false);
        } else {
            tmpl(l, "<|im_start|>assistant\n");
        }
        plain(l, c, cn);
        tmpl(l, "<|im_end|>\n");
    }
    tmpl(l, "<|im_start|>assistant\n");
    if (!kw_bool(kw, "enable_thinking", true)) tmpl(l, "<think>\n\n</think>\n\n");
}

/* DeepSeek R1 (the distilled models' template): the last system message first, then
 * <｜User｜> turns and answers without their reasoning (the text after the last </think>
 * of a content); the reply opens with <think>\n (closed at once when enable_thinking is
 * false). */
static void deepseek_r1(const mt_chat_message *m, int n, const json_t *kw, seglist *l) {
    int sys = -1;
    for (int i = 0; i < n; i++)
        if (m[i].role == MT_CHAT_ROLE_SYSTEM) sys = i;
    if (sys >= 0) text(l, &m[sys]);
    for (int i = 0; i < n; i++) {
        if (m[i].role == MT_CHAT_ROLE_USER) {
            tmpl(l, DS_USER);
            text(l, &m[i]);
        } else if (m[i].role == MT_CHAT_ROLE_ASSISTANT) {
            const char *c = m[i].text, *last = find(c, m[i].len, "</think>", true);
            const char *from = last ? last + 8 : c;
            tmpl(l, DS_ASST);
            plain(l, from, m[i].len - (size_t)(from - c));
            tmpl(l, DS_EOS);
        }
    }
    tmpl(l, DS_ASST "<think>\n");
    if (!kw_bool(kw, "enable_thinking", true)) tmpl(l, "</think>");
}

/* DeepSeek V3.1: system messages joined first; an answer that follows a user message starts
 * with <｜Assistant｜><think></think> and loses its reasoning (the text after the first
 * </think> of a content); the reply is opened only after a user message, with <think>
 * when thinking (or enable_thinking) is true, else <think></think>. */
static void deepseek_v31(const mt_chat_message *m, int n, const json_t *kw, seglist *l) {
    const bool thinking = kw_given(kw, "thinking") ? kw_bool(kw, "thinking", false)
                                                   : kw_bool(kw, "enable_thinking", false);
    bool first = true, after_user = false;
    for (int i = 0; i < n; i++) {
        if (m[i].role != MT_CHAT_ROLE_SYSTEM) continue;
        if (!first) tmpl(l, "\n\n");
        text(l, &m[i]);
        first = false;
    }
    for (int i = 0; i < n; i++) {
        if (m[i].role == MT_CHAT_ROLE_USER) {
            tmpl(l, DS_USER);
            text(l, &m[i]);
            after_user = true;
        } else if (m[i].role == MT_CHAT_ROLE_ASSISTANT) {
            if (after_user) tmpl(l, DS_ASST "<think></think>");
            after_user = false;
            const char *c = m[i].text, *end = find(c, m[i].len, "</think>", false);
            const char *from = end ? end + 8 : c;
            plain(l, from, m[i].len - (size_t)(from - c));
            tmpl(l, DS_EOS);
        }
    }
    if (after_user) tmpl(l, thinking ? DS_ASST "<think>" : DS_ASST "<think></think>");
}

/* Kimi K2 Thinking: Kimi K2's turns; the first assistant message (and any before it)
 * starts with an empty <think></think>, later ones with <think>reasoning_content</think>
 * (the template splits the history at the first plain assistant message). */
static void kimi_k2_thinking(const mt_chat_message *m, int n, seglist *l) {
    if (n == 0 || m[0].role != MT_CHAT_ROLE_SYSTEM)
        tmpl(l, "<|im_system|>system<|im_middle|>" KIMI_DEFAULT_SYSTEM "<|im_end|>");
    bool seen_assistant = false;
    for (int i = 0; i < n; i++) {
        tmpl(l, m[i].role == MT_CHAT_ROLE_SYSTEM ? "<|im_system|>system<|im_middle|>"
                : m[i].role == MT_CHAT_ROLE_USER ? "<|im_user|>user<|im_middle|>"
                                                 : "<|im_assistant|>assistant<|im_middle|>");
        if (m[i].role == MT_CHAT_ROLE_ASSISTANT) {
            tmpl(l, "<think>");
            if (seen_assistant && m[i].reasoning) plain(l, m[i].reasoning, m[i].reasoning_len);
            tmpl(l, "</think>");
            seen_assistant = true;
        }
        text(l, &m[i]);
        tmpl(l, "<|im_end|>");
    }
    tmpl(l, "<|im_assistant|>assistant<|im_middle|>");
}

static void build(mt_chat_format f, const mt_chat_message *msgs, int n, const json_t *kw,
                  seglist *l) {
    switch (f) {
    case MT_CHAT_CHATML:
        for (int i = 0; i < n; i++) {
            tmpl(l, "<|im_start|>");
            tmpl(l, role_name(msgs[i].role));
            tmpl(l, "\n");
            text(l, &msgs[i]);
            tmpl(l, "<|im_end|>\n");
        }
        tmpl(l, "<|im_start|>assistant\n");
        break;
    case MT_CHAT_LLAMA3:
        for (int i = 0; i < n; i++) {
            tmpl(l, "<|start_header_id|>");
            tmpl(l, role_name(msgs[i].role));
            tmpl(l, "<|end_header_id|>\n\n");
            text_trimmed(l, &msgs[i]);
            tmpl(l, "<|eot_id|>");
        }
        tmpl(l, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case MT_CHAT_DEEPSEEK3: {
        /* every system message first, joined by a blank line */
        bool first = true;
        for (int i = 0; i < n; i++) {
            if (msgs[i].role != MT_CHAT_ROLE_SYSTEM) continue;
            if (!first) tmpl(l, "\n\n");
            text(l, &msgs[i]);
            first = false;
        }
        for (int i = 0; i < n; i++) {
            if (msgs[i].role == MT_CHAT_ROLE_USER) {
                tmpl(l, DS_USER);
                text(l, &msgs[i]);
            } else if (msgs[i].role == MT_CHAT_ROLE_ASSISTANT) {
                tmpl(l, DS_ASST);
                text(l, &msgs[i]);
                tmpl(l, DS_EOS);
            }
        }
        tmpl(l, DS_ASST);
        break;
    }
    case MT_CHAT_KIMI_K2:
        if (n == 0 || msgs[0].role != MT_CHAT_ROLE_SYSTEM)
            tmpl(l, "<|im_system|>system<|im_middle|>" KIMI_DEFAULT_SYSTEM "<|im_end|>");
        for (int i = 0; i < n; i++) {
            tmpl(l, msgs[i].role == MT_CHAT_ROLE_SYSTEM ? "<|im_system|>system<|im_middle|>"
                    : msgs[i].role == MT_CHAT_ROLE_USER ? "<|im_user|>user<|im_middle|>"
                                                        : "<|im_assistant|>assistant<|im_middle|>");
            text(l, &msgs[i]);
            tmpl(l, "<|im_end|>");
        }
        tmpl(l, "<|im_assistant|>assistant<|im_middle|>");
        break;
    case MT_CHAT_KIMI_K3: {
        /* no default system message; message text is not trimmed. With thinking (the
         * default) a thinking_effort message comes first (unless it is null) and every
         * assistant message has a think section, holding its reasoning unless blank */
        const bool thinking = kw_bool(kw, "thinking", true);
        const char *effort = k3_effort(kw);
        if (thinking && effort) {
            tmpl(l, K3_EFFORT);
            tmpl(l, effort);
            tmpl(l, "`." K3_MSG_END);
        }
        for (int i = 0; i < n; i++) {
            if (msgs[i].role == MT_CHAT_ROLE_ASSISTANT) {
                tmpl(l, K3_ASSISTANT);
                if (thinking) {
                    tmpl(l, K3_THINK_OPEN);
                    if (msgs[i].reasoning && !blank(msgs[i].reasoning, msgs[i].reasoning_len))
                        plain(l, msgs[i].reasoning, msgs[i].reasoning_len);
                    tmpl(l, "<|close|>think<|sep|>");
                }
                tmpl(l, "<|open|>response<|sep|>");
                text(l, &msgs[i]);
                tmpl(l, "<|close|>response<|sep|>" K3_MSG_END);
            } else {
                tmpl(l, msgs[i].role == MT_CHAT_ROLE_SYSTEM ? K3_SYSTEM : K3_USER);
                text(l, &msgs[i]);
                tmpl(l, K3_MSG_END);
            }
        }
        tmpl(l, thinking ? K3_ASSISTANT K3_THINK_OPEN : K3_ASSISTANT "<|open|>response<|sep|>");
        break;
    }
    case MT_CHAT_QWEN3:
        qwen3(msgs, n, kw, l);
        break;
    case MT_CHAT_DEEPSEEK_R1:
        deepseek_r1(msgs, n, kw, l);
        break;
    case MT_CHAT_DEEPSEEK_V31:
        deepseek_v31(msgs, n, kw, l);
        break;
    case MT_CHAT_KIMI_K2_THINKING:
        kimi_k2_thinking(msgs, n, l);
        break;
    }
}

/* ---- rendering and tokenizing ------------------------------------------------------------- */

char *mt_chat_render(mt_chat_format f, const mt_chat_message *msgs, int n, size_t *len) {
    return mt_chat_render_kw(f, msgs, n, NULL, len);
}

char *mt_chat_render_kw(mt_chat_format f, const mt_chat_message *msgs, int n, const json_t *kwargs,
                        size_t *len) {
    seglist l = {0};
    build(f, msgs, n, kwargs, &l);
    size_t total = 0;
    for (int i = 0; i < l.n; i++) total += l.s[i].len;
    char *out = l.oom ? NULL : malloc(total + 1);
    if (out) {
        size_t k = 0;
        for (int i = 0; i < l.n; i++) {
            memcpy(out + k, l.s[i].p, l.s[i].len);
            k += l.s[i].len;
        }
        out[k] = 0;
        if (len) *len = k;
    }
    free(l.s);
    return out;
}

int64_t mt_chat_tokenize(mt_chat_format f, const mt_vocab *v, const mt_chat_message *msgs, int n,
                         int32_t **out, mt_error *err) {
    return mt_chat_tokenize_kw(f, v, msgs, n, NULL, out, err);
}

int64_t mt_chat_tokenize_kw(mt_chat_format f, const mt_vocab *v, const mt_chat_message *msgs, int n,
                            const json_t *kwargs, int32_t **out, mt_error *err) {
    seglist l = {0};
    build(f, msgs, n, kwargs, &l);
    int32_t *ids = NULL;
    int64_t n_ids = 0, cap = 0, rc = -1;
    char *run = NULL;
    if (l.oom) {
        mt_error_set(err, "out of memory rendering the chat template");
        goto done;
    }
    const int32_t bos = mt_vocab_bos(v);
    cap = 64;
    if (!(ids = malloc((size_t)cap * sizeof *ids))) {
        mt_error_set(err, "out of memory");
        goto done;
    }
    if (mt_vocab_add_bos(v) && bos >= 0) ids[n_ids++] = bos;
    /* join each run of segments of one kind, then tokenize the run */
    for (int i = 0; i < l.n;) {
        int j = i;
        size_t run_len = 0;
        while (j < l.n && l.s[j].special == l.s[i].special) run_len += l.s[j++].len;
        char *r = realloc(run, run_len + 1);
        if (!r) {
            mt_error_set(err, "out of memory");
            goto done;
        }
        run = r;
        size_t k = 0;
        for (int t = i; t < j; t++) {
            memcpy(run + k, l.s[t].p, l.s[t].len);
            k += l.s[t].len;
        }
        run[k] = 0;
        int32_t *part = NULL;
        int64_t np = mt_tokenize(v, run, run_len, false, l.s[i].special, &part, err);
        if (np < 0) goto done;
        if (n_ids + np > cap) {
            int64_t nc = 2 * (n_ids + np);
            int32_t *t = realloc(ids, (size_t)nc * sizeof *t);
            if (!t) {
                free(part);
                mt_error_set(err, "out of memory");
                goto done;
            }
            ids = t, cap = nc;
        }
        memcpy(ids + n_ids, part, (size_t)np * sizeof *part);
        n_ids += np;
        free(part);
        i = j;
    }
    *out = ids;
    ids = NULL;
    rc = n_ids;
done:
    free(ids);
    free(run);
    free(l.s);
    return rc;
}

/* ---- splitting replies -------------------------------------------------------------------- */

bool mt_chat_thinks(mt_chat_format f) {
    return f == MT_CHAT_QWEN3 || f == MT_CHAT_DEEPSEEK_R1 || f == MT_CHAT_DEEPSEEK_V31 ||
           f == MT_CHAT_KIMI_K2_THINKING || f == MT_CHAT_KIMI_K3;
}

bool mt_chat_reasoning(mt_chat_format f, const mt_vocab *v, const int32_t *prompt, int64_t n,
                       mt_reasoning *r) {
    memset(r, 0, sizeof *r);
    if (!mt_chat_thinks(f)) return false;
    int rc = 0;
    if (f == MT_CHAT_KIMI_K3) {
        /* the reasoning ends at its closer, or at the response opener if the model skips
         * the closer; the answer ends at the response closer, a tool section or the
         * message closer (the turn's <|end_of_msg|> stops generation) */
        static const char *const think[] = {"<|open|>", "think", "<|sep|>", NULL};
        static const char *const think_end[] = {"<|close|>", "think", "<|sep|>", NULL};
        static const char *const resp[] = {"<|open|>", "response", "<|sep|>", NULL};
        static const char *const resp_end[] = {"<|close|>", "response", "<|sep|>", NULL};
        static const char *const tools[] = {"<|open|>", "tools", "<|sep|>", NULL};
        static const char *const msg_end[] = {"<|close|>", "message", "<|sep|>", NULL};
        rc |= mt_reasoning_marker(r, v, think, r->open);
        rc |= mt_reasoning_marker(r, v, think_end, r->close[0]);
        rc |= mt_reasoning_marker(r, v, resp, r->close[1]);
        r->close_answers[1] = true;
        rc |= mt_reasoning_marker(r, v, resp, r->answer_open);
        rc |= mt_reasoning_marker(r, v, resp_end, r->answer_end[0]);
        rc |= mt_reasoning_marker(r, v, tools, r->answer_end[1]);
        rc |= mt_reasoning_marker(r, v, msg_end, r->answer_end[2]);
    } else {
        static const char *const open[] = {"<think>", NULL};
        static const char *const close[] = {"</think>", NULL};
        rc |= mt_reasoning_marker(r, v, open, r->open);
        rc |= mt_reasoning_marker(r, v, close, r->close[0]);
    }
    if (rc) abort(); /* the markers above fit the limits */
    r->on = true;
    r->starts_thinking = mt_reasoning_prompt_opens(r, v, prompt, n);
    return true;
}

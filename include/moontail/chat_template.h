/* chat_template.h - a model's own chat template: the Jinja text in its GGUF
 * file (tokenizer.chat_template) run by MoonTail's interpreter (jinja.h)
 * with the variables Hugging Face transformers gives it, and the built-in C
 * families (chat_format.h) as the fallback when the interpreter cannot run it
 * (a construct it does not implement), or when the model has no template.
 *
 * Message text never turns into control tokens: the rendered prompt knows
 * which bytes came from the request (jinja.h's data spans) and the tokenizer
 * only matches control tokens outside them (mt_tokenize_spans). */
#ifndef MOONTAIL_CHAT_TEMPLATE_H
#define MOONTAIL_CHAT_TEMPLATE_H

#include "moontail/chat_format.h"
#include "moontail/jinja.h"
#include "moontail/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct mt_chat_template mt_chat_template;

/* Where the template's log lines go (once per model for each fallback). */
typedef void (*mt_chat_template_log_fn)(void *ctx, const char *msg);

/* The template of a model: text is tokenizer.chat_template (NULL: none),
 * vocab gives bos_token/eos_token and tokenizes (it must outlive the
 * template; NULL for rendering only). log may be NULL. Returns NULL only
 * when out of memory. A template Jinja cannot parse is logged and the C
 * family takes over. */
mt_chat_template *mt_chat_template_new(const char *text, const mt_vocab *vocab,
                                       mt_chat_template_log_fn log, void *log_ctx);
void mt_chat_template_free(mt_chat_template *t);

/* "jinja (Kimi K3's markers)"-like description for banners and logs. */
const char *mt_chat_template_describe(const mt_chat_template *t);
/* The built-in family the template resembles (mt_chat_detect): its end token,
 * how its replies split into reasoning and answer, and the fallback. */
mt_chat_format mt_chat_template_family(const mt_chat_template *t);
/* Whether the model's Jinja template runs (false: a C family renders). */
bool mt_chat_template_is_jinja(const mt_chat_template *t);
/* The token that ends an assistant turn, or -1 (then only end-of-generation tokens end it). */
int32_t mt_chat_template_end_token(const mt_chat_template *t);

/* What to render. messages is a JSON array of OpenAI-style message objects
 * (role, content, and when present reasoning_content, tool_calls,
 * tool_call_id, name); tools an array or NULL (the template sees none);
 * kwargs an object of extra variables (chat_template_kwargs) or NULL. */
typedef struct mt_chat_template_input {
    const json_t *messages;
    const json_t *tools;
    const json_t *kwargs;
    bool add_generation_prompt;
} mt_chat_template_input;

/* Why rendering failed: the conversation was refused (the template raised an
 * error, jinja2 would fail too, a sandbox limit; a 400 for an API client), or
 * something else went wrong (out of memory, the tokenizer). */
typedef struct mt_chat_template_error {
    bool refused;
    mt_error err;
} mt_chat_template_error;

/* The prompt as the model sees it, with the data spans (jinja_output_free).
 * BOS is part of it only where the template writes it. */
int mt_chat_template_render(mt_chat_template *t, const mt_chat_template_input *in,
                            jinja_output *out, mt_chat_template_error *e);

/* The prompt's token ids (BOS first when the vocabulary asks for it and the
 * template did not write it). Returns the count and *ids (heap), or -1. */
int64_t mt_chat_template_tokenize(mt_chat_template *t, const mt_chat_template_input *in,
                                  int32_t **ids, mt_chat_template_error *e);

/* The JSON messages of a conversation held as mt_chat_message (roles
 * system, user, assistant; content as text; reasoning_content), with name,
 * tool_calls and tool_call_id taken from sent[i] (the request's messages
 * array, or NULL). */
json_t *mt_chat_template_messages_json(const mt_chat_message *msgs, int n, const json_t *sent);

#endif

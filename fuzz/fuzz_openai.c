/* fuzz_openai.c - libFuzzer target for the OpenAI request parser of
 * `moontail serve` (api_request_parse, src/api/api_openai.c): the bytes of a
 * /v1/completions (first input byte even) or /v1/chat/completions (odd)
 * request body, as the HTTP server hands them over (NUL-terminated). A body
 * that parses is rendered in every chat format with its chat_template_kwargs,
 * as the server would before tokenizing. */
#include "fuzz_target.h"
#include "../src/api/api_openai.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    api_kind kind = data[0] & 1 ? API_CHAT : API_COMPLETIONS;
    char *body = malloc(size);
    memcpy(body, data + 1, size - 1);
    body[size - 1] = 0;
    api_request rq;
    api_error e;
    memset(&e, 0, sizeof e);
    if (api_request_parse(kind, body, size - 1, "tiny", &rq, &e) == 0) {
        if (kind == API_CHAT)
            for (int f = MT_CHAT_CHATML; f <= MT_CHAT_KIMI_K2_THINKING; f++) {
                size_t len;
                free(mt_chat_render_kw((mt_chat_format)f, rq.messages, rq.n_messages,
                                       rq.chat_kwargs, &len));
            }
    } else if (e.status != 400 || !e.message[0]) {
        abort(); /* a refusal is a 400 with a message */
    }
    api_request_free(&rq);
    free(body);
    return 0;
}

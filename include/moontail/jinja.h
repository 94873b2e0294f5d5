/* jinja.h - a sandboxed interpreter for the Jinja subset that model chat
 * templates use (the tokenizer.chat_template of a GGUF file).
 *
 * A template is parsed once (jinja_parse) and rendered many times, from any
 * number of threads at once (jinja_render). Rendering follows Python's
 * jinja2 as Hugging Face transformers configures it for apply_chat_template:
 * the immutable sandbox, trim_blocks and lstrip_blocks, the loopcontrols
 * extension, transformers' tojson, raise_exception and strftime_now. Values
 * behave as Python's do: truthiness, int/float arithmetic and formatting,
 * repr() of lists and dicts, jinja2's default Undefined.
 *
 * The sandbox: no I/O (no include, import or extends), no mutation of lists
 * or dicts, and limits on output bytes, memory, loop iterations and calls,
 * and call depth, each an error naming the limit. A construct the
 * interpreter does not implement is an error of kind JINJA_ERR_UNSUPPORTED
 * naming it and its line and column, so a caller can fall back.
 *
 * Text that comes from the caller's data (variables marked `data`: the
 * messages of a request) is tracked through the interpreter: the output
 * lists which byte ranges came from data, so that a tokenizer can parse
 * special tokens only in the template's own text (see chat_template.h). */
#ifndef MOONTAIL_JINJA_H
#define MOONTAIL_JINJA_H

#include "moontail/error.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef struct jinja_template jinja_template;

/* What went wrong, for callers that react differently. */
typedef enum jinja_err_kind {
    JINJA_OK,
    JINJA_ERR_SYNTAX,      /* the template is not valid Jinja (jinja2 refuses it too) */
    JINJA_ERR_UNSUPPORTED, /* valid Jinja this interpreter does not implement */
    JINJA_ERR_RAISED,      /* the template called raise_exception(msg) */
    JINJA_ERR_RUNTIME,     /* an error jinja2 raises as well: undefined attribute, type error */
    JINJA_ERR_LIMIT,       /* a sandbox limit: output, memory, steps, depth */
    JINJA_ERR_MEMORY,      /* the process is out of memory */
} jinja_err_kind;

typedef struct jinja_error {
    jinja_err_kind kind;
    int line, col; /* where in the template, 1-based (0: not known) */
    mt_error err;  /* the message, with "name:line:col: " in front when known */
} jinja_error;

/* Parses len bytes of template source (UTF-8; NUL bytes are refused). name
 * labels error messages. Returns NULL with e filled on failure. */
jinja_template *jinja_parse(const char *src, size_t len, const char *name, jinja_error *e);
void jinja_free(jinja_template *t);

/* A variable of the rendering context. Strings inside value (at any depth,
 * keys too) count as data when data is set, except the string values of
 * object members named in plain_keys (NULL-terminated; e.g. a message's
 * "role", which a server has checked against a fixed set and templates glue
 * into special tokens like '<|' + role + '|>'). */
typedef struct jinja_var {
    const char *name;
    const json_t *value;
    bool data;
    const char *const *plain_keys;
} jinja_var;

typedef struct jinja_options {
    size_t max_output; /* bytes of output (0: 4 MiB) */
    size_t max_memory; /* bytes the render may allocate (0: 256 MiB) */
    int64_t max_steps; /* loop iterations + calls (0: 10 million) */
    int max_depth;     /* nested macro calls (0: 200) */
    time_t now;        /* strftime_now's time (0: the current time), local time */
} jinja_options;

/* A byte range of the output. */
typedef struct jinja_span {
    size_t off, len;
} jinja_span;

typedef struct jinja_output {
    char *text; /* NUL-terminated, len bytes (malloc) */
    size_t len;
    jinja_span *data; /* the ranges that came from data, in order, not adjacent (malloc) */
    size_t n_data;
} jinja_output;

/* Renders t with the variables vars[0..n). Returns 0 and fills out (free it
 * with jinja_output_free), or -1 with e filled. */
int jinja_render(const jinja_template *t, const jinja_var *vars, int n, const jinja_options *opt,
                 jinja_output *out, jinja_error *e);
void jinja_output_free(jinja_output *out);

#endif

/* model_source.h - the model a subcommand runs on (a file or the built-in default). */
#ifndef MOONTAIL_CLI_MODEL_SOURCE_H
#define MOONTAIL_CLI_MODEL_SOURCE_H

#include "moontail/model.h"

/* path NULL = the built-in synthetic default model. */
mt_model *cli_open_model(const char *path, mt_error *err);

/* Writes the built-in synthetic model (a small qwen3moe, Q8_0, byte vocabulary) to path. */
int cli_write_builtin_model(const char *path, mt_error *err);

/* Writes the demo's model to path: a tiny kimi-k3 (the seed's architecture at
 * narrow widths): 12 layers, KDA with MLA every fourth layer and the last,
 * attention residuals banked every 3 layers, one dense layer then 896 routed
 * experts (16 per token, MXFP4, latent) and a shared expert, Q8_0, byte
 * vocabulary. */
int cli_write_demo_model(const char *path, mt_error *err);

#endif

/* model_source.h - the model a subcommand runs on (a file or the built-in default). */
#ifndef MOONTAIL_CLI_MODEL_SOURCE_H
#define MOONTAIL_CLI_MODEL_SOURCE_H

#include "moontail/model.h"

/* path NULL = the built-in synthetic default model. */
mt_model *cli_open_model(const char *path, mt_error *err);

/* Writes the built-in synthetic model (a small qwen3moe, Q8_0, byte vocabulary) to path. */
int cli_write_builtin_model(const char *path, mt_error *err);

#endif

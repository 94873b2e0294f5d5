/* cli.h - shared pieces of the `moontail` subcommands: argument helpers and
 * the entry point of each subcommand. */
#ifndef MOONTAIL_CLI_H
#define MOONTAIL_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_eval(int argc, char **argv);

/* Parses a whole decimal integer in [lo, hi] from the value of option opt;
 * prints a clear message and returns false otherwise. */
bool cli_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);
bool cli_float(const char *opt, const char *s, float *out);
/* The value after option argv[*i], advancing *i; NULL (with a message) if missing. */
const char *cli_value(int argc, char **argv, int *i);
/* Whether option a is one of the NULL-terminated names. */
bool cli_is_one_of(const char *a, const char *const *names);
/* Reads a whole file into a NUL-terminated heap buffer; NULL with a message on error. */
char *cli_read_file(const char *path, size_t *len);

#endif

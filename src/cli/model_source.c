/* model_source.c - opens the model a subcommand was asked for: a GGUF path,
 * or with no -m the built-in default, a small synthetic qwen3moe model that
 * is generated on the fly (deterministic, so every machine gets the same). */
#include "cli.h"
#include "model_source.h"
#include "moontail/progress.h"
#include "moontail/synth_model.h"
#include "moontail/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_write_builtin_model(const char *path, mt_error *err) {
    mt_synth_params p = mt_synth_default_params("qwen3moe");
    p.type = MT_TYPE_Q8_0;
    p.seed = 42;
    p.readable = true;
    return mt_synth_write(&p, path, err);
}

int cli_write_demo_model(const char *path, mt_error *err) {
    mt_synth_params p = mt_synth_default_params("kimi-k3");
    p.n_layer = 12;
    p.res_block = 3; /* a pipeline of a few stages cuts inside blocks and on their edges */
    p.type = MT_TYPE_Q8_0;
    p.seed = 42;
    p.readable = true;
    return mt_synth_write(&p, path, err);
}

mt_model *cli_open_model(const char *path, mt_error *err) {
    if (path) {
        /* a large model read in with a progress bar on a terminal, so that the wait is
         * shown here and not hidden in the first token */
        mt_progress_preload(path, isatty(2) || mt_progress_env() > 0 ? stderr : NULL);
        return mt_model_load(path, err);
    }
    char tmp[512];
    int fd = mt_file_temp("moontail-default", tmp, sizeof tmp);
    if (fd < 0) {
        mt_error_set(err, "cannot create a temporary file for the built-in model: %s",
                     strerror(errno));
        return NULL;
    }
    mt_file_close(fd);
    mt_model *m = cli_write_builtin_model(tmp, err) == 0 ? mt_model_load(tmp, err) : NULL;
    /* the mapping stays valid after the name is gone (Windows may refuse to remove a mapped
     * file: it then stays in the temporary directory) */
    mt_file_remove(tmp);
    return m;
}

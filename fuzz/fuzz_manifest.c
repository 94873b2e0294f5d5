/* fuzz_manifest.c - libFuzzer target for the two shard manifests MoonTail
 * reads: the piece manifest a node gets before fetching a shard
 * (mt_shard_manifest_check, shard_fetch.h) and the plan manifest `moontail
 * plan --check` proves against a model (mt_plan_check, shard.h), which opens
 * the shard files the manifest names. Input: JSON text. At start the target
 * writes a tiny synthetic model and a 2-stage cell plan of it into a scratch
 * directory; the input is written there as the plan's manifest. */
#include "fuzz_target.h"
#include "fuzz_util.h"
#include "moontail/gguf.h"
#include "moontail/shard.h"
#include "moontail/shard_fetch.h"
#include "moontail/synth_model.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static char model_path[400], manifest_path[400];

static void init_once(void) {
    if (model_path[0]) return;
    mt_error err = {0};
    snprintf(model_path, sizeof model_path, "%s/tiny.gguf", fuzz_dir());
    mt_synth_params p = fuzz_tiny_params();
    if (mt_synth_write(&p, model_path, &err) != 0) fuzz_die("model", err.msg);
    gguf_file *f = gguf_open(model_path, &err);
    mt_plan plan;
    if (!f || mt_plan_cell(f, 2, &plan, &err) != 0 ||
        mt_plan_write(f, &plan, fuzz_dir(), NULL, 0, &err) != 0)
        fuzz_die("plan", err.msg);
    mt_plan_free(&plan);
    gguf_close(f);
    snprintf(manifest_path, sizeof manifest_path, "%s/fuzz-manifest.json", fuzz_dir());
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init_once();
    mt_error err = {0};
    json_error_t je;
    json_t *j = json_loadb((const char *)data, size, 0, &je);
    if (j) {
        (void)mt_shard_manifest_check(j, &err);
        json_decref(j);
    }
    FILE *fp = fopen(manifest_path, "wb");
    if (!fp || fwrite(data, 1, size, fp) != size || fclose(fp) != 0)
        fuzz_die(manifest_path, "write");
    char *report = NULL;
    int rc = mt_plan_check(model_path, manifest_path, &report, &err);
    if (rc < -1 || rc > 1 || (rc >= 0 && !report) || (rc < 0 && !err.msg[0])) abort();
    free(report);
    return 0;
}

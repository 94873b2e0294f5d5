/* fuzz_util.h - small helpers shared by the libFuzzer targets in fuzz/: a
 * scratch directory made once per process (removed at exit) and the tiny
 * synthetic model some targets build their fixed inputs from. Not used by the
 * normal build. */
#ifndef MOONTAIL_FUZZ_UTIL_H
#define MOONTAIL_FUZZ_UTIL_H

#include "moontail/synth_model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir_path[256];

static inline void fuzz_dir_remove(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir_path);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir_path);
}

/* A fresh scratch directory for this process (TMPDIR or /tmp). */
static inline const char *fuzz_dir(void) {
    if (!fuzz_dir_path[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/mt-fuzz-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(fuzz_dir_path)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir_path;
}

/* Stops the process with a message: a broken fixture, not a finding. */
static inline void fuzz_die(const char *what, const char *msg) {
    fprintf(stderr, "fuzz: %s: %s\n", what, msg);
    abort();
}

/* The tiny model of fuzz_manifest and of the corpus (make_corpus.c): a
 * qwen3moe of 2 layers, n_embd 32, 4 experts, Q8_0 matrices (about 100 KiB). */
static inline mt_synth_params fuzz_tiny_params(void) {
    mt_synth_params p = mt_synth_default_params("qwen3moe");
    p.n_embd = 32, p.n_head = 2, p.n_head_kv = 1, p.head_dim = 16, p.n_ff = 32, p.n_ff_exp = 32;
    p.n_expert = 4, p.n_expert_used = 2;
    p.type = MT_TYPE_Q8_0; /* a quarter of F32's bytes: smaller seeds */
    return p;
}

/* A tiny kimi-k3: one KDA and one MLA layer, banked checkpoints, latent
 * experts (the fuzz_gguf seed that reaches the kimi loader and forward). */
static inline mt_synth_params fuzz_tiny_k3_params(void) {
    mt_synth_params p = mt_synth_default_params("kimi-k3");
    p.n_layer = 2, p.mla_layers = "1", p.n_leading_dense = 0;
    p.n_embd = 32, p.n_head = 2, p.kda_head_dim = 16, p.n_ff = 32, p.n_ff_exp = 32;
    p.q_lora = 0, p.kv_lora = 32, p.qk_nope = 16, p.qk_rope = 8, p.v_dim = 16, p.latent = 32;
    p.n_expert = 4, p.n_expert_used = 2, p.res_block = 1;
    p.type = MT_TYPE_Q8_0;
    p.expert_type = MT_TYPE_Q8_0;
    return p;
}

/* The key of both directions in fuzz_frame (and of its corpus). */
static inline void fuzz_frame_key(uint8_t *key, size_t n) {
    for (size_t i = 0; i < n; i++) key[i] = (uint8_t)(i * 7 + 1);
}

#endif

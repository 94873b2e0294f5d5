/* test_quant_mix_llama.c - our quantization mixes (quant_mix.h) against
 * llama.cpp's own quantizer, tensor by tensor: the pinned release's
 * libllama (tools/golden, installed by `./dev test`) quantizes F32 synthetic
 * models (mkmodel's writer) with llama_model_quantize to every mix, and each
 * output tensor's type, read back with our GGUF reader, must be the type
 * mt_quant_mix_plan chooses for the same F32 file.
 *
 * llama.cpp refuses some mixes without an importance matrix (IQ1_*, IQ2_*,
 * IQ3_XXS, Q2_K_S: tensors it would make IQ1/IQ2/IQ3_XXS, or Q2_K in Q2_K_S).
 * Two comparisons are made:
 *   - "none", every mix: llama.cpp without an importance matrix, as mkmodel
 *     quantizes; where it refuses to write, its dry-run plan stands in for the
 *     file (its log lines, the only place a dry run reports the types; for four
 *     mixes the dry run's log is checked against the file it writes);
 *   - "imatrix", for the mixes it refuses without one and those whose choices
 *     read it: llama.cpp's dry run with a uniform importance matrix (all ones,
 *     one per tensor) against our plan for has_imatrix. Dry runs, because
 *     quantizing the IQ1/IQ2 types for real takes minutes.
 * The models: qwen3moe (8 experts: the 8-expert rules), a dense llama of 16
 * layers with 4 queries per KV head (layer-position and grouped-query rules,
 * tensors counted without layer numbers), deepseek2 with DeepSeek/Kimi K2's
 * 128-wide attn_k_b rows (the fallbacks) and the legacy attn_kv_b, and
 * kimi-k3 (64-wide rows everywhere, KDA layers, latent experts), and a
 * llama of 80 layers with grouped queries, which llama.cpp takes for a 70B
 * (its attn_v rule; dry runs only, the file is 60 MB).
 * Prints a table of agreeing tensors per mix and model. */
#include "check.h"
#include "lib/ggml_ref.h"
#include "moontail/gguf.h"
#include "moontail/quant_mix.h"
#include "moontail/synth_model.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama.h of the pinned release: struct llama_model_quantize_params and
 * struct llama_model_imatrix_data (enums are ints). The layout is checked
 * against llama_model_quantize_default_params' known defaults below. */
typedef struct llq_params {
    int32_t nthread;
    int ftype;
    int output_tensor_type;
    int token_embedding_type;
    bool allow_requantize, quantize_output_tensor, only_copy, pure, keep_split, dry_run;
    const void *imatrix, *kv_overrides, *tt_overrides;
    const int32_t *prune_layers;
    size_t max_buf_size;
} llq_params;

typedef struct llq_imatrix {
    const char *name;
    const float *data;
    size_t size;
} llq_imatrix;

typedef llq_params (*default_params_fn)(void);
typedef uint32_t (*quantize_fn)(const char *in, const char *out, const llq_params *p);
typedef void (*log_cb)(int level, const char *text, void *ud);
typedef void (*log_set_fn)(log_cb cb, void *ud);
typedef void (*backend_init_fn)(void);

static default_params_fn ll_default;
static quantize_fn ll_quantize;
static log_set_fn ll_log_set;

/* ------------------------------------------------------------ llama's log */

/* What a dry run reports: "[ i/ n] NAME - [shape], type = f32, " then
 * "size = ... MiB -> ... MiB (q4_K)" (or no arrow when the type is kept). */
typedef struct dry_log {
    char name[128];
    struct {
        char name[128];
        int type; /* mt_type, or -1 */
    } seen[4096];
    int n;
    char last[256]; /* the last error line, for a failure message */
} dry_log;

static void on_log(int level, const char *text, void *ud) {
    dry_log *d = ud;
    (void)level;
    if (!d) return;
    if (strstr(text, "error") || strstr(text, "ERROR") || strstr(text, "failed"))
        snprintf(d->last, sizeof d->last, "%s", text);
    if (text[0] == '[' && strstr(text, "] ") && strstr(text, " - [")) {
        const char *p = strstr(text, "] ") + 2;
        size_t k = 0;
        while (*p == ' ') p++;
        while (p[k] && p[k] != ' ' && k + 1 < sizeof d->name) k++;
        memcpy(d->name, p, k);
        d->name[k] = 0;
        return;
    }
    if (strncmp(text, "size = ", 7) != 0 || !d->name[0] || d->n >= 4096) return;
    int type = MT_TYPE_F32; /* kept: every source tensor is F32 */
    const char *open = strrchr(text, '('), *close = open ? strchr(open, ')') : NULL;
    if (open && close && close - open < 32) {
        char t[32];
        memcpy(t, open + 1, (size_t)(close - open - 1));
        t[close - open - 1] = 0;
        type = mt_type_from_name(t);
    }
    memcpy(d->seen[d->n].name, d->name, sizeof d->name);
    d->seen[d->n++].type = type;
    d->name[0] = 0;
}

/* ---------------------------------------------------------------- models */

typedef struct model {
    const char *label;
    const char *arch;
    const char *args; /* for the table */
    bool dry_only;    /* too big to quantize 33 times: llama.cpp's dry runs only */
    mt_synth_params p;
    char path[256];
    gguf_file *f;
    mt_quant_mix_tensor *t;
    mt_quant_mix_model m;
    llq_imatrix *imatrix;
    float *ones;
} model;

/* The model facts the rules read, from the file's keys as llama.cpp loads them. */
static mt_quant_mix_model read_model(const gguf_file *f, char *arch) {
    mt_quant_mix_model m = {.arch = arch};
    char key[160];
    uint32_t v = 0;
    snprintf(key, sizeof key, "%s.block_count", arch);
    if (gguf_get_u32(f, key, &v, NULL)) m.n_layer = (int32_t)v;
    snprintf(key, sizeof key, "%s.attention.head_count", arch);
    if (gguf_get_u32(f, key, &v, NULL)) m.n_head = (int32_t)v;
    m.n_head_kv = m.n_head;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (kv && kv->value.type == GGUF_TYPE_ARRAY) { /* per layer: layer 0's */
        int32_t h0;
        memcpy(&h0, kv->value.arr.data, 4);
        m.n_head_kv = h0;
    } else if (gguf_get_u32(f, key, &v, NULL)) {
        m.n_head_kv = (int32_t)v;
    }
    snprintf(key, sizeof key, "%s.expert_count", arch);
    if (gguf_get_u32(f, key, &v, NULL)) m.n_expert = (int32_t)v;
    return m;
}

static int make_model(model *md) {
    mt_error err = {{0}};
    snprintf(md->path, sizeof md->path, "%s", check_tmp(".gguf"));
    if (mt_synth_write(&md->p, md->path, &err)) {
        CHECK(0, "%s: %s", md->label, err.msg);
        return -1;
    }
    md->f = gguf_open(md->path, &err);
    CHECK(md->f != NULL, "%s: %s", md->label, err.msg);
    if (!md->f) return -1;
    char *arch = gguf_get_string(md->f, "general.architecture", &err);
    md->m = read_model(md->f, arch);
    size_t n = md->f->n_tensors, most = 1;
    md->t = calloc(n, sizeof *md->t);
    md->imatrix = calloc(n + 1, sizeof *md->imatrix);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor *g = &md->f->tensors[i];
        md->t[i].name = g->name;
        for (int d = 0; d < 4; d++) md->t[i].ne[d] = d < GGUF_MAX_DIMS ? g->ne[d] : 1;
        md->t[i].type = g->type;
        if (g->n_dims >= 2) { /* llama.cpp's imatrix: one weight per column per expert */
            md->imatrix[k].name = g->name;
            md->imatrix[k++].size = (size_t)(g->ne[0] * g->ne[2]);
            if ((size_t)(g->ne[0] * g->ne[2]) > most) most = (size_t)(g->ne[0] * g->ne[2]);
        }
    }
    md->ones = malloc(most * sizeof(float));
    for (size_t i = 0; i < most; i++) md->ones[i] = 1.0f;
    for (size_t i = 0; i < k; i++) md->imatrix[i].data = md->ones;
    return 0;
}

/* ------------------------------------------------------------- comparing */

typedef struct tally {
    int agree, total;
    char how; /* 'q' quantized file, 'd' dry-run log, 'i' with the uniform imatrix, '-' none */
} tally;

/* Our plan vs the types llama.cpp gave (type_of(name) from a file or a log). */
static void compare(const model *md, mt_quant_mix mix, bool imatrix, const gguf_file *out,
                    const dry_log *log, tally *ty) {
    size_t n = md->f->n_tensors;
    mt_type *ours = malloc(n * sizeof *ours);
    mt_quant_mix_model m = md->m;
    m.has_imatrix = imatrix;
    mt_error err = {{0}};
    int rc = mt_quant_mix_plan(mix, &m, md->t, n, ours, &err);
    CHECK(rc == 0, "%s %s: %s", md->label, mt_quant_mix_name(mix), err.msg);
    for (size_t i = 0; i < n && rc == 0; i++) {
        int theirs = -1;
        if (out) {
            const gguf_tensor *g = gguf_find_tensor(out, md->t[i].name);
            theirs = g ? (int)g->type : -1;
        } else {
            for (int k = 0; k < log->n; k++)
                if (strcmp(log->seen[k].name, md->t[i].name) == 0) theirs = log->seen[k].type;
        }
        ty->total++;
        ty->agree += theirs == (int)ours[i];
        const mt_type_traits *tr = theirs >= 0 ? mt_type_traits_get((uint32_t)theirs) : NULL;
        CHECK(theirs == (int)ours[i], "%s %s (%s, %s): %s is %s in llama.cpp, %s in ours",
              md->label, mt_quant_mix_name(mix), imatrix ? "imatrix" : "no imatrix",
              out ? "file" : "dry run", md->t[i].name, tr ? tr->name : "missing",
              mt_type_traits_get(ours[i])->name);
    }
    free(ours);
}

/* llama.cpp's dry run of mix on md: its log into *log. Returns its status. */
static uint32_t dry_run(model *md, mt_quant_mix mix, bool imatrix, dry_log *log) {
    llq_params q = ll_default();
    q.ftype = mt_quant_mix_llama_ftype(mix);
    q.nthread = 2;
    q.imatrix = imatrix ? md->imatrix : NULL;
    q.dry_run = true;
    memset(log, 0, sizeof *log);
    ll_log_set(on_log, log);
    uint32_t rc = ll_quantize(md->path, check_tmp(".dry.gguf"), &q);
    ll_log_set(on_log, NULL);
    CHECK(rc == 0, "%s %s: llama.cpp's dry run failed: %s", md->label, mt_quant_mix_name(mix),
          log->last);
    CHECK(rc != 0 || log->n == (int)md->f->n_tensors,
          "%s %s: the dry run's log names %d of %llu tensors", md->label, mt_quant_mix_name(mix),
          log->n, (unsigned long long)md->f->n_tensors);
    return rc;
}

/* One mix on one model without an importance matrix: llama.cpp's file, or its dry
 * run where it refuses to write one. With check_log, its dry run must also name
 * the file's types (the log reader stands in for files only where it is right). */
static void run(model *md, mt_quant_mix mix, bool check_log, tally *ty) {
    static dry_log log;
    const char *out = check_tmp(".q.gguf");
    llq_params q = ll_default();
    q.ftype = mt_quant_mix_llama_ftype(mix);
    q.nthread = 2;
    memset(&log, 0, sizeof log);
    ll_log_set(on_log, &log);
    uint32_t rc = ll_quantize(md->path, out, &q);
    ll_log_set(on_log, NULL);
    if (rc != 0) { /* refused without an importance matrix */
        CHECK(strstr(log.last, "imatrix") || strstr(log.last, "importance"),
              "%s %s: llama_model_quantize failed: %s", md->label, mt_quant_mix_name(mix),
              log.last);
        ty->how = 'd';
        if (dry_run(md, mix, false, &log) == 0) compare(md, mix, false, NULL, &log, ty);
        return;
    }
    mt_error err = {{0}};
    gguf_file *f = gguf_open(out, &err);
    CHECK(f != NULL, "%s %s: the quantized file: %s", md->label, mt_quant_mix_name(mix), err.msg);
    if (f) {
        CHECK(f->n_tensors == md->f->n_tensors, "%s %s: %llu tensors quantized of %llu", md->label,
              mt_quant_mix_name(mix), (unsigned long long)f->n_tensors,
              (unsigned long long)md->f->n_tensors);
        ty->how = 'q';
        compare(md, mix, false, f, NULL, ty);
        if (check_log && dry_run(md, mix, false, &log) == 0)
            for (uint64_t i = 0; i < f->n_tensors; i++) {
                int seen = -1;
                for (int k = 0; k < log.n; k++)
                    if (strcmp(log.seen[k].name, f->tensors[i].name) == 0) seen = log.seen[k].type;
                CHECK(seen == (int)f->tensors[i].type,
                      "%s %s: the dry run's log says %s for %s, the file has %s", md->label,
                      mt_quant_mix_name(mix),
                      seen >= 0 ? mt_type_traits_get((uint32_t)seen)->name : "nothing",
                      f->tensors[i].name, mt_type_traits_get(f->tensors[i].type)->name);
            }
        gguf_close(f);
    }
    remove(out);
}

/* The same with a uniform importance matrix, from llama.cpp's dry run (quantizing
 * the i-quants for real takes minutes). */
static void run_imatrix(model *md, mt_quant_mix mix, tally *ty) {
    static dry_log log;
    ty->how = 'i';
    if (dry_run(md, mix, true, &log) == 0) compare(md, mix, true, NULL, &log, ty);
}

static void *sym(void *h, const char *name) {
    void *p = dlsym(h, name);
    CHECK(p != NULL, "libllama exports no %s", name);
    return p;
}

/* "27/27 q", or "-" when not run (static: one cell at a time per call site). */
static const char *cell(const tally *t) {
    static char buf[2][32];
    static int k;
    char *b = buf[k++ & 1];
    if (t->how == '-')
        snprintf(b, 32, "-");
    else
        snprintf(b, 32, "%d/%d %c", t->agree, t->total, t->how);
    return b;
}

/* Mixes whose choices read has_imatrix, besides those llama.cpp refuses without one. */
static bool imatrix_matters(mt_quant_mix mix) {
    return mix == MT_QUANT_MIX_IQ3_XXS || mix == MT_QUANT_MIX_IQ4_NL ||
           mix == MT_QUANT_MIX_IQ4_XS || mix == MT_QUANT_MIX_Q4_0 || mix == MT_QUANT_MIX_Q5_0;
}

int main(int argc, char **argv) {
    const char *root = getenv("MT_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/libllama.v0.4.0.so", root && *root ? root : ".",
             GGML_REF_DIR);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL,
          "llama.cpp's libllama is the oracle: cannot load %s (%s); install the pinned "
          "node-llama-cpp with `./dev test` or `cd tools/golden && "
          "NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --ignore-scripts`",
          path, dlerror());
    if (!h) return check_report("test_quant_mix_llama");
    void *p;
    p = sym(h, "llama_model_quantize_default_params");
    memcpy(&ll_default, &p, sizeof p);
    p = sym(h, "llama_model_quantize");
    memcpy(&ll_quantize, &p, sizeof p);
    p = sym(h, "llama_log_set");
    memcpy(&ll_log_set, &p, sizeof p);
    backend_init_fn init;
    p = sym(h, "llama_backend_init");
    memcpy(&init, &p, sizeof p);
    if (!ll_default || !ll_quantize || !ll_log_set || !init)
        return check_report("test_quant_mix_llama");
    ll_log_set(on_log, NULL);
    init();
    /* the struct layout: llama.cpp's defaults, as its llama-quant.cpp sets them */
    llq_params d = ll_default();
    CHECK(d.ftype == 7 && d.output_tensor_type == 43 && d.token_embedding_type == 43 &&
              !d.allow_requantize && d.quantize_output_tensor && !d.only_copy && !d.pure &&
              !d.dry_run && !d.imatrix && d.max_buf_size == 8ull << 30,
          "llama_model_quantize_params does not have the layout of the pinned llama.h");

    model models[6] = {
        {.label = "qwen3moe", .args = "2 layers, 8 experts"},
        {.label = "llama", .args = "16 layers dense, gqa 4"},
        {.label = "deepseek2", .args = "9 layers, attn_k_b 128 wide"},
        {.label = "ds2-legacy", .args = "3 layers, attn_kv_b"},
        {.label = "kimi-k3", .args = "9 layers, 64 wide"},
        {.label = "llama-70b",
         .args = "80 layers dense, gqa 4: llama.cpp's \"70B\"",
         .dry_only = true},
    };
    models[0].p = mt_synth_default_params("qwen3moe");
    models[1].p = mt_synth_default_params("llama");
    models[1].p.dense = true;
    models[1].p.n_layer = 16;
    models[1].p.n_head = 8;
    models[1].p.n_head_kv = 2;
    models[1].p.head_dim = 32;
    models[1].p.n_ff = 256;
    models[2].p = mt_synth_default_params("deepseek2");
    models[2].p.n_layer = 9;
    models[2].p.qk_nope = 128;
    models[2].p.n_expert = 4;
    models[2].p.n_expert_used = 2;
    models[2].p.n_group = 2;
    models[2].p.n_group_used = 1;
    models[2].p.n_ff_exp = 128;
    models[3].p = mt_synth_default_params("deepseek2");
    models[3].p.mla_legacy = true;
    models[3].p.n_expert = 4;
    models[3].p.n_expert_used = 2;
    models[3].p.n_group = 2;
    models[3].p.n_group_used = 1;
    models[4].p = mt_synth_default_params("kimi-k3");
    models[4].p.n_layer = 9;
    models[4].p.n_expert = 16;
    models[4].p.n_expert_used = 4;
    models[4].p.expert_type = -1; /* F32 source */
    models[5].p = models[1].p;    /* llama.cpp's 70B rule: a llama of 80 layers, grouped queries */
    models[5].p.n_layer = 80;
    models[5].p.n_ff = 32;
    const int n_models = 6;
    for (int i = 0; i < n_models; i++)
        if (make_model(&models[i])) return check_report("test_quant_mix_llama");

    printf("agreeing tensors, ours vs llama.cpp's quantizer (q: its file; d: its dry run, where it"
           " refuses to write without an imatrix; i: its dry run with a uniform imatrix)\n");
    printf("%-10s", "");
    for (int i = 0; i < n_models; i++) printf(" | %-19s", models[i].label);
    printf("\n%-10s", "mix");
    for (int i = 0; i < n_models; i++) printf(" | %-9s %-9s", "none", "imatrix");
    printf("\n");
    int agree = 0, total = 0;
    for (int mix = 1; mix < MT_QUANT_MIX_COUNT; mix++) {
        if (argc > 1 && mt_quant_mix_from_name(argv[1]) != (mt_quant_mix)mix) continue;
        printf("%-10s", mt_quant_mix_name((mt_quant_mix)mix));
        for (int i = 0; i < n_models; i++) {
            tally a = {0, 0, '-'}, b = {0, 0, '-'};
            /* the dry run's log is checked against the files of a few mixes */
            bool check_log = mix == MT_QUANT_MIX_Q4_K_M || mix == MT_QUANT_MIX_IQ3_M ||
                             mix == MT_QUANT_MIX_MXFP4_MOE || mix == MT_QUANT_MIX_F16;
            if (models[i].dry_only) {
                static dry_log log;
                a.how = 'd';
                if (dry_run(&models[i], (mt_quant_mix)mix, false, &log) == 0)
                    compare(&models[i], (mt_quant_mix)mix, false, NULL, &log, &a);
            } else {
                run(&models[i], (mt_quant_mix)mix, check_log, &a);
            }
            /* with an imatrix where it changes a choice or is the only way to a file */
            if (a.how == 'd' || imatrix_matters((mt_quant_mix)mix))
                run_imatrix(&models[i], (mt_quant_mix)mix, &b);
            printf(" | %-9s %-9s", cell(&a), cell(&b));
            agree += a.agree + b.agree;
            total += a.total + b.total;
        }
        printf("\n");
        fflush(stdout);
    }
    printf("in all: %d of %d tensor types agree\n", agree, total);
    for (int i = 0; i < n_models; i++) {
        printf("  %-10s %s\n", models[i].label, models[i].args);
        free(models[i].t);
        free(models[i].imatrix);
        free(models[i].ones);
        free((void *)models[i].m.arch);
        gguf_close(models[i].f);
        remove(models[i].path);
    }
    return check_report("test_quant_mix_llama");
}

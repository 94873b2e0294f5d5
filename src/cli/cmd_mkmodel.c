/* cmd_mkmodel.c - `moontail mkmodel`: writes a deterministic synthetic GGUF
 * model (see synth_model.h) with the chosen architecture, type and sizes,
 * with progress on stderr (progress.h), then says what it wrote, as read
 * back from the file: path, architecture, sizes, bytes and tensor types. */
#include "cli.h"
#include "moontail/gguf.h"
#include "moontail/progress.h"
#include "moontail/quant_mix.h"
#include "moontail/synth_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: moontail mkmodel -o FILE [--arch ARCH] [--type TYPE | --ftype MIX] [--seed N] "
    "[options]\n"
    "       moontail mkmodel --dry-run [--arch ARCH] [--type TYPE | --ftype MIX] [options]\n"
    "\n"
    "  -o FILE              where to write the model\n"
    "  --arch ARCH          llama | qwen2moe | qwen3moe | deepseek2 | kimi-linear | kimi-k3\n"
    "                       (default qwen3moe)\n"
    "  --type TYPE          every tensor's type (default f32): f32 f16 bf16 q8_0 q4_0\n"
    "                       q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq1_s iq1_m iq2_xxs\n"
    "                       iq2_xs iq2_s iq3_xxs iq3_s iq4_nl iq4_xs tq1_0 tq2_0 mxfp4\n"
    "  --expert-type TYPE   type of the routed experts (default: --type; kimi-k3: mxfp4)\n"
    "  --ftype MIX          instead of --type: each tensor's type as llama.cpp's llama-quantize\n"
    "                       gives it from F32 under the mix MIX (no importance matrix), with its\n"
    "                       fallbacks for rows that are not whole blocks: F32 F16 BF16 Q4_0 Q4_1\n"
    "                       Q5_0 Q5_1 Q8_0 Q2_K Q2_K_S Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S\n"
    "                       Q5_K_M Q6_K IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS\n"
    "                       IQ3_S IQ3_M IQ4_NL IQ4_XS TQ1_0 TQ2_0 MXFP4_MOE\n"
    "  --dry-run            print each tensor's shape and type, write nothing (-o not needed)\n"
    "  --seed N             weight seed (default 1)\n"
    "  --vocab V            'bytes' (default) or the path of a tokenizer.json\n"
    "  --pre NAME           pre-tokenizer name written to the vocabulary\n"
    "  --layers N --embd N --heads N --heads-kv N --head-dim N --ff N --ctx N\n"
    "  --experts N --experts-used N --ff-exp N --shared-experts N\n"
    "  --dense-layers N     deepseek2, kimi: leading dense layers\n"
    "  --groups N --groups-used N            deepseek2 expert groups\n"
    "  --q-lora N --kv-lora N --nope N --rope N --v-dim N   MLA sizes (deepseek2, kimi);\n"
    "                       --q-lora 0 = a plain attn_q (kimi-linear allows only 0)\n"
    "  --yarn FACTOR --yarn-ctx N            YaRN RoPE scaling\n"
    "  --dense              llama without experts\n"
    "  --mla-legacy         deepseek2 with one attn_kv_b (older converters)\n"
    "  --tied               no output.weight (the head reuses token_embd)\n"
    "  --rope-freqs         llama: a rope_freqs.weight (llama-3 style RoPE divisors)\n"
    "  --logit-gain X       output head scale (default 5; larger = more peaked)\n"
    "  --readable           byte vocabulary: favour letters, digits, spaces and punctuation\n"
    "                       (text that a terminal shows, like the built-in model's)\n"
    "  --special-token TEXT byte vocabulary: add a control token (repeatable, ids from 259\n"
    "                       in the order given, with --added-token; at most 32 in all)\n"
    "  --added-token TEXT   byte vocabulary: add a user-defined token (matched in any text\n"
    "                       and shown in output, like DeepSeek R1's and Qwen3's <think>)\n"
    "  --chat-template FILE byte vocabulary: FILE's text as tokenizer.chat_template\n"
    "\n"
    "kimi-linear and kimi-k3 (defaults: the real layer and expert counts, kimi-linear 27\n"
    "layers, 256 experts, 8 used; kimi-k3 93 layers, 896 experts, 16 used; embd 64):\n"
    "  --kda-head-dim N     KDA head size (KDA heads = --heads; default 16)\n"
    "  --conv-kernel N      KDA short convolution width (default 4)\n"
    "  --mla-layers LIST    0-based MLA layers, e.g. 3,7, or 'all' or 'none'; the others are\n"
    "                       KDA (default: every 4th, 3,7,11,..., and the last); llama.cpp\n"
    "                       v0.4.0 loads 'all' and 'none' but aborts on the first decode\n"
    "kimi-k3 only:\n"
    "  --res-block N        attention-residual block size, 0 = off (default 2)\n"
    "  --latent N           routed experts' latent width, 0 = off (default 32)\n"
    "  --situ-beta X --situ-linear-beta X   situ activation (defaults 2 and 3)\n"
    "  --gate-lower-bound X KDA decay gate bound, 0 = none (softplus gate; default -5)\n"
    "  --no-mla-gate        no attn_gate on MLA layers\n"
    "for tests of the loader's checks (the file is then refused):\n"
    "  --extra-tensor NAME  also a tensor NAME (F32, embd) that no architecture uses\n"
    "  --arch-name NAME     general.architecture = NAME, other keys as --arch writes them\n";

/* Progress of making the layers, then of writing the file (a step of its own each). */
typedef struct mk_progress {
    const char *path;
    int step; /* 0: none yet, 1: making layers, 2: writing */
    mt_progress bar;
} mk_progress;

static void on_progress(void *ctx, bool writing, uint64_t done, uint64_t total) {
    mk_progress *m = ctx;
    if (m->step != 1 + writing) {
        m->step = 1 + writing;
        char label[300];
        snprintf(label, sizeof label, "mkmodel: %s %.200s", writing ? "writing" : "making",
                 m->path);
        mt_progress_init_quiet(&m->bar, stderr, label, 1.0);
    }
    if (writing)
        mt_progress_bytes(&m->bar, done, total);
    else
        mt_progress_count(&m->bar, done, total, "layers");
}

/* --dry-run: the tensors the model would have, one a line, then the count per type. */
static int print_plan(const mt_synth_params *p) {
    mt_synth_tensor *t;
    size_t n;
    mt_error err = {{0}};
    if (mt_synth_plan(p, &t, &n, &err)) {
        fprintf(stderr, "moontail mkmodel: %s\n", err.msg);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        char shape[64];
        int k = snprintf(shape, sizeof shape, "%lld", (long long)t[i].ne[0]);
        for (int d = 1; d < t[i].n_dims && k > 0 && (size_t)k < sizeof shape; d++)
            k += snprintf(shape + k, sizeof shape - (size_t)k, " x %lld", (long long)t[i].ne[d]);
        printf("%-36s %-18s %s\n", t[i].name, shape, mt_type_traits_get(t[i].type)->name);
    }
    printf("%s, %s: %zu tensors:", p->arch,
           p->ftype ? mt_quant_mix_name(p->ftype) : mt_type_traits_get(p->type)->name, n);
    const char *sep = " ";
    for (size_t i = 0; i < n; i++) {
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++) seen = t[j].type == t[i].type;
        if (seen) continue;
        size_t c = 0;
        for (size_t j = i; j < n; j++) c += t[j].type == t[i].type;
        printf("%s%zu %s", sep, c, mt_type_traits_get(t[i].type)->name);
        sep = ", ";
    }
    printf("\n");
    free(t);
    return 0;
}

/* What the file at path holds, read back from it: one line on stdout. */
static int print_written(const char *path) {
    mt_error err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    if (!f) {
        fprintf(stderr, "moontail mkmodel: wrote %s, but cannot read it back: %s\n", path, err.msg);
        return 1;
    }
    char *arch = gguf_get_string(f, "general.architecture", &err), key[128];
    uint32_t layers = 0, experts = 0, used = 0, embd = 0;
    mt_error e = {{0}};
    snprintf(key, sizeof key, "%s.block_count", arch ? arch : "");
    gguf_get_u32(f, key, &layers, &e);
    snprintf(key, sizeof key, "%s.embedding_length", arch ? arch : "");
    gguf_get_u32(f, key, &embd, &e);
    snprintf(key, sizeof key, "%s.expert_count", arch ? arch : "");
    gguf_get_u32(f, key, &experts, &e);
    snprintf(key, sizeof key, "%s.expert_used_count", arch ? arch : "");
    gguf_get_u32(f, key, &used, &e);
    printf("wrote %s: %s, %u layers, %u wide", path, arch ? arch : "?", layers, embd);
    if (experts) printf(", %u experts (%u used)", experts, used);
    printf(", %.2f MB, %llu tensors:", (double)f->size / 1e6, (unsigned long long)f->n_tensors);
    /* the tensors of each type, in the order the types first appear */
    const char *sep = " ";
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        bool seen = false;
        for (uint64_t j = 0; j < i && !seen; j++) seen = f->tensors[j].type == f->tensors[i].type;
        if (seen) continue;
        uint64_t n = 0;
        for (uint64_t j = i; j < f->n_tensors; j++) n += f->tensors[j].type == f->tensors[i].type;
        printf("%s%llu %s", sep, (unsigned long long)n,
               mt_type_traits_get(f->tensors[i].type)->name);
        sep = ", ";
    }
    printf("\n");
    free(arch);
    gguf_close(f);
    return 0;
}

int cmd_mkmodel(int argc, char **argv) {
    const char *arch = "qwen3moe", *out = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--arch") == 0) arch = argv[i + 1];
    mt_synth_params p = mt_synth_default_params(arch);
    bool dry_run = false, typed = false;
    const char *added[32];
    bool control[32];
    char *tmpl = NULL;
    static const struct {
        const char *opt;
        size_t off;
        int64_t lo, hi;
    } ints[] = {
        {"--layers", offsetof(mt_synth_params, n_layer), 1, 256},
        {"--embd", offsetof(mt_synth_params, n_embd), 32, 16384},
        {"--heads", offsetof(mt_synth_params, n_head), 1, 256},
        {"--heads-kv", offsetof(mt_synth_params, n_head_kv), 1, 256},
        {"--head-dim", offsetof(mt_synth_params, head_dim), 2, 1024},
        {"--ff", offsetof(mt_synth_params, n_ff), 32, 65536},
        {"--ctx", offsetof(mt_synth_params, n_ctx_train), 1, 1 << 24},
        {"--experts", offsetof(mt_synth_params, n_expert), 1, 1024},
        {"--experts-used", offsetof(mt_synth_params, n_expert_used), 1, 1024},
        {"--ff-exp", offsetof(mt_synth_params, n_ff_exp), 32, 65536},
        {"--shared-experts", offsetof(mt_synth_params, n_expert_shared), 0, 64},
        {"--dense-layers", offsetof(mt_synth_params, n_leading_dense), 0, 255},
        {"--groups", offsetof(mt_synth_params, n_group), 0, 256},
        {"--groups-used", offsetof(mt_synth_params, n_group_used), 0, 256},
        {"--q-lora", offsetof(mt_synth_params, q_lora), 0, 65536},
        {"--kv-lora", offsetof(mt_synth_params, kv_lora), 32, 65536},
        {"--nope", offsetof(mt_synth_params, qk_nope), 2, 1024},
        {"--rope", offsetof(mt_synth_params, qk_rope), 2, 1024},
        {"--v-dim", offsetof(mt_synth_params, v_dim), 2, 1024},
        {"--yarn-ctx", offsetof(mt_synth_params, yarn_orig_ctx), 1, 1 << 24},
        {"--kda-head-dim", offsetof(mt_synth_params, kda_head_dim), 2, 1024},
        {"--conv-kernel", offsetof(mt_synth_params, conv_kernel), 2, 16},
        {"--res-block", offsetof(mt_synth_params, res_block), 0, 256},
        {"--latent", offsetof(mt_synth_params, latent), 0, 16384},
    };
    static const struct {
        const char *opt;
        size_t off;
    } floats[] = {
        {"--yarn", offsetof(mt_synth_params, yarn_factor)},
        {"--logit-gain", offsetof(mt_synth_params, logit_gain)},
        {"--situ-beta", offsetof(mt_synth_params, situ_beta)},
        {"--situ-linear-beta", offsetof(mt_synth_params, situ_linear_beta)},
        {"--gate-lower-bound", offsetof(mt_synth_params, gate_lower_bound)},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int64_t n;
        bool matched = false;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            free(tmpl);
            return 0;
        }
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
            if (strcmp(a, ints[k].opt) != 0) continue;
            if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, ints[k].lo, ints[k].hi, &n))
                goto usage_error;
            *(int32_t *)((char *)&p + ints[k].off) = (int32_t)n;
            matched = true;
        }
        for (size_t k = 0; k < sizeof floats / sizeof floats[0]; k++) {
            if (strcmp(a, floats[k].opt) != 0) continue;
            if (!(v = cli_value(argc, argv, &i)) ||
                !cli_float(a, v, (float *)((char *)&p + floats[k].off)))
                goto usage_error;
            matched = true;
        }
        if (matched) continue;
        if (strcmp(a, "-o") == 0) {
            if (!(out = cli_value(argc, argv, &i))) goto usage_error;
        } else if (strcmp(a, "--arch") == 0) {
            if (!cli_value(argc, argv, &i)) goto usage_error;
        } else if (strcmp(a, "--type") == 0) {
            if (!(v = cli_value(argc, argv, &i))) goto usage_error;
            int t = mt_type_from_name(v);
            if (t < 0) {
                fprintf(stderr, "moontail mkmodel: unknown type '%s'\n", v);
                goto usage_error;
            }
            p.type = (mt_type)t;
            typed = true;
        } else if (strcmp(a, "--expert-type") == 0) {
            if (!(v = cli_value(argc, argv, &i))) goto usage_error;
            if ((p.expert_type = mt_type_from_name(v)) < 0) {
                fprintf(stderr, "moontail mkmodel: unknown type '%s'\n", v);
                goto usage_error;
            }
            typed = true;
        } else if (strcmp(a, "--ftype") == 0) {
            if (!(v = cli_value(argc, argv, &i))) goto usage_error;
            if (!(p.ftype = mt_quant_mix_from_name(v))) {
                fprintf(stderr,
                        "moontail mkmodel: unknown --ftype '%s'; the mixes are those of"
                        " llama-quantize, e.g. Q4_K_M (see 'moontail mkmodel --help')\n",
                        v);
                goto usage_error;
            }
        } else if (strcmp(a, "--dry-run") == 0) {
            dry_run = true;
        } else if (strcmp(a, "--mla-layers") == 0) {
            if (!(p.mla_layers = cli_value(argc, argv, &i))) goto usage_error;
        } else if (strcmp(a, "--seed") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 0, INT64_MAX, &n))
                goto usage_error;
            p.seed = (uint64_t)n;
        } else if (strcmp(a, "--vocab") == 0) {
            if (!(p.vocab = cli_value(argc, argv, &i))) goto usage_error;
        } else if (strcmp(a, "--pre") == 0) {
            if (!(p.pre = cli_value(argc, argv, &i))) goto usage_error;
        } else if (strcmp(a, "--no-mla-gate") == 0) {
            p.mla_gate = false;
        } else if (strcmp(a, "--dense") == 0) {
            p.dense = true;
        } else if (strcmp(a, "--mla-legacy") == 0) {
            p.mla_legacy = true;
        } else if (strcmp(a, "--tied") == 0) {
            p.tied_output = true;
        } else if (strcmp(a, "--rope-freqs") == 0) {
            p.rope_freqs = true;
        } else if (strcmp(a, "--readable") == 0) {
            p.readable = true;
        } else if (strcmp(a, "--special-token") == 0 || strcmp(a, "--added-token") == 0) {
            if (!(v = cli_value(argc, argv, &i))) goto usage_error;
            if (p.n_added == 32) {
                fprintf(stderr, "moontail mkmodel: at most 32 added tokens\n");
                goto usage_error;
            }
            control[p.n_added] = a[2] == 's';
            added[p.n_added++] = v;
        } else if (strcmp(a, "--chat-template") == 0) {
            size_t len = 0;
            if (!(v = cli_value(argc, argv, &i))) goto usage_error;
            free(tmpl);
            if (!(tmpl = cli_read_file(v, &len))) goto usage_error;
            if (strlen(tmpl) != len) {
                fprintf(stderr, "moontail mkmodel: the chat template %s holds a NUL byte\n", v);
                goto usage_error;
            }
            p.chat_template = tmpl;
        } else if (strcmp(a, "--extra-tensor") == 0) {
            if (!(p.extra_tensor = cli_value(argc, argv, &i))) goto usage_error;
        } else if (strcmp(a, "--arch-name") == 0) {
            if (!(p.arch_name = cli_value(argc, argv, &i))) goto usage_error;
        } else {
            fprintf(stderr,
                    "moontail mkmodel: unknown option '%s'; see 'moontail mkmodel --help'\n", a);
            goto usage_error;
        }
    }
    if (p.ftype && typed) {
        fprintf(stderr, "moontail mkmodel: --ftype chooses every tensor's type; give it without"
                        " --type and --expert-type\n");
        goto usage_error;
    }
    if (!out && !dry_run) {
        fprintf(stderr, "moontail mkmodel: -o FILE is required\n");
        goto usage_error;
    }
    p.added_tokens = added;
    p.added_control = control;
    if (dry_run) {
        int rc = print_plan(&p);
        free(tmpl);
        return rc;
    }
    mk_progress prog = {.path = out};
    p.progress = on_progress;
    p.progress_ctx = &prog;
    mt_error err = {{0}};
    int rc = 0;
    if (mt_synth_write(&p, out, &err)) {
        fprintf(stderr, "moontail mkmodel: %s\n", err.msg);
        rc = 1;
    } else {
        rc = print_written(out);
    }
    free(tmpl);
    return rc;
usage_error:
    free(tmpl);
    return 2;
}

/* test_quant_mix.c - the quantization mixes (quant_mix.h) on their own and in
 * mkmodel's writer, without llama.cpp (test_quant_mix_llama compares the
 * choices with llama.cpp's quantizer):
 *   - every mix has a name that reads back, a distinct llama.cpp file type,
 *     and a base type the engine's type table knows;
 *   - a pure function: the same tensors in another order get the same types,
 *     a second plan equals the first;
 *   - every chosen type fits its tensor's rows (the fallbacks), and what
 *     llama.cpp never quantizes (1-D, norms, routers, KDA convolutions and
 *     decay, names not ending in "weight") keeps its type under every mix;
 *   - DeepSeek/Kimi K2's 128-wide attn_k_b rows take the fallback of each
 *     K-quant (Q4_K -> Q5_0, Q6_K -> Q8_0, Q5_K -> Q5_1, Q2_K/Q3_K -> Q4_0)
 *     and of each i-quant (-> IQ4_NL);
 *   - mkmodel's writer: mt_synth_plan with a mix is mt_quant_mix_plan of its
 *     F32 tensors; mt_synth_write writes exactly those types when the engine
 *     can quantize to all of them, and otherwise fails naming the type. */
#include "check.h"
#include "moontail/gguf.h"
#include "moontail/quant_mix.h"
#include "moontail/synth_model.h"

#include <stdlib.h>
#include <string.h>

static const char *const archs[] = {"llama",     "qwen2moe",    "qwen3moe",
                                    "deepseek2", "kimi-linear", "kimi-k3"};
enum { N_ARCHS = sizeof archs / sizeof archs[0] };

/* Small models of each architecture (kimi: a few layers and experts). */
static mt_synth_params small(const char *arch) {
    mt_synth_params p = mt_synth_default_params(arch);
    if (strncmp(arch, "kimi", 4) == 0) {
        p.n_layer = 4;
        p.n_expert = 8;
        p.n_expert_used = 2;
    }
    if (strcmp(arch, "deepseek2") == 0) p.qk_nope = 128; /* K2's attn_k_b width */
    return p;
}

static mt_quant_mix_model model_of(const mt_synth_params *p) {
    mt_quant_mix_model m = {.arch = p->arch, .n_layer = p->n_layer, .n_head = p->n_head};
    m.n_head_kv = strncmp(p->arch, "kimi", 4) == 0 ? 0 : p->n_head_kv; /* kimi: layer 0 is KDA */
    m.n_expert = p->dense ? 0 : p->n_expert;
    return m;
}

/* The F32 model's tensors as the rules see them. */
static mt_quant_mix_tensor *tensors_of(const mt_synth_tensor *s, size_t n) {
    mt_quant_mix_tensor *t = calloc(n, sizeof *t);
    for (size_t i = 0; i < n; i++) {
        t[i].name = s[i].name;
        for (int d = 0; d < 4; d++) t[i].ne[d] = d < 3 ? s[i].ne[d] : 1;
        t[i].type = s[i].type;
    }
    return t;
}

static void test_names(void) {
    for (int m = 1; m < MT_QUANT_MIX_COUNT; m++) {
        const char *name = mt_quant_mix_name((mt_quant_mix)m);
        CHECK(name && mt_quant_mix_from_name(name) == (mt_quant_mix)m, "mix %d: name %s", m,
              name ? name : "(null)");
        for (int k = 1; k < m; k++)
            CHECK(mt_quant_mix_llama_ftype((mt_quant_mix)k) != mt_quant_mix_llama_ftype(m),
                  "%s and %s have one llama ftype", mt_quant_mix_name((mt_quant_mix)k), name);
    }
    CHECK(mt_quant_mix_from_name("q4_k_m") == MT_QUANT_MIX_Q4_K_M, "names are case-insensitive");
    CHECK(mt_quant_mix_from_name("Q4_K_X") == MT_QUANT_MIX_NONE, "an unknown mix");
    CHECK(mt_quant_mix_name(MT_QUANT_MIX_NONE) == NULL && mt_quant_mix_llama_ftype(0) == -1,
          "NONE has no name");
}

static bool same_kept(const char *name) {
    /* what llama.cpp leaves in every model (its tensor_allows_quantization) */
    return strstr(name, "_norm.weight") || strstr(name, "ffn_gate_inp") ||
           strstr(name, "ssm_conv1d") || strstr(name, ".bias") || strstr(name, "ssm_a") ||
           strstr(name, "res_score");
}

static void test_model(const char *arch) {
    mt_synth_params p = small(arch);
    mt_synth_tensor *s;
    size_t n;
    mt_error err = {{0}};
    CHECK(mt_synth_plan(&p, &s, &n, &err) == 0, "%s: %s", arch, err.msg);
    if (!s) return;
    mt_quant_mix_tensor *t = tensors_of(s, n), *rev = calloc(n, sizeof *rev);
    for (size_t i = 0; i < n; i++) rev[i] = t[n - 1 - i];
    mt_type *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    mt_quant_mix_model m = model_of(&p);
    for (int mix = 1; mix < MT_QUANT_MIX_COUNT; mix++) {
        const char *mn = mt_quant_mix_name((mt_quant_mix)mix);
        CHECK(mt_quant_mix_plan((mt_quant_mix)mix, &m, t, n, a, &err) == 0, "%s %s: %s", arch, mn,
              err.msg);
        CHECK(mt_quant_mix_plan((mt_quant_mix)mix, &m, t, n, b, &err) == 0, "%s", err.msg);
        CHECK(mt_quant_mix_plan((mt_quant_mix)mix, &m, rev, n, c, &err) == 0, "%s", err.msg);
        for (size_t i = 0; i < n; i++) {
            const mt_type_traits *tr = mt_type_traits_get(a[i]);
            CHECK(tr && t[i].ne[0] % tr->blck == 0, "%s %s: %s (rows of %lld) gets %s", arch, mn,
                  t[i].name, (long long)t[i].ne[0], tr ? tr->name : "?");
            CHECK(a[i] == b[i] && a[i] == c[n - 1 - i], "%s %s: %s depends on the call or order",
                  arch, mn, t[i].name);
            if (same_kept(t[i].name) || s[i].n_dims < 2)
                CHECK(a[i] == t[i].type && !mt_quant_mix_quantizes(&t[i]),
                      "%s %s: %s should keep its type", arch, mn, t[i].name);
            /* the 128-wide rows of attn_k_b */
            if (strstr(t[i].name, "attn_k_b") && t[i].ne[0] == 128) {
                static const struct {
                    mt_quant_mix mix;
                    mt_type to;
                } fb[] = {
                    {MT_QUANT_MIX_Q4_K_S, MT_TYPE_Q5_0},   {MT_QUANT_MIX_Q5_K_S, MT_TYPE_Q5_1},
                    {MT_QUANT_MIX_Q6_K, MT_TYPE_Q8_0},     {MT_QUANT_MIX_Q3_K_S, MT_TYPE_Q4_0},
                    {MT_QUANT_MIX_Q2_K, MT_TYPE_Q4_0},     {MT_QUANT_MIX_IQ2_XXS, MT_TYPE_IQ4_NL},
                    {MT_QUANT_MIX_IQ4_XS, MT_TYPE_IQ4_NL}, {MT_QUANT_MIX_TQ1_0, MT_TYPE_Q4_0}};
                for (size_t k = 0; k < sizeof fb / sizeof fb[0]; k++)
                    if ((int)fb[k].mix == mix)
                        CHECK(a[i] == fb[k].to, "%s %s: %s is %s, not %s", arch, mn, t[i].name,
                              mt_type_traits_get(a[i])->name, mt_type_traits_get(fb[k].to)->name);
            }
        }
        /* mkmodel's plan is the mix's plan of the F32 tensors */
        mt_synth_params q = p;
        q.ftype = (mt_quant_mix)mix;
        mt_synth_tensor *qs;
        size_t qn;
        CHECK(mt_synth_plan(&q, &qs, &qn, &err) == 0 && qn == n, "%s %s: %s", arch, mn, err.msg);
        for (size_t i = 0; qs && qn == n && i < n; i++)
            CHECK(strcmp(qs[i].name, s[i].name) == 0 && qs[i].type == a[i],
                  "%s %s: mkmodel plans %s as %s", arch, mn, qs[i].name,
                  mt_type_traits_get(qs[i].type)->name);
        free(qs);
    }
    free(a);
    free(b);
    free(c);
    free(rev);
    free(t);
    free(s);
}

/* Writes arch under mix: the file has the planned types, or the write fails naming
 * the first type the engine cannot quantize to yet. */
static void test_write(const char *arch, int n_expert, mt_quant_mix mix) {
    mt_synth_params p = small(arch);
    p.ftype = mix;
    if (n_expert) p.n_expert = n_expert;
    mt_synth_tensor *s;
    size_t n;
    mt_error err = {{0}};
    if (mt_synth_plan(&p, &s, &n, &err)) {
        CHECK(0, "%s: %s", arch, err.msg);
        return;
    }
    const char *unsupported = NULL;
    for (size_t i = 0; i < n && !unsupported; i++)
        if (!mt_type_traits_get(s[i].type)->supported)
            unsupported = mt_type_traits_get(s[i].type)->name;
    const char *path = check_tmp(".gguf");
    int rc = mt_synth_write(&p, path, &err);
    if (unsupported) {
        char want[64];
        snprintf(want, sizeof want, "cannot quantize to %s yet", unsupported);
        CHECK(rc != 0 && strstr(err.msg, want) && strstr(err.msg, mt_quant_mix_name(mix)),
              "%s %s: want a refusal naming %s, got %d '%s'", arch, mt_quant_mix_name(mix),
              unsupported, rc, err.msg);
    } else {
        CHECK(rc == 0, "%s %s: %s", arch, mt_quant_mix_name(mix), err.msg);
        gguf_file *f = rc == 0 ? gguf_open(path, &err) : NULL;
        CHECK(rc != 0 || f, "%s", err.msg);
        for (size_t i = 0; f && i < n; i++) {
            const gguf_tensor *g = gguf_find_tensor(f, s[i].name);
            CHECK(g && g->type == s[i].type, "%s %s: %s written as %s, planned %s", arch,
                  mt_quant_mix_name(mix), s[i].name, g ? mt_type_traits_get(g->type)->name : "-",
                  mt_type_traits_get(s[i].type)->name);
        }
        uint32_t ft = 0;
        CHECK(f && gguf_get_u32(f, "general.file_type", &ft, NULL) &&
                  (int)ft == mt_quant_mix_llama_ftype(mix),
              "%s: general.file_type", mt_quant_mix_name(mix));
        if (f) gguf_close(f);
    }
    printf("%-10s %2d experts  %-10s %s\n", arch, p.n_expert, mt_quant_mix_name(mix),
           unsupported ? "refused (a type the engine cannot quantize yet)" : "written");
    remove(path);
    free(s);
}

int main(void) {
    test_names();
    for (int a = 0; a < N_ARCHS; a++) test_model(archs[a]);
    static const mt_quant_mix writes[] = {MT_QUANT_MIX_Q8_0,   MT_QUANT_MIX_Q4_K_M,
                                          MT_QUANT_MIX_Q6_K,   MT_QUANT_MIX_MXFP4_MOE,
                                          MT_QUANT_MIX_Q3_K_M, MT_QUANT_MIX_IQ2_XXS};
    for (size_t k = 0; k < sizeof writes / sizeof writes[0]; k++) {
        test_write("qwen3moe", 0, writes[k]);
        test_write("qwen3moe", 4, writes[k]); /* no 8-expert rules: Q4_K_M is Q4_K + Q6_K */
        test_write("deepseek2", 0, writes[k]);
    }
    return check_report("test_quant_mix");
}

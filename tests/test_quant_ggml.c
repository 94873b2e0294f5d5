/* test_quant_ggml.c - MoonTail's block formats against llama.cpp's own
 * decoders (tests/lib/ggml_ref.h: the pinned release's libggml-base.so), an
 * oracle written independently of our kernels:
 *   - for every type both compute with: random-byte blocks (any quant, grid
 *     index, sign and sub-scale; finite scales) decode bit for bit the same;
 *   - our quantizer's blocks decode the same in both;
 *   - our dot products (every kernel set) are within 1e-5 of sum |w*x| of the
 *     exact dot of llama.cpp's decoding of the same two rows (for Q8_1
 *     activations, with each block's s in the min term, as ggml computes).
 * Every type in the list must be compared (but Q8_1, whose decoder llama.cpp
 * does not export): one the engine cannot compute with fails the test. */
#include "check.h"
#include "lib/ggml_ref.h"
#include "lib/quant_random.h"
#include "moontail/quant.h"
#include "moontail/tensor_type.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x51ED2701ull;

/* Bitwise equal, or both NaN. */
static int same_floats(const float *a, const float *b, int64_t n, int64_t *first) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0 && !(isnan(a[i]) && isnan(b[i]))) {
            *first = i;
            return 0;
        }
    return 1;
}

static const mt_type types[] = {
    MT_TYPE_Q4_0,    MT_TYPE_Q4_1,   MT_TYPE_Q5_0,   MT_TYPE_Q5_1,    MT_TYPE_Q8_0,  MT_TYPE_Q8_1,
    MT_TYPE_Q2_K,    MT_TYPE_Q3_K,   MT_TYPE_Q4_K,   MT_TYPE_Q5_K,    MT_TYPE_Q6_K,  MT_TYPE_Q8_K,
    MT_TYPE_IQ2_XXS, MT_TYPE_IQ2_XS, MT_TYPE_IQ2_S,  MT_TYPE_IQ3_XXS, MT_TYPE_IQ3_S, MT_TYPE_IQ1_S,
    MT_TYPE_IQ1_M,   MT_TYPE_IQ4_NL, MT_TYPE_IQ4_XS, MT_TYPE_TQ1_0,   MT_TYPE_TQ2_0, MT_TYPE_MXFP4,
};
enum { N_TYPES = sizeof types / sizeof types[0], N = 2048 };

int main(void) {
    void *lib = ggml_ref_open(getenv("MT_SRC"));
    CHECK(lib != NULL, "llama.cpp's ggml library is needed as the oracle (see the message above)");
    if (!lib) return check_report("test_quant_ggml");

    uint8_t *q = malloc(N * 4), *xc = malloc(N * 4);
    float *ours = malloc(N * sizeof(float)), *theirs = malloc(N * sizeof(float));
    float *w = malloc(N * sizeof(float)), *x = malloc(N * sizeof(float));
    float *xd = malloc(N * sizeof(float));
    int compared = 0, unsupported = 0;
    printf(
        "type      random blocks  quantized  dot vs exact(llama.cpp decode), worst / sum|w*x|\n");
    for (int ti = 0; ti < N_TYPES; ti++) {
        const mt_type t = types[ti];
        const mt_type_traits *tr = mt_type_traits_get((uint32_t)t);
        ggml_ref_dequantize_fn ref = ggml_ref_dequantize(lib, tr->name);
        if (!tr->supported) {
            printf("%-8s  skipped: the engine does not compute with it yet\n", tr->name);
            unsupported++;
            continue;
        }
        if (!ref) {
            printf("%-8s  skipped: llama.cpp exports no dequantize_row for it\n", tr->name);
            continue;
        }
        compared++;
        /* random-byte blocks */
        int bad = 0;
        for (int trial = 0; trial < 40; trial++) {
            quant_random_blocks(t, q, N, &rng);
            quant_dequantize_row(t, q, ours, N);
            ref(q, theirs, N);
            int64_t i = 0;
            if (!same_floats(ours, theirs, N, &i) && bad++ < 3)
                fprintf(stderr,
                        "%s random blocks, trial %d: element %lld is %a here, %a in "
                        "llama.cpp (block %lld)\n",
                        tr->name, trial, (long long)i, (double)ours[i], (double)theirs[i],
                        (long long)(i / tr->blck));
        }
        CHECK(bad == 0, "%s: %d of 40 random-byte rows decode differently from llama.cpp", tr->name,
              bad);
        const mt_type vt = quant_vec_dot_type(t);
        if (vt == MT_TYPE_COUNT) { /* an activation type: decoding only */
            printf("%-8s  40 x %d equal   -          (activations)\n", tr->name, N);
            continue;
        }
        /* our quantizer's blocks, and the dot products */
        int qbad = 0;
        double worst = 0;
        static const char *const sets[] = {"reference", "avx2", "avx512"};
        for (int trial = 0; trial < 10; trial++) {
            for (int i = 0; i < N; i++)
                w[i] = quant_random_gauss(&rng) * (trial % 3 == 0 ? 1e-3f : 1.0f);
            for (int i = 0; i < N; i++)
                x[i] = quant_random_gauss(&rng) * (i % 97 == 3 ? 20.0f : 1.0f);
            quant_quantize_row(t, w, q, N);
            quant_dequantize_row(t, q, ours, N);
            ref(q, theirs, N);
            int64_t i = 0;
            if (!same_floats(ours, theirs, N, &i)) qbad++;
            quant_convert_activations(vt, x, xc, N);
            ggml_ref_dequantize_fn xref = ggml_ref_dequantize(lib, mt_type_traits_get(vt)->name);
            if (xref)
                xref(xc, xd, N);
            else
                quant_dequantize_row(vt, xc, xd, N);
            double exact = 0, mag = 0;
            for (int k = 0; k < N; k++) {
                exact += (double)theirs[k] * xd[k];
                mag += fabs((double)theirs[k] * xd[k]);
            }
            double s_bound; /* for Q8_1 activations: each block's s in the min term */
            exact += quant_q8_1_min_shift(t, N, q, xc, &s_bound);
            for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
                if (quant_kernels_select(sets[s]) != 0) continue;
                double err = fabs(quant_vec_dot(t, N, q, xc) - exact) / (mag > 0 ? mag : 1);
                if (err > worst) worst = err;
            }
            quant_kernels_select("reference");
        }
        CHECK(qbad == 0, "%s: %d of 10 quantized rows decode differently from llama.cpp", tr->name,
              qbad);
        CHECK(worst <= 1e-5, "%s: a dot product is %.2e of sum|w*x| from the exact dot", tr->name,
              worst);
        printf("%-8s  40 x %d equal   10 equal   %.2e\n", tr->name, N, worst);
    }
    CHECK(unsupported == 0 && compared >= N_TYPES - 1,
          "%d types unsupported, %d of the %d compared with llama.cpp (only Q8_1, which it exports"
          " no decoder of, may be missing)",
          unsupported, compared, N_TYPES);
    free(q);
    free(xc);
    free(ours);
    free(theirs);
    free(w);
    free(x);
    free(xd);
    dlclose(lib);
    return check_report("test_quant_ggml");
}

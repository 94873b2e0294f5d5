/* test_kv_cache.c - the KV cache types (mt_kv_type) on their own:
 *   - the Walsh-Hadamard rotation of q8_0 caches equals the matrix of its
 *     definition (H[i][j] = (-1)^popcount(i & j) / sqrt(n)), undoes itself and
 *     keeps dot products;
 *   - one head's attention over f16, bf16 and q8_0 rows equals a double
 *     precision reference that rounds where llama.cpp does (the query and the
 *     softmax weights to the 16-bit type; the query to q8_0 blocks), with the
 *     rounding done here by the compiler's _Float16 and by hand;
 *   - sizes per type (GQA, absorbed MLA, the older MLA layout), types refused
 *     for widths their blocks do not fit, names parsed;
 *   - a long context is mapped without being committed: a cache of a million
 *     positions adds almost nothing to the resident memory until written;
 *   - rewinding (mt_kv_snap_begin, mt_kv_rewind): a kimi-k3 cache taken back
 *     to a position inside its last pass holds, bit for bit, the KDA state of
 *     a cache that only ever saw the tokens up to there, and goes on to the
 *     same logits; rewinds without a snapshot are refused, and the snapshots'
 *     bytes are counted.
 * Batch and thread invariance of every type is in test_determinism.c, the
 * agreement with llama.cpp in test_golden.c (tests/golden/kv.json). */
#include "../src/model/model_internal.h"
#include "check.h"
#include "moontail/sysinfo.h"
#include "moontail/session.h"
#include "moontail/synth_model.h"

#include <math.h>
#include <string.h>
#include <unistd.h>
#ifdef _WIN32
#include <windows.h>

#include <psapi.h>
#endif

static void check_hadamard(void) {
    for (int32_t n = 64; n <= 256; n *= 2) {
        /* row e_j rotated is column j of H; H is symmetric */
        float *x = calloc((size_t)n * n, sizeof *x);
        for (int32_t j = 0; j < n; j++) x[(size_t)j * n + j] = 1;
        mt_hadamard_rows(x, (int64_t)n * n, n);
        double worst = 0;
        for (int32_t i = 0; i < n; i++)
            for (int32_t j = 0; j < n; j++) {
                double want = (__builtin_popcount((unsigned)(i & j)) % 2 ? -1 : 1) / sqrt(n);
                worst = fmax(worst, fabs(x[(size_t)j * n + i] - want));
            }
        CHECK(worst < 1e-6, "H(%d) differs from its definition by %g", n, worst);
        free(x);
    }
    enum { N = 256 };
    float q[N], k[N], q0[N];
    double dot0 = 0, dot1 = 0;
    for (int i = 0; i < N; i++) {
        q[i] = q0[i] = sinf(0.37f * (float)i) * (i % 7 == 0 ? 9.0f : 1.0f);
        k[i] = cosf(0.11f * (float)i);
        dot0 += (double)q[i] * k[i];
    }
    mt_hadamard_rows(q, N, 128);
    mt_hadamard_rows(k, N, 128);
    for (int i = 0; i < N; i++) dot1 += (double)q[i] * k[i];
    CHECK(fabs(dot0 - dot1) < 1e-4, "rotation changes a dot product: %g vs %g", dot0, dot1);
    mt_hadamard_rows(q, N, 128);
    double back = 0;
    for (int i = 0; i < N; i++) back = fmax(back, fabs(q[i] - q0[i]));
    CHECK(back < 1e-5, "rotating twice is off the input by %g", back);
    CHECK(mt_hadamard_block_k(128) == 128 && mt_hadamard_block_k(192) == 64 &&
              mt_hadamard_block_k(96) == 0 && mt_hadamard_block_k(576) == 64 &&
              mt_hadamard_block_v(128) == 64 && mt_hadamard_block_v(32) == 0,
          "rotation blocks: k 128 -> %d, 192 -> %d, 96 -> %d, 576 -> %d; v 128 -> %d, 32 -> %d",
          mt_hadamard_block_k(128), mt_hadamard_block_k(192), mt_hadamard_block_k(96),
          mt_hadamard_block_k(576), mt_hadamard_block_v(128), mt_hadamard_block_v(32));
}

/* Rounding as llama.cpp's cache types do, written here independently. */
static float round_f16(float x) {
    return (float)(_Float16)x;
}
static float round_bf16(float x) { /* to nearest, ties to even */
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}
/* x as q8_0 blocks of 32 (scale amax / 127 stored as f16, values rounded), back in f32. */
static void round_q8_0(const float *x, float *out, int n) {
    for (int b = 0; b < n; b += 32) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        float d = amax / 127, id = d ? 1 / d : 0, ds = round_f16(d);
        for (int i = 0; i < 32; i++) out[b + i] = ds * (float)(int)roundf(x[b + i] * id);
    }
}

static void check_attend(void) {
    enum { DK = 96, DV = 64, NP = 37 };
    const float scale = 0.125f;
    float q[DK], k[NP][DK], v[NP][DV];
    for (int i = 0; i < DK; i++) q[i] = 1.7f * sinf(0.3f * (float)i + 0.2f);
    for (int s = 0; s < NP; s++) {
        for (int i = 0; i < DK; i++) k[s][i] = cosf(0.17f * (float)(i * (s + 1)) + (float)s);
        for (int i = 0; i < DV; i++) v[s][i] = sinf(0.05f * (float)(i + 3 * s)) * 2;
    }
    static const mt_kv_type types[] = {MT_KV_F16, MT_KV_BF16, MT_KV_Q8_0};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const mt_kv_type t = types[ti];
        const size_t kr = mt_type_row_size(mt_kv_row_type(t), DK),
                     vr = mt_type_row_size(mt_kv_row_type(t), DV);
        uint8_t *kc = malloc(NP * kr), *vc = malloc(NP * vr);
        for (int s = 0; s < NP; s++) {
            mt_kv_store(t, k[s], DK, kc + s * kr);
            mt_kv_store(t, v[s], DV, vc + s * vr);
        }
        /* the reference: what the cache holds, the query as llama.cpp rounds it */
        float kq[NP][DK], vq[NP][DV], qr[DK];
        for (int s = 0; s < NP; s++) {
            if (t == MT_KV_Q8_0) {
                round_q8_0(k[s], kq[s], DK);
                round_q8_0(v[s], vq[s], DV);
            } else {
                for (int i = 0; i < DK; i++)
                    kq[s][i] = t == MT_KV_F16 ? round_f16(k[s][i]) : round_bf16(k[s][i]);
                for (int i = 0; i < DV; i++)
                    vq[s][i] = t == MT_KV_F16 ? round_f16(v[s][i]) : round_bf16(v[s][i]);
            }
        }
        if (t == MT_KV_Q8_0)
            round_q8_0(q, qr, DK);
        else
            for (int i = 0; i < DK; i++)
                qr[i] = t == MT_KV_F16 ? round_f16(q[i]) : round_bf16(q[i]);
        double sc[NP], mx = -INFINITY, sum = 0;
        for (int s = 0; s < NP; s++) {
            double d = 0;
            for (int i = 0; i < DK; i++) d += (double)qr[i] * kq[s][i];
            sc[s] = d * scale;
            mx = fmax(mx, sc[s]);
        }
        for (int s = 0; s < NP; s++) sum += (sc[s] = exp(sc[s] - mx));
        double want[DV] = {0};
        for (int s = 0; s < NP; s++) {
            float w = (float)(sc[s] / sum);
            if (t == MT_KV_F16) w = round_f16(w);
            if (t == MT_KV_BF16) w = round_bf16(w);
            for (int i = 0; i < DV; i++) want[i] += (double)w * vq[s][i];
        }
        mt_attend_work w;
        CHECK(mt_attend_work_init(&w, NP, DK) == 0, "attend work");
        float got[DV];
        mt_attend_cached(t, q, kc, kr, DK, vc, vr, DV, NP, scale, &w, got);
        mt_attend_work_free(&w);
        double worst = 0;
        for (int i = 0; i < DV; i++) worst = fmax(worst, fabs(got[i] - want[i]));
        CHECK(worst < 2e-5, "%s attention is off the reference by %g", mt_kv_type_name(t), worst);
        free(kc), free(vc);
    }
}

/* Resident memory of this process in bytes (/proc/self/statm; the working
 * set on Windows). */
static uint64_t resident(void) {
#ifdef _WIN32
    PROCESS_MEMORY_COUNTERS pm = {.cb = sizeof pm};
    return K32GetProcessMemoryInfo(GetCurrentProcess(), &pm, sizeof pm) ? pm.WorkingSetSize : 0;
#endif
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &res) != 2) res = 0;
        fclose(f);
    }
    return (uint64_t)res * (uint64_t)mt_sys_page_size();
}

static mt_model *synth(const char *arch, bool legacy, int32_t layers, const char **path) {
    mt_synth_params p = mt_synth_default_params(arch);
    p.mla_legacy = legacy;
    p.n_layer = layers;
    *path = check_tmp(".gguf");
    mt_error err = {{0}};
    CHECK(mt_synth_write(&p, *path, &err) == 0, "mkmodel %s: %s", arch, err.msg);
    mt_model *m = mt_model_load(*path, &err);
    CHECK(m != NULL, "load %s: %s", arch, err.msg);
    return m;
}

static void check_sizes(void) {
    mt_kv_type t;
    mt_error err = {{0}};
    CHECK(mt_kv_type_parse("Q8_0", &t, &err) == 0 && t == MT_KV_Q8_0 &&
              mt_kv_type_parse("f16", &t, &err) == 0 && t == MT_KV_F16 &&
              strcmp(mt_kv_type_name(MT_KV_BF16), "bf16") == 0,
          "kv type names: %s", err.msg);
    CHECK(mt_kv_type_parse("q4_0", &t, &err) < 0 && strstr(err.msg, "f32, f16, bf16, q8_0"),
          "an unknown kv type: %s", err.msg);
    CHECK(MT_KV_DEFAULT == MT_KV_F16 && MT_KV_F16 == 0, "f16 is the default and a zeroed config's");

    /* bytes a position per type: GQA K + V rows, the MLA latent, the older MLA layout's heads */
    const struct {
        const char *arch;
        bool legacy;
    } shapes[] = {{"qwen3moe", false}, {"deepseek2", false}, {"deepseek2", true}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const char *path;
        mt_model *m = synth(shapes[i].arch, shapes[i].legacy, 2, &path);
        if (!m) continue;
        const mt_hparams *hp = &m->hp;
        int64_t values = mt_arch_has_mla(hp->arch)
                             ? (hp->mla_expanded ? (int64_t)hp->n_head *
                                                       (hp->qk_nope + hp->qk_rope + hp->v_head_dim)
                                                 : hp->kv_lora_rank + hp->qk_rope)
                             : (int64_t)hp->n_head_kv * (hp->head_dim_k + hp->head_dim_v);
        CHECK(hp->mla_expanded == shapes[i].legacy, "%s: older layout detected %d", shapes[i].arch,
              hp->mla_expanded);
        const uint64_t want[MT_KV_TYPE_COUNT] = {[MT_KV_F32] = 4 * (uint64_t)values,
                                                 [MT_KV_F16] = 2 * (uint64_t)values,
                                                 [MT_KV_BF16] = 2 * (uint64_t)values,
                                                 [MT_KV_Q8_0] = 34 * (uint64_t)values / 32};
        for (int k = 0; k < MT_KV_TYPE_COUNT; k++) {
            uint64_t fixed, per;
            mt_kv_layer_bytes(hp, false, (mt_kv_type)k, &fixed, &per);
            mt_kv_cache *kv = mt_kv_cache_new(m, 0, 2, 10, (mt_kv_type)k, &err);
            CHECK(kv && fixed == 0 && per == want[k] && mt_kv_cache_bytes(kv) == 20 * per,
                  "%s%s as %s: %llu bytes a position (want %llu), cache %zu: %s", shapes[i].arch,
                  shapes[i].legacy ? " (older layout)" : "", mt_kv_type_name((mt_kv_type)k),
                  (unsigned long long)per, (unsigned long long)want[k], mt_kv_cache_bytes(kv),
                  err.msg);
            mt_kv_cache_free(kv);
        }
        mt_model_free(m);
        unlink(path);
    }

    /* a head of 48 values does not fit q8_0's blocks of 32: refused by name */
    mt_synth_params p = mt_synth_default_params("qwen3moe");
    p.head_dim = 48;
    p.n_layer = 1;
    const char *path = check_tmp(".gguf");
    CHECK(mt_synth_write(&p, path, &err) == 0, "mkmodel head 48: %s", err.msg);
    mt_model *m = mt_model_load(path, &err);
    mt_kv_cache *kv = m ? mt_kv_cache_new(m, 0, 1, 8, MT_KV_Q8_0, &err) : NULL;
    CHECK(m && !kv && strstr(err.msg, "blocks of 32") && strstr(err.msg, "48"),
          "q8_0 with heads of 48: %s", err.msg);
    mt_kv_cache_free(kv);
    mt_model_free(m);
    unlink(path);
}

static void check_no_reservation(void) {
#if defined(__SANITIZE_ADDRESS__)
    return; /* sanitizer builds allocate caches with calloc (kv_cache.c) */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return;
#endif
#endif
    const char *path;
    mt_model *m = synth("deepseek2", false, 2, &path);
    if (!m) return;
    mt_error err = {{0}};
    const uint64_t before = resident();
    /* 2 layers x 1M positions x 576 bytes: 1.2 GB of address space */
    mt_kv_cache *kv = mt_kv_cache_new(m, 0, 2, 1 << 20, MT_KV_F16, &err);
    const uint64_t after = resident();
    CHECK(kv && mt_kv_cache_bytes(kv) > ((uint64_t)1 << 30) && after < before + (16u << 20),
          "a 1M-position cache: %zu bytes mapped, resident %llu -> %llu: %s", mt_kv_cache_bytes(kv),
          (unsigned long long)before, (unsigned long long)after, err.msg);
    /* writing 1000 positions backs about that much (2 layers x 1000 x 576 bytes), no more */
    if (kv) {
        memset(kv->k, 1, 1000 * kv->k_row);
        memset(kv->k + (size_t)kv->n_ctx * kv->k_row, 1, 1000 * kv->k_row);
        const uint64_t used = resident();
        CHECK(used >= after + 1000 * kv->k_row && used < after + (8u << 20),
              "1000 positions written: resident %llu -> %llu", (unsigned long long)after,
              (unsigned long long)used);
    }
    mt_kv_cache_free(kv);
    mt_model_free(m);
    unlink(path);
}

/* A session of m over n_ctx positions that has evaluated ids (one pass); NULL on failure. */
static mt_session *session_after(const mt_model *m, const int32_t *ids, int32_t n, float *logits) {
    mt_error err = {{0}};
    mt_session *s = mt_session_new(m, 32, MT_KV_F16, 2, &err);
    CHECK(s && mt_session_eval(s, ids, n, 0, true, logits, &err) == 0, "eval %d tokens: %s", n,
          err.msg);
    return s;
}

static void check_rewind(void) {
    mt_synth_params p = mt_synth_default_params("kimi-k3");
    p.n_layer = 5; /* KDA layers 0, 2, 3 and MLA layers 1, 4 */
    p.mla_layers = "1,4";
    p.n_expert = 16;
    p.n_expert_used = 4;
    p.res_block = 2;
    const char *path = check_tmp(".gguf");
    mt_error err = {{0}};
    CHECK(mt_synth_write(&p, path, &err) == 0, "mkmodel kimi-k3: %s", err.msg);
    mt_model *m = mt_model_load(path, &err);
    unlink(path);
    CHECK(m != NULL, "load kimi-k3: %s", err.msg);
    if (!m) return;
    const size_t V = (size_t)m->hp.n_vocab;
    const int32_t ids[] = {5, 77, 200, 12, 9, 41, 250, 3, 180, 66, 7}; /* 4 + 5 + 2 */
    float *lg = malloc(11 * V * sizeof *lg), *want = malloc(11 * V * sizeof *want);
    /* the reference saw ids[0..6) and then ids[9..11) at positions 6, 7 */
    const int32_t ref_ids[] = {5, 77, 200, 12, 9, 41, 66, 7};
    mt_session *ref = session_after(m, ref_ids, 6, want);
    mt_session *s = session_after(m, ids, 4, lg);
    if (!ref || !s || !lg || !want) goto out;
    CHECK(s->kv->n_rec == 3 && mt_kv_cache_snap_bytes(s->kv) == 0, "%d KDA layers, %zu bytes",
          s->kv->n_rec, mt_kv_cache_snap_bytes(s->kv));
    /* a pass of 5 tokens at positions 4..8 with snapshots, then back to 6 */
    CHECK(mt_kv_snap_begin(s->kv, 4, 5, &err) == 0, "snapshots: %s", err.msg);
    CHECK(mt_session_eval(s, ids + 4, 5, 0, true, lg, &err) == 0, "pass: %s", err.msg);
    CHECK(mt_kv_cache_snap_bytes(s->kv) == 3 * 5 * s->kv->rec_floats * sizeof(float),
          "snapshot bytes %zu for 3 layers x 5 tokens x %zu floats", mt_kv_cache_snap_bytes(s->kv),
          s->kv->rec_floats);
    CHECK(mt_kv_rewind(s->kv, 4, &err) < 0 && strstr(err.msg, "cannot go back to 4"),
          "rewind to the pass's start (no snapshot before it): %s", err.msg);
    CHECK(mt_kv_rewind(s->kv, 10, &err) < 0 && strstr(err.msg, "(4, 9]"),
          "rewind past the pass: %s", err.msg);
    CHECK(mt_kv_rewind(s->kv, 6, &err) == 0, "rewind to 6: %s", err.msg);
    s->n_past = 6;
    CHECK(memcmp(s->kv->rec, ref->kv->rec, (size_t)3 * s->kv->rec_floats * sizeof(float)) == 0 &&
              s->kv->rec_next[0] == 6 && s->kv->rec_next[2] == 6,
          "the KDA states after a rewind to 6 differ from those of a cache that saw 6 tokens");
    /* the snapshots after 6 are gone; the ones before stay */
    CHECK(mt_kv_rewind(s->kv, 8, &err) < 0, "rewind forward to 8 after going back to 6");
    /* both go on with the same two tokens: the same logits */
    float *got = lg + 9 * V, *ref_got = want + 6 * V;
    CHECK(mt_session_eval(s, ids + 9, 2, 0, true, got, &err) == 0 &&
              mt_session_eval(ref, ref_ids + 6, 2, 0, true, ref_got, &err) == 0,
          "go on: %s", err.msg);
    CHECK(memcmp(got, ref_got, 2 * V * sizeof(float)) == 0,
          "logits after a rewind differ from a run that never went past position 6");
    /* a closed window takes no snapshots: a rewind inside the last pass is refused */
    CHECK(mt_kv_snap_begin(s->kv, 8, 0, &err) == 0 && mt_kv_rewind(s->kv, 7, &err) < 0,
          "rewind with the window closed");
out:
    mt_session_free(ref);
    mt_session_free(s);
    free(lg), free(want);
    mt_model_free(m);
}

int main(void) {
    check_hadamard();
    check_attend();
    check_sizes();
    check_no_reservation();
    check_rewind();
    return check_report("test_kv_cache");
}

/* ffn_dense.c - the SwiGLU feed-forward block used by dense layers, shared
 * experts and (through ffn_moe.c) every routed expert:
 *   FFN(u) = down . (silu(gate . u) * (up . u))
 * or, in kimi-k3, the same with situ in place of silu(g) * u (mt_ffn_act).
 *
 * mt_ffn_multi runs several such blocks at once (the experts a batch of
 * tokens chose, each over its own tokens) in two parallel sections: gate
 * and up of every block, then down of every block, so a decode step pays
 * two synchronisations per MoE layer whatever the number of experts. Every
 * output row depends only on its own input row and its block's weights. */
#include "model_internal.h"
#include "moontail/quant.h"
#include "moontail/vecops.h"

#include <string.h>

/* Below this many elements the SwiGLU step runs on the calling thread. */
enum { GLU_INLINE = 1 << 15 };

typedef struct glu_job {
    const mt_ffn_task *tasks;
    const int64_t *row0; /* (n_tasks + 1) first global token row of each task */
    int n_tasks;
    float *g, *h;         /* per task: (n_tok, F) gate and up outputs, packed */
    const size_t *gh_off; /* (n_tasks) float offset of each task's g/h rows */
    uint8_t *hc;          /* per task: (n_tok, row_size(vt_down, F)) */
    const size_t *hc_off; /* (n_tasks) byte offset of each task's hc rows */
} glu_job;

/* h = silu(g) * h, or situ(g, h), for one row of n. */
static void act_row(const mt_ffn_act *act, const float *g, float *h, int64_t n) {
    if (act && act->situ) /* in ggml's order of operations */
        mt_vec_situ(g, h, n, act->beta, act->linear_beta);
    else
        mt_vec_swiglu(g, h, n);
}

typedef struct act_job {
    const mt_ffn_act *act;
    const float *g;
    float *h;
    int64_t n;
} act_job;

static void act_rows(void *ctx, int64_t begin, int64_t end) {
    const act_job *j = ctx;
    for (int64_t r = begin; r < end; r++)
        act_row(j->act, j->g + (size_t)r * j->n, j->h + (size_t)r * j->n, j->n);
}

void mt_ffn_act_rows(const mt_ffn_act *act, const float *g, float *h, int64_t n_rows, int64_t n,
                     mt_pool *pool) {
    act_job j = {act, g, h, n};
    if (n_rows * n < GLU_INLINE)
        act_rows(&j, 0, n_rows);
    else
        mt_pool_run(pool, n_rows, act_rows, &j);
}

/* h = silu(g) * h (or situ), then h converted for the down matrix, global
 * rows [begin, end). */
static void glu_rows(void *ctx, int64_t begin, int64_t end) {
    const glu_job *j = ctx;
    int k = 0;
    for (int64_t r = begin; r < end; r++) {
        while (j->row0[k + 1] <= r) k++;
        const mt_ffn_task *t = &j->tasks[k];
        const int64_t F = t->gate->n_rows, i = r - j->row0[k];
        float *g = j->g + j->gh_off[k] + (size_t)i * F, *h = j->h + j->gh_off[k] + (size_t)i * F;
        act_row(t->act, g, h, F);
        const mt_type vt = quant_vec_dot_type(t->down->type);
        if (vt != MT_TYPE_F32)
            quant_convert_activations(
                vt, h, j->hc + j->hc_off[k] + (size_t)i * mt_type_row_size(vt, F), F);
    }
}

int mt_ffn_multi(const mt_ffn_task *tasks, int n_tasks, mt_pool *pool, mt_error *err) {
    if (n_tasks <= 0) return 0;
    const size_t n = (size_t)n_tasks;
    int64_t *row0 = calloc(n + 1, sizeof *row0);
    size_t *xg_off = calloc(n, sizeof *xg_off), *xu_off = calloc(n, sizeof *xu_off);
    size_t *gh_off = calloc(n, sizeof *gh_off), *hc_off = calloc(n, sizeof *hc_off);
    mt_matmul_task *mm = calloc(2 * n, sizeof *mm);
    float *gh = NULL;
    uint8_t *xc = NULL, *hc = NULL;
    int rc = 0;
    if (!row0 || !xg_off || !xu_off || !gh_off || !hc_off || !mm) goto oom;

    /* sizes of the packed buffers */
    size_t n_xc = 0, n_gh = 0, n_hc = 0;
    for (size_t k = 0; k < n; k++) {
        const mt_ffn_task *t = &tasks[k];
        const int64_t E = t->gate->n_cols, F = t->gate->n_rows, T = t->n_tok;
        const mt_type vg = quant_vec_dot_type(t->gate->type), vu = quant_vec_dot_type(t->up->type);
        const mt_type vd = quant_vec_dot_type(t->down->type);
        row0[k + 1] = row0[k] + T;
        xg_off[k] = n_xc;
        n_xc += vg == MT_TYPE_F32 ? 0 : (size_t)T * mt_type_row_size(vg, E);
        xu_off[k] = n_xc;
        n_xc += vu == MT_TYPE_F32 || vu == vg ? 0 : (size_t)T * mt_type_row_size(vu, E);
        gh_off[k] = n_gh;
        n_gh += (size_t)T * (size_t)F;
        hc_off[k] = n_hc;
        n_hc += vd == MT_TYPE_F32 ? 0 : (size_t)T * mt_type_row_size(vd, F);
    }
    if (!(gh = malloc(2 * n_gh * sizeof(float) + 1)) || !(xc = malloc(n_xc + 1)) ||
        !(hc = malloc(n_hc + 1)))
        goto oom;
    float *g = gh, *h = gh + n_gh;

    /* activations once per block (and per type when gate and up differ) */
    for (size_t k = 0; k < n; k++) {
        const mt_ffn_task *t = &tasks[k];
        const int64_t E = t->gate->n_cols, F = t->gate->n_rows;
        const mt_type vg = quant_vec_dot_type(t->gate->type), vu = quant_vec_dot_type(t->up->type);
        const void *xg = t->x, *xu = t->x;
        if (vg != MT_TYPE_F32) {
            mt_convert_rows(vg, t->x, t->n_tok, E, xc + xg_off[k], pool);
            xg = xc + xg_off[k];
        }
        if (vu == vg) {
            xu = xg;
        } else if (vu != MT_TYPE_F32) {
            mt_convert_rows(vu, t->x, t->n_tok, E, xc + xu_off[k], pool);
            xu = xc + xu_off[k];
        }
        mm[2 * k] = (mt_matmul_task){t->gate,       xg,       mt_type_row_size(vg, E), t->n_tok,
                                     g + gh_off[k], (size_t)F};
        mm[2 * k + 1] = (mt_matmul_task){t->up,         xu,       mt_type_row_size(vu, E), t->n_tok,
                                         h + gh_off[k], (size_t)F};
    }
    mt_matmul_tasks(mm, 2 * n_tasks, pool);

    glu_job gj = {tasks, row0, n_tasks, g, h, gh_off, hc, hc_off};
    if (n_gh < GLU_INLINE)
        glu_rows(&gj, 0, row0[n]);
    else
        mt_pool_run(pool, row0[n], glu_rows, &gj);

    for (size_t k = 0; k < n; k++) {
        const mt_ffn_task *t = &tasks[k];
        const int64_t F = t->gate->n_rows;
        const mt_type vd = quant_vec_dot_type(t->down->type);
        mm[k] = (mt_matmul_task){t->down,
                                 vd == MT_TYPE_F32 ? (const void *)(h + gh_off[k])
                                                   : (const void *)(hc + hc_off[k]),
                                 mt_type_row_size(vd, F),
                                 t->n_tok,
                                 t->out,
                                 (size_t)t->down->n_rows};
    }
    mt_matmul_tasks(mm, n_tasks, pool);
    goto done;
oom:
    rc = mt_error_set(err, "FFN: out of memory for %d blocks", n_tasks);
done:
    free(row0), free(xg_off), free(xu_off), free(gh_off), free(hc_off), free(mm);
    free(gh), free(xc), free(hc);
    return rc;
}

int mt_ffn_dense(const mt_matrix *gate, const mt_matrix *up, const mt_matrix *down,
                 const mt_ffn_act *act, int32_t n_tok, const float *u, float *out, mt_pool *pool,
                 mt_error *err) {
    mt_ffn_task t = {gate, up, down, n_tok, u, out, act};
    return mt_ffn_multi(&t, 1, pool, err);
}

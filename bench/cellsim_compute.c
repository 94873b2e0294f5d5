/* cellsim_compute.c - what a layer costs: the bytes a deepseek2-style layer
 * holds and reads and its multiply-adds per token (from the shape, as
 * `moontail mkmodel` lays the tensors out), and the time of a compute call
 *     ms = c0 + ms_per_gmac * MACs + ms_per_gb * bytes read
 * fitted to `moontail bench --layer-times` measurements.
 *
 * Why this form: a decode step streams every weight row it touches once
 * (bytes: the non-expert part plus each distinct expert any token of the
 * batch chose), and multiplies each token by the rows it uses (MACs grow
 * with the tokens). Measuring models with the real layer widths but fewer
 * experts than the target (896 experts of full width do not fit in this
 * machine's RAM) and fitting both terms lets the target's time follow from
 * its own bytes touched and MACs: with B tokens a layer of E experts, k per
 * token, touches E * (1 - (1 - k/E)^B) experts on average. */
#include "cellsim.h"
#include "moontail/tensor_type.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- bytes and MACs of a shape ------------------------------------------------------- */

/* The type a matrix with rows of n elements gets (synth_model.c's fit_type). */
static mt_type row_type(int type, int64_t n) {
    const mt_type_traits *t = mt_type_traits_get((uint32_t)type);
    if (t && n % t->blck == 0) return (mt_type)type;
    return n % 32 == 0 ? MT_TYPE_Q8_0 : MT_TYPE_F32;
}

/* Bytes of a matrix of n_out rows of n_in elements (times n_mat). */
static double matrix_bytes(int type, int64_t n_in, int64_t n_out, int64_t n_mat) {
    return (double)mt_type_row_size(row_type(type, n_in), n_in) * (double)n_out * (double)n_mat;
}

cs_layer_cost cs_layer_cost_of(const cs_shape *s, int32_t layer) {
    const int64_t E = s->n_embd, H = s->n_head, qk = s->qk_nope + s->qk_rope;
    cs_layer_cost c = {0};
    double b = 4.0 * 2 * E, m = 0; /* attn_norm, ffn_norm */
    if (s->q_lora > 0) {
        b += matrix_bytes(s->type, E, s->q_lora, 1) + 4.0 * s->q_lora +
             matrix_bytes(s->type, s->q_lora, H * qk, 1);
        m += (double)E * s->q_lora + (double)s->q_lora * H * qk;
    } else {
        b += matrix_bytes(s->type, E, H * qk, 1);
        m += (double)E * H * qk;
    }
    b += matrix_bytes(s->type, E, s->kv_lora + s->qk_rope, 1) + 4.0 * s->kv_lora;
    m += (double)E * (s->kv_lora + s->qk_rope);
    /* absorbed MLA: per head k_b (kv_lora rows of nope) and v_b (v_dim rows of kv_lora) */
    b += matrix_bytes(s->type, s->qk_nope, s->kv_lora, H) +
         matrix_bytes(s->type, s->kv_lora, s->v_dim, H);
    m += (double)H * s->qk_nope * s->kv_lora + (double)H * s->kv_lora * s->v_dim;
    b += matrix_bytes(s->type, H * s->v_dim, E, 1);
    m += (double)H * s->v_dim * E;
    if (layer < s->n_dense || s->n_expert == 0) {
        b += 2 * matrix_bytes(s->type, E, s->n_ff, 1) + matrix_bytes(s->type, s->n_ff, E, 1);
        m += 3.0 * E * s->n_ff;
    } else {
        const int64_t X = s->n_expert, F = s->n_ff_exp,
                      FS = (int64_t)s->n_ff_exp * s->n_expert_shared;
        b += 4.0 * E * X + 4.0 * X; /* router and selection bias, F32 */
        m += (double)E * X;
        if (FS > 0) {
            b += 2 * matrix_bytes(s->type, E, FS, 1) + matrix_bytes(s->type, FS, E, 1);
            m += 3.0 * E * FS;
        }
        c.expert_bytes = 2 * matrix_bytes(s->type, E, F, 1) + matrix_bytes(s->type, F, E, 1);
        c.expert_macs = 3.0 * E * F;
    }
    c.attn_bytes = b;
    c.attn_macs = m;
    return c;
}

double cs_head_bytes(const cs_shape *s) {
    return matrix_bytes(s->type, s->n_embd, s->n_vocab, 1) + 4.0 * s->n_embd;
}

double cs_head_macs(const cs_shape *s) {
    return (double)s->n_embd * s->n_vocab;
}

double cs_model_bytes(const cs_shape *s) {
    double total = cs_head_bytes(s) + matrix_bytes(s->type, s->n_embd, s->n_vocab, 1);
    for (int32_t l = 0; l < s->n_layer; l++) {
        cs_layer_cost c = cs_layer_cost_of(s, l);
        total += c.attn_bytes + c.expert_bytes * s->n_expert;
    }
    return total;
}

/* ---- compute time ---------------------------------------------------------------------- */

double cs_touched_fraction(const cs_compute *c, const cs_shape *s, double n) {
    if (s->n_expert <= 0 || n <= 0) return 0;
    const double p = (double)s->n_expert_used / s->n_expert;
    if (!c->touch_measured || c->n_touch == 0) return 1.0 - pow(1.0 - p, n);
    /* measured points, linear in log(n) between them; one token touches exactly k */
    double n0 = 1, f0 = p;
    for (int i = 0; i < c->n_touch; i++) {
        double n1 = c->touch_n[i], f1 = c->touch_frac[i];
        if (n <= n1) {
            if (n1 <= n0) return f1;
            double w = (log(n) - log(n0)) / (log(n1) - log(n0));
            return f0 + w * (f1 - f0);
        }
        n0 = n1, f0 = f1;
    }
    /* beyond the last point: what is still untouched shrinks as the uniform rate says */
    return 1.0 - (1.0 - f0) * pow(1.0 - p, n - n0);
}

double cs_compute_ms(const cs_compute *c, double macs, double bytes) {
    return c->c0_ms + c->ms_per_gmac * macs * 1e-9 + c->ms_per_gb * bytes * 1e-9;
}

double cs_layer_ms(const cs_compute *c, const cs_shape *s, int32_t l, double n_tok, int32_t held,
                   bool attention) {
    cs_layer_cost lc = cs_layer_cost_of(s, l);
    double macs = attention ? lc.attn_macs * n_tok : 0, bytes = attention ? lc.attn_bytes : 0;
    if (lc.expert_bytes > 0 && held > 0) {
        double share = (double)held / s->n_expert;
        macs += n_tok * s->n_expert_used * share * lc.expert_macs;
        bytes += held * cs_touched_fraction(c, s, n_tok) * lc.expert_bytes;
    }
    return cs_compute_ms(c, macs, bytes);
}

/* ---- calibration files ------------------------------------------------------------------ */

static int get_int(json_t *o, const char *key, int32_t *out, const char *path, mt_error *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 24))
        return mt_error_set(err,
                            "%s: \"%s\" is missing or not a whole number in [0, 16M]; is this"
                            " `moontail bench --layer-times --json` output?",
                            path, key);
    *out = (int32_t)json_integer_value(v);
    return 0;
}

static int get_num(json_t *o, const char *key, double *out, const char *path, mt_error *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0)
        return mt_error_set(err, "%s: \"%s\" is missing or not a number >= 0", path, key);
    *out = json_number_value(v);
    return 0;
}

/* The points of one array ("decode" or "prefill"). */
static int load_points(json_t *root, const char *key, bool prefill, cs_time_kind which,
                       cs_calibration *c, const char *path, mt_error *err) {
    json_t *a = json_object_get(root, key);
    if (!json_is_array(a)) return mt_error_set(err, "%s: \"%s\" is not a list", path, key);
    const cs_shape *s = &c->shape;
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *p = json_array_get(a, i);
        double n = 0, ms = 0, bytes = 0, experts = 0;
        static const char *time_key[] = {"ms_per_layer", "ms_min", "cpu_ms_per_layer"};
        if (get_num(p, "batch", &n, path, err) || get_num(p, time_key[which], &ms, path, err) ||
            get_num(p, "bytes_per_layer", &bytes, path, err) ||
            get_num(p, "experts", &experts, path, err))
            return -1;
        if (n < 1 || ms <= 0 || c->n_points == CS_MAX_POINTS)
            return mt_error_set(err,
                                "%s: %s[%zu]: batch >= 1 and ms > 0 expected, at most %d"
                                " points",
                                path, key, i, CS_MAX_POINTS);
        /* MACs per layer: the average over the model's layers, as the time is */
        double macs = 0;
        for (int32_t l = 0; l < s->n_layer; l++) {
            cs_layer_cost lc = cs_layer_cost_of(s, l);
            macs +=
                n * (lc.attn_macs + (lc.expert_bytes > 0 ? s->n_expert_used * lc.expert_macs : 0));
        }
        /* CPU time over the threads: the step's time on a machine of its own if it keeps
         * every thread busy (exact for one thread) */
        if (which == CS_TIME_CPU) ms /= c->threads;
        c->points[c->n_points++] = (cs_point){n, macs / s->n_layer, bytes, ms, prefill};
        if (!prefill && s->n_expert > 0 && c->n_touch < CS_MAX_POINTS && n > 1) {
            int k = c->n_touch++;
            c->touch_n[k] = n;
            c->touch_frac[k] = fmin(1.0, experts / s->n_expert);
        }
    }
    return 0;
}

int cs_calibration_load(const char *path, cs_time_kind which, cs_calibration *c, mt_error *err) {
    memset(c, 0, sizeof *c);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return mt_error_set(err, "%s:%d: not JSON: %s", path, je.line, je.text);
    int rc = -1;
    cs_shape *s = &c->shape;
    int32_t n_moe = 0, threads = 0;
    const char *arch = json_string_value(json_object_get(root, "arch"));
    const char *type = json_string_value(json_object_get(root, "type"));
    if (!arch || strcmp(arch, "deepseek2") != 0) {
        mt_error_set(err,
                     "%s: the calibration model's arch is %s; cellsim models deepseek2"
                     " (MLA) layers: make it with `moontail mkmodel --arch deepseek2`",
                     path, arch ? arch : "missing");
        goto done;
    }
    if (!type || mt_type_from_name(type) < 0) {
        mt_error_set(err, "%s: \"type\" (the matrices' type) is missing or unknown", path);
        goto done;
    }
    s->type = mt_type_from_name(type);
    if (get_int(root, "n_layer", &s->n_layer, path, err) ||
        get_int(root, "n_moe_layer", &n_moe, path, err) ||
        get_int(root, "n_embd", &s->n_embd, path, err) ||
        get_int(root, "n_vocab", &s->n_vocab, path, err) ||
        get_int(root, "n_head", &s->n_head, path, err) ||
        get_int(root, "q_lora", &s->q_lora, path, err) ||
        get_int(root, "kv_lora", &s->kv_lora, path, err) ||
        get_int(root, "qk_nope", &s->qk_nope, path, err) ||
        get_int(root, "qk_rope", &s->qk_rope, path, err) ||
        get_int(root, "v_dim", &s->v_dim, path, err) ||
        get_int(root, "n_ff", &s->n_ff, path, err) ||
        get_int(root, "n_expert", &s->n_expert, path, err) ||
        get_int(root, "n_expert_used", &s->n_expert_used, path, err) ||
        get_int(root, "n_expert_shared", &s->n_expert_shared, path, err) ||
        get_int(root, "n_ff_exp", &s->n_ff_exp, path, err) ||
        get_int(root, "threads", &threads, path, err) ||
        get_num(root, "attn_bytes", &c->attn_bytes, path, err) ||
        get_num(root, "expert_bytes", &c->expert_bytes, path, err) ||
        get_num(root, "head_ms", &c->head_ms, path, err))
        goto done;
    if (s->n_layer < 1 || n_moe > s->n_layer || s->n_embd < 1 || s->n_head < 1 ||
        s->n_expert_used > s->n_expert) {
        mt_error_set(err,
                     "%s: inconsistent shape (layers %d, MoE layers %d, experts %d used of"
                     " %d)",
                     path, s->n_layer, n_moe, s->n_expert_used, s->n_expert);
        goto done;
    }
    s->n_dense = s->n_layer - n_moe;
    c->threads = threads;
    if (which == CS_TIME_CPU && threads < 1) {
        mt_error_set(err, "%s: \"threads\" must be at least 1", path);
        goto done;
    }
    if (load_points(root, "decode", false, which, c, path, err) ||
        load_points(root, "prefill", true, which, c, path, err))
        goto done;
    if (c->n_points < 3) {
        mt_error_set(err, "%s: %d points; the fit needs at least 3 (several --batches)", path,
                     c->n_points);
        goto done;
    }
    rc = 0;
done:
    json_decref(root);
    return rc;
}

/* ---- the fit ------------------------------------------------------------------------------ */

/* Solves the n x n system a x = b (n <= 3) by Gaussian elimination with
 * partial pivoting; false when singular. */
static bool solve(double a[3][3], double b[3], int n, double x[3]) {
    for (int i = 0; i < n; i++) {
        int p = i;
        for (int r = i + 1; r < n; r++)
            if (fabs(a[r][i]) > fabs(a[p][i])) p = r;
        if (fabs(a[p][i]) < 1e-300) return false;
        for (int k = 0; k < n; k++) {
            double t = a[i][k];
            a[i][k] = a[p][k], a[p][k] = t;
        }
        double t = b[i];
        b[i] = b[p], b[p] = t;
        for (int r = i + 1; r < n; r++) {
            double f = a[r][i] / a[i][i];
            for (int k = i; k < n; k++) a[r][k] -= f * a[i][k];
            b[r] -= f * b[i];
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        double s = b[i];
        for (int k = i + 1; k < n; k++) s -= a[i][k] * x[k];
        x[i] = s / a[i][i];
    }
    return true;
}

int cs_compute_fit(const cs_calibration *cal, int n_cal, cs_compute *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    /* features: 1, GMACs, GB; weights 1/ms^2. Every subset of the three terms is
     * fitted; the best one with no negative coefficient wins (non-negative least
     * squares for three unknowns). */
    double best_err = INFINITY, best[3] = {0};
    for (int mask = 1; mask < 8; mask++) {
        int idx[3], n = 0;
        for (int j = 0; j < 3; j++)
            if (mask & (1 << j)) idx[n++] = j;
        double a[3][3] = {{0}}, b[3] = {0}, x[3] = {0};
        for (int k = 0; k < n_cal; k++)
            for (int i = 0; i < cal[k].n_points; i++) {
                const cs_point *p = &cal[k].points[i];
                double f[3] = {1, p->macs * 1e-9, p->bytes * 1e-9}, w = 1 / (p->ms * p->ms);
                for (int r = 0; r < n; r++) {
                    for (int q = 0; q < n; q++) a[r][q] += w * f[idx[r]] * f[idx[q]];
                    b[r] += w * f[idx[r]] * p->ms;
                }
            }
        if (!solve(a, b, n, x)) continue;
        double coef[3] = {0};
        bool ok = true;
        for (int r = 0; r < n; r++) ok &= x[r] >= 0, coef[idx[r]] = x[r];
        if (!ok) continue;
        double e = 0;
        for (int k = 0; k < n_cal; k++)
            for (int i = 0; i < cal[k].n_points; i++) {
                const cs_point *p = &cal[k].points[i];
                double t = coef[0] + coef[1] * p->macs * 1e-9 + coef[2] * p->bytes * 1e-9;
                e += (t - p->ms) * (t - p->ms) / (p->ms * p->ms);
            }
        if (e < best_err) best_err = e, memcpy(best, coef, sizeof best);
    }
    if (!isfinite(best_err))
        return mt_error_set(err, "the calibration points do not determine a compute model"
                                 " (give several batch sizes)");
    out->c0_ms = best[0], out->ms_per_gmac = best[1], out->ms_per_gb = best[2];
    out->threads = cal[0].threads;
    int np = 0;
    double sum = 0, worst = 0;
    for (int k = 0; k < n_cal; k++)
        for (int i = 0; i < cal[k].n_points; i++) {
            const cs_point *p = &cal[k].points[i];
            double rel = cs_compute_ms(out, p->macs, p->bytes) / p->ms - 1;
            sum += rel * rel, np++;
            if (fabs(rel) > worst) worst = fabs(rel);
        }
    out->fit_rms_rel = sqrt(sum / np);
    out->fit_max_rel = worst;
    out->n_fit_points = np;
    return 0;
}

/* cellsim_report.c - what cellsim prints: the compute model it fitted (and
 * how well it fits the measurements), a layer's predicted step times, the
 * results of a run as a table row or JSON, and the timeline around a
 * failure. */
#include "cellsim.h"

#include <math.h>

void cs_print_compute(FILE *f, const cs_compute *c, const cs_shape *s) {
    fprintf(f,
            "compute  ms = %.3f + %.3f ms/GMAC x MACs + %.3f ms/GMAC x KDA recurrence MACs +"
            " %.3f ms/GB x bytes read (%.1f GB/s); %d threads; fit over %d points: rms %.1f%%,"
            " worst %.1f%%\n",
            c->c0_ms, c->ms_per_gmac, c->ms_per_gstate, c->ms_per_gb,
            c->ms_per_gb > 0 ? 1e3 / c->ms_per_gb : 0, c->threads, c->n_fit_points,
            100 * c->fit_rms_rel, 100 * c->fit_max_rel);
    /* a MoE layer of each kind: the last layer (MLA), and for kimi-k3 the last KDA layer */
    int32_t show[2] = {s->n_layer - 1, -1};
    for (int32_t l = s->n_layer - 1; s->arch == CS_ARCH_KIMI_K3 && l >= s->n_dense; l--)
        if (l < CS_MAX_KIMI_LAYERS && !s->mla[l]) {
            show[1] = l;
            break;
        }
    static const double ns[] = {1, 2, 4, 8, 16, 32, 64, 128, 512};
    for (int k = 0; k < 2 && show[k] >= 0; k++) {
        const int32_t l = show[k];
        cs_layer_cost lc = cs_layer_cost_of(s, l);
        fprintf(f,
                "layer    %d (%s): %.3f GB non-expert + %d x %.2f MB experts = %.2f GB; %.0f M"
                " MACs per token (%d of %d experts, %s)%s\n",
                l, lc.kda ? "KDA" : "MLA", lc.attn_bytes / 1e9, s->n_expert, lc.expert_bytes / 1e6,
                (lc.attn_bytes + s->n_expert * lc.expert_bytes) / 1e9,
                (lc.attn_macs + s->n_expert_used * lc.expert_macs) / 1e6, s->n_expert_used,
                s->n_expert,
                c->touch_measured ? "experts touched as measured" : "experts touched uniformly",
                lc.kda ? "; and the recurrence" : "");
        fprintf(f, "step     tokens:");
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) fprintf(f, " %8.0f", ns[i]);
        fprintf(f, "\n decode  ms/layer:");
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
            cs_step st = cs_step_of(ns[i], ns[i], 128); /* sessions at position 128 */
            fprintf(f, " %8.2f", cs_layer_ms(c, s, l, &st, s->n_expert, true));
        }
        fprintf(f, "\n prompt  ms/layer:");
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
            cs_step st = cs_step_of(ns[i], 1, 0); /* one session's first ns tokens */
            fprintf(f, " %8.2f", cs_layer_ms(c, s, l, &st, s->n_expert, true));
        }
        fprintf(f, "\n         experts:");
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            fprintf(f, " %8.1f", s->n_expert * cs_touched_fraction(c, s, ns[i]));
        fprintf(f, "\n");
    }
}

void cs_print_timeline(FILE *f, const cs_result *r, double from_ms, double to_ms) {
    if (!r->timeline || r->n_timeline == 0) return;
    int b0 = (int)fmax(0, floor(from_ms / r->bucket_ms));
    int b1 = (int)fmin(r->n_timeline, ceil(to_ms / r->bucket_ms));
    const double per_s = r->bucket_ms / 1e3;
    double top = 0;
    for (int b = b0; b < b1; b++) top = fmax(top, r->timeline[b] / per_s);
    fprintf(f, "timeline tokens/s in each %.0f s (the failure at %.0f s; # = %.3g tok/s)\n", per_s,
            r->fail_at_ms / 1e3, top > 0 ? top / 50 : 0);
    for (int b = b0; b < b1; b++) {
        double v = r->timeline[b] / per_s;
        int bar = top > 0 ? (int)lround(v * 50 / top) : 0;
        bool failed_here =
            r->fail_at_ms >= b * r->bucket_ms && r->fail_at_ms < (b + 1) * r->bucket_ms;
        bool restored_here = r->restored_ms >= 0 &&
                             r->fail_at_ms + r->restored_ms >= b * r->bucket_ms &&
                             r->fail_at_ms + r->restored_ms < (b + 1) * r->bucket_ms;
        fprintf(f, "  %8.0f s %8.2f |%.*s%s%s\n", b * per_s, v, bar,
                "##################################################",
                failed_here ? "  <- failure" : "", restored_here ? "  <- spare serving" : "");
    }
}

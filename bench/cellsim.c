/* cellsim.c - the `cellsim` command: predicts what a MoonTail cell serves
 * (per-user and aggregate tokens/s against concurrent requests, and what a
 * node failure costs) by simulating it (cellsim_cell.c) with compute times
 * calibrated on this machine (`moontail bench --layer-times --json`) and a
 * LAN model. docs/cellsim.md explains the model, its inputs and limits.
 *
 *   cellsim --calib FILE [--calib FILE ...] [options]    (--help lists them)
 *
 * The target model is Kimi K3 as llama.cpp's kimi-k3 architecture defines it
 * (--shape kimi-k3, the default: 93 layers of KDA and MLA, attention residuals,
 * latent MXFP4 experts; the widths K3 does not publish are assumptions, see
 * kimi_k3_shape), the earlier deepseek2-style seed shape (--shape deepseek2:
 * Kimi K2's layers, 92 of them) or, with --shape calib, the calibrated model
 * itself (the validation's). --hops prints the hidden state each stage of the
 * placed cell is sent and sends back, per token, and exits. */
#include "cellsim.h"
#include "moontail/tensor_type.h"
#include "moontail/placement.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: cellsim --calib FILE [--calib FILE ...] [options]\n"
    "\n"
    "calibration and model\n"
    "  --calib FILE          `moontail bench --layer-times --json` output (several: one fit)\n"
    "  --shape kimi-k3|deepseek2|calib   Kimi K3 (default: kimi-k3's layers at K2's widths,\n"
    "                        93 layers), the earlier seed shape (deepseek2 layers at K2's\n"
    "                        widths, 92 layers) or the calibrated model itself (--model: the "
    "same)\n"
    "  --layers N --experts N --experts-used N --embd N --heads N --ff N --ff-exp N\n"
    "  --shared-experts N --vocab N --dense-layers N --type T --expert-type T\n"
    "                        change the model's shape (types: q4_k, q8_0, mxfp4, bf16, f32, ...)\n"
    "  kimi-k3: --res-block B (6)  attention-residual checkpoint every B layers, 0 = none\n"
    "           --latent L (3584)  routed experts' width (expert_latent_length), 0 = n_embd\n"
    "           --mla-every N (4)  MLA layers N-1, 2N-1, ... and the last; the rest KDA\n"
    "           --mla-layers LIST|all|none   instead: which layers are MLA (0-based)\n"
    "           --kda-head-dim N (128) --conv-kernel N (4) --no-mla-gate\n"
    "  --touch uniform|measured  experts a batch touches: 1-(1-k/E)^B, or as the calibration\n"
    "                        measured (default: measured for --shape calib, else uniform)\n"
    "  --threads N           compute threads per node (default: the calibration's)\n"
    "  --calib-time wall|min|cpu  the bench's median step, fastest step, or CPU time / threads\n"
    "                        (a machine of one's own, every thread busy) (default wall)\n"
    "topology\n"
    "  --machines N          machines placed as the registry does (default 200)\n"
    "  --ram-gb G            RAM per machine; a node offers 70% of G - 4 GB (default 64)\n"
    "  --capacity-gb C       what each machine offers for shards (instead of --ram-gb)\n"
    "  --replicas N --spares N --max-group N   placement (defaults 2, 1, 8)\n"
    "  --objective throughput|latency|balanced  how each pipeline is laid out, as\n"
    "                        `registry --objective` (default throughput)\n"
    "  --latency-goal-ms T   placement's per-user goal, as `registry --latency-goal-ms`:\n"
    "                        the most pipelines (>= --replicas) whose estimated trip is\n"
    "                        within T (default 0: none, --replicas pipelines)\n"
    "  --stages L1,L2,...    instead: one pipeline of stages holding L1, L2, ... layers\n"
    "  --shared-host         every node and requester on one machine ...\n"
    "  --cores N             ... with N CPUs (default 2)\n"
    "  --cpu-share C[,C2,...] ... which gives them C CPUs (or C1, C2, ... to 1, 2, ... runnable\n"
    "                        threads): what other programs leave (cellsim_load's cpu_capacity)\n"
    "network\n"
    "  --latency-us U        one way (default 50)      --gbps G    per link (default 1)\n"
    "  --overhead-us U       per message (default 350) --wire f32|bf16 (default f32)\n"
    "  --connect-ms M        per connection opened (default 2)\n"
    "  --registry-ms M       per registry call (default 5)\n"
    "workload\n"
    "  --users LIST          concurrent requests, e.g. 1,8,32 (default 1)\n"
    "  --sweep               1, 2, 4, ... until the aggregate stops growing (or --max-users)\n"
    "  --max-users N         (default 256)\n"
    "  --prompt N --gen N    tokens per request (default 128, 128)\n"
    "  --burst               all users start one request at 0 (the validation's protocol)\n"
    "  --stagger-ms M        ... user u at u x M ms instead\n"
    "  --others-gen N        ... users 1.. ask for N tokens (1: prompts alone; user 0: --gen)\n"
    "  --route-per-request   a new route per request (moontail prompt), not per user\n"
    "  --one-requester [CORES]  every user a slot of one requester process (moontail serve):\n"
    "                        one machine's link and CORES CPUs (default the nodes') for all\n"
    "  --think-ms M          between a user's requests (default 0)\n"
    "  --retry-after-s S     after a request failed, before the user's next (default 10)\n"
    "  --duration-s S --warmup-s S   steady runs (default 3600, 600)\n"
    "  --ubatch N --max-batch N --seed N\n"
    "node (src/net/node_worker.c)\n"
    "  --step-tokens N       a step: every decode, then prompt chunks up to N tokens (32)\n"
    "  --prefill-chunk N     a prompt's chunk (4); 0: the old node, each request whole in\n"
    "                        arrival order\n"
    "  --no-pacing           no decode pacing: prompt steps start whenever no decode waits\n"
    "  --spec-k K --spec-accept A  speculative decoding: each decode pass carries K guesses,\n"
    "                        each taken with chance A in order (gain: the taken + 1); nodes\n"
    "                        copy their KDA states per token of such a pass\n"
    "  --max-sessions N      a cap on a node's sessions (default 0: memory alone, the memory\n"
    "                        it offers minus its shard; the old node: 64)\n"
    "  --place-sessions N    sessions placement reserves beside each shard (64)\n"
    "routes\n"
    "  --route-mode turn|oneway  the requester calls each stage in turn (default), or sends\n"
    "                        a pass to the first stage and each stage forwards each chunk to\n"
    "                        the next, the last answering with the last row\n"
    "  --route-choice hint|memory  a route's pipeline: the session's (default), or drawn by\n"
    "                        the pipelines' free session memory, as the registry does\n"
    "  --session-ctx N       positions placement reserves per session of a stage (KDA states are\n"
    "                        fixed, MLA caches per position; default: prompt + gen)\n"
    "failure\n"
    "  --fail-at-s T         kill a node at T s (steady runs)\n"
    "  --fail-node ID        which (default 0: the stage holding the middle layer of pipeline 0;\n"
    "                        -1: the one on the first requester's route)\n"
    "  --fail-silent         it goes silent (cable, power) instead of being killed\n"
    "  --dead-after-ms M --heartbeat-ms M --call-timeout-ms M --fetch-gbps G --load-ms M\n"
    "  --bucket-s S          the timeline's step (default 1)\n"
    "  --timeline-s B,A      the timeline from B s before the failure to A s after (30,120)\n"
    "output\n"
    "  --fit-points          every calibration point: its MACs, bytes, time and the fit's\n"
    "  --hops                the placed cell's stage groups and the bytes each is sent and\n"
    "                        sends back per token (f32 and bf16); no simulation, no --calib\n"
    "  --json                one JSON object\n"
    "  --quiet               no model description\n";

enum { MAX_CALIB = 16, MAX_RUNS = 32 };

/* The earlier seed shape: 92 layers, 896 routed experts, 16 per token (the issue); the
 * layers Kimi K2's (deepseek2: hidden 7168, MLA with 64 heads, q_lora 1536, kv_lora 512,
 * rope 64, nope 128, v 128; expert width 2048, 1 shared expert, 1 leading dense layer of
 * 18432, vocabulary 163840), in Q4_K. */
static cs_shape deepseek2_shape(void) {
    return (cs_shape){.arch = CS_ARCH_DEEPSEEK2,
                      .n_layer = 92,
                      .n_dense = 1,
                      .n_embd = 7168,
                      .n_vocab = 163840,
                      .n_head = 64,
                      .q_lora = 1536,
                      .kv_lora = 512,
                      .qk_nope = 128,
                      .qk_rope = 64,
                      .v_dim = 128,
                      .n_ff = 18432,
                      .n_expert = 896,
                      .n_expert_used = 16,
                      .n_expert_shared = 1,
                      .n_ff_exp = 2048,
                      .type = MT_TYPE_Q4_K,
                      .expert_type = -1};
}

/* Kimi K3 as llama.cpp's kimi-k3 defines it (docs/kimi-k3.md): 93 layers (its type table;
 * the cell's description says 92: --layers), 896 routed experts, 16 per token, one shared,
 * one leading dense layer; KDA layers with MLA at 3, 7, ..., 91 and the last (Kimi
 * Linear's pattern, mkmodel's default); routed experts in MXFP4 at a latent width. What K3
 * does not publish is assumed: Kimi K2's widths (hidden 7168, 64 heads, KDA heads of 128
 * with a 4-tap convolution, MLA q_lora 1536, kv_lora 512, nope 128, rope 64, v 128, the
 * MLA output gate; expert width 2048, dense FFN 18432, vocabulary 163840), a latent width
 * of 3584 (half the hidden size), a residual block of 6 layers, the other matrices in Q4_K
 * (4.5 bits per weight). */
static cs_shape kimi_k3_shape(void) {
    cs_shape s = deepseek2_shape();
    s.arch = CS_ARCH_KIMI_K3;
    s.n_layer = 93;
    s.expert_type = MT_TYPE_MXFP4;
    s.kda_head_dim = 128;
    s.conv_kernel = 4;
    s.res_block = 6;
    s.latent = 3584;
    s.mla_gate = true;
    return s;
}

static void die(const char *fmt, const char *a) {
    fprintf(stderr, "cellsim: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, " (cellsim --help)\n");
    exit(2);
}

static double num(const char *opt, const char *v, double lo, double hi) {
    char *end = NULL;
    double x = v ? strtod(v, &end) : NAN;
    if (!v || end == v || *end || !(x >= lo && x <= hi)) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s takes a number in [%g, %g], not '%%s'", opt, lo, hi);
        die(msg, v ? v : "(nothing)");
    }
    return x;
}

static int parse_list(const char *opt, const char *v, int32_t *out, int max, int32_t lo,
                      int32_t hi) {
    int n = 0;
    for (const char *p = v; p && *p;) {
        char *end = NULL;
        long x = strtol(p, &end, 10);
        if (end == p || x < lo || x > hi || n == max || (*end && *end != ',')) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "%s takes up to %d numbers in [%d, %d] separated by commas,"
                     " not '%%s'",
                     opt, max, lo, hi);
            die(msg, v);
        }
        out[n++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (n == 0) die("%s needs a list of numbers", opt);
    return n;
}

static json_t *run_json(int32_t users, const cs_result *r) {
    return json_pack(
        "{s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:I,s:i,s:i,s:i,s:f,s:i,s:f,s:f,s:I}", "users",
        users, "agg_tps", r->agg_tps, "user_tps", r->user_tps, "user_tps_min", r->user_tps_min,
        "user_tps_max", r->user_tps_max, "ttft_ms", r->ttft_ms, "batch_mean", r->batch_mean,
        "step_ms_mean", r->step_ms_mean, "replays", (json_int_t)r->replays, "evictions",
        (json_int_t)r->evictions, "failovers", (json_int_t)r->failovers, "requests_done",
        r->requests_done, "requests_failed", r->requests_failed, "requests_short",
        r->requests_short, "cpu_used", r->cpu_used, "user_requests", r->user_requests, "itl_max_ms",
        r->itl_max_ms, "gap0_p95_ms", r->gap0_p95_ms, "paced_holds", (json_int_t)r->paced_holds);
}

static void print_row(int32_t users, const cs_result *r) {
    char per_user[64] = "         - (no request measured)";
    if (r->user_requests > 0)
        snprintf(per_user, sizeof per_user, "%10.3f (%.3f-%.3f)", r->user_tps, r->user_tps_min,
                 r->user_tps_max);
    printf("%6d %10.3f %s %9.1f %7.1f %9.1f %7lld %7lld %6lld %5d %5d\n", users, r->agg_tps,
           per_user, r->ttft_ms / 1e3, r->batch_mean, r->step_ms_mean, (long long)r->replays,
           (long long)r->evictions, (long long)r->failovers, r->requests_done, r->requests_failed);
}

/* --hops: the placed cell's stage groups and what each is sent and sends back per token
 * (the requester calls each in turn: route.c's default). */
static int print_hops(const cs_config *cfg, bool json) {
    cs_hop *h = NULL;
    int32_t n = 0;
    cs_result r;
    mt_error err = {{0}};
    if (cs_plan_hops(cfg, &h, &n, &r, &err)) {
        fprintf(stderr, "cellsim: %s\n", err.msg);
        return 1;
    }
    const cs_shape *s = &cfg->shape;
    const double E = s->n_embd;
    json_t *arr = json ? json_array() : NULL;
    if (!json) {
        printf("cell     %s\n", r.topology);
        printf("model    %d layers, n_embd %d, attention residuals %s%d: a token's whole state is"
               " %d x %d values; expert rows %d values\n",
               s->n_layer, s->n_embd, s->res_block > 0 ? "every " : "", s->res_block,
               1 + cs_banked(s, s->n_layer), s->n_embd, cs_expert_width(s));
        printf("hops     per token, requester -> stage (STAGE_FORWARD) and back (STAGE_REPLY);"
               " KB = 1000 bytes of values; msg = one token's whole message\n");
        printf("%4s %5s %9s %4s %5s %8s %8s %15s %15s %17s %17s\n", "pipe", "group", "layers",
               "part", "ckpts", "vals in", "vals out", "f32 KB in/out", "bf16 KB in/out",
               "f32 msg in/out", "bf16 msg in/out");
    }
    double sum[2] = {0, 0}; /* f32 / bf16 bytes per token through pipeline 0, both ways */
    for (int32_t i = 0; i < n; i++) {
        const cs_hop *x = &h[i];
        double m[2][2];
        for (int k = 0; k < 2; k++) {
            const int w = k ? 2 : 4;
            m[k][0] = cs_wire_bytes(CS_WIRE_STAGE_FORWARD, 1, (double)x->cols_in, w);
            m[k][1] = cs_wire_bytes(CS_WIRE_STAGE_REPLY, 1, (double)x->cols_out, w);
            if (x->pipeline == h[0].pipeline) sum[k] += m[k][0] + m[k][1];
        }
        if (json) {
            json_array_append_new(
                arr,
                json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:I,s:I,s:f,s:f,s:f,s:f}", "pipeline",
                          x->pipeline, "group", x->group, "layer_begin", x->layer_begin,
                          "layer_end", x->layer_end, "partners", x->partners, "checkpoints_in",
                          cs_banked(s, x->layer_begin), "cols_in", (json_int_t)x->cols_in,
                          "cols_out", (json_int_t)x->cols_out, "f32_msg_in", m[0][0], "f32_msg_out",
                          m[0][1], "bf16_msg_in", m[1][0], "bf16_msg_out", m[1][1]));
            continue;
        }
        char layers[24];
        snprintf(layers, sizeof layers, "%d-%d", x->layer_begin, x->layer_end - 1);
        printf("%4d %5d %9s %4d %5d %8lld %8lld %7.1f/%-7.1f %7.1f/%-7.1f %8.0f/%-8.0f "
               "%8.0f/%-8.0f\n",
               x->pipeline, x->group, layers, x->partners, cs_banked(s, x->layer_begin),
               (long long)x->cols_in, (long long)x->cols_out, x->cols_in * 4 / 1e3,
               x->cols_out * 4 / 1e3, x->cols_in * 2 / 1e3, x->cols_out * 2 / 1e3, m[0][0], m[0][1],
               m[1][0], m[1][1]);
    }
    /* without attention residuals every hop would carry the stream alone */
    int32_t groups0 = 0;
    for (int32_t i = 0; i < n; i++) groups0 += h[i].pipeline == h[0].pipeline;
    const double plain[2] = {cs_wire_bytes(CS_WIRE_STAGE_FORWARD, 1, E, 4) +
                                 cs_wire_bytes(CS_WIRE_STAGE_REPLY, 1, E, 4),
                             cs_wire_bytes(CS_WIRE_STAGE_FORWARD, 1, E, 2) +
                                 cs_wire_bytes(CS_WIRE_STAGE_REPLY, 1, E, 2)};
    if (json) {
        json_t *o = json_pack("{s:s,s:o,s:f,s:f,s:f,s:f}", "topology", r.topology, "hops", arr,
                              "pipeline_bytes_per_token_f32", sum[0],
                              "pipeline_bytes_per_token_bf16", sum[1], "plain_bytes_per_token_f32",
                              plain[0] * groups0, "plain_bytes_per_token_bf16", plain[1] * groups0);
        char *t = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(8));
        puts(t ? t : "{}");
        free(t);
        json_decref(o);
    } else {
        printf("token    through pipeline %d (%d groups), both ways: %.1f KB in f32, %.1f KB in"
               " bf16; the stream alone would be %.1f / %.1f KB (%.2fx)\n",
               h[0].pipeline, groups0, sum[0] / 1e3, sum[1] / 1e3, plain[0] * groups0 / 1e3,
               plain[1] * groups0 / 1e3, sum[0] / (plain[0] * groups0));
    }
    free(h);
    return 0;
}

int main(int argc, char **argv) {
    cs_config cfg;
    cs_config_defaults(&cfg);
    const char *calib_paths[MAX_CALIB];
    int n_calib = 0, n_users = 1, touch = -1, threads = 0;
    cs_time_kind calib_time = CS_TIME_WALL;
    int32_t users[MAX_RUNS] = {1};
    bool json = false, quiet = false, sweep = false, model_calib = false, hops = false;
    bool no_mla_gate = false, fit_points = false;
    int shape_kind = 0; /* 0 kimi-k3, 1 deepseek2, 2 calib */
    double ram_gb = 64, capacity_gb = 0, max_users = 256;
    double timeline_before_ms = 30e3, timeline_after_ms = 120e3;
    cfg.machines = 200;
    int32_t layers = 0, experts = 0, used = 0, embd = 0, ff_exp = 0, vocab = 0, dense = -1;
    int32_t heads = 0, ff = 0, shared = -1, res_block = -1, latent = -1, mla_every = -1;
    int32_t kda_hd = 0, conv = 0, type = -1, expert_type = -1;
    const char *mla_list = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        /* flags */
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            quiet = true;
            continue;
        }
        if (!strcmp(a, "--sweep")) {
            sweep = true;
            continue;
        }
        if (!strcmp(a, "--hops")) {
            hops = true;
            continue;
        }
        if (!strcmp(a, "--fit-points")) {
            fit_points = true;
            continue;
        }
        if (!strcmp(a, "--one-requester")) {
            cfg.one_requester = true;
            if (v && v[0] >= '0' && v[0] <= '9')
                cfg.requester_cores = num(a, argv[++i], 0.01, 4096);
            continue;
        }
        if (!strcmp(a, "--no-mla-gate")) {
            no_mla_gate = true;
            continue;
        }
        if (!strcmp(a, "--burst")) {
            cfg.work.burst = true;
            continue;
        }
        if (!strcmp(a, "--no-pacing")) {
            cfg.no_pacing = true;
            continue;
        }
        if (!strcmp(a, "--shared-host")) {
            cfg.shared_host = true;
            continue;
        }
        if (!strcmp(a, "--route-per-request")) {
            cfg.work.route_per_request = true;
            continue;
        }
        if (!strcmp(a, "--fail-silent")) {
            cfg.failure.silent = true;
            continue;
        }
        if (!v) die("%s needs a value", a);
        i++;
        if (!strcmp(a, "--stagger-ms")) {
            cfg.work.stagger_ms = num(a, v, 0, 1e9);
        } else if (!strcmp(a, "--spec-k")) {
            cfg.spec_k = (int32_t)num(a, v, 0, 15);
        } else if (!strcmp(a, "--spec-accept")) {
            cfg.spec_accept = num(a, v, 0, 1);
        } else if (!strcmp(a, "--others-gen")) {
            cfg.work.others_gen = (int32_t)num(a, v, 1, 1 << 20);
        } else if (!strcmp(a, "--calib")) {
            if (n_calib == MAX_CALIB) die("at most 16 --calib files (%s)", v);
            calib_paths[n_calib++] = v;
        } else if (!strcmp(a, "--shape") || !strcmp(a, "--model")) {
            if (!strcmp(v, "kimi-k3") || !strcmp(v, "k3"))
                shape_kind = 0;
            else if (!strcmp(v, "deepseek2"))
                shape_kind = 1;
            else if (!strcmp(v, "calib"))
                shape_kind = 2;
            else
                die("--shape is kimi-k3, deepseek2 or calib, not '%s'", v);
            model_calib = shape_kind == 2;
        } else if (!strcmp(a, "--type") || !strcmp(a, "--expert-type")) {
            int t = mt_type_from_name(v);
            if (t < 0) die("unknown tensor type '%s'", v);
            *(!strcmp(a, "--type") ? &type : &expert_type) = t;
        } else if (!strcmp(a, "--mla-layers")) {
            mla_list = v;
        } else if (!strcmp(a, "--touch")) {
            if (strcmp(v, "uniform") && strcmp(v, "measured"))
                die("--touch is uniform or measured, not '%s'", v);
            touch = !strcmp(v, "measured");
        } else if (!strcmp(a, "--calib-time")) {
            if (!strcmp(v, "wall"))
                calib_time = CS_TIME_WALL;
            else if (!strcmp(v, "min"))
                calib_time = CS_TIME_MIN;
            else if (!strcmp(v, "cpu"))
                calib_time = CS_TIME_CPU;
            else
                die("--calib-time is wall, min or cpu, not '%s'", v);
        } else if (!strcmp(a, "--cpu-share")) {
            cfg.n_share = 0;
            for (const char *p = v; *p && cfg.n_share < 16;) {
                char *end;
                double x = strtod(p, &end);
                if (end == p || !(x > 0 && x <= 4096) || (*end && *end != ','))
                    die("--cpu-share takes up to 16 numbers > 0 separated by commas, not '%s'", v);
                cfg.share[cfg.n_share++] = x;
                p = *end ? end + 1 : end;
            }
        } else if (!strcmp(a, "--layers"))
            layers = (int32_t)num(a, v, 1, 65536);
        else if (!strcmp(a, "--experts"))
            experts = (int32_t)num(a, v, 1, 65536);
        else if (!strcmp(a, "--experts-used"))
            used = (int32_t)num(a, v, 1, 65536);
        else if (!strcmp(a, "--embd"))
            embd = (int32_t)num(a, v, 32, 1 << 20);
        else if (!strcmp(a, "--ff-exp"))
            ff_exp = (int32_t)num(a, v, 32, 1 << 20);
        else if (!strcmp(a, "--vocab"))
            vocab = (int32_t)num(a, v, 1, 1 << 24);
        else if (!strcmp(a, "--dense-layers"))
            dense = (int32_t)num(a, v, 0, 65536);
        else if (!strcmp(a, "--heads"))
            heads = (int32_t)num(a, v, 1, 65536);
        else if (!strcmp(a, "--ff"))
            ff = (int32_t)num(a, v, 32, 1 << 20);
        else if (!strcmp(a, "--shared-experts"))
            shared = (int32_t)num(a, v, 0, 64);
        else if (!strcmp(a, "--res-block"))
            res_block = (int32_t)num(a, v, 0, 65536);
        else if (!strcmp(a, "--latent"))
            latent = (int32_t)num(a, v, 0, 1 << 20);
        else if (!strcmp(a, "--mla-every"))
            mla_every = (int32_t)num(a, v, 1, 65536);
        else if (!strcmp(a, "--kda-head-dim"))
            kda_hd = (int32_t)num(a, v, 2, 1024);
        else if (!strcmp(a, "--conv-kernel"))
            conv = (int32_t)num(a, v, 2, 16);
        else if (!strcmp(a, "--threads"))
            threads = (int)num(a, v, 1, 1024);
        else if (!strcmp(a, "--machines"))
            cfg.machines = (int32_t)num(a, v, 1, 100000);
        else if (!strcmp(a, "--ram-gb"))
            ram_gb = num(a, v, 5, 1e6);
        else if (!strcmp(a, "--capacity-gb"))
            capacity_gb = num(a, v, 0.001, 1e6);
        else if (!strcmp(a, "--replicas"))
            cfg.replicas = (int32_t)num(a, v, 1, 64);
        else if (!strcmp(a, "--spares"))
            cfg.spares = (int32_t)num(a, v, 0, 1000);
        else if (!strcmp(a, "--max-group"))
            cfg.max_group = (int32_t)num(a, v, 1, 64);
        else if (!strcmp(a, "--objective")) {
            mt_place_objective o;
            if (mt_place_objective_parse(v, &o))
                die("--objective is throughput, latency or balanced, not '%s'", v ? v : "");
            cfg.objective = (int)o;
        } else if (!strcmp(a, "--latency-goal-ms"))
            cfg.latency_goal_ms = num(a, v, 0, 1e9);
        else if (!strcmp(a, "--stages"))
            cfg.n_stages = parse_list(a, v, cfg.stage_layers, CS_MAX_STAGES, 1, 65536);
        else if (!strcmp(a, "--cores"))
            cfg.cores = num(a, v, 0.01, 4096);
        else if (!strcmp(a, "--latency-us"))
            cfg.lan.latency_us = num(a, v, 0, 1e7);
        else if (!strcmp(a, "--gbps"))
            cfg.lan.gbps = num(a, v, 1e-6, 1e6);
        else if (!strcmp(a, "--overhead-us"))
            cfg.lan.overhead_us = num(a, v, 0, 1e7);
        else if (!strcmp(a, "--connect-ms"))
            cfg.lan.connect_ms = num(a, v, 0, 1e6);
        else if (!strcmp(a, "--registry-ms"))
            cfg.lan.registry_ms = num(a, v, 0, 1e6);
        else if (!strcmp(a, "--wire")) {
            if (strcmp(v, "f32") && strcmp(v, "bf16")) die("--wire is f32 or bf16, not '%s'", v);
            cfg.lan.wire_bytes = strcmp(v, "f32") ? 2 : 4;
        } else if (!strcmp(a, "--users"))
            n_users = parse_list(a, v, users, MAX_RUNS, 1, 100000);
        else if (!strcmp(a, "--max-users"))
            max_users = num(a, v, 1, 100000);
        else if (!strcmp(a, "--prompt"))
            cfg.work.prompt = (int32_t)num(a, v, 1, 1 << 20);
        else if (!strcmp(a, "--gen"))
            cfg.work.gen = (int32_t)num(a, v, 1, 1 << 20);
        else if (!strcmp(a, "--think-ms"))
            cfg.work.think_ms = num(a, v, 0, 1e9);
        else if (!strcmp(a, "--retry-after-s"))
            cfg.work.retry_after_ms = 1e3 * num(a, v, 0, 1e6);
        else if (!strcmp(a, "--duration-s"))
            cfg.work.duration_ms = 1e3 * num(a, v, 1, 1e7);
        else if (!strcmp(a, "--warmup-s"))
            cfg.work.warmup_ms = 1e3 * num(a, v, 0, 1e7);
        else if (!strcmp(a, "--ubatch"))
            cfg.work.ubatch = (int32_t)num(a, v, 1, 1 << 20);
        else if (!strcmp(a, "--max-sessions"))
            cfg.max_sessions = (int32_t)num(a, v, 0, 1 << 20);
        else if (!strcmp(a, "--place-sessions"))
            cfg.place_sessions = (int32_t)num(a, v, 0, 1 << 20);
        else if (!strcmp(a, "--step-tokens"))
            cfg.step_tokens = (int32_t)num(a, v, 1, 1 << 20);
        else if (!strcmp(a, "--prefill-chunk"))
            cfg.prefill_chunk = (int32_t)num(a, v, 0, 1 << 20);
        else if (!strcmp(a, "--route-mode")) {
            if (strcmp(v, "turn") && strcmp(v, "oneway"))
                die("--route-mode is turn or oneway, not '%s'", v);
            cfg.oneway = !strcmp(v, "oneway");
        } else if (!strcmp(a, "--route-choice")) {
            if (strcmp(v, "hint") && strcmp(v, "memory"))
                die("--route-choice is hint or memory, not '%s'", v);
            cfg.route_by_memory = !strcmp(v, "memory");
        } else if (!strcmp(a, "--session-ctx"))
            cfg.session_ctx = (int32_t)num(a, v, 1, 1 << 24);
        else if (!strcmp(a, "--max-batch"))
            cfg.max_batch_tokens = (int32_t)num(a, v, 1, 1 << 20);
        else if (!strcmp(a, "--seed"))
            cfg.work.seed = (uint64_t)num(a, v, 0, 1e15);
        else if (!strcmp(a, "--fail-at-s"))
            cfg.failure.at_ms = 1e3 * num(a, v, 0, 1e7);
        else if (!strcmp(a, "--fail-node"))
            cfg.failure.node = (int64_t)num(a, v, -1, 1e9);
        else if (!strcmp(a, "--dead-after-ms"))
            cfg.failure.dead_after_ms = num(a, v, 1, 1e9);
        else if (!strcmp(a, "--heartbeat-ms"))
            cfg.failure.heartbeat_ms = num(a, v, 1, 1e9);
        else if (!strcmp(a, "--call-timeout-ms"))
            cfg.failure.call_timeout_ms = num(a, v, 1, 1e9);
        else if (!strcmp(a, "--fetch-gbps"))
            cfg.failure.fetch_gbps = num(a, v, 1e-6, 1e6);
        else if (!strcmp(a, "--timeline-s")) {
            char *end = NULL;
            timeline_before_ms = 1e3 * strtod(v, &end);
            if (end == v || *end != ',' || timeline_before_ms < 0)
                die("--timeline-s takes BEFORE,AFTER in seconds, not '%s'", v);
            timeline_after_ms = 1e3 * num(a, end + 1, 0, 1e7);
        } else if (!strcmp(a, "--bucket-s"))
            cfg.timeline_bucket_ms = 1e3 * num(a, v, 0.001, 1e6);
        else if (!strcmp(a, "--load-ms"))
            cfg.failure.load_ms = num(a, v, 0, 1e9);
        else
            die("unknown option '%s'", a);
    }
    if (n_calib == 0 && !(hops && !model_calib))
        die("%s", "--calib FILE is required (moontail bench --layer-times --json)");
    if (cfg.work.warmup_ms >= cfg.work.duration_ms)
        die("%s", "--warmup-s must be shorter than --duration-s");

    /* the compute model */
    static cs_calibration cal[MAX_CALIB];
    mt_error err = {{0}};
    for (int i = 0; i < n_calib; i++)
        if (cs_calibration_load(calib_paths[i], calib_time, &cal[i], &err)) {
            fprintf(stderr, "cellsim: %s\n", err.msg);
            return 1;
        }
    if (n_calib && cs_compute_fit(cal, n_calib, &cfg.compute, &err)) {
        fprintf(stderr, "cellsim: %s\n", err.msg);
        return 1;
    }
    if (threads) cfg.compute.threads = threads;
    if (fit_points) { /* every calibration point against the fit */
        printf("%-28s %-7s %6s %10s %10s %10s %10s %10s %7s\n", "calibration", "kind", "tokens",
               "GMACs", "KDA GMACs", "GB", "ms", "fit ms", "error");
        for (int i = 0; i < n_calib; i++)
            for (int k = 0; k < cal[i].n_points; k++) {
                const cs_point *p = &cal[i].points[k];
                double t = cs_work_ms(&cfg.compute, &(cs_work){p->macs, p->state_macs, p->bytes});
                printf("%-28s %-7s %6.0f %10.4f %10.4f %10.4f %10.3f %10.3f %+6.1f%%\n",
                       calib_paths[i], p->prefill ? "prompt" : "decode", p->n_tok, p->macs / 1e9,
                       p->state_macs / 1e9, p->bytes / 1e9, p->ms, t, 100 * (t / p->ms - 1));
            }
    }

    /* the model's shape */
    cs_shape *sh = &cfg.shape;
    *sh = shape_kind == 2 ? cal[0].shape : shape_kind == 1 ? deepseek2_shape() : kimi_k3_shape();
    const bool kimi = sh->arch == CS_ARCH_KIMI_K3;
    if ((res_block >= 0 || latent >= 0 || mla_every >= 0 || mla_list || kda_hd || conv ||
         no_mla_gate || expert_type >= 0) &&
        !kimi)
        die("%s", "--res-block, --latent, --mla-every, --mla-layers, --kda-head-dim,"
                  " --conv-kernel, --no-mla-gate and --expert-type are for --shape kimi-k3");
    if (layers) sh->n_layer = layers;
    if (experts) sh->n_expert = experts;
    if (used) sh->n_expert_used = used;
    if (embd) sh->n_embd = embd;
    if (heads) sh->n_head = heads;
    if (ff) sh->n_ff = ff;
    if (ff_exp) sh->n_ff_exp = ff_exp;
    if (shared >= 0) sh->n_expert_shared = shared;
    if (vocab) sh->n_vocab = vocab;
    if (dense >= 0) sh->n_dense = dense;
    if (type >= 0) sh->type = type;
    if (expert_type >= 0) sh->expert_type = expert_type;
    if (res_block >= 0) sh->res_block = res_block;
    if (latent >= 0) sh->latent = latent;
    if (kda_hd) sh->kda_head_dim = kda_hd;
    if (conv) sh->conv_kernel = conv;
    if (no_mla_gate) sh->mla_gate = false;
    if (sh->n_expert_used > sh->n_expert || sh->n_dense > sh->n_layer)
        die("%s", "the shape needs experts-used <= experts and dense-layers <= layers");
    if (kimi && sh->n_layer > CS_MAX_KIMI_LAYERS) die("%s", "kimi-k3 has at most 1024 layers");
    if (kimi && (shape_kind != 2 || layers || mla_every >= 0 || mla_list)) {
        /* the MLA layers: a list, or every N-th (N - 1, 2N - 1, ...) and the last */
        const int32_t every = mla_every > 0 ? mla_every : 4;
        memset(sh->mla, 0, sizeof sh->mla);
        for (int32_t l = 0; l < sh->n_layer; l++)
            sh->mla[l] = mla_list ? !strcmp(mla_list, "all")
                                  : l % every == every - 1 || l == sh->n_layer - 1;
        if (mla_list && strcmp(mla_list, "all") && strcmp(mla_list, "none")) {
            int32_t ids[CS_MAX_KIMI_LAYERS];
            int n =
                parse_list("--mla-layers", mla_list, ids, CS_MAX_KIMI_LAYERS, 0, sh->n_layer - 1);
            for (int i = 0; i < n; i++) sh->mla[ids[i]] = 1;
        }
    }
    cfg.compute.touch_measured = touch >= 0 ? touch : model_calib;
    if (cfg.compute.touch_measured) {
        cfg.compute.n_touch = cal[0].n_touch;
        memcpy(cfg.compute.touch_n, cal[0].touch_n, sizeof cal[0].touch_n);
        memcpy(cfg.compute.touch_frac, cal[0].touch_frac, sizeof cal[0].touch_frac);
    }
    if (model_calib) cfg.compute.head_ms = cal[0].head_ms;
    cfg.capacity_bytes = 1e9 * (capacity_gb > 0 ? capacity_gb : 0.7 * (ram_gb - 4));
    if (hops) return print_hops(&cfg, json);

    if (!quiet && !json) {
        /* the layout formula against what the bench read from the calibration file: means
         * over the MoE layers (a kimi model's KDA and MLA layers differ) */
        double attn = 0, expert = 0;
        int32_t n_moe = 0;
        for (int32_t l = 0; l < cal[0].shape.n_layer; l++) {
            cs_layer_cost lc = cs_layer_cost_of(&cal[0].shape, l);
            if (lc.expert_bytes > 0) attn += lc.attn_bytes, expert += lc.expert_bytes, n_moe++;
        }
        if (n_moe) attn /= n_moe, expert /= n_moe;
        printf("calib    %s: layer bytes from the shape %.3f MB + %.3f MB per expert; the file"
               " had %.3f + %.3f\n",
               calib_paths[0], attn / 1e6, expert / 1e6, cal[0].attn_bytes / 1e6,
               cal[0].expert_bytes / 1e6);
        cs_print_compute(stdout, &cfg.compute, &cfg.shape);
        printf("model    %s: %d layers (%d dense), %.2f TB; head %.2f GB\n",
               model_calib ? "the calibrated model"
               : kimi      ? "Kimi K3 (kimi-k3)"
                           : "the deepseek2 seed shape",
               cfg.shape.n_layer, cfg.shape.n_dense, cs_model_bytes(&cfg.shape) / 1e12,
               cs_head_bytes(&cfg.shape) / 1e9);
        if (kimi) {
            int32_t n_mla = 0;
            for (int32_t l = 0; l < cfg.shape.n_layer; l++) n_mla += cfg.shape.mla[l];
            double fixed, per_pos;
            cs_session_bytes(&cfg.shape, 0, cfg.shape.n_layer, &fixed, &per_pos);
            printf("kimi     %d KDA + %d MLA layers; a checkpoint every %d layers (a token between"
                   " layers: %d x %d values); experts at %d; a session holds %.1f MiB + %.1f KiB"
                   " per position\n",
                   cfg.shape.n_layer - n_mla, n_mla, cfg.shape.res_block,
                   1 + cs_banked(&cfg.shape, cfg.shape.n_layer), cfg.shape.n_embd,
                   cs_expert_width(&cfg.shape), fixed / 1048576, per_pos / 1024);
        }
        printf("lan      latency %.0f us, %.2f Gb/s, %.0f us per message, wire %s\n",
               cfg.lan.latency_us, cfg.lan.gbps, cfg.lan.overhead_us,
               cfg.lan.wire_bytes == 4 ? "f32" : "bf16");
    }
    json_t *out = json ? json_object() : NULL, *runs = json ? json_array() : NULL;
    if (json) {
        json_object_set_new(out, "compute",
                            json_pack("{s:f,s:f,s:f,s:f,s:i,s:f,s:f}", "c0_ms", cfg.compute.c0_ms,
                                      "ms_per_gmac", cfg.compute.ms_per_gmac, "ms_per_gstate",
                                      cfg.compute.ms_per_gstate, "ms_per_gb", cfg.compute.ms_per_gb,
                                      "threads", cfg.compute.threads, "fit_rms_rel",
                                      cfg.compute.fit_rms_rel, "fit_max_rel",
                                      cfg.compute.fit_max_rel));
        json_object_set_new(out, "model_bytes", json_real(cs_model_bytes(&cfg.shape)));
    }
    bool header = false;
    double last_agg = 0;
    int stalls = 0;
    for (int k = 0;; k++) {
        int32_t u;
        if (sweep) {
            u = 1 << k;
            if (u > max_users) break;
        } else {
            if (k >= n_users) break;
            u = users[k];
        }
        cfg.work.users = u;
        cs_result r;
        if (cs_simulate(&cfg, &r, &err)) {
            fprintf(stderr, "cellsim: %s\n", err.msg);
            return 1;
        }
        if (!header && !json) {
            printf("cell     %s\n", r.topology);
            printf("workload %s, prompt %d, gen %d tokens%s%s\n",
                   cfg.work.burst ? "one request per user, all at 0" : "users repeat requests",
                   cfg.work.prompt, cfg.work.gen,
                   cfg.work.burst ? ""
                                  : (cfg.work.route_per_request ? ", a route per request"
                                                                : ", a route per user"),
                   cfg.one_requester ? "; every user a slot of one requester (one machine)" : "");
            printf("%6s %10s %10s %13s %9s %7s %9s %7s %7s %6s %5s %5s\n", "users", "agg tok/s",
                   "user tok/s", "(min-max)", "TTFT s", "batch", "step ms", "replays", "evicted",
                   "fover", "done", "fail");
            header = true;
        }
        if (json) {
            json_t *rj = run_json(u, &r);
            if (cfg.failure.at_ms >= 0) {
                json_object_set_new(rj, "affected", json_integer(r.affected));
                json_object_set_new(rj, "detect_ms_max", json_real(r.detect_ms_max));
                json_object_set_new(rj, "recovery_ms_mean", json_real(r.recovery_ms_mean));
                json_object_set_new(rj, "recovery_ms_max", json_real(r.recovery_ms_max));
                json_object_set_new(rj, "restored_ms", json_real(r.restored_ms));
                json_object_set_new(rj, "first_after_fail_ms", json_real(r.first_after_fail_ms));
                json_t *tl = json_array();
                for (int b = 0; b < r.n_timeline; b++)
                    json_array_append_new(tl, json_real(r.timeline[b] / (r.bucket_ms / 1e3)));
                json_object_set_new(rj, "timeline_tps", tl);
            }
            json_array_append_new(runs, rj);
            if (!json_object_get(out, "topology"))
                json_object_set_new(out, "topology", json_string(r.topology));
        } else {
            print_row(u, &r);
            if (cfg.failure.at_ms >= 0) {
                char rec[96] = "none of them recovered within its request";
                if (r.recovery_ms_mean >= 0)
                    snprintf(rec, sizeof rec,
                             "failure -> their next token %.1f s mean, %.1f s worst",
                             r.recovery_ms_mean / 1e3, r.recovery_ms_max / 1e3);
                printf("failure  node at %.0f s: %d requesters affected, detected within %.2f s;"
                       " %s; the cell's first token %.1f s after; spare serving after %.1f s;"
                       " requests failed %d, short %d\n",
                       cfg.failure.at_ms / 1e3, r.affected, r.detect_ms_max / 1e3, rec,
                       r.first_after_fail_ms / 1e3, r.restored_ms / 1e3, r.requests_failed,
                       r.requests_short);
                cs_print_timeline(stdout, &r, cfg.failure.at_ms - timeline_before_ms,
                                  cfg.failure.at_ms + timeline_after_ms);
            }
        }
        fflush(stdout);
        if (sweep) { /* saturated: two doublings in a row gained less than 5% */
            stalls = r.agg_tps < last_agg * 1.05 ? stalls + 1 : 0;
            last_agg = fmax(last_agg, r.agg_tps);
        }
        cs_result_free(&r);
        if (sweep && stalls >= 2) break;
    }
    if (json) {
        json_object_set_new(out, "runs", runs);
        char *s = json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(6));
        puts(s ? s : "{}");
        free(s);
        json_decref(out);
    }
    return 0;
}

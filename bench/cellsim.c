/* cellsim.c - the `cellsim` command: predicts what a MoonTail cell serves
 * (per-user and aggregate tokens/s against concurrent requests, and what a
 * node failure costs) by simulating it (cellsim_cell.c) with compute times
 * calibrated on this machine (`moontail bench --layer-times --json`) and a
 * LAN model. docs/cellsim.md explains the model, its inputs and limits.
 *
 *   cellsim --calib FILE [--calib FILE ...] [options]    (--help lists them)
 *
 * The target model is the Kimi K3 seed shape (92 layers, 896 experts of which
 * 16 per token; the rest taken from Kimi K2: see k3_shape) or, with
 * --model calib, the calibrated model itself (the validation's). */
#include "cellsim.h"
#include "moontail/tensor_type.h"

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
    "  --model k3|calib      the Kimi K3 seed shape (default) or the calibrated model itself\n"
    "  --layers N --experts N --experts-used N --embd N --ff-exp N --vocab N --dense-layers N\n"
    "                        change the model's shape\n"
    "  --touch uniform|measured  experts a batch touches: 1-(1-k/E)^B, or as the calibration\n"
    "                        measured (default: measured for --model calib, else uniform)\n"
    "  --threads N           compute threads per node (default: the calibration's)\n"
    "  --calib-time wall|min|cpu  the bench's median step, fastest step, or CPU time / threads\n"
    "                        (a machine of one's own, every thread busy) (default wall)\n"
    "topology\n"
    "  --machines N          machines placed as the registry does (default 200)\n"
    "  --ram-gb G            RAM per machine; a node offers 70%% of G - 4 GB (default 64)\n"
    "  --capacity-gb C       what each machine offers for shards (instead of --ram-gb)\n"
    "  --replicas N --spares N --max-group N   placement (defaults 2, 1, 8)\n"
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
    "  --route-per-request   a new route per request (moontail prompt), not per user\n"
    "  --think-ms M          between a user's requests (default 0)\n"
    "  --retry-after-s S     after a request failed, before the user's next (default 10)\n"
    "  --duration-s S --warmup-s S   steady runs (default 3600, 600)\n"
    "  --ubatch N --max-sessions N --max-batch N --seed N\n"
    "failure\n"
    "  --fail-at-s T         kill a node at T s (steady runs)\n"
    "  --fail-node ID        which (default 0: the stage holding the middle layer of pipeline 0;\n"
    "                        -1: the one on the first requester's route)\n"
    "  --fail-silent         it goes silent (cable, power) instead of being killed\n"
    "  --dead-after-ms M --heartbeat-ms M --call-timeout-ms M --fetch-gbps G --load-ms M\n"
    "  --bucket-s S          the timeline's step (default 1)\n"
    "  --timeline-s B,A      the timeline from B s before the failure to A s after (30,120)\n"
    "output\n"
    "  --json                one JSON object\n"
    "  --quiet               no model description\n";

enum { MAX_CALIB = 8, MAX_RUNS = 32 };

/* The Kimi K3 seed shape: 92 layers, 896 routed experts, 16 per token (the issue);
 * everything else as Kimi K2 (hidden 7168, MLA with 64 heads, q_lora 1536, kv_lora
 * 512, rope 64, nope 128, v 128; expert width 2048, 1 shared expert, 1 leading
 * dense layer of 18432, vocabulary 163840), in Q4_K. */
static cs_shape k3_shape(void) {
    return (cs_shape){.n_layer = 92,
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
                      .type = MT_TYPE_Q4_K};
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
    return json_pack("{s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:I,s:i,s:i,s:i,s:f,s:i}", "users",
                     users, "agg_tps", r->agg_tps, "user_tps", r->user_tps, "user_tps_min",
                     r->user_tps_min, "user_tps_max", r->user_tps_max, "ttft_ms", r->ttft_ms,
                     "batch_mean", r->batch_mean, "step_ms_mean", r->step_ms_mean, "replays",
                     (json_int_t)r->replays, "evictions", (json_int_t)r->evictions, "failovers",
                     (json_int_t)r->failovers, "requests_done", r->requests_done, "requests_failed",
                     r->requests_failed, "requests_short", r->requests_short, "cpu_used",
                     r->cpu_used, "user_requests", r->user_requests);
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

int main(int argc, char **argv) {
    cs_config cfg;
    cs_config_defaults(&cfg);
    const char *calib_paths[MAX_CALIB];
    int n_calib = 0, n_users = 1, touch = -1, threads = 0;
    cs_time_kind calib_time = CS_TIME_WALL;
    int32_t users[MAX_RUNS] = {1};
    bool json = false, quiet = false, sweep = false, model_calib = false;
    double ram_gb = 64, capacity_gb = 0, max_users = 256;
    double timeline_before_ms = 30e3, timeline_after_ms = 120e3;
    cfg.machines = 200;
    cs_shape k3 = k3_shape();
    int32_t layers = 0, experts = 0, used = 0, embd = 0, ff_exp = 0, vocab = 0, dense = -1;
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
        if (!strcmp(a, "--burst")) {
            cfg.work.burst = true;
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
        if (!strcmp(a, "--calib")) {
            if (n_calib == MAX_CALIB) die("at most 8 --calib files (%s)", v);
            calib_paths[n_calib++] = v;
        } else if (!strcmp(a, "--model")) {
            if (strcmp(v, "k3") && strcmp(v, "calib")) die("--model is k3 or calib, not '%s'", v);
            model_calib = !strcmp(v, "calib");
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
            cfg.max_sessions = (int32_t)num(a, v, 1, 1 << 20);
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
    if (n_calib == 0) die("%s", "--calib FILE is required (moontail bench --layer-times --json)");
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
    if (cs_compute_fit(cal, n_calib, &cfg.compute, &err)) {
        fprintf(stderr, "cellsim: %s\n", err.msg);
        return 1;
    }
    if (threads) cfg.compute.threads = threads;
    cfg.shape = model_calib ? cal[0].shape : k3;
    if (layers) cfg.shape.n_layer = layers;
    if (experts) cfg.shape.n_expert = experts;
    if (used) cfg.shape.n_expert_used = used;
    if (embd) cfg.shape.n_embd = embd;
    if (ff_exp) cfg.shape.n_ff_exp = ff_exp;
    if (vocab) cfg.shape.n_vocab = vocab;
    if (dense >= 0) cfg.shape.n_dense = dense;
    if (cfg.shape.n_expert_used > cfg.shape.n_expert || cfg.shape.n_dense > cfg.shape.n_layer)
        die("%s", "the shape needs experts-used <= experts and dense-layers <= layers");
    cfg.compute.touch_measured = touch >= 0 ? touch : model_calib;
    if (cfg.compute.touch_measured) {
        cfg.compute.n_touch = cal[0].n_touch;
        memcpy(cfg.compute.touch_n, cal[0].touch_n, sizeof cal[0].touch_n);
        memcpy(cfg.compute.touch_frac, cal[0].touch_frac, sizeof cal[0].touch_frac);
    }
    if (model_calib) cfg.compute.head_ms = cal[0].head_ms;
    cfg.capacity_bytes = 1e9 * (capacity_gb > 0 ? capacity_gb : 0.7 * (ram_gb - 4));

    if (!quiet && !json) {
        /* the layout formula against what the bench read from the calibration file */
        cs_layer_cost lc = cs_layer_cost_of(&cal[0].shape, cal[0].shape.n_layer - 1);
        printf("calib    %s: layer bytes from the shape %.3f MB + %.3f MB per expert; the file"
               " had %.3f + %.3f\n",
               calib_paths[0], lc.attn_bytes / 1e6, lc.expert_bytes / 1e6, cal[0].attn_bytes / 1e6,
               cal[0].expert_bytes / 1e6);
        cs_print_compute(stdout, &cfg.compute, &cfg.shape);
        printf("model    %s: %d layers (%d dense), %.2f TB; head %.2f GB\n",
               model_calib ? "the calibrated model" : "Kimi K3 seed shape", cfg.shape.n_layer,
               cfg.shape.n_dense, cs_model_bytes(&cfg.shape) / 1e12,
               cs_head_bytes(&cfg.shape) / 1e9);
        printf("lan      latency %.0f us, %.2f Gb/s, %.0f us per message, wire %s\n",
               cfg.lan.latency_us, cfg.lan.gbps, cfg.lan.overhead_us,
               cfg.lan.wire_bytes == 4 ? "f32" : "bf16");
    }
    json_t *out = json ? json_object() : NULL, *runs = json ? json_array() : NULL;
    if (json) {
        json_object_set_new(out, "compute",
                            json_pack("{s:f,s:f,s:f,s:i,s:f,s:f}", "c0_ms", cfg.compute.c0_ms,
                                      "ms_per_gmac", cfg.compute.ms_per_gmac, "ms_per_gb",
                                      cfg.compute.ms_per_gb, "threads", cfg.compute.threads,
                                      "fit_rms_rel", cfg.compute.fit_rms_rel, "fit_max_rel",
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
            printf("workload %s, prompt %d, gen %d tokens%s\n",
                   cfg.work.burst ? "one request per user, all at 0" : "users repeat requests",
                   cfg.work.prompt, cfg.work.gen,
                   cfg.work.burst ? ""
                                  : (cfg.work.route_per_request ? ", a route per request"
                                                                : ", a route per user"));
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

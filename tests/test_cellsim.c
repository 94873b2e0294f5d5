/* test_cellsim.c - bench/cellsim's simulation against answers worked out by
 * hand from the model it documents (cellsim.h, docs/cellsim.md), never
 * against its own earlier output:
 *   - a layer's bytes equal the bytes `moontail mkmodel` writes (read back
 *     from the file), and its multiply-adds per token are the textbook count;
 *   - messages carry the bytes proto.c encodes (57,438 per f32 round trip of a
 *     7168-wide state, as bench_dataplane measured);
 *   - one request through one pipeline: time per token = the stages' compute
 *     + two messages per stage + the head;
 *   - saturation: many requesters on a pipeline whose slowest stage costs the
 *     same whatever its batch: tokens/s = batch limit / that stage's time;
 *   - CPUs shared by processor sharing: two jobs on one core take twice as long;
 *   - failure: no token lost; a killed stage -> the failure's time to the next
 *     token = the registry call + a connection per stage + the replay; a
 *     silent one adds the call timeout; with no backup pipeline the requester
 *     retries every 250 ms + the registry call until the spare serves after
 *     dead-after + 2 heartbeats + the load;
 *   - evictions (max_sessions) turn into replays;
 *   - the fit recovers known coefficients; the event queue keeps time order. */
#include "cellsim.h"
#include "check.h"
#include "moontail/shard.h"
#include "moontail/synth_model.h"
#include "moontail/tensor_type.h"

/* ---- shapes, bytes and MACs ------------------------------------------------------------- */

/* deepseek2, n_embd 64, MLA 2 heads (q_lora 32, kv_lora 32, nope 16, rope 16, v 16),
 * 4 experts of 32, 2 used, no shared expert, F32. */
static cs_shape tiny_shape(void) {
    return (cs_shape){.n_layer = 4,
                      .n_dense = 0,
                      .n_embd = 64,
                      .n_vocab = 100,
                      .n_head = 2,
                      .q_lora = 32,
                      .kv_lora = 32,
                      .qk_nope = 16,
                      .qk_rope = 16,
                      .v_dim = 16,
                      .n_ff = 64,
                      .n_expert = 4,
                      .n_expert_used = 2,
                      .n_expert_shared = 0,
                      .n_ff_exp = 32,
                      .type = MT_TYPE_F32};
}

static void test_macs(void) {
    cs_shape s = tiny_shape();
    cs_layer_cost c = cs_layer_cost_of(&s, 1);
    /* q_a 64x32 + q_b 32x(2x32) + kv_a 64x48 + k_b 2x16x32 + v_b 2x32x16 + o 32x64
     * + router 64x4 = 2048 + 2048 + 3072 + 1024 + 1024 + 2048 + 256 = 11520;
     * one expert: gate + up 64x32 each, down 32x64 = 6144 */
    CHECK(c.attn_macs == 11520, "attention MACs %.0f, want 11520", c.attn_macs);
    CHECK(c.expert_macs == 6144, "expert MACs %.0f, want 6144", c.expert_macs);
    CHECK(cs_head_macs(&s) == 6400, "head MACs %.0f, want 64 x 100", cs_head_macs(&s));
}

/* The layout formula against the bytes of a file mkmodel writes. */
static void check_bytes_against_file(const cs_shape *s, const char *what) {
    mt_synth_params p = mt_synth_default_params("deepseek2");
    p.type = (mt_type)s->type;
    p.n_layer = s->n_layer;
    p.n_leading_dense = s->n_dense;
    p.n_embd = s->n_embd;
    p.n_head = s->n_head;
    p.n_head_kv = 1;
    p.q_lora = s->q_lora;
    p.kv_lora = s->kv_lora;
    p.qk_nope = s->qk_nope;
    p.qk_rope = s->qk_rope;
    p.v_dim = s->v_dim;
    p.n_ff = s->n_ff;
    p.n_expert = s->n_expert;
    p.n_expert_used = s->n_expert_used;
    p.n_expert_shared = s->n_expert_shared;
    p.n_ff_exp = s->n_ff_exp;
    p.n_group = p.n_group_used = 1;
    const char *path = check_tmp(".gguf");
    mt_error err = {{0}};
    CHECK(mt_synth_write(&p, path, &err) == 0, "%s: mkmodel: %s", what, err.msg);
    gguf_file *f = gguf_open(path, &err);
    CHECK(f != NULL, "%s: %s", what, err.msg);
    mt_shard_layout l;
    if (f && mt_shard_layout_read(f, &l, &err) == 0) {
        for (int32_t il = 0; il < s->n_layer; il++) {
            cs_layer_cost c = cs_layer_cost_of(s, il);
            CHECK(c.attn_bytes == (double)l.attn_bytes[il],
                  "%s layer %d: attention %.0f bytes,"
                  " the file %llu",
                  what, il, c.attn_bytes, (unsigned long long)l.attn_bytes[il]);
            CHECK(c.expert_bytes == (double)l.expert_bytes[il],
                  "%s layer %d: expert %.0f bytes,"
                  " the file %llu",
                  what, il, c.expert_bytes, (unsigned long long)l.expert_bytes[il]);
        }
        mt_shard_layout_free(&l);
    } else {
        CHECK(0, "%s: layout: %s", what, err.msg);
    }
    gguf_close(f);
    unlink(path);
}

static void test_bytes(void) {
    cs_shape s = tiny_shape();
    s.n_dense = 1;
    check_bytes_against_file(&s, "F32");
    /* Q4_K where rows are whole blocks of 256, Q8_0 or F32 elsewhere, a shared expert */
    s = (cs_shape){.n_layer = 2,
                   .n_dense = 1,
                   .n_embd = 256,
                   .n_vocab = 100,
                   .n_head = 2,
                   .q_lora = 256,
                   .kv_lora = 256,
                   .qk_nope = 32,
                   .qk_rope = 16,
                   .v_dim = 32,
                   .n_ff = 512,
                   .n_expert = 8,
                   .n_expert_used = 2,
                   .n_expert_shared = 1,
                   .n_ff_exp = 256,
                   .type = MT_TYPE_Q4_K};
    check_bytes_against_file(&s, "Q4_K");
}

/* ---- the compute model ---------------------------------------------------------------------- */

static void test_touched(void) {
    cs_shape s = tiny_shape(); /* 2 of 4 experts per token */
    cs_compute c = {0};
    CHECK(fabs(cs_touched_fraction(&c, &s, 1) - 0.5) < 1e-12, "1 token touches half");
    CHECK(fabs(cs_touched_fraction(&c, &s, 2) - 0.75) < 1e-12, "2 tokens: 1 - 1/4");
    CHECK(fabs(cs_touched_fraction(&c, &s, 3) - 0.875) < 1e-12, "3 tokens: 1 - 1/8");
    c.touch_measured = true;
    c.n_touch = 2;
    c.touch_n[0] = 2, c.touch_frac[0] = 0.6;
    c.touch_n[1] = 4, c.touch_frac[1] = 0.9;
    CHECK(fabs(cs_touched_fraction(&c, &s, 1) - 0.5) < 1e-12, "measured: 1 token is still k/E");
    CHECK(fabs(cs_touched_fraction(&c, &s, 2) - 0.6) < 1e-12, "measured point");
    CHECK(fabs(cs_touched_fraction(&c, &s, sqrt(8)) - 0.75) < 1e-12, "log-midway");
    CHECK(fabs(cs_touched_fraction(&c, &s, 6) - (1 - 0.1 * 0.25)) < 1e-12,
          "beyond: the rest shrinks as (1 - k/E)^(n - 4)");
}

static void test_fit(void) {
    cs_calibration cal = {0};
    cal.threads = 1;
    const double c0 = 2, a = 3, b = 4; /* ms, ms/GMAC, ms/GB */
    for (int i = 0; i < 6; i++) {
        double macs = (i + 1) * 0.4e9, bytes = (i % 3 + 1) * 0.3e9;
        cal.points[cal.n_points++] =
            (cs_point){1, macs, bytes, c0 + a * macs / 1e9 + b * bytes / 1e9, false};
    }
    cs_compute c;
    mt_error err = {{0}};
    CHECK(cs_compute_fit(&cal, 1, &c, &err) == 0, "fit: %s", err.msg);
    CHECK(fabs(c.c0_ms - c0) < 1e-9 && fabs(c.ms_per_gmac - a) < 1e-9 &&
              fabs(c.ms_per_gb - b) < 1e-9,
          "fit gave %g %g %g, want 2 3 4", c.c0_ms, c.ms_per_gmac, c.ms_per_gb);
    CHECK(c.fit_max_rel < 1e-9, "exact points fit exactly (%g)", c.fit_max_rel);
    /* a negative coefficient is not allowed: points that would want one */
    cal.n_points = 0;
    for (int i = 0; i < 4; i++)
        cal.points[cal.n_points++] = (cs_point){1, (i + 1) * 1e9, 1e9, 10.0 - i, false};
    CHECK(cs_compute_fit(&cal, 1, &c, &err) == 0, "fit: %s", err.msg);
    CHECK(c.c0_ms >= 0 && c.ms_per_gmac >= 0 && c.ms_per_gb >= 0, "coefficients stay >= 0");
}

static void test_queue(void) {
    cs_queue q = {0};
    uint64_t s = 12345;
    for (int i = 0; i < 2000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        CHECK(cs_queue_push(&q, (double)(s >> 54), 0, i, 0) == 0, "push");
    }
    cs_event prev = {-1, 0, 0, -1, 0}, e;
    int n = 0;
    while (cs_queue_pop(&q, &e)) {
        CHECK(e.t > prev.t || (e.t == prev.t && e.a > prev.a), "order at %d: %g/%d after %g/%d", n,
              e.t, e.a, prev.t, prev.a);
        prev = e;
        n++;
    }
    CHECK(n == 2000, "popped %d of 2000", n);
    cs_queue_free(&q);
}

/* ---- simulations ----------------------------------------------------------------------------- */

/* Every layer costs c0 = 1 ms whatever its tokens; the head 0.25 ms; a message 70 us of
 * overhead and 30 us of latency, the links so fast that bytes take no time. */
static cs_config base(void) {
    cs_config c;
    cs_config_defaults(&c);
    c.shape = tiny_shape();
    c.compute = (cs_compute){.c0_ms = 1.0, .threads = 1, .head_ms = 0.25};
    c.lan = (cs_lan){.latency_us = 30,
                     .gbps = 1e6,
                     .overhead_us = 70,
                     .connect_ms = 2,
                     .registry_ms = 5,
                     .wire_bytes = 4};
    c.work.burst = true;
    c.work.prompt = 1;
    c.work.gen = 5;
    return c;
}

static bool run(const cs_config *c, cs_result *r, const char *what) {
    mt_error err = {{0}};
    int rc = cs_simulate(c, r, &err);
    CHECK(rc == 0, "%s: %s", what, err.msg);
    return rc == 0;
}

static void test_one_request(void) {
    cs_config c = base();
    c.n_stages = 3;
    c.stage_layers[0] = 1, c.stage_layers[1] = 2, c.stage_layers[2] = 1;
    cs_result r;
    if (!run(&c, &r, "one request")) return;
    /* per token: 3 stages x 2 messages x (70 + 30) us + (1 + 2 + 1) layers x 1 ms + 0.25 ms */
    const double period = 3 * 2 * 0.1 + 4 * 1.0 + 0.25;
    CHECK(fabs(r.ttft_ms - period) < 1e-3, "first token after %.6f ms, want %.6f", r.ttft_ms,
          period);
    CHECK(fabs(r.user_tps - 1e3 / period) < 1e-3, "%.6f tok/s, want %.6f", r.user_tps,
          1e3 / period);
    CHECK(r.requests_done == 1 && r.requests_short == 0, "the request finished");
    cs_result_free(&r);

    /* bytes: a 7168-wide f32 state over 1 Gb/s. STAGE_FORWARD of one token: 12 header + 21
     * fixed + 4 position + 28672 rows + 20 framing = 28729; STAGE_REPLY: 12 + 5 + 28672 + 20
     * = 28709 (together 57,438 bytes: bench_dataplane's measured round trip) */
    c = base();
    c.shape.n_embd = 7168;
    c.lan.gbps = 1.0;
    c.n_stages = 1;
    c.stage_layers[0] = 4;
    if (!run(&c, &r, "bytes")) return;
    const double wire = (28729.0 + 28709.0) * 8 / 1e9 * 1e3;
    const double p2 = 2 * 0.1 + wire + 4 * 1.0 + 0.25;
    CHECK(fabs(r.user_tps - 1e3 / p2) < 1e-6 * (1e3 / p2), "%.6f tok/s, want %.6f", r.user_tps,
          1e3 / p2);
    cs_result_free(&r);
}

static void test_saturation(void) {
    cs_config c = base();
    c.n_stages = 2;
    c.stage_layers[0] = 1, c.stage_layers[1] = 3; /* the slow one: 3 ms per step */
    c.max_batch_tokens = 4;
    c.work.burst = false;
    c.work.users = 16;
    c.work.gen = 1000000; /* no request ends in the run */
    c.work.duration_ms = 10000;
    c.work.warmup_ms = 1000;
    c.lan.overhead_us = c.lan.latency_us = 0;
    c.compute.head_ms = 1e-9;
    cs_result r;
    if (!run(&c, &r, "saturation")) return;
    const double want = 4 / 3e-3; /* 4 tokens per 3 ms */
    CHECK(fabs(r.agg_tps - want) < 0.005 * want, "%.2f tok/s, want %.2f", r.agg_tps, want);
    cs_result_free(&r);
}

static void test_shared_cpu(void) {
    /* one stage (1 ms), heads of 1 ms, 2 requesters on one machine. With 2 cores a node step
     * and a head run side by side: a token every 2 ms per requester. With 1 core both run at
     * half speed: every 4 ms (a node step with the other's head). */
    cs_config c = base();
    c.n_stages = 1;
    c.shape.n_layer = 1;
    c.stage_layers[0] = 1;
    c.compute.head_ms = 1.0;
    c.lan.overhead_us = c.lan.latency_us = 0;
    c.shared_host = true;
    c.work.users = 2;
    c.work.gen = 11;
    cs_result r;
    c.cores = 2;
    if (run(&c, &r, "2 cores")) {
        CHECK(fabs(r.user_tps - 500) < 1e-6 * 500, "2 cores: %.6f tok/s per requester, want 500",
              r.user_tps);
        cs_result_free(&r);
    }
    c.cores = 1;
    if (run(&c, &r, "1 core")) {
        /* the first requester's tokens at 3, 7, ..., 43 ms; the second's at 5, 9, ..., 41 ms and
         * its last at 44 ms: once the first is done its head runs alone (1 ms) */
        CHECK(fabs(r.user_tps_min - 250) < 1e-6, "1 core: %.6f tok/s, want 250", r.user_tps_min);
        CHECK(fabs(r.user_tps_max - 1e4 / 39) < 1e-6, "1 core, the second: %.6f tok/s, want %.6f",
              r.user_tps_max, 1e4 / 39);
        cs_result_free(&r);
    }
    /* other programs leave half a CPU to one thread of ours, one CPU to two: every job runs at
     * half speed, a token every 4 ms for each requester, to the end */
    c.cores = 2;
    c.n_share = 2;
    c.share[0] = 0.5, c.share[1] = 1.0;
    if (run(&c, &r, "a measured share")) {
        CHECK(fabs(r.user_tps_min - 250) < 1e-6 && fabs(r.user_tps_max - 250) < 1e-6,
              "half speed: %.6f-%.6f tok/s, want 250", r.user_tps_min, r.user_tps_max);
        cs_result_free(&r);
    }
}

/* Two layers, each machine holding one: pipelines of 2 stages (max_group 1: no partners). */
static cs_config cell_config(int replicas) {
    cs_config c = base();
    c.shape.n_layer = 2;
    cs_layer_cost lc = cs_layer_cost_of(&c.shape, 0);
    c.capacity_bytes = 1.5 * (lc.attn_bytes + c.shape.n_expert * lc.expert_bytes);
    c.machines = 2 * replicas + 1;
    c.replicas = replicas;
    c.spares = 1;
    c.max_group = 1;
    c.lan.overhead_us = c.lan.latency_us = 0;
    c.compute.head_ms = 1e-9;
    c.work.gen = 20;
    c.failure.at_ms = 11.5; /* the requester is in its 6th pass, at its second stage */
    c.failure.node = -1;    /* the stage of its route that holds layer 1 */
    c.failure.dead_after_ms = 1000;
    c.failure.heartbeat_ms = 100;
    c.failure.load_ms = 300;
    c.failure.fetch_gbps = 1e6;
    c.failure.call_timeout_ms = 3000;
    return c;
}

static void test_failover(void) {
    cs_config c = cell_config(2);
    cs_result r;
    if (!run(&c, &r, "failover")) return;
    CHECK(r.pipelines == 2 && r.stages_min == 2 && r.stages_max == 2 && r.spares == 1,
          "the placement: %s", r.topology);
    /* a token every 2 ms; at 11.5 ms the second stage dies mid-step: the reset is seen at once.
     * Then: the session ended on the first stage (no wait), the registry (5 ms), two connects
     * (2 x 2 ms), the 6 tokens of the history through both stages (2 x 1 ms) */
    CHECK(r.affected == 1, "%d requesters affected, want 1", r.affected);
    CHECK(fabs(r.detect_ms_max) < 1e-6, "detected after %.6f ms, want 0", r.detect_ms_max);
    CHECK(fabs(r.recovery_ms_max - (5 + 2 * 2 + 2 * 1)) < 1e-6, "recovery %.6f ms, want 11",
          r.recovery_ms_max);
    CHECK(r.requests_done == 1 && r.requests_short == 0 && r.requests_failed == 0,
          "no token lost: %d done, %d short, %d failed", r.requests_done, r.requests_short,
          r.requests_failed);
    CHECK(r.failovers == 1, "%lld failovers", (long long)r.failovers);
    /* the spare serves after dead-after + 2 heartbeats + fetch (nothing at 1e6 Gb/s) + load */
    CHECK(fabs(r.restored_ms - 1500) < 1e-3, "spare serving %.6f ms after, want 1500",
          r.restored_ms);
    cs_result_free(&r);

    /* silent: the call to the dead stage began at 11 ms and times out at 3011 ms */
    c.failure.silent = true;
    if (!run(&c, &r, "silent")) return;
    CHECK(fabs(r.detect_ms_max - 2999.5) < 1e-6, "detected after %.6f ms, want 2999.5",
          r.detect_ms_max);
    CHECK(fabs(r.recovery_ms_max - (2999.5 + 11)) < 1e-6, "recovery %.6f ms, want 3010.5",
          r.recovery_ms_max);
    CHECK(r.requests_short == 0 && r.requests_failed == 0, "no token lost");
    cs_result_free(&r);

    /* no backup pipeline: attempts at 11.5 + k x (250 + 5) ms until the spare serves at
     * 1511.5 ms: k = 6 (1541.5 ms), then 5 + 4 + 2 ms */
    c = cell_config(1);
    if (!run(&c, &r, "spare")) return;
    double attempt = 11.5;
    while (attempt < 11.5 + 1500) attempt += 250 + 5;
    const double want = attempt + 5 + 4 + 2 - 11.5;
    CHECK(fabs(r.recovery_ms_max - want) < 1e-6, "recovery %.6f ms, want %.6f", r.recovery_ms_max,
          want);
    CHECK(r.requests_short == 0 && r.requests_failed == 0, "no token lost with a single pipeline");
    cs_result_free(&r);
}

static void test_evictions(void) {
    cs_config c = base();
    c.n_stages = 1;
    c.stage_layers[0] = 4;
    c.work.users = 2;
    c.work.gen = 4;
    cs_result r;
    c.max_sessions = 2;
    if (run(&c, &r, "2 sessions")) {
        CHECK(r.evictions == 0 && r.replays == 0, "room for both: %lld evictions",
              (long long)r.evictions);
        cs_result_free(&r);
    }
    c.max_sessions = 1; /* each new session evicts the other: replays */
    if (run(&c, &r, "1 session")) {
        CHECK(r.evictions > 0 && r.replays > 0, "one slot: %lld evictions, %lld replays",
              (long long)r.evictions, (long long)r.replays);
        cs_result_free(&r);
    }
}

static void test_refusals(void) {
    cs_config c = base();
    cs_result r;
    mt_error err = {{0}};
    c.n_stages = 2;
    c.stage_layers[0] = 1, c.stage_layers[1] = 1; /* 2 of 4 layers */
    CHECK(cs_simulate(&c, &r, &err) != 0 && strstr(err.msg, "layers"), "stages short: %s", err.msg);
    c = base();
    c.machines = 3;
    c.capacity_bytes = 1000; /* nothing fits */
    CHECK(cs_simulate(&c, &r, &err) != 0 && strstr(err.msg, "cannot hold"), "too small: %s",
          err.msg);
    c = base();
    c.n_stages = 1;
    c.stage_layers[0] = 4;
    c.failure.at_ms = 5;
    CHECK(cs_simulate(&c, &r, &err) != 0 && strstr(err.msg, "fail over"), "no backup: %s", err.msg);
}

int main(void) {
    test_macs();
    test_bytes();
    test_touched();
    test_fit();
    test_queue();
    test_one_request();
    test_saturation();
    test_shared_cpu();
    test_failover();
    test_evictions();
    test_refusals();
    return check_report("test_cellsim");
}

/* test_pace.c - decode pacing's rule (mt_node_pace_hold, src/net/node_pace.c)
 * against cases worked out by hand from its definition in moontail/node.h:
 * a prompt step starting at now and taking step ms waits when a decoding
 * session's next token (its last arrival + its period) is due before the
 * step would end, until that due time plus the slack (half the period, at
 * most one step, at least 0.5 ms); a decode later than that counts as
 * stopped; and the line through the recent steps' times that sizes a smaller
 * prompt step to end before a due decode. The node's use of the rule is
 * measured, not tested, in
 * bench/cellsim-validate.sh (timings), and modelled in bench/cellsim. */
#include "check.h"
#include "moontail/node.h"

static void expect(const mt_node_pace_decode *d, int n, double now, double step, double want,
                   const char *what) {
    double due = -1, got = mt_node_pace_hold(d, n, now, step, &due);
    CHECK(fabs(got - want) < 1e-9, "%s: hold until %.3f, wanted %.3f", what, got, want);
    CHECK(want > 0 ? due > 0 && due < want : due == 0, "%s: due %.3f", what, due);
}

static void expect_due(const mt_node_pace_decode *d, int n, double now, double step, double want,
                       const char *what) {
    double due = -1;
    mt_node_pace_hold(d, n, now, step, &due);
    CHECK(fabs(due - want) < 1e-9, "%s: due %.3f, wanted %.3f", what, due, want);
}

/* The cost line (mt_node_pace_measured, _step_ms, _fit). */
static void test_costs(void) {
    mt_node_pace_costs c = {0};
    CHECK(mt_node_pace_step_ms(&c, 4) == 0 && mt_node_pace_fit(&c, 100) == 0,
          "nothing measured: no estimate");
    /* prompt steps alone: 12 ms for 4 tokens, then 20 ms for 4: 0.75 x 12 + 0.25 x 20 = 14 */
    mt_node_pace_measured(&c, true, 12, 4);
    CHECK(fabs(mt_node_pace_step_ms(&c, 2) - 6) < 1e-9 && mt_node_pace_fit(&c, 7) == 2,
          "prompt steps only: 3 ms a token, no fixed part: %.3f ms, %d tokens",
          mt_node_pace_step_ms(&c, 2), mt_node_pace_fit(&c, 7));
    mt_node_pace_measured(&c, true, 20, 4);
    CHECK(fabs(c.prompt_ms - 14) < 1e-9 && fabs(c.prompt_tok - 4) < 1e-9,
          "moving average: %.3f ms, %.3f tokens", c.prompt_ms, c.prompt_tok);
    /* with decode steps alone, 9.4 ms for 1 token, and prompt steps of 22 ms for 4: the line
     * through both, 4.2 ms a token and 5.2 fixed */
    c = (mt_node_pace_costs){0};
    mt_node_pace_measured(&c, true, 22, 4);
    mt_node_pace_measured(&c, false, 9.4, 1);
    CHECK(fabs(mt_node_pace_step_ms(&c, 4) - 22) < 1e-9 &&
              fabs(mt_node_pace_step_ms(&c, 2) - 13.6) < 1e-9,
          "the line: %.3f and %.3f ms", mt_node_pace_step_ms(&c, 4), mt_node_pace_step_ms(&c, 2));
    CHECK(mt_node_pace_fit(&c, 14) == 2 && mt_node_pace_fit(&c, 9.5) == 1 &&
              mt_node_pace_fit(&c, 5) == 0,
          "fits: %d, %d, %d tokens", mt_node_pace_fit(&c, 14), mt_node_pace_fit(&c, 9.5),
          mt_node_pace_fit(&c, 5));
    /* two kinds too alike in tokens (4 and 4): the prompt steps' time per token */
    c = (mt_node_pace_costs){0};
    mt_node_pace_measured(&c, true, 16, 4);
    mt_node_pace_measured(&c, false, 10, 4);
    CHECK(fabs(mt_node_pace_step_ms(&c, 1) - 4) < 1e-9, "alike: %.3f ms",
          mt_node_pace_step_ms(&c, 1));
    mt_node_pace_measured(&c, true, 0, 4); /* not a measurement */
    CHECK(fabs(c.prompt_ms - 16) < 1e-9, "a 0 ms step is ignored: %.3f", c.prompt_ms);
}

/* The step's decision (mt_node_pace_plan) on the line of test_costs (5.2 ms + 4.2 ms a token,
 * so 4 prompt tokens 22 ms, 1 decode 9.4 ms) and one session decoding every 40 ms, the last at
 * 100: its next is due at 140, slack min(20, 22) = 20. */
static void test_plan(void) {
    mt_node_pace_costs c = {0};
    mt_node_pace_measured(&c, true, 22, 4);
    mt_node_pace_measured(&c, false, 9.4, 1);
    const mt_node_pace_decode d = {.at_ms = 100, .period_ms = 40};
    double hold = -1;
    int skips = 0;
    double got = mt_node_pace_plan(&c, &d, 1, 110, 0, 4, &skips, &hold);
    CHECK(got == 4 && hold == 0, "prompts alone from 110 end at 132: %g tokens, hold %g", got,
          hold);
    got = mt_node_pace_plan(&c, &d, 1, 125, 0, 4, &skips, &hold);
    CHECK(got == 2 && hold == 0, "from 125: 15 ms left, 2 tokens (13.6 ms) fit: %g, hold %g", got,
          hold);
    got = mt_node_pace_plan(&c, &d, 1, 136, 0, 4, &skips, &hold);
    CHECK(got == 0 && hold == 160, "from 136: 4 ms left, none fits: %g, hold until %g", got, hold);
    got = mt_node_pace_plan(&c, &d, 1, 100, 1, 4, &skips, &hold);
    CHECK(got == 0 && skips == 1 && hold == 0,
          "a decode from 100 ends at 109.4, prompts then end at 131.4: none now (%g), skips %d",
          got, skips);
    skips = MT_NODE_PACE_MAX_SKIPS;
    got = mt_node_pace_plan(&c, &d, 1, 100, 1, 4, &skips, &hold);
    CHECK(got == 4 && skips == MT_NODE_PACE_MAX_SKIPS, "after %d skips the prompts join: %g",
          MT_NODE_PACE_MAX_SKIPS, got);
    skips = 0;
    got = mt_node_pace_plan(&c, &d, 1, 120, 1, 4, &skips, &hold);
    CHECK(got == 4 && skips == 0, "from 120 the prompts would end at 151.4: they join: %g", got);
    c = (mt_node_pace_costs){0};
    got = mt_node_pace_plan(&c, &d, 1, 136, 0, 4, &skips, &hold);
    CHECK(got == 4 && hold == 0, "nothing measured: no pacing: %g", got);
}

int main(void) {
    /* last decode at 100 ms, every 20 ms: the next is due at 120 */
    const mt_node_pace_decode one = {.at_ms = 100, .period_ms = 20};
    expect(&one, 1, 110, 0, 0, "no step measured yet");
    expect(&one, 1, 110, 5, 0, "a 5 ms step from 110 ends at 115, before 120");
    expect(&one, 1, 115, 5, 0, "a step ending exactly at 120 runs");
    /* slack: min(0.5 x 20, 5) = 5 -> wait until 125 */
    expect(&one, 1, 117, 5, 125, "a 5 ms step from 117 would end after 120");
    expect(&one, 1, 124.5, 5, 125, "late: still waited for until 125");
    expect(&one, 1, 125, 5, 0, "later than 125: stopped");
    /* a long step: slack is half the period, 10 -> 130 */
    expect(&one, 1, 101, 50, 130, "a 50 ms step waits until 120 + 10");
    /* a short period: slack at least 0.5 ms (0.5 x 0.4 = 0.2) */
    const mt_node_pace_decode fast = {.at_ms = 10, .period_ms = 0.4};
    expect(&fast, 1, 10.2, 1, 10.9, "period 0.4: due 10.4, slack 0.5");
    /* no rhythm known: never waited for */
    const mt_node_pace_decode first = {.at_ms = 100, .period_ms = 0};
    expect(&first, 1, 110, 50, 0, "one decode seen, no period");
    /* several sessions: the earliest end among those due within the step */
    const mt_node_pace_decode many[3] = {
        {.at_ms = 100, .period_ms = 20}, /* due 120, slack 4 (step) -> 124 */
        {.at_ms = 95, .period_ms = 30},  /* due 125: after a step from 118 ends (122) */
        {.at_ms = 90, .period_ms = 29},  /* due 119, slack 4 -> 123 */
    };
    expect(many, 3, 118, 4, 123, "two due within the step: the earlier end");
    expect(many, 3, 123.5, 4, 124, "the first late past its end: the next");
    expect(many, 3, 124, 4, 129, "both late: the third is due at 125 -> 125 + 4");
    expect(many, 0, 118, 4, 0, "no decoding session");
    expect_due(many, 3, 118, 4, 119, "the earliest due of those holding");
    expect_due(many, 3, 124, 4, 125, "the third, the others late past their ends");
    expect_due(&one, 1, 110, 5, 0, "none holding: no due");
    test_costs();
    test_plan();
    return check_report("test_pace");
}

/* test_circuit.c - the per-task circuit breaker. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "task/circuit.h"
#include "util/log.h"
#include "util/util.h"

#include "unit_main.h"

static struct tm_cfg_task task_cfg(unsigned failures, int64_t cool,
                                   int64_t max)
{
    struct tm_cfg_task t;
    memset(&t, 0, sizeof t);
    t.name = (char *)"t";
    t.circuit_failures = failures;
    t.circuit_cool_off_ms = cool;
    t.circuit_max_cool_off_ms = max;
    return t;
}

static enum tm_circuit_state state_now(const struct tm_circuit *c)
{
    return tm_circuit_state(c, tm_now_ms());
}

/* end_cool_off makes an open circuit's cool-off over (half-open) without
 * waiting for it. */
static void end_cool_off(struct tm_circuit *c)
{
    atomic_store(&c->until_ms, tm_now_ms() - 1);
}

START_TEST(opens_after_failures_in_a_row)
{
    struct tm_cfg_task t = task_cfg(3, 60000, 600000);
    struct tm_circuit c;
    memset(&c, 0, sizeof c);
    tm_circuit_note(&c, &t, TM_OUT_CRASHED);
    tm_circuit_note(&c, &t, TM_OUT_TIMEOUT);
    /* anything that is neither a crash nor a timeout breaks the run */
    tm_circuit_note(&c, &t, TM_OUT_ERROR);
    tm_circuit_note(&c, &t, TM_OUT_CRASHED);
    tm_circuit_note(&c, &t, TM_OUT_CRASHED);
    tm_circuit_note(&c, &t, TM_OUT_NONE); /* not run: ignored */
    ck_assert_int_eq(state_now(&c), TM_CIRCUIT_CLOSED);
    tm_circuit_note(&c, &t, TM_OUT_TIMEOUT);
    ck_assert_int_eq(state_now(&c), TM_CIRCUIT_OPEN);
    ck_assert_int_eq(c.cool_off_ms, 60000);
    /* more failures of messages read before it opened change nothing */
    int64_t until = atomic_load(&c.until_ms);
    tm_circuit_note(&c, &t, TM_OUT_CRASHED);
    ck_assert_int_eq(atomic_load(&c.until_ms), until);
    ck_assert_int_eq(state_now(&c), TM_CIRCUIT_OPEN);
}
END_TEST

START_TEST(disabled_never_opens)
{
    struct tm_cfg_task t = task_cfg(0, 1000, 1000);
    struct tm_circuit c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < 100; i++)
        tm_circuit_note(&c, &t, TM_OUT_CRASHED);
    ck_assert_int_eq(state_now(&c), TM_CIRCUIT_CLOSED);
    long room = 16;
    ck_assert_int_eq(tm_circuit_gate(&c, &t, 0, &room), 0);
    ck_assert_int_eq(room, 16);
}
END_TEST

START_TEST(gate_holds_open_and_lets_probes_through_half_open)
{
    struct tm_cfg_task t = task_cfg(1, 60000, 600000);
    struct tm_circuit c;
    memset(&c, 0, sizeof c);
    long room = 16;
    ck_assert_int_eq(tm_circuit_gate(&c, &t, 5, &room), 0);
    ck_assert_int_eq(room, 16);
    tm_circuit_note(&c, &t, TM_OUT_CRASHED);
    int64_t wait = tm_circuit_gate(&c, &t, 0, &room);
    ck_assert(wait > 0 && wait <= 1000);
    end_cool_off(&c);
    ck_assert_int_eq(state_now(&c), TM_CIRCUIT_HALF_OPEN);
    /* half-open: a probe in flight already, so wait */
    ck_assert(tm_circuit_gate(&c, &t, TM_CIRCUIT_PROBES, &room) > 0);
    /* none in flight: read at most the probes */
    room = 16;
    ck_assert_int_eq(tm_circuit_gate(&c, &t, 0, &room), 0);
    ck_assert_int_eq(room, TM_CIRCUIT_PROBES);
}
END_TEST

START_TEST(failed_probes_double_the_cool_off_up_to_the_cap)
{
    struct tm_cfg_task t = task_cfg(2, 1000, 5000);
    struct tm_circuit c;
    memset(&c, 0, sizeof c);
    tm_circuit_note(&c, &t, TM_OUT_CRASHED);
    tm_circuit_note(&c, &t, TM_OUT_CRASHED);
    ck_assert_int_eq(c.cool_off_ms, 1000);
    static const int64_t want[] = {2000, 4000, 5000, 5000};
    for (size_t i = 0; i < 4; i++) {
        end_cool_off(&c);
        tm_circuit_note(&c, &t, TM_OUT_TIMEOUT); /* the probe fails */
        ck_assert_int_eq(c.cool_off_ms, want[i]);
        ck_assert_int_eq(state_now(&c), TM_CIRCUIT_OPEN);
    }
    /* a probe that runs to the end closes it */
    end_cool_off(&c);
    tm_circuit_note(&c, &t, TM_OUT_REJECTED);
    ck_assert_int_eq(state_now(&c), TM_CIRCUIT_CLOSED);
    /* and the next opening starts from the first cool-off again */
    tm_circuit_note(&c, &t, TM_OUT_CRASHED);
    ck_assert_int_eq(state_now(&c), TM_CIRCUIT_CLOSED);
    tm_circuit_note(&c, &t, TM_OUT_CRASHED);
    ck_assert_int_eq(state_now(&c), TM_CIRCUIT_OPEN);
    ck_assert_int_eq(c.cool_off_ms, 1000);
}
END_TEST

START_TEST(state_names)
{
    ck_assert_str_eq(tm_circuit_state_name(TM_CIRCUIT_CLOSED), "closed");
    ck_assert_str_eq(tm_circuit_state_name(TM_CIRCUIT_OPEN), "open");
    ck_assert_str_eq(tm_circuit_state_name(TM_CIRCUIT_HALF_OPEN),
                     "half-open");
}
END_TEST

static Suite *circuit_suite(void)
{
    Suite *s = suite_create("circuit");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, opens_after_failures_in_a_row);
    tcase_add_test(tc, disabled_never_opens);
    tcase_add_test(tc, gate_holds_open_and_lets_probes_through_half_open);
    tcase_add_test(tc, failed_probes_double_the_cool_off_up_to_the_cap);
    tcase_add_test(tc, state_names);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    tm_log_setup(TM_LOG_ERR, TM_LOG_TEXT);
    return tm_unit_run(circuit_suite());
}

/* unit_main.h - how every unit test binary (tests/unit/test_*.c, one
 * check suite each) runs its suite and turns the result into its exit
 * status.
 *
 * A test whose main only runs a suite ends with
 *
 *     TM_UNIT_MAIN(json_suite)
 *
 * A test that prepares something first (logging, a library loaded, a
 * scratch directory) keeps that in a main of its own, which ends with
 * `return tm_unit_run(its_suite());`.
 *
 * The fork mode is check's default, set per run by CK_FORK in the
 * environment (`make check-unit` sets CK_FORK=yes); no test overrides it. */
#ifndef TASKMILL_TEST_UNIT_MAIN_H
#define TASKMILL_TEST_UNIT_MAIN_H

#include <stdlib.h>

#include <check.h>

/* tm_unit_run runs every test of s, prints check's summary line
 * ("N%: Checks: N, Failures: N, Errors: N") and the failures, and frees
 * s with its runner. Returns EXIT_SUCCESS when no test failed or erred,
 * else EXIT_FAILURE: the exit status of a test binary. */
static inline int tm_unit_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* TM_UNIT_MAIN defines the main of a test that only runs the suite that
 * suite_fn (Suite *(void)) builds. */
#define TM_UNIT_MAIN(suite_fn)                                                \
    int main(void)                                                            \
    {                                                                         \
        return tm_unit_run(suite_fn());                                       \
    }

#endif

/* test_dlib.c - optional libraries opened on first need (src/dlib.c):
 * every function or none, a clear reason when the library is missing or
 * lacks a function, a second open that changes nothing. libm stands in
 * for an optional library. */
#include "util/dlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "unit_main.h"

TM_DLSYM_PROTOTYPE(cos);
TM_DLSYM_PROTOTYPE(hypot);
TM_DLSYM_DEFINE(cos);
TM_DLSYM_DEFINE(hypot);

/* a row for a function no library has */
static void (*sym_missing)(void);

START_TEST(every_function_or_none)
{
    char err[512];
    const struct tm_dlsym bad_syms[] = {
        TM_DLSYM_ARG(cos),
        { "tm_no_such_function", (char *)&sym_missing, sizeof sym_missing },
    };
    struct tm_dlib bad = { .soname = "libm.so.6", .package = "libc6",
                           .syms = bad_syms, .nsyms = 2 };
    ck_assert_int_eq(tm_dlib_open(&bad, err, sizeof err), -1);
    ck_assert(!tm_dlib_loaded(&bad));
    ck_assert_ptr_null(sym_cos); /* resolved, but not set: none or all */
    ck_assert_ptr_null(sym_missing);
    ck_assert_msg(strstr(err, "needs libm.so.6 (Debian: apt-get install "
                              "libc6): ") == err, "%s", err);
    ck_assert_msg(strstr(err, "tm_no_such_function") != NULL, "%s", err);

    const struct tm_dlsym good_syms[] = {
        TM_DLSYM_ARG(cos),
        TM_DLSYM_ARG(hypot),
    };
    struct tm_dlib good = { .soname = "libm.so.6", .package = "libc6",
                            .syms = good_syms, .nsyms = 2 };
    ck_assert_int_eq(tm_dlib_open(&good, err, sizeof err), 0);
    ck_assert(tm_dlib_loaded(&good));
    ck_assert(sym_cos(0.0) == 1.0);
    ck_assert(sym_hypot(3.0, 4.0) == 5.0);
    /* a second open keeps the pointers */
    double (*first)(double) = sym_cos;
    ck_assert_int_eq(tm_dlib_open(&good, err, sizeof err), 0);
    ck_assert(sym_cos == first);
}
END_TEST

START_TEST(missing_library_names_it)
{
    char err[512];
    const struct tm_dlsym syms[] = { TM_DLSYM_ARG(hypot) };
    struct tm_dlib lib = { .soname = "libtaskmill-absent.so.9",
                           .package = "taskmill-absent", .syms = syms,
                           .nsyms = 1 };
    ck_assert_int_eq(tm_dlib_open(&lib, err, sizeof err), -1);
    ck_assert(!tm_dlib_loaded(&lib));
    ck_assert_ptr_null(sym_hypot);
    ck_assert_msg(strstr(err, "needs libtaskmill-absent.so.9 (Debian: "
                              "apt-get install taskmill-absent): "
                              "libtaskmill-absent.so.9: cannot open") == err,
                  "%s", err);
}
END_TEST

static Suite *dlib_suite(void)
{
    Suite *s = suite_create("dlib");
    TCase *tc = tcase_create("dlib");
    tcase_add_test(tc, every_function_or_none);
    tcase_add_test(tc, missing_library_names_it);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(dlib_suite)

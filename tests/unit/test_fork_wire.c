/* test_fork_wire.c - the fork pool parent's check of a child's reply. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "fork/wire.h"
#include "task/msg.h"
#include "util/util.h"

#include "unit_main.h"

#define MS 1000000LL

static const struct tm_fork_expect EX = {
    .seq = 41,
    .task_index = 2,
    .not_before_ns = 1000 * MS,
    .not_after_ns = 2000 * MS,
};

/* frame builds a reply to EX with the given texts in buf; returns its
 * size. */
static size_t frame(char *buf, struct tm_fork_resp *rs, const char *error,
                    const char *result)
{
    rs->magic = TM_FORK_MAGIC_RESP;
    rs->outcome = TM_OUT_SUCCESS;
    rs->error_len = (uint32_t)strlen(error);
    rs->task_index = EX.task_index;
    rs->result_len = strlen(result);
    rs->seq = EX.seq;
    rs->t_start_ns = 1100 * MS;
    rs->t_end_ns = 1200 * MS;
    memcpy(buf, rs, sizeof *rs);
    memcpy(buf + sizeof *rs, error, rs->error_len);
    memcpy(buf + sizeof *rs + rs->error_len, result, rs->result_len);
    return sizeof *rs + rs->error_len + rs->result_len;
}

/* check_header rewrites the header of the frame in buf with rs and
 * checks it (the texts stay). */
static enum tm_fork_check check_header(char *buf, size_t len,
                                       const struct tm_fork_resp *rs,
                                       const char **why)
{
    struct tm_fork_resp out;
    size_t flen = 0;
    memcpy(buf, rs, sizeof *rs);
    *why = NULL;
    enum tm_fork_check rc = tm_fork_resp_check(buf, len, &EX, &out, &flen,
                                               why);
    if (rc == TM_FORK_CORRUPT)
        ck_assert_ptr_nonnull(*why);
    return rc;
}

START_TEST(valid_frames_pass_whole)
{
    char buf[256];
    struct tm_fork_resp rs, out;
    size_t n = frame(buf, &rs, "", "{\"ok\":true}");
    size_t flen = 0;
    const char *why = NULL;
    ck_assert_int_eq(tm_fork_resp_check(buf, n, &EX, &out, &flen, &why),
                     TM_FORK_FRAME);
    ck_assert_uint_eq(flen, n);
    ck_assert_uint_eq(out.result_len, 11);
    /* every shorter prefix is "more to come", never a frame */
    for (size_t k = 0; k < n; k++)
        ck_assert_int_eq(tm_fork_resp_check(buf, k, &EX, &out, &flen, &why),
                         TM_FORK_MORE);
    /* bytes after the frame (the next reply) are not its business */
    memset(buf + n, 'x', 10);
    ck_assert_int_eq(tm_fork_resp_check(buf, n + 10, &EX, &out, &flen,
                                        &why),
                     TM_FORK_FRAME);
    ck_assert_uint_eq(flen, n);
}
END_TEST

START_TEST(every_header_field_is_checked)
{
    char buf[256];
    struct tm_fork_resp good, rs;
    size_t n = frame(buf, &good, "boom", "");
    const char *why;

    rs = good;
    rs.magic ^= 1;
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_CORRUPT);
    /* a wrong magic is seen as soon as it has arrived */
    ck_assert_int_eq(check_header(buf, 4, &rs, &why), TM_FORK_CORRUPT);

    rs = good;
    rs.seq = EX.seq + 1; /* the next message's */
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_CORRUPT);
    rs.seq = EX.seq - 1; /* an earlier one's */
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_CORRUPT);

    rs = good;
    rs.task_index = EX.task_index + 1;
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_CORRUPT);

    static const uint32_t bad_outcomes[] = {TM_OUT_NONE, TM_OUT_COUNT, 77,
                                            UINT32_MAX};
    for (size_t i = 0; i < sizeof bad_outcomes / sizeof *bad_outcomes; i++) {
        rs = good;
        rs.outcome = bad_outcomes[i];
        ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_CORRUPT);
    }
    for (uint32_t o = TM_OUT_NONE + 1; o < TM_OUT_COUNT; o++) {
        rs = good;
        rs.outcome = o;
        ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_FRAME);
    }

    rs = good;
    rs.t_start_ns = EX.not_before_ns - 1;
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_CORRUPT);
    rs = good;
    rs.t_end_ns = EX.not_after_ns + 1;
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_CORRUPT);
    rs = good;
    rs.t_end_ns = rs.t_start_ns - 1;
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_CORRUPT);
}
END_TEST

START_TEST(lengths_are_bounded_before_waiting_for_them)
{
    char buf[256];
    struct tm_fork_resp good, rs;
    size_t n = frame(buf, &good, "", "");
    const char *why;

    /* a length past its limit is refused at once, not waited for */
    rs = good;
    rs.error_len = UINT32_MAX;
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_CORRUPT);
    rs.error_len = TM_FORK_ERROR_MAX + 1;
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_CORRUPT);
    rs = good;
    rs.result_len = UINT64_MAX; /* would wrap the frame size */
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_CORRUPT);
    rs.result_len = UINT64_MAX - sizeof rs + 1;
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_CORRUPT);
    rs.result_len = TM_FORK_RESULT_MAX + 1;
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_CORRUPT);
    /* within the limits but not here yet: more to come */
    rs = good;
    rs.error_len = TM_FORK_ERROR_MAX;
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_MORE);
}
END_TEST

START_TEST(texts_must_be_utf8_without_nul)
{
    char buf[256];
    struct tm_fork_resp rs;
    const char *why;
    size_t n = frame(buf, &rs, "bad byte", "");
    buf[sizeof rs + 3] = '\0';
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_CORRUPT);
    n = frame(buf, &rs, "", "{\"a\":\"\xff\"}");
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_CORRUPT);
    n = frame(buf, &rs, "caf\xc3\xa9", "{\"a\":\"caf\xc3\xa9\"}");
    ck_assert_int_eq(check_header(buf, n, &rs, &why), TM_FORK_FRAME);
}
END_TEST

static Suite *wire_suite(void)
{
    Suite *s = suite_create("fork_wire");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, valid_frames_pass_whole);
    tcase_add_test(tc, every_header_field_is_checked);
    tcase_add_test(tc, lengths_are_bounded_before_waiting_for_them);
    tcase_add_test(tc, texts_must_be_utf8_without_nul);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(wire_suite)

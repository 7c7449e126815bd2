/* test_fork_ring.c - the fork pool's shared rings (fork/ring.h): records
 * never wrap, a reader sees only what was published, and the parent's
 * reader refuses impossible positions and records. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "fork/ring.h"

#include "unit_main.h"

#define CAP 256u

static char area[CAP];

/* put writes a record of len bytes of c; returns 0, or -1 without room. */
static int put(uint64_t *head, uint64_t tail, uint32_t len, char c)
{
    char *p = tm_ring_reserve(area, CAP, head, tail, len, TM_RING_FRAME);
    if (p == NULL)
        return -1;
    memset(p, c, len);
    return 0;
}

START_TEST(records_come_out_in_order_and_whole)
{
    uint64_t head = 0, tail = 0;
    memset(area, 0, sizeof area);
    for (int round = 0; round < 50; round++) {
        uint32_t len = (uint32_t)(round * 7 % 90 + 1);
        ck_assert_int_eq(put(&head, tail, len, (char)('a' + round % 26)), 0);
        struct tm_ring_rec rec;
        const char *payload = NULL, *why = NULL;
        ck_assert_int_eq(tm_ring_peek(area, CAP, head, &tail, &rec, &payload,
                                      &why), 1);
        ck_assert_uint_eq(rec.len, len);
        ck_assert_uint_eq(rec.kind, TM_RING_FRAME);
        /* the payload is contiguous inside the area */
        ck_assert(payload >= area && payload + len <= area + CAP);
        for (uint32_t i = 0; i < len; i++)
            ck_assert_int_eq(payload[i], 'a' + round % 26);
        tail += tm_ring_rec_size(rec.len);
        ck_assert_uint_eq(tail, head);
        ck_assert_int_eq(tm_ring_peek(area, CAP, head, &tail, &rec, &payload,
                                      &why), 0);
    }
}
END_TEST

START_TEST(no_room_is_refused_not_overwritten)
{
    uint64_t head = 0, tail = 0;
    ck_assert_int_eq(put(&head, tail, 100, 'a'), 0);
    ck_assert_int_eq(put(&head, tail, 100, 'b'), 0);
    /* 2 x 112 used: 40 left, not enough for 100 */
    ck_assert_int_eq(put(&head, tail, 100, 'c'), -1);
    ck_assert_uint_eq(head, 224);
    /* larger than the whole ring: never */
    uint64_t h2 = 0;
    ck_assert_ptr_null(tm_ring_reserve(area, CAP, &h2, 0, CAP, TM_RING_FRAME));
    /* the first is read: its room comes back, after a SKIP at the end */
    tail = 112;
    ck_assert_int_eq(put(&head, tail, 80, 'c'), 0);
    ck_assert_uint_eq(head, 256 + 88);
}
END_TEST

START_TEST(unpublished_records_are_not_seen)
{
    uint64_t head = 0, tail = 0, published = 0;
    memset(area, 0, sizeof area);
    ck_assert_int_eq(put(&head, tail, 40, 'x'), 0);
    struct tm_ring_rec rec;
    const char *payload = NULL, *why = NULL;
    /* written but not published (a child killed before its store) */
    ck_assert_int_eq(tm_ring_peek(area, CAP, published, &tail, &rec,
                                  &payload, &why), 0);
    ck_assert_uint_eq(tail, 0);
}
END_TEST

START_TEST(impossible_positions_and_records_are_refused)
{
    uint64_t head = 0, tail = 0;
    struct tm_ring_rec rec;
    const char *payload = NULL, *why = NULL;
    memset(area, 0, sizeof area);
    ck_assert_int_eq(put(&head, tail, 40, 'x'), 0);
    /* a head more than the ring ahead, or not aligned */
    why = NULL;
    ck_assert_int_eq(tm_ring_peek(area, CAP, CAP + 8, &tail, &rec, &payload,
                                  &why), -1);
    ck_assert_ptr_nonnull(why);
    ck_assert_int_eq(tm_ring_peek(area, CAP, head + 3, &tail, &rec, &payload,
                                  &why), -1);
    /* a head that covers only half the record */
    ck_assert_int_eq(tm_ring_peek(area, CAP, 24, &tail, &rec, &payload, &why),
                     -1);
    /* a record longer than the ring holds */
    struct tm_ring_rec big = {.len = CAP, .kind = TM_RING_FRAME};
    memcpy(area, &big, sizeof big);
    ck_assert_int_eq(tm_ring_peek(area, CAP, head, &tail, &rec, &payload,
                                  &why), -1);
    /* a kind that does not exist */
    struct tm_ring_rec odd = {.len = 40, .kind = 77};
    memcpy(area, &odd, sizeof odd);
    ck_assert_int_eq(tm_ring_peek(area, CAP, head, &tail, &rec, &payload,
                                  &why), -1);
    /* a SKIP that does not reach the end */
    struct tm_ring_rec skip = {.len = 40, .kind = TM_RING_SKIP};
    memcpy(area, &skip, sizeof skip);
    ck_assert_int_eq(tm_ring_peek(area, CAP, head, &tail, &rec, &payload,
                                  &why), -1);
    ck_assert_uint_eq(tail, 0);
}
END_TEST

static Suite *ring_suite(void)
{
    Suite *s = suite_create("fork_ring");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, records_come_out_in_order_and_whole);
    tcase_add_test(tc, no_room_is_refused_not_overwritten);
    tcase_add_test(tc, unpublished_records_are_not_seen);
    tcase_add_test(tc, impossible_positions_and_records_are_refused);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(ring_suite)

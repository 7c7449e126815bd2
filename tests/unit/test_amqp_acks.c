/* test_amqp_acks.c - what RabbitMQ counts unacknowledged on a consume
 * channel, from the ack floor and the acks held back (src/amqp/amqp.h);
 * the admin API's and the metrics' `pending` of a RabbitMQ task. */
#include "amqp/amqp.h"

#include <stdlib.h>

#include <check.h>

#include "unit_main.h"

/* Tags 1 .. 15 delivered; 1 .. 10 and 12, 13 settled; of those, the acks
 * of 7, 9, 10 and 12 are held back (not sent yet): RabbitMQ still counts
 * them, with the unsettled 11, 14 and 15. */
START_TEST(held_acks_count_as_unacknowledged)
{
    uint64_t above[] = {12, 13}, held[] = {7, 9, 10, 12};
    struct tm_amqp_acks k = {
        .floor = 10, .above = above, .n = 2, .cap = 2,
        .held = held, .nheld = 4, .capheld = 4,
    };
    ck_assert_uint_eq(tm_amqp_acks_unacked(&k, 15), 7);
    /* once they went out, only the unsettled ones are left */
    k.nheld = 0;
    ck_assert_uint_eq(tm_amqp_acks_unacked(&k, 15), 3);
    /* everything settled and sent: nothing */
    k.floor = 15;
    k.n = 0;
    ck_assert_uint_eq(tm_amqp_acks_unacked(&k, 15), 0);
}
END_TEST

static Suite *amqp_acks_suite(void)
{
    Suite *s = suite_create("amqp_acks");
    TCase *tc = tcase_create("acks");
    tcase_add_test(tc, held_acks_count_as_unacknowledged);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(amqp_acks_suite)

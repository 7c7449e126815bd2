/* test_redis.c - unit tests for the Redis adapter's pure parts
 * (src/redis/). */
#include "redis/arena.h"
#include "redis/redis.h"
#include "redis/keys.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <check.h>

#include "util/util.h"

#include "unit_main.h"

/* The retry set is named after the queue, then the group: a hash tag in
 * the queue comes first, so the set shares the queue's cluster slot. */
START_TEST(retry_key_derives_from_the_queue)
{
    char q1[] = "{orders}", g1[] = "workers";
    char q2[] = "taskmill.add", g2[] = "taskmill";
    struct tm_cfg_task t = {.queue = q1, .group = g1};
    char *k = tm_redis_retry_key(&t);
    ck_assert_str_eq(k, "{orders}.retry.workers");
    tm_free(k);
    t.queue = q2;
    t.group = g2;
    k = tm_redis_retry_key(&t);
    ck_assert_str_eq(k, "taskmill.add.retry.taskmill");
    tm_free(k);
}
END_TEST

/* The pause key is named like the retry set: queue first, then the
 * group, so a hash tag in the queue puts it in the queue's slot. */
START_TEST(pause_key_derives_from_the_queue)
{
    char q1[] = "{orders}", g1[] = "workers";
    struct tm_cfg_task t = {.queue = q1, .group = g1};
    char *k = tm_redis_pause_key(&t);
    ck_assert_str_eq(k, "{orders}.paused.workers");
    ck_assert_uint_eq(tm_redis_key_slot(k, strlen(k)),
                      tm_redis_key_slot(q1, strlen(q1)));
    tm_free(k);
}
END_TEST

/* The scheduled set (delayed messages) is named after the queue too,
 * and joins the one-slot rule. */
START_TEST(scheduled_key_derives_from_the_queue)
{
    char q1[] = "{orders}", q2[] = "taskmill.add";
    struct tm_cfg_task t = {.queue = q1};
    char *k = tm_redis_scheduled_key(&t);
    ck_assert_str_eq(k, "{orders}.scheduled");
    ck_assert_uint_eq(tm_redis_key_slot(k, strlen(k)),
                      tm_redis_key_slot(q1, strlen(q1)));
    tm_free(k);
    t.queue = q2;
    k = tm_redis_scheduled_key(&t);
    ck_assert_str_eq(k, "taskmill.add.scheduled");
    tm_free(k);
}
END_TEST

/* The due-time index: one key outside a cluster; in a cluster one per
 * slot, hashing to that slot (every slot has one). */
START_TEST(due_key_hashes_to_its_slot)
{
    char *k = tm_redis_due_key(0, 1234);
    ck_assert_str_eq(k, "taskmill.due");
    tm_free(k);
    for (unsigned slot = 0; slot < TM_REDIS_SLOTS; slot += 97) {
        k = tm_redis_due_key(1, slot);
        ck_assert_int_eq(strncmp(k, "taskmill.due.{", 14), 0);
        ck_assert_uint_eq(tm_redis_key_slot(k, strlen(k)), slot);
        tm_free(k);
    }
    char q[] = "{orders}";
    unsigned qs = tm_redis_key_slot(q, strlen(q));
    k = tm_redis_due_key(1, qs);
    ck_assert_uint_eq(tm_redis_key_slot(k, strlen(k)), qs);
    tm_free(k);
}
END_TEST

/* Cluster slots as Redis computes them (CLUSTER KEYSLOT), hash tags
 * included: the first '{' to the next '}', when not empty. */
START_TEST(key_slots_follow_redis)
{
    ck_assert_uint_eq(tm_redis_key_slot("123456789", 9), 12739);
    ck_assert_uint_eq(tm_redis_key_slot("foo", 3), 12182);
    ck_assert_uint_eq(tm_redis_key_slot("bar", 3), 5061);
    ck_assert_uint_eq(tm_redis_key_slot("{bar}.x", 7), 5061);
    ck_assert_uint_eq(tm_redis_key_slot("a{bar}b{foo}", 12), 5061);
    /* an empty tag does not count: the whole key is hashed */
    ck_assert_uint_eq(tm_redis_key_slot("foo{}{bar}", 10),
                      tm_redis_key_slot("foo{}{bar}", 10));
    ck_assert_uint_ne(tm_redis_key_slot("foo{}{bar}", 10), 5061);
    ck_assert_uint_eq(tm_redis_key_slot("foo{{bar}}zap", 13),
                      tm_redis_key_slot("{bar", 4));
}
END_TEST

/* A task's stream, retry set, rate bucket and dead-letter stream must
 * share a slot in cluster mode; the refusal proposes a hash tag. */
START_TEST(task_keys_share_a_slot)
{
    char name[] = "orders", q1[] = "orders", d1[] = "orders.dlq";
    char q2[] = "{orders}", d2[] = "{orders}.dlq", g[] = "taskmill";
    char d3[] = "dead.orders";
    struct tm_cfg_task t = {.name = name, .queue = q1, .group = g,
                            .dead_letter = d1};
    char err[600];
    ck_assert_int_eq(tm_redis_task_slots_check(&t, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "pause key 'orders.paused.taskmill'"));
    ck_assert_ptr_nonnull(strstr(err, "queue: '{orders}'"));
    ck_assert_ptr_nonnull(strstr(err, "dead_letter: '{orders}.dlq'"));
    ck_assert_ptr_nonnull(strstr(err, "rate bucket 'orders.rate.taskmill'"));
    ck_assert_ptr_nonnull(strstr(err, "scheduled set 'orders.scheduled'"));
    t.queue = q2;
    t.dead_letter = d2;
    ck_assert_int_eq(tm_redis_task_slots_check(&t, err, sizeof err), 0);
    t.dead_letter = d3; /* a tagged queue, an untagged dead letter */
    ck_assert_int_eq(tm_redis_task_slots_check(&t, err, sizeof err), -1);

    /* dedup keys "<queue>.dedup.<key>" share the slot of a tagged
     * queue, whatever the key holds */
    t.dead_letter = d2;
    t.dedup_ttl_ms = 60000;
    ck_assert_int_eq(tm_redis_task_slots_check(&t, err, sizeof err), 0);
    ck_assert_uint_eq(tm_redis_key_slot("{orders}.dedup.}{x}", 19),
                      tm_redis_key_slot(q2, strlen(q2)));
    t.queue = q1;
    t.dead_letter = d1;
    ck_assert_int_eq(tm_redis_task_slots_check(&t, err, sizeof err), -1);
    ck_assert(tm_redis_has_hash_tag("{a}"));
    ck_assert(tm_redis_has_hash_tag("x{a}y"));
    ck_assert(!tm_redis_has_hash_tag("x{}{a}"));
    ck_assert(!tm_redis_has_hash_tag("x{a"));
    ck_assert(!tm_redis_has_hash_tag("plain"));
}
END_TEST

/* A request's answer is written by the acknowledging script, except in
 * cluster mode for a reply_to in another slot than the queue: then it is
 * a command of its own, in reply_to's slot, sent first. Dedup keys
 * follow the queue. */
START_TEST(answer_in_the_script_or_before_it)
{
    struct tm_cfg cfg = {.redis_mode = TM_REDIS_CLUSTER};
    char name[] = "add", q[] = "{add}", g[] = "taskmill", d[] = "{add}.dlq";
    struct tm_cfg_task t = {.name = name, .queue = q, .group = g,
                            .dead_letter = d, .reply_ttl_ms = 300000};
    struct tm_redis_task rt = {.cfg = &t};
    struct tm_redis rb;
    memset(&rb, 0, sizeof rb);
    rb.base.cfg = &cfg;
    rb.tasks = &rt;
    rb.ntasks = 1;
    struct tm_msg m = {.id = "1-0", .id_len = 3,
                       .outcome = TM_OUT_SUCCESS,
                       .settle = TM_SETTLE_ACK};
    rb.cluster = 1;
    rt.slot = tm_redis_key_slot(q, strlen(q));
    struct tm_redis_final f;
    unsigned final;

    /* no request, no dedup key: a plain XACK will do */
    ck_assert_int_eq(tm_redis_settle_kind(&rb, &m, &final), TM_REDIS_SK_ACK);
    ck_assert_uint_eq(final, 0);
    m.reply_to = "elsewhere";
    m.reply_to_len = strlen(m.reply_to);
    ck_assert_int_eq(tm_redis_settle_kind(&rb, &m, &final),
                     TM_REDIS_SK_FINAL);
    ck_assert_uint_eq(final, TM_REDIS_FINAL_APART);
    /* the answer of its own: its key is reply_to, in reply_to's slot */
    memset(&f, 0, sizeof f);
    tm_redis_final_argv(&rb, &m, final, 1, &f);
    ck_assert_str_eq(f.argv[0], "EVAL");
    ck_assert_str_eq(f.argv[2], "1");
    ck_assert_str_eq(f.argv[3], "elsewhere");
    ck_assert_uint_eq(f.slot, tm_redis_key_slot("elsewhere", 9));
    ck_assert_ptr_null(strstr(f.argv[1], "XACK"));
    /* checked first; the answer's first field is the marker */
    ck_assert_ptr_nonnull(strstr(f.argv[1], "refusal(KEYS[1])"));
    ck_assert_str_eq(f.argv[5], "taskmill_reply");
    ck_assert_str_eq(f.argv[6], "add");
    tm_redis_final_free(&f);
    /* then the script, in the queue's slot, its reply_to key unused */
    memset(&f, 0, sizeof f);
    tm_redis_final_argv(&rb, &m, final, 0, &f);
    ck_assert_ptr_nonnull(strstr(f.argv[1], "XACK"));
    ck_assert_str_eq(f.argv[5], q);
    ck_assert_str_eq(f.argv[10], "0"); /* reply_ttl 0: no answer here */
    ck_assert_uint_eq(f.slot, rt.slot);
    tm_redis_final_free(&f);

    /* a reply_to in the queue's slot: one script */
    m.reply_to = "{add}.reply.x";
    m.reply_to_len = strlen(m.reply_to);
    ck_assert_int_eq(tm_redis_settle_kind(&rb, &m, &final),
                     TM_REDIS_SK_FINAL);
    ck_assert_uint_eq(final, TM_REDIS_FINAL_ANSWER);
    memset(&f, 0, sizeof f);
    tm_redis_final_argv(&rb, &m, final, 0, &f);
    ck_assert_str_eq(f.argv[5], "{add}.reply.x");
    ck_assert_str_eq(f.argv[10], "300000");
    ck_assert_ptr_nonnull(strstr(f.argv[1], "refusal(KEYS[3])"));
    /* no dead letter: its fields but "task" (the marker's value) left out */
    ck_assert_int_eq(f.argc, 19);
    ck_assert_str_eq(f.argv[17], "task");
    ck_assert_str_eq(f.argv[18], "add");
    tm_redis_final_free(&f);

    /* standalone: any key in one script */
    rb.cluster = 0;
    m.reply_to = "elsewhere";
    m.reply_to_len = strlen(m.reply_to);
    ck_assert_int_eq(tm_redis_settle_kind(&rb, &m, &final),
                     TM_REDIS_SK_FINAL);
    ck_assert_uint_eq(final, TM_REDIS_FINAL_ANSWER);
    memset(&f, 0, sizeof f);
    tm_redis_final_argv(&rb, &m, final, 0, &f);
    ck_assert_str_eq(f.argv[5], "elsewhere");
    tm_redis_final_free(&f);

    /* a retry answers nothing */
    m.settle = TM_SETTLE_RETRY;
    ck_assert_int_eq(tm_redis_settle_kind(&rb, &m, &final),
                     TM_REDIS_SK_RETRY);
    ck_assert_uint_eq(final, 0);

    /* a success with a dedup key is recorded only with dedup_ttl */
    m.settle = TM_SETTLE_ACK;
    m.reply_to = NULL;
    m.dedup_key = "k";
    m.dedup_key_len = 1;
    ck_assert_int_eq(tm_redis_settle_kind(&rb, &m, &final), TM_REDIS_SK_ACK);
    t.dedup_ttl_ms = 1000;
    ck_assert_int_eq(tm_redis_settle_kind(&rb, &m, &final),
                     TM_REDIS_SK_FINAL);
    ck_assert_uint_eq(final, TM_REDIS_FINAL_RECORD);
    char *key = tm_redis_dedup_key(&t, "k}{x", 4);
    ck_assert_str_eq(key, "{add}.dedup.k}{x");
    ck_assert_uint_eq(tm_redis_key_slot(key, strlen(key)),
                      tm_redis_key_slot(q, strlen(q)));
    tm_free(key);
}
END_TEST

/* A schedule's last-slot key "<queue>.sched.<name>" shares the slot of a
 * tagged queue; an untagged one is refused with a hash tag proposed. */
START_TEST(schedule_key_shares_the_slot)
{
    char q1[] = "orders", q2[] = "{orders}";
    struct tm_cfg_task t = {.queue = q1};
    char err[600];
    ck_assert_int_eq(tm_redis_schedule_slot_check(&t, "nightly", err,
                                                  sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "queue: '{orders}'"));
    ck_assert_ptr_nonnull(strstr(err, "'orders.sched.nightly'"));
    t.queue = q2;
    ck_assert_int_eq(tm_redis_schedule_slot_check(&t, "nightly", err,
                                                  sizeof err), 0);
}
END_TEST

/* The claim period is a quarter of claim_idle, within 50 ms .. 5 s. */
START_TEST(claim_period_bounds)
{
    struct tm_cfg_task t = {.claim_idle_ms = 60000};
    ck_assert_int_eq(tm_redis_claim_period(&t), 5000);
    t.claim_idle_ms = 2000;
    ck_assert_int_eq(tm_redis_claim_period(&t), 500);
    t.claim_idle_ms = 100;
    ck_assert_int_eq(tm_redis_claim_period(&t), 50);
}
END_TEST

/* body_byte is byte j of entry i's body in resp_entries. */
static char body_byte(size_t i, size_t j)
{
    return (char)('a' + (i * 7 + j) % 26);
}

/* resp_entries builds the RESP2 reply of XREADGROUP for entries whose
 * bodies have the given sizes (bytes body_byte), with a nil and an
 * integer after them; returns its length. */
static size_t resp_entries(char **out, const size_t *sizes, size_t n)
{
    size_t cap = 1024;
    for (size_t i = 0; i < n; i++)
        cap += sizes[i] + 64;
    char *p = tm_malloc(cap);
    size_t len = 0;
    len += (size_t)tm_snprintf(p + len, cap - len, "*3\r\n*%zu\r\n", n);
    for (size_t i = 0; i < n; i++) {
        len += (size_t)tm_snprintf(p + len, cap - len,
                                   "*2\r\n$3\r\n%zu-0\r\n*2\r\n$4\r\n"
                                   "body\r\n$%zu\r\n", i % 10, sizes[i]);
        for (size_t j = 0; j < sizes[i]; j++)
            p[len + j] = body_byte(i, j);
        len += sizes[i];
        memcpy(p + len, "\r\n", 2);
        len += 2;
    }
    len += (size_t)tm_snprintf(p + len, cap - len, "$-1\r\n:42\r\n");
    *out = p;
    return len;
}

/* check_entries checks the reply of resp_entries read through a filter
 * of the given limit: every body whole, byte for byte, or the marker. */
static void check_entries(const redisReply *r, const size_t *sizes,
                          size_t n, size_t limit)
{
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    ck_assert_uint_eq(r->elements, 3);
    ck_assert_uint_eq(r->element[0]->elements, n);
    for (size_t i = 0; i < n; i++) {
        const redisReply *e = r->element[0]->element[i];
        ck_assert_uint_eq(e->element[0]->len, 3);
        ck_assert_str_eq(e->element[1]->element[0]->str, "body");
        const redisReply *body = e->element[1]->element[1];
        ck_assert_int_eq(body->type, REDIS_REPLY_STRING);
        if (sizes[i] <= limit) {
            ck_assert_uint_eq(body->len, sizes[i]);
            ck_assert_int_eq(body->str[sizes[i]], '\0');
            for (size_t j = 0; j < sizes[i]; j++)
                if (body->str[j] != body_byte(i, j))
                    ck_abort_msg("entry %zu byte %zu", i, j);
            continue;
        }
        char want[128];
        tm_snprintf(want, sizeof want,
                    TM_REDIS_OVERSIZE "body of %zu bytes exceeds "
                    "max_payload of %zu", sizes[i], limit);
        ck_assert_str_eq(body->str, want);
    }
    ck_assert_int_eq(r->element[1]->type, REDIS_REPLY_NIL);
    ck_assert_int_eq(r->element[2]->integer, 42);
}

/* The reply filter drops bulk strings over its limit wherever they fall
 * and however the bytes are split, leaves the rest as they are, and ends
 * at the reply's end with nothing left over. */
START_TEST(cap_drops_oversized_bulks)
{
    static const size_t sizes[] = {5000, 10, 4096, 0, 4097, 100000, 7};
    static const size_t chunks[] = {1, 2, 3, 7, 100, 4096, 1 << 20};
    const size_t limit = 4096, n = sizeof sizes / sizeof sizes[0];
    char *resp;
    size_t len = resp_entries(&resp, sizes, n);
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        struct tm_redis_cap f;
        tm_redis_cap_init(&f, limit);
        redisReader *rd = redisReaderCreate();
        for (size_t i = 0; i < len; i += chunks[c]) {
            size_t k = len - i < chunks[c] ? len - i : chunks[c];
            ck_assert_int_eq(tm_redis_cap_feed(&f, rd, resp + i, k), 0);
        }
        ck_assert(f.pass == 0 && f.drop == 0 && f.nline == 0);
        void *v = NULL;
        ck_assert_int_eq(redisReaderGetReply(rd, &v), REDIS_OK);
        redisReply *r = v;
        check_entries(r, sizes, n, limit);
        freeReplyObject(r);
        v = NULL;
        ck_assert_int_eq(redisReaderGetReply(rd, &v), REDIS_OK);
        ck_assert_ptr_null(v);
        redisReaderFree(rd);
    }
    tm_free(resp);
}
END_TEST

/* feed_socket runs resp[0 .. len) through f into rd as get_reply does,
 * in reads of at most chunk bytes, the first one cut at split (0: not
 * cut): with direct, a read goes first into the room of the string being
 * filled (tm_redis_cap_room), the rest through the filter. */
static int feed_socket(struct tm_redis_cap *f, redisReader *rd,
                       const char *resp, size_t len, size_t chunk,
                       size_t split, int direct)
{
    size_t i = 0;
    while (i < len) {
        size_t k = len - i < chunk ? len - i : chunk;
        if (split > i && split < i + k)
            k = split - i;
        char *at = NULL;
        size_t room = direct ? tm_redis_cap_room(f, &at) : 0;
        size_t d = room < k ? room : k;
        if (d > 0) {
            memcpy(at, resp + i, d);
            tm_redis_cap_filled(f, d);
        }
        if (k > d && tm_redis_cap_feed(f, rd, resp + i + d, k - d) != 0)
            return -1;
        i += k;
    }
    return 0;
}


/* read_in_arena reads resp through a filter with an arena, as feed_socket
 * feeds it, and checks the reply. */
static void read_in_arena(const char *resp, size_t len, const size_t *sizes,
                          size_t n, size_t limit, size_t chunk, size_t split,
                          int direct)
{
    struct tm_rarena *a = tm_rarena_new();
    struct tm_redis_cap f;
    tm_redis_cap_init_in(&f, limit, a);
    redisReader *rd = redisReaderCreate();
    rd->fn = &tm_rarena_fns;
    rd->privdata = a;
    ck_assert_int_eq(feed_socket(&f, rd, resp, len, chunk, split, direct),
                     0);
    ck_assert(f.pass == 0 && f.drop == 0 && f.nline == 0 && f.str == NULL);
    void *v = NULL;
    ck_assert_int_eq(redisReaderGetReply(rd, &v), REDIS_OK);
    check_entries(v, sizes, n, limit);
    ck_assert(!tm_rarena_queued(a));
    v = NULL;
    ck_assert_int_eq(redisReaderGetReply(rd, &v), REDIS_OK);
    ck_assert_ptr_null(v);
    redisReaderFree(rd);
    tm_rarena_unref(a);
}

/* With an arena, bulks of TM_REDIS_CAP_DIRECT bytes up to the limit, and
 * empty ones, are taken out of the stream into the arena and put in
 * their place, byte for byte, whether the filter copies them or they are
 * read into their place; the rest is as without. Sizes around the
 * direct size, and around the limit (limit - 1 and limit taken, limit + 1
 * dropped), in reads of every size below, and in two reads cut at every
 * byte. */
START_TEST(cap_takes_large_bulks_into_the_arena)
{
    static const size_t sizes[] = {5000, 10, 4095, 0, 4096, 4097, 9999,
                                   10000, 10001, 100000, 0, 7};
    static const size_t chunks[] = {1, 2, 3, 7, 100, 4096, 16384, 1 << 20};
    const size_t limit = 10000, n = sizeof sizes / sizeof sizes[0];
    char *resp;
    size_t len = resp_entries(&resp, sizes, n);
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++)
        for (int direct = 0; direct < 2; direct++)
            read_in_arena(resp, len, sizes, n, limit, chunks[c], 0, direct);
    tm_free(resp);
    /* every cut of a short reply: a taken, a passed and a dropped bulk,
     * an empty one, and bodies at the limit +- 1 */
    static const size_t small[] = {4096, 3, 0, 4097, 4095};
    const size_t ns = sizeof small / sizeof small[0];
    len = resp_entries(&resp, small, ns);
    for (size_t cut = 1; cut < len; cut++)
        for (int direct = 0; direct < 2; direct++)
            read_in_arena(resp, len, small, ns, 4096, 1 << 20, cut, direct);
    tm_free(resp);
}
END_TEST

/* A bulk taken into the arena must end with CRLF, as the reader has it
 * of any bulk: anything else is a protocol error, fed at once or read in
 * place. */
START_TEST(cap_taken_bulk_needs_crlf)
{
    char resp[5000];
    int hl = tm_snprintf(resp, sizeof resp, "*1\r\n$4096\r\n");
    memset(resp + hl, 'y', 4096);
    memcpy(resp + hl + 4096, "\rX", 2);
    size_t len = (size_t)hl + 4098;
    for (int direct = 0; direct < 2; direct++) {
        struct tm_rarena *a = tm_rarena_new();
        struct tm_redis_cap f;
        tm_redis_cap_init_in(&f, 8192, a);
        redisReader *rd = redisReaderCreate();
        rd->fn = &tm_rarena_fns;
        rd->privdata = a;
        ck_assert_int_eq(feed_socket(&f, rd, resp, len, 1000, 0, direct),
                         -1);
        rd->reply = NULL; /* a half-built reply is the arena's */
        redisReaderFree(rd);
        tm_rarena_unref(a);
    }
}
END_TEST

/* A line longer than the filter takes is a protocol error. */
START_TEST(cap_refuses_overlong_lines)
{
    struct tm_redis_cap f;
    tm_redis_cap_init(&f, 10);
    redisReader *rd = redisReaderCreate();
    char line[TM_REDIS_CAP_LINE_MAX + 2];
    line[0] = '+';
    memset(line + 1, 'a', sizeof line - 1);
    ck_assert_int_eq(tm_redis_cap_feed(&f, rd, line, sizeof line), -1);
    redisReaderFree(rd);
    /* the same line whole in one input, its end included */
    tm_redis_cap_init(&f, 10);
    rd = redisReaderCreate();
    line[sizeof line - 1] = '\n';
    ck_assert_int_eq(tm_redis_cap_feed(&f, rd, line, sizeof line), -1);
    redisReaderFree(rd);
}
END_TEST

/* Commands are written as hiredis formats them: empty, binary and long
 * arguments, lengths given or taken by strlen, one after another. */
START_TEST(argv_formats_as_hiredis)
{
    struct tm_rconn c;
    memset(&c, 0, sizeof c);
    char big[70000];
    memset(big, 'b', sizeof big);
    const char *argv[] = {"XACK", "s", "", "a\0b\r\n", big, "1-0"};
    const size_t lens[] = {4, 1, 0, 5, sizeof big, 3};
    size_t at = 0;
    for (int round = 0; round < 3; round++) {
        int argc = round == 2 ? 1 : 6;
        const size_t *l = round == 1 ? NULL : lens;
        const char *plain[] = {"XACK", "s", "", "x", "y", "1-0"};
        const char **av = round == 1 ? plain : argv;
        char *want = NULL;
        int wl = redisFormatCommandArgv(&want, argc, av, l);
        ck_assert_int_gt(wl, 0);
        ck_assert_int_eq(tm_rconn_append_argv(&c, argc, av, l), 0);
        ck_assert_uint_eq(c.outlen - at, (size_t)wl);
        ck_assert_int_eq(memcmp(c.out + at, want, (size_t)wl), 0);
        at = c.outlen;
        redisFreeCommand(want);
    }
    tm_free(c.out);
}
END_TEST

/* A command sent ahead (tm_rconn_send) goes out whole, without waiting
 * for its reply; the reply is read later, through the max_payload
 * filter, like that of any command. A connection in error sends
 * nothing. */
START_TEST(send_ahead_then_read_reply)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
    struct tm_rconn c;
    memset(&c, 0, sizeof c);
    c.fd = sv[0];
    c.fns = &tm_rconn_tcp;
    c.reader = redisReaderCreate();
    c.timeout_ms = 5000;
    const char *argv[] = {"XREADGROUP", "GROUP", "g", "c", "COUNT", "2",
                          "STREAMS", "q", ">"};
    char *want = NULL;
    int wl = redisFormatCommandArgv(&want, 9, argv, NULL);
    ck_assert_int_gt(wl, 0);
    ck_assert_int_eq(tm_rconn_append_argv(&c, 9, argv, NULL), 0);
    ck_assert_int_eq(tm_rconn_send(&c), 0);
    ck_assert_uint_eq(c.outlen, 0);
    char got[512];
    ck_assert_int_eq(read(sv[1], got, sizeof got), wl);
    ck_assert_int_eq(memcmp(got, want, (size_t)wl), 0);
    redisFreeCommand(want);
    /* the reply: one stream, one entry whose body is over the limit */
    const char reply[] = "*1\r\n*2\r\n$1\r\nq\r\n*1\r\n*2\r\n$3\r\n1-1\r\n"
                         "*2\r\n$4\r\nbody\r\n$10\r\n0123456789\r\n";
    ck_assert_int_eq(write(sv[1], reply, sizeof reply - 1),
                     (ssize_t)(sizeof reply - 1));
    redisReply *r = NULL;
    ck_assert_int_eq(tm_rconn_get_reply_capped(&c, 8, &r), 0);
    ck_assert_ptr_nonnull(r);
    const redisReply *body = r->element[0]->element[1]->element[0]
                                 ->element[1]->element[1];
    ck_assert_int_eq(body->type, REDIS_REPLY_STRING);
    ck_assert_int_eq(memcmp(body->str, TM_REDIS_OVERSIZE,
                            sizeof TM_REDIS_OVERSIZE - 1), 0);
    freeReplyObject(r);
    c.err = REDIS_ERR_IO;
    ck_assert_int_eq(tm_rconn_append_argv(&c, 9, argv, NULL), 0);
    ck_assert_int_eq(tm_rconn_send(&c), -1);
    redisReaderFree(c.reader);
    tm_free(c.out);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

/* A bulk length past any real size is dropped, never buffered: nothing
 * after its header reaches the reader. */
START_TEST(cap_drops_absurd_lengths)
{
    static const char resp[] = "*1\r\n$1234567890123456789012\r\nxxxx";
    struct tm_redis_cap f;
    tm_redis_cap_init(&f, 10);
    redisReader *rd = redisReaderCreate();
    ck_assert_int_eq(tm_redis_cap_feed(&f, rd, resp, sizeof resp - 1), 0);
    ck_assert(f.drop > 1000000);
    void *v = NULL;
    ck_assert_int_eq(redisReaderGetReply(rd, &v), REDIS_OK);
    redisReply *r = v;
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->elements, 1);
    ck_assert_int_eq(memcmp(r->element[0]->str, TM_REDIS_OVERSIZE,
                            sizeof TM_REDIS_OVERSIZE - 1), 0);
    freeReplyObject(r);
    redisReaderFree(rd);
}
END_TEST

/* MOVED and ASK name a slot and an address (IPv6 too: the last colon
 * parts the port); TRYAGAIN and CLUSTERDOWN ask for a wait; anything
 * else, a malformed redirect included, is no redirect. */
START_TEST(redirects_are_read)
{
    char host[64];
    int port = 0;
    unsigned slot = 0;
    ck_assert_int_eq(tm_redis_redirect_of("MOVED 3999 127.0.0.1:6381", &slot,
                                          host, sizeof host, &port),
                     TM_REDIS_MOVED);
    ck_assert_uint_eq(slot, 3999);
    ck_assert_str_eq(host, "127.0.0.1");
    ck_assert_int_eq(port, 6381);
    ck_assert_int_eq(tm_redis_redirect_of("ASK 16383 ::1:7000", &slot, host,
                                          sizeof host, &port),
                     TM_REDIS_ASK);
    ck_assert_uint_eq(slot, 16383);
    ck_assert_str_eq(host, "::1");
    ck_assert_int_eq(port, 7000);
    ck_assert_int_eq(tm_redis_redirect_of("TRYAGAIN Multiple keys request "
                                          "during rehashing of slot", &slot,
                                          host, sizeof host, &port),
                     TM_REDIS_BUSY);
    ck_assert_int_eq(tm_redis_redirect_of("CLUSTERDOWN The cluster is down",
                                          &slot, host, sizeof host, &port),
                     TM_REDIS_BUSY);
    const char *bad[] = {"MOVED", "MOVED 16384 127.0.0.1:6381",
                         "MOVED 12 127.0.0.1", "ASK x 127.0.0.1:1",
                         "MOVED 12 127.0.0.1:0", "ERR MOVED 1 a:1",
                         "NOGROUP No such key"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(tm_redis_redirect_of(bad[i], &slot, host, sizeof host,
                                           &port) == TM_REDIS_NO_REDIRECT,
                      "'%s' read as a redirect", bad[i]);
    /* a host longer than the buffer is refused, not cut */
    ck_assert_int_eq(tm_redis_redirect_of("MOVED 1 a-very-long-host-name:1",
                                          &slot, host, 8, &port),
                     TM_REDIS_NO_REDIRECT);
}
END_TEST

/* check_sorted sorts keys[0 .. n) with tm_redis_sort_keys and checks the
 * result against the keys in order, each key's tag (m) following it:
 * equal keys keep their order (stable). */
static void check_sorted(const uint64_t *keys, size_t n)
{
    struct tm_redis_ack_key *v = tm_calloc(n + 1, sizeof *v);
    struct tm_redis_ack_key *tmp = tm_calloc(n + 1, sizeof *tmp);
    for (size_t i = 0; i < n; i++)
        v[i] = (struct tm_redis_ack_key){keys[i], (struct tm_msg *)(i + 1)};
    struct tm_redis_ack_key *got = tm_redis_sort_keys(v, tmp, n);
    ck_assert(got == v || got == tmp);
    for (size_t i = 1; i < n; i++) {
        ck_assert_msg(got[i - 1].key <= got[i].key, "not sorted at %zu of %zu",
                      i, n);
        if (got[i - 1].key == got[i].key)
            ck_assert_uint_lt((size_t)got[i - 1].m, (size_t)got[i].m);
    }
    /* a permutation: every tag once */
    unsigned char *seen = tm_calloc(n + 1, 1);
    for (size_t i = 0; i < n; i++) {
        size_t tag = (size_t)got[i].m;
        ck_assert(tag >= 1 && tag <= n && !seen[tag]);
        ck_assert_uint_eq(got[i].key, keys[tag - 1]);
        seen[tag] = 1;
    }
    tm_free(seen);
    tm_free(v);
    tm_free(tmp);
}

/* Acks are put in id order for XACK: in order already, runs that join
 * up once placed (chunks of workers finished out of turn, each in order
 * or newest first), runs that overlap, more runs than are placed, equal
 * keys, random keys, nothing and one. */
START_TEST(acks_sort_by_key)
{
    uint64_t k[1000] = {0};
    check_sorted(k, 0);
    k[0] = 7;
    check_sorted(k, 1);
    for (size_t i = 0; i < 1000; i++)
        k[i] = i;
    check_sorted(k, 1000);
    for (size_t i = 0; i < 1000; i++)
        k[i] = 1000 - i;
    check_sorted(k, 1000);
    for (size_t i = 0; i < 1000; i++)
        k[i] = i % 3;
    check_sorted(k, 1000);
    /* two runs that overlap: evens, then odds */
    for (size_t i = 0; i < 1000; i++)
        k[i] = i < 500 ? 2 * i : 2 * (i - 500) + 1;
    check_sorted(k, 1000);
    /* chunks of 64 of four workers, finished out of turn */
    for (size_t r = 1; r < 9; r++) {
        for (size_t i = 0; i < 1000; i++) {
            size_t chunk = i / 64, at = i % 64;
            size_t moved = (chunk * r * 7) % 16; /* a chunk's new place */
            k[i] = (uint64_t)(moved * 64 + at);
        }
        check_sorted(k, 1000);
        check_sorted(k, 65 + r * 97);
        /* the same, each chunk newest first (the settle thread's list) */
        for (size_t i = 0; i < 1000; i++) {
            size_t chunk = i / 64, at = 63 - i % 64;
            size_t moved = (chunk * r * 7) % 16;
            k[i] = (uint64_t)(moved * 64 + at);
        }
        check_sorted(k, 1000);
        check_sorted(k, 65 + r * 97);
    }
    /* descending runs next to equal keys: 3 2 2 1 1 0, twice */
    static const uint64_t eq[] = {3, 2, 2, 1, 1, 0, 3, 2, 2, 1, 1, 0};
    check_sorted(eq, sizeof eq / sizeof eq[0]);
    srand(19);
    for (int round = 0; round < 50; round++) {
        size_t n = (size_t)(rand() % 1000);
        for (size_t i = 0; i < n; i++)
            k[i] = (uint64_t)(rand() % 50) << 40 | (uint64_t)(rand() % 5);
        check_sorted(k, n);
    }
}
END_TEST

static Suite *redis_suite(void)
{
    Suite *s = suite_create("redis");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, retry_key_derives_from_the_queue);
    tcase_add_test(tc, pause_key_derives_from_the_queue);
    tcase_add_test(tc, claim_period_bounds);
    tcase_add_test(tc, cap_drops_oversized_bulks);
    tcase_add_test(tc, cap_refuses_overlong_lines);
    tcase_add_test(tc, cap_drops_absurd_lengths);
    tcase_add_test(tc, argv_formats_as_hiredis);
    tcase_add_test(tc, send_ahead_then_read_reply);
    tcase_add_test(tc, key_slots_follow_redis);
    tcase_add_test(tc, scheduled_key_derives_from_the_queue);
    tcase_add_test(tc, due_key_hashes_to_its_slot);
    tcase_add_test(tc, task_keys_share_a_slot);
    tcase_add_test(tc, redirects_are_read);
    tcase_add_test(tc, schedule_key_shares_the_slot);
    tcase_add_test(tc, answer_in_the_script_or_before_it);
    tcase_add_test(tc, acks_sort_by_key);
    suite_add_tcase(s, tc);
    /* thousands of reads of a reply, cut at every byte: slow under ASan */
    TCase *ta = tcase_create("cap_arena");
    tcase_set_timeout(ta, 120);
    tcase_add_test(ta, cap_takes_large_bulks_into_the_arena);
    tcase_add_test(ta, cap_taken_bulk_needs_crlf);
    suite_add_tcase(s, ta);
    return s;
}

TM_UNIT_MAIN(redis_suite)

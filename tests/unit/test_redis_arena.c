/* test_redis_arena.c - unit tests for reply trees built in an arena
 * (src/redis/arena.c). */
#include "redis/arena.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <pthread.h>

#include "util/util.h"

#include "unit_main.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

/* same says whether two reply trees hold the same values. */
static int same(const redisReply *a, const redisReply *b)
{
    if (a->type != b->type)
        return 0;
    switch (a->type) {
    case REDIS_REPLY_INTEGER:
        return a->integer == b->integer;
    case REDIS_REPLY_NIL:
        return 1;
    case REDIS_REPLY_ARRAY:
        if (a->elements != b->elements)
            return 0;
        for (size_t i = 0; i < a->elements; i++)
            if (!same(a->element[i], b->element[i]))
                return 0;
        return 1;
    default:
        return a->len == b->len && memcmp(a->str, b->str, a->len) == 0 &&
               b->str[b->len] == '\0';
    }
}

/* xread_reply writes an XREADGROUP-like reply of n entries, entry i's
 * body of sizes[i % nsizes] bytes, then a nil, an integer, an error, a
 * status and an empty array, into *out (the caller frees it). */
static size_t xread_reply(char **out, size_t n, const size_t *sizes,
                          size_t nsizes)
{
    size_t cap = 64 + n * 128;
    for (size_t i = 0; i < n; i++)
        cap += sizes[i % nsizes];
    char *p = tm_malloc(cap);
    size_t len = 0;
    len += (size_t)tm_snprintf(p + len, cap - len,
                               "*6\r\n*1\r\n*2\r\n$3\r\nq.a\r\n*%zu\r\n", n);
    for (size_t i = 0; i < n; i++) {
        size_t sz = sizes[i % nsizes];
        char id[32];
        int il = tm_snprintf(id, sizeof id, "%zu-0", i + 1);
        len += (size_t)tm_snprintf(p + len, cap - len,
                                   "*2\r\n$%d\r\n%s\r\n*4\r\n$4\r\nbody\r\n"
                                   "$%zu\r\n", il, id, sz);
        memset(p + len, 'a' + (int)(i % 26), sz);
        len += sz;
        len += (size_t)tm_snprintf(p + len, cap - len,
                                   "\r\n$2\r\nid\r\n$-1\r\n");
    }
    len += (size_t)tm_snprintf(p + len, cap - len,
                               "$-1\r\n:42\r\n-ERR no\r\n+OK\r\n*0\r\n");
    *out = p;
    return len;
}

/* parse reads one reply of resp, fed chunk bytes at a time, with the
 * object functions fn (NULL: hiredis's own) building in privdata. */
static redisReply *parse(const char *resp, size_t len, size_t chunk,
                         redisReplyObjectFunctions *fn, void *privdata)
{
    redisReader *rd = fn != NULL ? redisReaderCreateWithFunctions(fn)
                                 : redisReaderCreate();
    rd->privdata = privdata;
    void *v = NULL;
    for (size_t i = 0; i < len && v == NULL; i += chunk) {
        size_t k = len - i < chunk ? len - i : chunk;
        ck_assert_int_eq(redisReaderFeed(rd, resp + i, k), REDIS_OK);
        ck_assert_int_eq(redisReaderGetReply(rd, &v), REDIS_OK);
    }
    ck_assert_ptr_nonnull(v);
    redisReaderFree(rd);
    return v;
}

/* A reply built in the arena holds what hiredis's own tree holds, across
 * blocks grown as needed, objects of their own block included, however
 * the bytes are split; every string ends in a NUL. */
START_TEST(arena_builds_what_hiredis_builds)
{
    static const size_t sizes[] = {3, 0, 100, 5000, 70000, 17};
    static const size_t chunks[] = {1, 7, 4096, 1 << 22};
    static const size_t counts[] = {0, 1, 10, 300};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        char *resp;
        size_t len = xread_reply(&resp, counts[c], sizes,
                                 sizeof sizes / sizeof sizes[0]);
        redisReply *want = parse(resp, len, 1 << 22, NULL, NULL);
        for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
            if (counts[c] > 10 && chunks[k] < 4096)
                continue; /* slow, and no different */
            struct tm_rarena *a = tm_rarena_new();
            redisReply *got = parse(resp, len, chunks[k], &tm_rarena_fns, a);
            ck_assert(same(want, got));
            tm_rarena_reply_free(got, a); /* the arena's: left alone */
            tm_rarena_unref(a);
        }
        freeReplyObject(want);
        tm_free(resp);
    }
}
END_TEST

/* The arena is freed with its last reference, and the tree stays
 * readable until then. */
START_TEST(arena_lives_until_the_last_reference)
{
    static const size_t sizes[] = {10};
    char *resp;
    size_t len = xread_reply(&resp, 50, sizes, 1);
    struct tm_rarena *a = tm_rarena_new();
    redisReply *r = parse(resp, len, 1 << 20, &tm_rarena_fns, a);
    tm_rarena_ref(a);
    tm_rarena_ref(a);
    tm_rarena_unref(a);
    tm_rarena_unref(a);
    ck_assert_str_eq(r->element[0]->element[0]->element[1]
                         ->element[49]->element[0]->str, "50-0");
    tm_rarena_unref(a);
    tm_rarena_unref(NULL);
    tm_free(resp);
}
END_TEST

/* A protocol error in the middle of a reply leaves the half-built tree
 * to the arena: the reader's free of it does nothing, the arena frees
 * it once (a leak or a double free would show under ASan/valgrind). */
START_TEST(arena_survives_a_protocol_error)
{
    static const char bad[] = "*3\r\n$3\r\nabc\r\n*2\r\n:1\r\n?oops\r\n";
    struct tm_rarena *a = tm_rarena_new();
    redisReader *rd = redisReaderCreateWithFunctions(&tm_rarena_fns);
    rd->privdata = a;
    void *v = NULL;
    ck_assert_int_eq(redisReaderFeed(rd, bad, sizeof bad - 1), REDIS_OK);
    ck_assert_int_eq(redisReaderGetReply(rd, &v), REDIS_ERR);
    ck_assert_ptr_null(v);
    redisReaderFree(rd);
    tm_rarena_unref(a);
}
END_TEST

/* setup_reply writes the 200-entry reply the block-reuse tests parse
 * into *resp (length *len), its tree as hiredis builds it into *want,
 * and empties the process's block cache so that the first arena takes
 * fresh blocks. */
static void setup_reply(char **resp, size_t *len, redisReply **want)
{
    static const size_t sizes[] = {10, 3000};
    *len = xread_reply(resp, 200, sizes, 2);
    *want = parse(*resp, *len, 1 << 22, NULL, NULL);
    tm_rarena_trim();
}

/* A freed arena's blocks are the next arena's (kept by the process): the
 * same reply lands at the same place, whole and right; after a trim
 * they are gone. Under ASan a kept block is poisoned: a reply read after
 * its arena went is reported. */
START_TEST(arena_blocks_are_reused)
{
    char *resp;
    size_t len;
    redisReply *want;
    setup_reply(&resp, &len, &want);
    struct tm_rarena *a = tm_rarena_new();
    redisReply *first = parse(resp, len, 4096, &tm_rarena_fns, a);
    ck_assert(same(want, first));
    tm_rarena_unref(a);
#if defined(__SANITIZE_ADDRESS__)
    ck_assert(__asan_address_is_poisoned(first));
#endif
    for (int round = 0; round < 3; round++) {
        a = tm_rarena_new();
        redisReply *again = parse(resp, len, 4096, &tm_rarena_fns, a);
        ck_assert_ptr_eq(again, first);
        ck_assert(same(want, again));
        tm_rarena_unref(a);
    }
    tm_rarena_trim();
    tm_rarena_trim();
    freeReplyObject(want);
    tm_free(resp);
}
END_TEST

/* An arena freed on another thread (the settle thread drops a read's
 * last batch) gives its blocks to the next arena built on this one (a
 * lane): the thread that frees keeps none of its own. The freeing thread
 * stays alive until the check, so a block kept for it alone would not
 * come back through free and malloc either. */
struct unref_job {
    struct tm_rarena *a;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int freed, release;
};

static void *unref_elsewhere(void *arg)
{
    struct unref_job *j = arg;
    tm_rarena_unref(j->a);
    pthread_mutex_lock(&j->mu);
    j->freed = 1;
    pthread_cond_broadcast(&j->cv);
    while (!j->release)
        pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

START_TEST(arena_blocks_come_back_across_threads)
{
    char *resp;
    size_t len;
    redisReply *want;
    setup_reply(&resp, &len, &want);
    struct unref_job j = {.a = tm_rarena_new(),
                          .mu = PTHREAD_MUTEX_INITIALIZER,
                          .cv = PTHREAD_COND_INITIALIZER};
    redisReply *first = parse(resp, len, 4096, &tm_rarena_fns, j.a);
    ck_assert(same(want, first));
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, unref_elsewhere, &j), 0);
    pthread_mutex_lock(&j.mu);
    while (!j.freed)
        pthread_cond_wait(&j.cv, &j.mu);
    pthread_mutex_unlock(&j.mu);
    struct tm_rarena *a = tm_rarena_new();
    redisReply *again = parse(resp, len, 4096, &tm_rarena_fns, a);
    ck_assert_ptr_eq(again, first);
    ck_assert(same(want, again));
    tm_rarena_unref(a);
    pthread_mutex_lock(&j.mu);
    j.release = 1;
    pthread_cond_broadcast(&j.cv);
    pthread_mutex_unlock(&j.mu);
    pthread_join(t, NULL);
    tm_rarena_trim();
    freeReplyObject(want);
    tm_free(resp);
}
END_TEST

#if defined(__SANITIZE_ADDRESS__)
/* Under ASan, the bytes past each object and the room not yet used are
 * poisoned: an overrun of a reply string is reported, not silent. */
START_TEST(arena_poisons_around_objects)
{
    static const size_t sizes[] = {5, 40000};
    char *resp;
    size_t len = xread_reply(&resp, 4, sizes, 2);
    struct tm_rarena *a = tm_rarena_new();
    redisReply *r = parse(resp, len, 1 << 20, &tm_rarena_fns, a);
    const redisReply *entries = r->element[0]->element[0]->element[1];
    for (size_t i = 0; i < entries->elements; i++) {
        const redisReply *body = entries->element[i]->element[1]->element[1];
        ck_assert(!__asan_address_is_poisoned(body->str + body->len));
        ck_assert(__asan_address_is_poisoned(body->str + body->len + 1));
    }
    ck_assert(__asan_address_is_poisoned((const char *)r + sizeof *r));
    tm_rarena_unref(a);
    tm_free(resp);
}
END_TEST
#endif

static Suite *arena_suite(void)
{
    Suite *s = suite_create("redis_arena");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, arena_builds_what_hiredis_builds);
    tcase_add_test(tc, arena_lives_until_the_last_reference);
    tcase_add_test(tc, arena_survives_a_protocol_error);
    tcase_add_test(tc, arena_blocks_are_reused);
    tcase_add_test(tc, arena_blocks_come_back_across_threads);
#if defined(__SANITIZE_ADDRESS__)
    tcase_add_test(tc, arena_poisons_around_objects);
#endif
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(arena_suite)

/* ceiling_redis.c - the leanest correct Redis Streams consumer we can
 * write: the ceiling that taskmill's Redis figures are divided by.
 *
 *   ceiling_redis HOST PORT STREAM GROUP COUNT N [DEPTH]
 *
 * One connection, consumer "ceiling" in GROUP (which must exist). Each
 * round reads up to COUNT entries with XREADGROUP ... STREAMS STREAM >,
 * looks at each entry's body field (no handler runs), and acknowledges
 * the whole batch with ONE XACK, pipelined with the next read, so a batch
 * costs one round trip. DEPTH (default 2) reads are kept in flight so
 * that Redis prepares the next batch while this one is parsed. Stops after
 * N entries, or when a read (BLOCK 2000 ms) comes back empty. Prints
 * "consumed=... seconds=... rate=..." on stdout: its own view, from the
 * first reply with entries to the reply of the last XACK. */
#include "bench.h"

#include <hiredis/hiredis.h>

#define PROG "ceiling_redis"
#define MAX_DEPTH 8

enum { K_READ, K_ACK };

int main(int argc, char **argv)
{
    if (argc < 7 || argc > 8) {
        fprintf(stderr, "usage: %s HOST PORT STREAM GROUP COUNT N "
                        "[DEPTH]\n", PROG);
        return 2;
    }
    bench_hold_init();
    const char *host = argv[1];
    int port = (int)bench_parse_long(PROG, "PORT", argv[2]);
    const char *stream = argv[3], *group = argv[4];
    long long count = bench_parse_long(PROG, "COUNT", argv[5]);
    long long n = bench_parse_long(PROG, "N", argv[6]);
    long long depth = argc == 8 ? bench_parse_long(PROG, "DEPTH", argv[7])
                                : 2;
    if (count < 1 || depth < 1 || depth > MAX_DEPTH)
        bench_die(PROG, "COUNT >= 1 and 1 <= DEPTH <= %d", MAX_DEPTH);

    redisContext *c = redisConnect(host, port);
    if (c == NULL || c->err)
        bench_die(PROG, "connect %s:%d: %s", host, port,
                  c != NULL ? c->errstr : "out of memory");

    char countbuf[24];
    snprintf(countbuf, sizeof countbuf, "%lld", count);
    const char *rargv[] = {"XREADGROUP", "GROUP", group, "ceiling",
                           "COUNT", countbuf, "BLOCK", "2000",
                           "STREAMS", stream, ">"};
    /* the XACK argv is reused for every batch: no per-message malloc */
    const char **aargv = malloc((size_t)(count + 3) * sizeof *aargv);
    size_t *alens = malloc((size_t)(count + 3) * sizeof *alens);
    if (aargv == NULL || alens == NULL)
        bench_die(PROG, "out of memory");
    aargv[0] = "XACK";
    alens[0] = 4;
    aargv[1] = stream;
    alens[1] = strlen(stream);
    aargv[2] = group;
    alens[2] = strlen(group);

    /* the kinds of the replies still to come, in order */
    int kinds[2 * MAX_DEPTH + 2];
    size_t qhead = 0, qlen = 0;
    const size_t qcap = sizeof kinds / sizeof kinds[0];
    long long consumed = 0, reads = 0, body_bytes = 0;
    int ended = 0;
    int64_t first_ns = 0, last_ns = 0;

    for (;;) {
        while (!ended && reads < depth && consumed + reads * count < n) {
            redisAppendCommandArgv(c, 11, rargv, NULL);
            kinds[(qhead + qlen++) % qcap] = K_READ;
            reads++;
        }
        if (qlen == 0)
            break;
        int kind = kinds[qhead];
        qhead = (qhead + 1) % qcap;
        qlen--;
        void *vr;
        if (redisGetReply(c, &vr) != REDIS_OK)
            bench_die(PROG, "%s", c->errstr);
        redisReply *r = vr;
        if (r->type == REDIS_REPLY_ERROR)
            bench_die(PROG, "%s: %s", kind == K_ACK ? "XACK" : "XREADGROUP",
                      r->str);
        if (kind == K_ACK) {
            last_ns = bench_mono_ns();
            freeReplyObject(r);
            continue;
        }
        reads--;
        if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
            ended = 1; /* nil: nothing arrived within BLOCK */
            freeReplyObject(r);
            continue;
        }
        if (first_ns == 0)
            first_ns = bench_mono_ns();
        const redisReply *entries = r->element[0]->element[1];
        size_t k = 0;
        for (size_t i = 0; i < entries->elements; i++) {
            const redisReply *e = entries->element[i];
            const redisReply *f = e->element[1];
            /* find the body, as any consumer must; run nothing */
            for (size_t j = 0; j + 1 < f->elements; j += 2)
                if (f->element[j]->len == 4 &&
                    memcmp(f->element[j]->str, "body", 4) == 0) {
                    body_bytes += (long long)f->element[j + 1]->len;
                    break;
                }
            aargv[3 + k] = e->element[0]->str;
            alens[3 + k] = e->element[0]->len;
            k++;
        }
        consumed += (long long)k;
        /* one XACK for the batch; it leaves with the next read */
        redisAppendCommandArgv(c, (int)(3 + k), aargv, alens);
        kinds[(qhead + qlen++) % qcap] = K_ACK;
        freeReplyObject(r);
    }
    double sec = first_ns > 0 ? (double)(last_ns - first_ns) / 1e9 : 0;
    printf("consumed=%lld seconds=%.6f rate=%.0f body_bytes=%lld\n",
           consumed, sec, sec > 0 ? (double)consumed / sec : 0.0,
           body_bytes);
    fflush(stdout);
    bench_hold();
    free(aargv);
    free(alens);
    redisFree(c);
    return consumed == n ? 0 : 1;
}

/* load_redis.c - pre-load a Redis stream with N entries, fast.
 *
 *   load_redis HOST PORT STREAM N [BODY]
 *
 * Appends N entries "XADD STREAM * body BODY" (BODY defaults to {}) in
 * pipelined windows of 4096 commands, then prints the id of the last entry
 * on stdout and the load rate on stderr. */
#include "bench.h"

#include <hiredis/hiredis.h>

#define PROG "load_redis"
#define WINDOW 4096

int main(int argc, char **argv)
{
    if (argc < 5 || argc > 6) {
        fprintf(stderr, "usage: %s HOST PORT STREAM N [BODY]\n", PROG);
        return 2;
    }
    const char *host = argv[1];
    int port = (int)bench_parse_long(PROG, "PORT", argv[2]);
    const char *stream = argv[3];
    long long n = bench_parse_long(PROG, "N", argv[4]);
    const char *body = argc == 6 ? argv[5] : "{}";

    redisContext *c = redisConnect(host, port);
    if (c == NULL || c->err)
        bench_die(PROG, "connect %s:%d: %s", host, port,
                  c != NULL ? c->errstr : "out of memory");

    /* every command is the same: format it once */
    char *cmd = NULL;
    const char *av[] = {"XADD", stream, "*", "body", body};
    size_t al[] = {4, strlen(stream), 1, 4, strlen(body)};
    int cmdlen = redisFormatCommandArgv(&cmd, 5, av, al);
    if (cmdlen < 0)
        bench_die(PROG, "cannot format the command");

    char last[64] = "";
    int64_t t0 = bench_mono_ns();
    for (long long done = 0; done < n;) {
        long long w = n - done < WINDOW ? n - done : WINDOW;
        for (long long i = 0; i < w; i++)
            if (redisAppendFormattedCommand(c, cmd, (size_t)cmdlen) !=
                REDIS_OK)
                bench_die(PROG, "append: %s", c->errstr);
        for (long long i = 0; i < w; i++) {
            void *vr;
            if (redisGetReply(c, &vr) != REDIS_OK)
                bench_die(PROG, "XADD: %s", c->errstr);
            redisReply *r = vr;
            if (r->type != REDIS_REPLY_STRING)
                bench_die(PROG, "XADD: %s", r->type == REDIS_REPLY_ERROR
                                                ? r->str
                                                : "unexpected reply");
            if (done + i == n - 1)
                snprintf(last, sizeof last, "%s", r->str);
            freeReplyObject(r);
        }
        done += w;
    }
    int64_t t1 = bench_mono_ns();
    printf("%s\n", last);
    fprintf(stderr, "%s: %lld entries in %.2f s (%.0f/s)\n", PROG, n,
            (double)(t1 - t0) / 1e9,
            (double)n / ((double)(t1 - t0) / 1e9));
    redisFreeCommand(cmd);
    redisFree(c);
    return 0;
}

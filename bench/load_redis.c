/* load_redis.c - pre-load a Redis stream with N entries, fast.
 *
 *   load_redis HOST PORT STREAM N [BODY]
 *
 * Appends N entries "XADD STREAM * body BODY" (BODY defaults to {}) in
 * pipelined windows of 4096 commands (fewer for large bodies: about 8 MiB
 * of bodies a window), then prints the id of the last entry on stdout and
 * the load rate on stderr. BODY "@BYTES" is a JSON object of exactly that
 * many bytes, {"pad":"xxx...x"} (too long for a command line). */
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
    char *padded = NULL;
    if (body[0] == '@') {
        long long size = bench_parse_long(PROG, "BODY size", body + 1);
        if (size < 11)
            bench_die(PROG, "a padded body has at least 11 bytes");
        padded = malloc((size_t)size + 1);
        if (padded == NULL)
            bench_die(PROG, "out of memory");
        memset(padded, 'x', (size_t)size);
        memcpy(padded, "{\"pad\":\"", 8);
        memcpy(padded + size - 2, "\"}", 3);
        body = padded;
    }
    long long window = WINDOW;
    if ((long long)strlen(body) * window > 8LL * 1024 * 1024)
        window = 8LL * 1024 * 1024 / (long long)strlen(body) + 1;

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
        long long w = n - done < window ? n - done : window;
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
    free(padded);
    return 0;
}

/* peer_measure.c - run one Redis consumer over a pre-loaded queue and
 * time it from the broker's side, whatever its storage layout.
 *
 *   peer_measure --n N --redis H:P --eval LUA [--key K]... [--arg A]...
 *                [--broker-pid PID] [--poll-us US] [--timeout SEC]
 *                [--log FILE] -- COMMAND [ARG...]
 *
 * The peers of `make bench-peers` keep their queues in different shapes
 * (a stream and its group, Celery's list and "unacked" hash, BullMQ's
 * wait and active lists), so the caller gives a Lua script that returns
 * two counts, read every --poll-us (default 1000 us) from a connection of
 * our own, EVAL LUA #keys KEY... ARG...:
 *
 *   { undelivered, unfinished }
 *
 * undelivered: messages no consumer has taken yet; unfinished: those plus
 * the ones taken and not yet acknowledged. Before COMMAND starts both must
 * be N. The run starts when undelivered drops below N (first delivery) and
 * ends when unfinished reaches 0 (last ack): the same two instants that
 * bench/measure.c takes for the taskmill daemon.
 *
 * CPU is utime+stime of COMMAND and its descendants (Celery's prefork
 * children) between the two instants, from /proc; --broker-pid does the
 * same for the broker. RSS: the sum of VmHWM over the process tree at the
 * end. host_busy_s and other_cpu_s as in measure.c. Then COMMAND gets
 * SIGTERM (SIGKILL after 20 s). One JSON object is printed on stdout; the
 * exit status is 0 when the run completed. */
#include "../child.h"
#include "../proc.h"


#include <hiredis/hiredis.h>

#define PROG "peer_measure"
#define MAX_KEYS 16

struct opts {
    long long n;
    const char *redis, *lua;
    const char *keys[MAX_KEYS], *args[MAX_KEYS];
    int nkeys, nargs;
    pid_t broker_pid;
    long poll_us, timeout_s;
    const char *log;
    char **cmd;
};

/* tree_ticks sums utime+stime over the tree; *hwm gets the sum of VmHWM. */
static long long tree_ticks(pid_t pid, long long *hwm)
{
    pid_t pids[BENCH_MAX_PROCS];
    size_t n = bench_tree_pids(pid, pids, BENCH_MAX_PROCS);
    long long t = 0;
    if (hwm != NULL)
        *hwm = 0;
    for (size_t i = 0; i < n; i++) {
        long long k = bench_proc_ticks(pids[i]);
        if (k > 0)
            t += k;
        if (hwm != NULL) {
            long long h = bench_status_kib(pids[i], "VmHWM");
            if (h > 0)
                *hwm += h;
        }
    }
    return t;
}

/* counts runs the script: cnt[0] undelivered, cnt[1] unfinished. */
static void counts(redisContext *rc, const struct opts *o, long long cnt[2])
{
    const char *argv[4 + 2 * MAX_KEYS];
    char nk[16];
    int argc = 0;
    snprintf(nk, sizeof nk, "%d", o->nkeys);
    argv[argc++] = "EVAL";
    argv[argc++] = o->lua;
    argv[argc++] = nk;
    for (int i = 0; i < o->nkeys; i++)
        argv[argc++] = o->keys[i];
    for (int i = 0; i < o->nargs; i++)
        argv[argc++] = o->args[i];
    redisReply *r = redisCommandArgv(rc, argc, argv, NULL);
    if (r == NULL)
        bench_die(PROG, "EVAL: %s", rc->errstr);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER)
        bench_die(PROG, "the script must return two integers (%s)",
                  r->type == REDIS_REPLY_ERROR ? r->str : "got another shape");
    cnt[0] = r->element[0]->integer;
    cnt[1] = r->element[1]->integer;
    freeReplyObject(r);
}

static void usage(void)
{
    fprintf(stderr, "usage: %s --n N --redis H:P --eval LUA [--key K]... "
                    "[--arg A]... [--broker-pid PID] [--poll-us US] "
                    "[--timeout SEC] [--log FILE] -- COMMAND [ARG...]\n",
            PROG);
    exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
    o->poll_us = 1000;
    o->timeout_s = 600;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (strcmp(a, "--n") == 0)
            o->n = bench_parse_long(PROG, a, v);
        else if (strcmp(a, "--redis") == 0)
            o->redis = v;
        else if (strcmp(a, "--eval") == 0)
            o->lua = v;
        else if (strcmp(a, "--key") == 0 && o->nkeys < MAX_KEYS)
            o->keys[o->nkeys++] = v;
        else if (strcmp(a, "--arg") == 0 && o->nargs < MAX_KEYS)
            o->args[o->nargs++] = v;
        else if (strcmp(a, "--broker-pid") == 0)
            o->broker_pid = (pid_t)bench_parse_long(PROG, a, v);
        else if (strcmp(a, "--poll-us") == 0)
            o->poll_us = (long)bench_parse_long(PROG, a, v);
        else if (strcmp(a, "--timeout") == 0)
            o->timeout_s = (long)bench_parse_long(PROG, a, v);
        else if (strcmp(a, "--log") == 0)
            o->log = v;
        else
            usage();
    }
    if (i >= argc || o->n <= 0 || o->redis == NULL || o->lua == NULL)
        usage();
    o->cmd = argv + i;
}

static redisContext *connect_redis(const char *hp)
{
    char host[64];
    const char *colon = strrchr(hp, ':');
    if (colon == NULL || (size_t)(colon - hp) >= sizeof host)
        bench_die(PROG, "expected HOST:PORT, got '%s'", hp);
    memcpy(host, hp, (size_t)(colon - hp));
    host[colon - hp] = '\0';
    int port = (int)bench_parse_long(PROG, "port", colon + 1);
    redisContext *rc = redisConnect(host, port);
    if (rc == NULL || rc->err)
        bench_die(PROG, "connect %s: %s", hp,
                  rc != NULL ? rc->errstr : "out of memory");
    return rc;
}

static pid_t spawn(const struct opts *o)
{
    pid_t pid = fork();
    if (pid < 0)
        bench_die(PROG, "fork: %s", strerror(errno));
    if (pid == 0)
        bench_exec_logged(PROG, o->log, o->cmd);
    return pid;
}

int main(int argc, char **argv)
{
    struct opts o = {0};
    parse(argc, argv, &o);
    redisContext *rc = connect_redis(o.redis);
    long long cnt[2];
    counts(rc, &o, cnt);
    if (cnt[0] != o.n || cnt[1] != o.n)
        bench_die(PROG, "the queue is not fresh: %lld undelivered, %lld "
                  "unfinished, expected %lld", cnt[0], cnt[1], o.n);

    int64_t t_spawn = bench_mono_ns();
    int64_t deadline = t_spawn + (int64_t)o.timeout_s * 1000000000LL;
    pid_t pid = spawn(&o);
    int64_t t_start = 0, t_end = 0;
    long long c0 = 0, c1 = 0, b0 = 0, b1 = 0, h0 = 0, h1 = 0, hwm = 0;
    double m0 = 0, m1 = 0;
    const char *fail = NULL;
    int status = 0, reaped = 0;
    for (;;) {
        /* an exit is noticed after one more look at the broker */
        int gone = waitpid(pid, &status, WNOHANG) == pid;
        if (bench_mono_ns() > deadline) {
            fail = "timed out";
            break;
        }
        counts(rc, &o, cnt);
        int64_t now = bench_mono_ns();
        if (t_start == 0 && cnt[0] < o.n) {
            t_start = now;
            c0 = tree_ticks(pid, NULL);
            b0 = o.broker_pid > 0 ? bench_proc_ticks(o.broker_pid) : 0;
            h0 = bench_host_ticks();
            m0 = bench_self_cpu_s();
        }
        if (t_start != 0 && cnt[1] == 0) {
            t_end = now;
            c1 = tree_ticks(pid, &hwm);
            b1 = o.broker_pid > 0 ? bench_proc_ticks(o.broker_pid) : 0;
            h1 = bench_host_ticks();
            m1 = bench_self_cpu_s();
            break;
        }
        if (gone) {
            reaped = 1;
            fail = "the command exited before the run completed";
            break;
        }
        bench_sleep_until(now + o.poll_us * 1000LL);
    }
    if (!reaped) {
        const char *f = bench_stop_child(pid, &status);
        if (fail == NULL)
            fail = f;
    }
    int exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
                                      : 128 + WTERMSIG(status);
    double sec = t_end > t_start ? (double)(t_end - t_start) / 1e9 : 0;
    double tk = (double)sysconf(_SC_CLK_TCK);
    double cpu = (double)(c1 - c0) / tk, bcpu = (double)(b1 - b0) / tk;
    double host = (double)(h1 - h0) / tk, mcpu = m1 - m0;
    double perm = 1e6 / (double)o.n;
    printf("{\"ok\":%s,\"error\":\"%s\",\"n\":%lld,\"seconds\":%.6f,"
           "\"rate\":%.0f,\"startup_s\":%.3f,\"cpu_s\":%.2f,"
           "\"cpu_s_per_m\":%.3f,\"broker_cpu_s\":%.2f,"
           "\"broker_cpu_s_per_m\":%.3f,\"host_busy_s\":%.2f,"
           "\"measure_cpu_s\":%.2f,\"other_cpu_s\":%.2f,"
           "\"rss_peak_kib\":%lld,\"exit\":%d}\n",
           fail == NULL ? "true" : "false", fail == NULL ? "" : fail, o.n,
           sec, sec > 0 ? (double)o.n / sec : 0.0,
           t_start > 0 ? (double)(t_start - t_spawn) / 1e9 : 0.0, cpu,
           cpu * perm, bcpu, bcpu * perm, host, mcpu,
           host - cpu - bcpu - mcpu, hwm, exit_code);
    redisFree(rc);
    return fail == NULL ? 0 : 1;
}

/* measure.c - run one consumer over a pre-loaded queue and measure it.
 *
 *   measure --n N [--redis H:P --stream S --group G --last ID [--from ID]]
 *           [--amqp H:P --queue Q (--metrics H:P --task T | --done-pipe)]
 *           [--broker-pid PID] [--poll-us US] [--timeout SEC]
 *           [--log FILE] -- COMMAND [ARG...]
 *
 * Starts COMMAND (a taskmill daemon or a ceiling loop) and watches the
 * broker from a connection of its own, every --poll-us (default 1000 us):
 *
 *   Redis: XINFO GROUPS STREAM. The run starts when the group's
 *     last-delivered-id leaves --from (default 0-0; the group must be
 *     there, with nothing pending): first delivery. It ends when it
 *     equals --last and the group has nothing pending: last ack.
 *   RabbitMQ: a passive queue.declare. The run starts when the queue's
 *     ready count drops below N (first delivery) and ends when taskmill's
 *     /metrics counts N successes of --task (counted right before the
 *     ack is sent), or, with --done-pipe, when COMMAND writes a byte to
 *     fd 3 (BENCH_DONE_FD) after its last ack. Once the run has started,
 *     the queue (one Erlang process) is asked only every 20 ms, until it
 *     has no ready message left; then /metrics is read every --poll-us.
 *
 * CPU is utime+stime of COMMAND and its descendants (fork pool children)
 * between the two instants, from /proc (10 ms ticks); --broker-pid does the
 * same for the broker. Context switches of all their threads, too (per
 * thousand messages). RSS: VmHWM of COMMAND at the end (its children
 * separately), and the highest VmRSS sampled every 10 ms in the first and
 * the second half of the run. host_busy_s is the CPU time every process
 * of the host used meanwhile (/proc/stat); other_cpu_s what neither
 * COMMAND, the broker nor this watcher used: load from elsewhere.
 *
 * Then COMMAND gets SIGTERM (SIGKILL after 20 s); BENCH_HOLD=1 in its
 * environment asks a program that ends by itself (a ceiling loop) to wait
 * for that signal. One JSON object is printed on stdout; the exit status
 * is 0 when the run completed. */
#include "bench_amqp.h"
#include "child.h"
#include "proc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <hiredis/hiredis.h>

#define PROG "measure"

struct opts {
    long long n;
    const char *redis, *stream, *group, *last, *from;
    const char *amqp, *queue, *metrics, *task;
    int done_pipe;
    pid_t broker_pid;
    long poll_us;
    long timeout_s;
    const char *log;
    char **cmd;
};

static void split_hostport(const char *s, char *host, size_t hsize, int *port)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL || (size_t)(colon - s) >= hsize)
        bench_die(PROG, "expected HOST:PORT, got '%s'", s);
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    *port = (int)bench_parse_long(PROG, "port", colon + 1);
}

/* ---- /proc ------------------------------------------------------------ */

static long g_tick;

struct tree_sample {
    long long ticks;        /* pid + descendants */
    long long cswitches;    /* context switches, every thread */
    long long kids_hwm_kib; /* sum of descendants' VmHWM */
    size_t nkids;
};

/* tree_sample reads pid and its descendants (the fork pool's children). */
static struct tree_sample tree_sample(pid_t pid, int with_hwm)
{
    pid_t pids[BENCH_MAX_PROCS];
    size_t n = bench_tree_pids(pid, pids, BENCH_MAX_PROCS);
    struct tree_sample s = {.nkids = n > 0 ? n - 1 : 0};
    for (size_t i = 0; i < n; i++) {
        long long t = bench_proc_ticks(pids[i]);
        if (t > 0)
            s.ticks += t;
        s.cswitches += bench_ctxt_switches(pids[i]);
        if (with_hwm && i > 0) {
            long long h = bench_status_kib(pids[i], "VmHWM");
            if (h > 0)
                s.kids_hwm_kib += h;
        }
    }
    return s;
}

/* ---- brokers ---------------------------------------------------------- */

struct watch {
    redisContext *rc;
    amqp_connection_state_t ac;
    int http_port;
    char http_host[64];
};

/* redis_state reads the group's last-delivered-id and pending count. */
static void redis_state(struct watch *w, const struct opts *o, char *last,
                        size_t lsize, long long *pending)
{
    redisReply *r = redisCommand(w->rc, "XINFO GROUPS %s", o->stream);
    if (r == NULL)
        bench_die(PROG, "XINFO GROUPS: %s", w->rc->errstr);
    if (r->type != REDIS_REPLY_ARRAY)
        bench_die(PROG, "XINFO GROUPS %s: %s", o->stream,
                  r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    int found = 0;
    for (size_t i = 0; i < r->elements && !found; i++) {
        const redisReply *g = r->element[i];
        const char *name = NULL, *ld = NULL;
        long long pend = -1;
        for (size_t j = 0; j + 1 < g->elements; j += 2) {
            const char *k = g->element[j]->str;
            const redisReply *v = g->element[j + 1];
            if (strcmp(k, "name") == 0)
                name = v->str;
            else if (strcmp(k, "last-delivered-id") == 0)
                ld = v->str;
            else if (strcmp(k, "pending") == 0)
                pend = v->integer;
        }
        if (name != NULL && strcmp(name, o->group) == 0 && ld != NULL) {
            snprintf(last, lsize, "%s", ld);
            *pending = pend;
            found = 1;
        }
    }
    freeReplyObject(r);
    if (!found)
        bench_die(PROG, "stream %s has no group %s", o->stream, o->group);
}

/* g_lowat is the daemon's taskmill_broker_lowat_batches_total at the last
 * /metrics read (-1: never read): how often RabbitMQ's low-water mark
 * engaged in the run, which a slow run's notes show. */
static long long g_lowat = -1;

/* metrics_success GETs /metrics and returns the success count of the
 * task, or -1; it also keeps the low-water batch count in g_lowat. */
static long long metrics_success(struct watch *w, const struct opts *o)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)w->http_port)};
    inet_pton(AF_INET, w->http_host, &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    static const char req[] = "GET /metrics HTTP/1.0\r\n"
                              "Host: bench\r\n\r\n";
    if (write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) {
        close(fd);
        return -1;
    }
    static char buf[1 << 20];
    size_t len = 0;
    ssize_t k;
    while (len < sizeof buf - 1 &&
           (k = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)k;
    close(fd);
    buf[len] = '\0';
    char want[256];
    snprintf(want, sizeof want,
             "\ntaskmill_tasks_total{task=\"%s\",outcome=\"success\"} ",
             o->task);
    static const char lowat[] = "\ntaskmill_broker_lowat_batches_total ";
    const char *l = strstr(buf, lowat);
    if (l != NULL)
        g_lowat = strtoll(l + strlen(lowat), NULL, 10);
    const char *p = strstr(buf, want);
    if (p == NULL)
        return -1;
    return (long long)strtod(p + strlen(want), NULL);
}

/* ---- main ------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr, "usage: %s --n N (--redis H:P --stream S --group G "
                    "--last ID | --amqp H:P --queue Q (--metrics H:P --task "
                    "T | --done-pipe)) [--broker-pid PID] [--poll-us US] "
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
        if (strcmp(a, "--done-pipe") == 0) {
            o->done_pipe = 1;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (strcmp(a, "--n") == 0)
            o->n = bench_parse_long(PROG, a, v);
        else if (strcmp(a, "--redis") == 0)
            o->redis = v;
        else if (strcmp(a, "--stream") == 0)
            o->stream = v;
        else if (strcmp(a, "--group") == 0)
            o->group = v;
        else if (strcmp(a, "--last") == 0)
            o->last = v;
        else if (strcmp(a, "--from") == 0)
            o->from = v;
        else if (strcmp(a, "--amqp") == 0)
            o->amqp = v;
        else if (strcmp(a, "--queue") == 0)
            o->queue = v;
        else if (strcmp(a, "--metrics") == 0)
            o->metrics = v;
        else if (strcmp(a, "--task") == 0)
            o->task = v;
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
    if (i >= argc || o->n <= 0)
        usage();
    if (o->from == NULL)
        o->from = "0-0";
    o->cmd = argv + i;
    if ((o->redis == NULL) == (o->amqp == NULL))
        usage();
    if (o->redis != NULL && (o->stream == NULL || o->group == NULL ||
                             o->last == NULL))
        usage();
    if (o->amqp != NULL &&
        (o->queue == NULL ||
         (o->done_pipe == 0 && (o->metrics == NULL || o->task == NULL))))
        usage();
}

static void connect_watch(struct watch *w, const struct opts *o)
{
    char host[64];
    int port;
    if (o->redis != NULL) {
        split_hostport(o->redis, host, sizeof host, &port);
        w->rc = redisConnect(host, port);
        if (w->rc == NULL || w->rc->err)
            bench_die(PROG, "connect %s: %s", o->redis,
                      w->rc ? w->rc->errstr : "out of memory");
        return;
    }
    split_hostport(o->amqp, host, sizeof host, &port);
    w->ac = bench_amqp_open(PROG, host, port);
    if (o->metrics != NULL)
        split_hostport(o->metrics, w->http_host, sizeof w->http_host,
                       &w->http_port);
}

int main(int argc, char **argv)
{
    struct opts o = {0};
    struct watch w = {0};
    parse(argc, argv, &o);
    g_tick = sysconf(_SC_CLK_TCK);
    connect_watch(&w, &o);

    /* the queue must be untouched before the consumer starts */
    char last[64] = "";
    long long pending = 0;
    if (o.redis != NULL) {
        redis_state(&w, &o, last, sizeof last, &pending);
        if (strcmp(last, o.from) != 0 || pending != 0)
            bench_die(PROG, "group %s of %s is not fresh (last-delivered "
                      "%s, %lld pending)", o.group, o.stream, last, pending);
    } else {
        long long ready = bench_amqp_ready(PROG, w.ac, o.queue);
        if (ready != o.n)
            bench_die(PROG, "queue %s holds %lld ready messages, not %lld",
                      o.queue, ready, o.n);
    }

    int pfd[2] = {-1, -1};
    if (o.done_pipe && pipe2(pfd, O_CLOEXEC) != 0)
        bench_die(PROG, "pipe: %s", strerror(errno));
    int64_t t_spawn = bench_mono_ns();
    pid_t pid = fork();
    if (pid < 0)
        bench_die(PROG, "fork: %s", strerror(errno));
    if (pid == 0) {
        if (o.done_pipe) {
            dup2(pfd[1], 3); /* dup2 clears close-on-exec */
            setenv("BENCH_DONE_FD", "3", 1);
        }
        /* ceiling loops wait for SIGTERM once done, so that their /proc
         * figures can still be read */
        setenv("BENCH_HOLD", "1", 1);
        bench_exec_logged(PROG, o.log, o.cmd);
    }
    if (o.done_pipe) {
        close(pfd[1]);
        fcntl(pfd[0], F_SETFL, O_NONBLOCK);
    }

    int64_t deadline = t_spawn + (int64_t)o.timeout_s * 1000000000LL;
    int64_t t_start = 0, t_end = 0, next_rss = 0, next_queue_poll = 0;
    int drained = 0;
    struct tree_sample c0 = {0}, c1 = {0};
    long long b0 = 0, b1 = 0, h0 = 0, h1 = 0;
    double m0 = 0, m1 = 0;
    size_t nsamp = 0, capsamp = 4096;
    int64_t *st = malloc(capsamp * sizeof *st);
    long long *sr = malloc(capsamp * sizeof *sr);
    const char *fail = NULL;
    int status = 0, reaped = 0;

    for (;;) {
        int64_t now = bench_mono_ns();
        /* an exit is noticed after one more look at the broker */
        int gone = !reaped && waitpid(pid, &status, WNOHANG) == pid;
        if (gone)
            reaped = 1;
        if (now > deadline) {
            fail = "timed out";
            break;
        }
        int started = 0, ended = 0;
        if (o.redis != NULL) {
            redis_state(&w, &o, last, sizeof last, &pending);
            started = strcmp(last, o.from) != 0;
            ended = pending == 0 && strcmp(last, o.last) == 0;
        } else if (t_start == 0) {
            started = bench_amqp_ready(PROG, w.ac, o.queue) < o.n;
        } else if (o.done_pipe) {
            /* no broker query while the queue works: it is one process */
            char b;
            started = 1;
            ended = read(pfd[0], &b, 1) == 1;
        } else {
            started = 1;
            if (!drained && now >= next_queue_poll) {
                next_queue_poll = now + 20000000LL;
                drained = bench_amqp_ready(PROG, w.ac, o.queue) == 0;
            }
            /* the last prefetch window: watch the counter closely */
            if (drained)
                ended = metrics_success(&w, &o) >= o.n;
        }
        now = bench_mono_ns();
        if (started && t_start == 0) {
            t_start = now;
            c0 = tree_sample(pid, 0);
            b0 = o.broker_pid > 0 ? bench_proc_ticks(o.broker_pid) : 0;
            h0 = bench_host_ticks();
            m0 = bench_self_cpu_s();
        }
        if (t_start != 0 && now >= next_rss) {
            next_rss = now + 10000000LL;
            if (nsamp == capsamp) {
                capsamp *= 2;
                st = realloc(st, capsamp * sizeof *st);
                sr = realloc(sr, capsamp * sizeof *sr);
            }
            st[nsamp] = now;
            sr[nsamp++] = bench_status_kib(pid, "VmRSS");
        }
        if (ended && t_start != 0) {
            t_end = now;
            c1 = tree_sample(pid, 1);
            b1 = o.broker_pid > 0 ? bench_proc_ticks(o.broker_pid) : 0;
            h1 = bench_host_ticks();
            m1 = bench_self_cpu_s();
            break;
        }
        if (gone) {
            fail = "the command exited before the run completed";
            break;
        }
        bench_sleep_until(now + o.poll_us * 1000LL);
    }
    long long hwm = bench_status_kib(pid, "VmHWM");
    long long rss_end = bench_status_kib(pid, "VmRSS");
    int64_t t_stop = bench_mono_ns();
    if (!reaped) {
        const char *f = bench_stop_child(pid, &status);
        if (fail == NULL)
            fail = f;
    }
    double stop_s = (double)(bench_mono_ns() - t_stop) / 1e9;
    int exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
                                      : 128 + WTERMSIG(status);

    double sec = t_end > t_start ? (double)(t_end - t_start) / 1e9 : 0;
    double tk = (double)g_tick;
    double cpu = (double)(c1.ticks - c0.ticks) / tk;
    double bcpu = (double)(b1 - b0) / tk;
    double host = (double)(h1 - h0) / tk;
    double mcpu = m1 - m0;
    long long half1 = 0, half2 = 0;
    int64_t mid = t_start + (t_end - t_start) / 2;
    for (size_t i = 0; i < nsamp; i++) {
        long long *h = st[i] < mid ? &half1 : &half2;
        if (sr[i] > *h)
            *h = sr[i];
    }
    double perm = 1e6 / (double)o.n;
    printf("{\"ok\":%s,\"error\":\"%s\",\"n\":%lld,\"seconds\":%.6f,"
           "\"rate\":%.0f,\"startup_s\":%.3f,\"cpu_s\":%.2f,"
           "\"cpu_s_per_m\":%.3f,\"broker_cpu_s\":%.2f,"
           "\"broker_cpu_s_per_m\":%.3f,\"host_busy_s\":%.2f,"
           "\"measure_cpu_s\":%.2f,\"other_cpu_s\":%.2f,"
           "\"rss_peak_kib\":%lld,\"rss_end_kib\":%lld,"
           "\"rss_half1_kib\":%lld,\"rss_half2_kib\":%lld,"
           "\"children\":%zu,\"children_rss_peak_kib\":%lld,"
           "\"ctxt_switches_per_k\":%.1f,\"lowat_batches\":%lld,"
           "\"stop_s\":%.3f,\"exit\":%d}\n",
           fail == NULL ? "true" : "false", fail == NULL ? "" : fail, o.n,
           sec, sec > 0 ? (double)o.n / sec : 0.0,
           t_start > 0 ? (double)(t_start - t_spawn) / 1e9 : 0.0, cpu,
           cpu * perm, bcpu, bcpu * perm, host, mcpu,
           host - cpu - bcpu - mcpu, hwm, rss_end, half1, half2, c1.nkids,
           c1.kids_hwm_kib,
           (double)(c1.cswitches - c0.cswitches) * 1000.0 / (double)o.n,
           g_lowat, stop_s, exit_code);
    free(st);
    free(sr);
    if (w.rc != NULL)
        redisFree(w.rc);
    if (w.ac != NULL)
        bench_amqp_close(w.ac);
    return fail == NULL ? 0 : 1;
}

/* pub_rate.c - latency at a steady publish rate, and broker round trips.
 *
 *   pub_rate redis HOST PORT STREAM RATE SECONDS
 *   pub_rate amqp  HOST PORT QUEUE RATE SECONDS JOURNAL_FILE
 *   pub_rate rtt-redis HOST PORT COUNT
 *   pub_rate rtt-amqp  HOST PORT QUEUE COUNT
 *
 * redis: publishes RATE messages per second for SECONDS on a fixed
 *   schedule (open loop: a late publish does not delay the next ones),
 *   each "XADD STREAM * body {"t":<CLOCK_REALTIME ns>}", and records the
 *   id Redis gave it with that publish time. A second connection runs
 *   MONITOR, which reports every command Redis executes with Redis's own
 *   CLOCK_REALTIME timestamp (microseconds); each XACK on STREAM names the
 *   ids it acknowledges. Latency of a message = time Redis executed the
 *   XACK that named its id - time just before its XADD was sent: publish
 *   to ack, on one clock (same host).
 * amqp: publishes the same bodies to the default exchange, routing key
 *   QUEUE, and watches JOURNAL_FILE, which the daemon's `journal` task
 *   appends "<id> <body>" to, with inotify. Latency = time the line was
 *   read here - t in its body: publish to the end of the task's run (the
 *   ack follows it), plus this watcher's wake-up. RabbitMQ has no MONITOR
 *   that would show the ack itself.
 * In both, a third connection measures the broker's round trip during the
 *   run, paced at 1 per ms: PING (Redis), or a passive queue.declare of
 *   QUEUE (RabbitMQ: through the channel and the queue process).
 * rtt-*: COUNT such round trips back to back on an otherwise idle broker.
 *
 * Its threads run SCHED_FIFO (priority 1) where that is permitted ("rt":1
 * in the output), so that under load from elsewhere on the host the
 * publisher, the watcher and the pinger are not the ones kept waiting for
 * a CPU; the daemon and the broker keep their ordinary priority.
 *
 * BENCH_PIDS="PID..." (the daemon, the broker) adds other_cpu_s: the CPU
 * the rest of the host used during the run, besides them and this
 * program. BENCH_LAT_DUMP=FILE writes every latency.
 *
 * Prints one JSON object on stdout; times in microseconds. */
#include "bench_amqp.h"
#include "proc.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <strings.h>
#include <sys/inotify.h>

#include <hiredis/hiredis.h>

#define PROG "pub_rate"
#define ID_MAX 48

struct ack {
    char id[ID_MAX];
    int64_t t_ns;
};

struct pub {
    char id[ID_MAX];
    int64_t t_ns;
};

struct vec {
    int64_t *v;
    size_t n, cap;
};

static void vec_push(struct vec *v, int64_t x)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 1024;
        v->v = realloc(v->v, v->cap * sizeof *v->v);
        if (v->v == NULL)
            bench_die(PROG, "out of memory");
    }
    v->v[v->n++] = x;
}

static const char *g_host, *g_name;
static int g_port;
static atomic_int g_stop;
static atomic_int g_observer_ready;
static atomic_long g_observed;

/* ---- broker round trips ------------------------------------------------ */

struct pinger {
    int amqp;
    redisContext *rc;
    amqp_connection_state_t ac;
    struct vec rtt; /* ns */
};

static void pinger_open(struct pinger *p)
{
    if (p->amqp) {
        p->ac = bench_amqp_open(PROG, g_host, g_port);
        return;
    }
    p->rc = redisConnect(g_host, g_port);
    if (p->rc == NULL || p->rc->err)
        bench_die(PROG, "connect: %s", p->rc ? p->rc->errstr : "no memory");
}

static void ping_once(struct pinger *p)
{
    int64_t t0 = bench_mono_ns();
    if (p->amqp) {
        bench_amqp_ready(PROG, p->ac, g_name);
    } else {
        redisReply *r = redisCommand(p->rc, "PING");
        if (r == NULL)
            bench_die(PROG, "PING: %s", p->rc->errstr);
        freeReplyObject(r);
    }
    vec_push(&p->rtt, bench_mono_ns() - t0);
}

static void *pinger_main(void *arg)
{
    struct pinger *p = arg;
    int64_t next = bench_mono_ns();
    while (!atomic_load(&g_stop)) {
        ping_once(p);
        next += 1000000;
        bench_sleep_until(next);
    }
    return NULL;
}

/* ---- Redis: MONITOR ---------------------------------------------------- */

struct monitor {
    redisContext *rc;
    struct ack *acks;
    size_t n, cap;
};

/* next_token copies the quoted token at *p (MONITOR escapes with
 * backslashes) into out; returns 0, or -1 at the end of the line. */
static int next_token(const char **p, const char *end, char *out,
                      size_t size)
{
    const char *s = *p;
    while (s < end && *s == ' ')
        s++;
    if (s >= end || *s != '"')
        return -1;
    s++;
    size_t k = 0;
    while (s < end && *s != '"') {
        if (*s == '\\' && s + 1 < end)
            s++;
        if (k + 1 < size)
            out[k++] = *s;
        s++;
    }
    out[k] = '\0';
    *p = s < end ? s + 1 : end;
    return 0;
}

/* on_monitor_line takes "SEC.USEC [db addr] "XACK" "stream" "group" ids". */
static void on_monitor_line(struct monitor *m, const char *line, size_t len)
{
    const char *end = line + len;
    char *e;
    long long sec = strtoll(line, &e, 10);
    if (*e != '.')
        return;
    long long usec = strtoll(e + 1, &e, 10);
    const char *p = memchr(line, ']', len);
    if (p == NULL)
        return;
    p++;
    char tok[256];
    if (next_token(&p, end, tok, sizeof tok) != 0 ||
        strcasecmp(tok, "xack") != 0)
        return;
    if (next_token(&p, end, tok, sizeof tok) != 0 ||
        strcmp(tok, g_name) != 0)
        return;
    if (next_token(&p, end, tok, sizeof tok) != 0) /* group */
        return;
    int64_t t = (int64_t)sec * 1000000000LL + (int64_t)usec * 1000LL;
    while (next_token(&p, end, tok, sizeof tok) == 0) {
        if (m->n == m->cap) {
            m->cap = m->cap ? m->cap * 2 : 4096;
            m->acks = realloc(m->acks, m->cap * sizeof *m->acks);
            if (m->acks == NULL)
                bench_die(PROG, "out of memory");
        }
        size_t tl = strlen(tok);
        if (tl >= ID_MAX)
            continue; /* not an id of ours */
        memcpy(m->acks[m->n].id, tok, tl + 1);
        m->acks[m->n++].t_ns = t;
        atomic_fetch_add(&g_observed, 1);
    }
}

static void *monitor_main(void *arg)
{
    struct monitor *m = arg;
    redisReply *r = redisCommand(m->rc, "MONITOR");
    if (r == NULL || r->type == REDIS_REPLY_ERROR)
        bench_die(PROG, "MONITOR: %s", r ? r->str : m->rc->errstr);
    freeReplyObject(r);
    atomic_store(&g_observer_ready, 1);
    while (!atomic_load(&g_stop)) {
        struct pollfd pfd = {.fd = m->rc->fd, .events = POLLIN};
        if (poll(&pfd, 1, 50) <= 0)
            continue;
        if (redisBufferRead(m->rc) != REDIS_OK)
            bench_die(PROG, "MONITOR read: %s", m->rc->errstr);
        void *vr;
        while (redisGetReplyFromReader(m->rc, &vr) == REDIS_OK &&
               vr != NULL) {
            redisReply *x = vr;
            if (x->type == REDIS_REPLY_STATUS ||
                x->type == REDIS_REPLY_STRING)
                on_monitor_line(m, x->str, x->len);
            freeReplyObject(x);
        }
    }
    return NULL;
}

static int ack_cmp(const void *a, const void *b)
{
    return bench_id_cmp(((const struct ack *)a)->id,
                        ((const struct ack *)b)->id);
}

/* ---- RabbitMQ: the journal file ---------------------------------------- */

struct journal {
    const char *path;
    struct vec lat; /* ns: read here - t in the body */
    struct vec pub; /* t in the body, same order */
};

static void *journal_main(void *arg)
{
    struct journal *j = arg;
    int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (in < 0 || inotify_add_watch(in, j->path, IN_MODIFY) < 0)
        bench_die(PROG, "inotify %s: %s", j->path, strerror(errno));
    int fd = open(j->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        bench_die(PROG, "%s: %s", j->path, strerror(errno));
    off_t off = lseek(fd, 0, SEEK_END); /* older lines are not ours */
    static char buf[1 << 16];
    size_t have = 0;
    atomic_store(&g_observer_ready, 1);
    while (!atomic_load(&g_stop)) {
        struct pollfd pfd = {.fd = in, .events = POLLIN};
        if (poll(&pfd, 1, 50) <= 0)
            continue;
        char ev[4096];
        while (read(in, ev, sizeof ev) > 0) {
        }
        for (;;) {
            ssize_t k = pread(fd, buf + have, sizeof buf - 1 - have, off);
            if (k <= 0)
                break;
            int64_t now = bench_wall_ns();
            off += k;
            have += (size_t)k;
            buf[have] = '\0';
            char *s = buf, *nl;
            while ((nl = memchr(s, '\n', have - (size_t)(s - buf))) !=
                   NULL) {
                *nl = '\0';
                const char *t = strstr(s, "\"t\":");
                if (t != NULL) {
                    long long tp = strtoll(t + 4, NULL, 10);
                    vec_push(&j->lat, now - tp);
                    vec_push(&j->pub, tp);
                    atomic_fetch_add(&g_observed, 1);
                }
                s = nl + 1;
            }
            have -= (size_t)(s - buf);
            memmove(buf, s, have);
        }
    }
    close(fd);
    close(in);
    return NULL;
}

/* ---- output ------------------------------------------------------------ */

static void print_stats(const char *name, struct vec *v, int comma)
{
    qsort(v->v, v->n, sizeof *v->v, bench_cmp_i64);
    double sum = 0;
    for (size_t i = 0; i < v->n; i++)
        sum += (double)v->v[i];
    printf("\"%s_n\":%zu,\"%s_p50_us\":%.1f,\"%s_p99_us\":%.1f,"
           "\"%s_max_us\":%.1f,\"%s_mean_us\":%.1f%s",
           name, v->n, name, (double)bench_pct(v->v, v->n, 0.50) / 1e3, name,
           (double)bench_pct(v->v, v->n, 0.99) / 1e3, name,
           v->n ? (double)v->v[v->n - 1] / 1e3 : 0.0, name,
           v->n ? sum / (double)v->n / 1e3 : 0.0, comma ? "," : "");
}

/* try_rt asks for SCHED_FIFO priority 1 (inherited by new threads);
 * returns 1 when granted. */
static int try_rt(void)
{
    struct sched_param sp = {.sched_priority = 1};
    return sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
}

static int rtt_only(int amqp, long long count)
{
    int rt = try_rt();
    struct pinger p = {.amqp = amqp};
    pinger_open(&p);
    for (int i = 0; i < 100; i++) /* warm up */
        ping_once(&p);
    p.rtt.n = 0;
    for (long long i = 0; i < count; i++)
        ping_once(&p);
    printf("{\"mode\":\"rtt-%s\",\"rt\":%d,", amqp ? "amqp" : "redis", rt);
    print_stats("rtt", &p.rtt, 0);
    printf("}\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "rtt-redis") == 0) {
        g_host = argv[2];
        g_port = (int)bench_parse_long(PROG, "PORT", argv[3]);
        return rtt_only(0, bench_parse_long(PROG, "COUNT", argv[4]));
    }
    if (argc >= 6 && strcmp(argv[1], "rtt-amqp") == 0) {
        g_host = argv[2];
        g_port = (int)bench_parse_long(PROG, "PORT", argv[3]);
        g_name = argv[4];
        return rtt_only(1, bench_parse_long(PROG, "COUNT", argv[5]));
    }
    int amqp = argc == 8 && strcmp(argv[1], "amqp") == 0;
    if (!amqp && !(argc == 7 && strcmp(argv[1], "redis") == 0)) {
        fprintf(stderr,
                "usage: %s redis HOST PORT STREAM RATE SECONDS\n"
                "       %s amqp HOST PORT QUEUE RATE SECONDS JOURNAL_FILE\n"
                "       %s rtt-redis HOST PORT COUNT\n"
                "       %s rtt-amqp HOST PORT QUEUE COUNT\n",
                PROG, PROG, PROG, PROG);
        return 2;
    }
    g_host = argv[2];
    g_port = (int)bench_parse_long(PROG, "PORT", argv[3]);
    g_name = argv[4];
    long long rate = bench_parse_long(PROG, "RATE", argv[5]);
    long long secs = bench_parse_long(PROG, "SECONDS", argv[6]);
    if (rate < 1 || secs < 1)
        bench_die(PROG, "RATE and SECONDS must be positive");
    long long total = rate * secs;
    int rt = try_rt();

    /* the observer first: nothing published may go unseen */
    pthread_t obs, png;
    struct monitor mon = {0};
    struct journal jr = {0};
    if (amqp) {
        jr.path = argv[7];
        pthread_create(&obs, NULL, journal_main, &jr);
    } else {
        mon.rc = redisConnect(g_host, g_port);
        if (mon.rc == NULL || mon.rc->err)
            bench_die(PROG, "connect: %s",
                      mon.rc ? mon.rc->errstr : "no memory");
        pthread_create(&obs, NULL, monitor_main, &mon);
    }
    while (!atomic_load(&g_observer_ready))
        bench_sleep_until(bench_mono_ns() + 1000000);
    struct pinger pg = {.amqp = amqp};
    pinger_open(&pg);
    pthread_create(&png, NULL, pinger_main, &pg);

    redisContext *rc = NULL;
    amqp_connection_state_t ac = NULL;
    if (amqp)
        ac = bench_amqp_open(PROG, g_host, g_port);
    else if ((rc = redisConnect(g_host, g_port)) == NULL || rc->err)
        bench_die(PROG, "connect: %s", rc ? rc->errstr : "no memory");
    struct pub *pubs = calloc((size_t)total, sizeof *pubs);
    struct vec pub_rtt = {0};
    amqp_basic_properties_t props;
    memset(&props, 0, sizeof props);
    props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG |
                   AMQP_BASIC_DELIVERY_MODE_FLAG |
                   AMQP_BASIC_MESSAGE_ID_FLAG;
    props.content_type = amqp_cstring_bytes("application/json");
    props.delivery_mode = 1;

    /* BENCH_PIDS="PID...": the daemon and the broker, whose CPU is not
     * counted as load from elsewhere */
    pid_t pids[8];
    size_t npids = 0;
    const char *ps = getenv("BENCH_PIDS");
    while (ps != NULL && *ps != '\0' && npids < 8) {
        char *e;
        long v = strtol(ps, &e, 10);
        if (e == ps)
            break;
        pids[npids++] = (pid_t)v;
        ps = e;
    }
    long long ticks0 = 0, host0 = bench_host_ticks();
    double self0 = bench_self_cpu_s();
    for (size_t i = 0; i < npids; i++)
        ticks0 += bench_proc_ticks(pids[i]);
    int64_t w0 = bench_mono_ns();

    int64_t period = 1000000000LL / rate;
    int64_t start = bench_mono_ns() + 20000000LL, late = 0;
    for (long long i = 0; i < total; i++) {
        int64_t due = start + i * period;
        bench_sleep_until(due);
        int64_t m0 = bench_mono_ns();
        if (m0 - due > late)
            late = m0 - due;
        char body[64];
        int64_t t = bench_wall_ns();
        int blen = snprintf(body, sizeof body, "{\"t\":%lld}", (long long)t);
        pubs[i].t_ns = t;
        if (amqp) {
            char id[32];
            int ilen = snprintf(id, sizeof id, "lat-%lld", i);
            props.message_id.bytes = id;
            props.message_id.len = (size_t)ilen;
            amqp_bytes_t b = {.len = (size_t)blen, .bytes = body};
            int rc2 = amqp_basic_publish(ac, 1, amqp_empty_bytes,
                                         amqp_cstring_bytes(g_name), 0, 0,
                                         &props, b);
            if (rc2 != AMQP_STATUS_OK)
                bench_die(PROG, "publish: %s", amqp_error_string2(rc2));
        } else {
            const char *av[] = {"XADD", g_name, "*", "body", body};
            size_t al[] = {4, strlen(g_name), 1, 4, (size_t)blen};
            redisReply *r = redisCommandArgv(rc, 5, av, al);
            if (r == NULL || r->type != REDIS_REPLY_STRING)
                bench_die(PROG, "XADD: %s",
                          r ? (r->type == REDIS_REPLY_ERROR ? r->str : "?")
                            : rc->errstr);
            snprintf(pubs[i].id, ID_MAX, "%s", r->str);
            freeReplyObject(r);
        }
        vec_push(&pub_rtt, bench_mono_ns() - m0);
    }
    /* wait for the last ones, up to 10 s */
    int64_t until = bench_mono_ns() + 10000000000LL;
    while (atomic_load(&g_observed) < total && bench_mono_ns() < until)
        bench_sleep_until(bench_mono_ns() + 5000000);
    long long ticks1 = 0, host1 = bench_host_ticks();
    double self1 = bench_self_cpu_s();
    for (size_t i = 0; i < npids; i++)
        ticks1 += bench_proc_ticks(pids[i]);
    double window = (double)(bench_mono_ns() - w0) / 1e9;
    double tk = (double)sysconf(_SC_CLK_TCK);
    double other = (double)(host1 - host0 - ticks1 + ticks0) / tk -
                   (self1 - self0);
    atomic_store(&g_stop, 1);
    pthread_join(obs, NULL);
    pthread_join(png, NULL);

    struct vec lat = {0};
    /* BENCH_LAT_DUMP=FILE: every latency in publish order, for a closer
     * look ("publish_ns latency_ns") */
    const char *dump = getenv("BENCH_LAT_DUMP");
    FILE *df = dump != NULL ? fopen(dump, "w") : NULL;
    if (amqp) {
        lat = jr.lat;
        for (size_t i = 0; df != NULL && i < lat.n; i++)
            fprintf(df, "%lld %lld\n", (long long)jr.pub.v[i],
                    (long long)lat.v[i]);
    } else {
        qsort(mon.acks, mon.n, sizeof *mon.acks, ack_cmp);
        for (long long i = 0; i < total; i++) {
            struct ack key;
            snprintf(key.id, ID_MAX, "%s", pubs[i].id);
            struct ack *a = bsearch(&key, mon.acks, mon.n, sizeof key,
                                    ack_cmp);
            if (a != NULL) {
                vec_push(&lat, a->t_ns - pubs[i].t_ns);
                if (df != NULL)
                    fprintf(df, "%lld %lld\n", (long long)pubs[i].t_ns,
                            (long long)(a->t_ns - pubs[i].t_ns));
            }
        }
    }
    if (df != NULL)
        fclose(df);
    printf("{\"mode\":\"%s\",\"rt\":%d,\"rate\":%lld,\"published\":%lld,"
           "\"observed\":%zu,\"missing\":%lld,\"max_publish_late_us\":%.1f,"
           "\"window_s\":%.2f,\"other_cpu_s\":%.2f,",
           argv[1], rt, rate, total, lat.n, total - (long long)lat.n,
           (double)late / 1e3, window, npids > 0 ? other : 0.0);
    print_stats("lat", &lat, 1);
    print_stats("rtt", &pg.rtt, 1);
    print_stats("pub", &pub_rtt, 0);
    printf("}\n");
    return lat.n == (size_t)total ? 0 : 1;
}

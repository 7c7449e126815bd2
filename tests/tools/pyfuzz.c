/* pyfuzz.c - a bounded fuzzer of the Python host's boundary: loads
 * python.so as the daemon does (cb_init, a cb_worker_init per thread) and
 * runs tests/hosts/pyfuzz.py with random seeds from THREADS threads, each
 * run with a deadline of DEADLINE_MS, for SECONDS seconds. Fails (exit 1,
 * naming the seed) when a run ends with no valid outcome, a success whose
 * result is empty, or later than its deadline + 1 s (a run still going
 * 2 s after its deadline is told while it runs); a crash ends the
 * process (the test sees its signal).
 *
 *   pyfuzz PLUGIN_SO MODULE_DIR SECONDS [SEED [THREADS [DEADLINE_MS]]]
 */

#include "../../include/taskmill.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* SLACK_MS: how late after its deadline a run may end. */
#define SLACK_MS 1000

struct run {
    struct tm_call call; /* first: the host's callbacks get &call */
    char *result;
    size_t result_len;
    char error[256];
};

static const struct tm_task_plugin *desc;
static void *task_data;
static int64_t end_ms;
static unsigned long seed0;
static int64_t deadline_ms = 200;
static atomic_ulong next_case, runs, outcomes[4], logs, worst_late;
static atomic_int failed, done;
/* each thread's run in progress (deadline 0: none), for main's watch */
static _Atomic int64_t cur_deadline[16];
static atomic_ulong cur_seed[16];

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void h_log(const void *ctx, int kind, int level, const char *fmt, ...)
{
    (void)ctx;
    (void)kind;
    /* the first few lines, for the test's log; the rest counted */
    if (atomic_fetch_add(&logs, 1) >= 5 || level > TM_LOG_WARNING)
        return;
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "pyfuzz: log %d: %.500s\n", level, line);
}

static int h_set_result(struct tm_call *call, const char *json, size_t len)
{
    struct run *r = (struct run *)call;
    char *p = malloc(len + 1);
    if (p == NULL)
        return -1;
    memcpy(p, json, len);
    p[len] = '\0';
    free(r->result);
    r->result = p;
    r->result_len = len;
    return 0;
}

static void h_set_error(struct tm_call *call, const char *msg)
{
    struct run *r = (struct run *)call;
    snprintf(r->error, sizeof r->error, "%s", msg != NULL ? msg : "(null)");
}

static int h_should_stop(const struct tm_call *call)
{
    return call->deadline_ms > 0 && now_ms() >= call->deadline_ms;
}

static const struct tm_host host = {
    .struct_size = sizeof host,
    .log = h_log,
    .set_result = h_set_result,
    .set_error = h_set_error,
    .now_ms = now_ms,
    .should_stop = h_should_stop,
};

static void *worker(void *arg)
{
    int me = (int)(intptr_t)arg;
    void *wdata = NULL;
    if (desc->cb_worker_init != NULL &&
        desc->cb_worker_init(task_data, &wdata) != 0) {
        fprintf(stderr, "pyfuzz: worker init refused\n");
        atomic_store(&failed, 1);
        return NULL;
    }
    while (!atomic_load(&failed) && now_ms() < end_ms) {
        unsigned long seed = seed0 + atomic_fetch_add(&next_case, 1);
        char body[64];
        int n = snprintf(body, sizeof body, "{\"seed\":%lu}", seed);
        struct run r;
        memset(&r, 0, sizeof r);
        r.call.struct_size = sizeof r.call;
        r.call.body = body;
        r.call.body_len = (size_t)n;
        r.call.id = "fuzz";
        r.call.attempt = 1;
        r.call.task_data = task_data;
        r.call.worker_data = wdata;
        r.call.host = &host;
        int64_t t0 = now_ms();
        r.call.deadline_ms = t0 + deadline_ms;
        atomic_store(&cur_seed[me], seed);
        atomic_store(&cur_deadline[me], r.call.deadline_ms);
        int rc = desc->cb_run(&r.call);
        atomic_store(&cur_deadline[me], 0);
        int64_t late = now_ms() - r.call.deadline_ms;
        atomic_fetch_add(&runs, 1);
        if (late > 0) {
            unsigned long w = atomic_load(&worst_late);
            while ((unsigned long)late > w &&
                   !atomic_compare_exchange_weak(&worst_late, &w,
                                                 (unsigned long)late)) {
            }
        }
        if (rc < TM_TASK_OK || rc > TM_TASK_REJECT) {
            fprintf(stderr, "pyfuzz: seed %lu: outcome %d\n", seed, rc);
            atomic_store(&failed, 1);
        } else if (rc == TM_TASK_OK && r.result != NULL &&
                   r.result_len == 0) {
            fprintf(stderr, "pyfuzz: seed %lu: an empty result\n", seed);
            atomic_store(&failed, 1);
        } else if (rc != TM_TASK_OK && r.error[0] == '\0') {
            fprintf(stderr, "pyfuzz: seed %lu: outcome %d, no reason\n",
                    seed, rc);
            atomic_store(&failed, 1);
        }
        if (late > SLACK_MS) {
            fprintf(stderr, "pyfuzz: seed %lu: ended %lld ms after its "
                    "deadline\n", seed, (long long)late);
            atomic_store(&failed, 1);
        }
        atomic_fetch_add(&outcomes[rc >= 1 && rc <= 3 ? rc : 0], 1);
        free(r.result);
    }
    if (desc->cb_worker_fini != NULL)
        desc->cb_worker_fini(task_data, wdata);
    atomic_fetch_add(&done, 1);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: pyfuzz PLUGIN_SO MODULE_DIR SECONDS "
                "[SEED [THREADS [DEADLINE_MS]]]\n");
        return 2;
    }
    int seconds = atoi(argv[3]);
    seed0 = argc > 4 ? strtoul(argv[4], NULL, 10) : (unsigned long)time(NULL);
    int nthreads = argc > 5 ? atoi(argv[5]) : 2;
    if (argc > 6)
        deadline_ms = atoi(argv[6]);
    if (nthreads < 1 || nthreads > 16 || seconds < 1 || deadline_ms < 1)
        return 2;
    void *dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        fprintf(stderr, "pyfuzz: %s\n", dlerror());
        return 2;
    }
    const struct tm_task_plugin *(*get)(void) =
        (const struct tm_task_plugin *(*)(void))dlsym(dl, TM_TASK_SYMBOL);
    if (get == NULL || (desc = get()) == NULL || desc->cb_run == NULL) {
        fprintf(stderr, "pyfuzz: %s: no descriptor\n", argv[1]);
        return 2;
    }
    char config[4096];
    snprintf(config, sizeof config, "{\"module\":\"pyfuzz\",\"path\":[\"%s\"]}",
             argv[2]);
    struct tm_task_env env = {.struct_size = sizeof env,
                              .task = "fuzz",
                              .queue = "fuzz",
                              .config_json = config,
                              .host = &host};
    if (desc->cb_init != NULL && desc->cb_init(&env, &task_data) != 0) {
        fprintf(stderr, "pyfuzz: cb_init refused\n");
        return 1;
    }
    fprintf(stderr, "pyfuzz: seed %lu, %d thread(s), deadline %lld ms, "
            "%d s\n", seed0, nthreads, (long long)deadline_ms, seconds);
    end_ms = now_ms() + (int64_t)seconds * 1000;
    pthread_t th[16];
    for (int i = 0; i < nthreads; i++)
        if (pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i) != 0)
            return 2;
    /* a run that never returns is told here, not by a test's watchdog */
    struct timespec tick = {0, 20 * 1000000L};
    while (atomic_load(&done) < nthreads) {
        nanosleep(&tick, NULL);
        for (int i = 0; i < nthreads; i++) {
            int64_t d = atomic_load(&cur_deadline[i]);
            if (d > 0 && now_ms() - d > 2 * SLACK_MS) {
                fprintf(stderr, "pyfuzz: seed %lu still running %lld ms "
                        "after its deadline\n", atomic_load(&cur_seed[i]),
                        (long long)(now_ms() - d));
                fflush(stderr);
                _exit(1);
            }
        }
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    if (desc->cb_fini != NULL)
        desc->cb_fini(task_data);
    printf("pyfuzz: %lu runs: %lu ok, %lu error, %lu rejected; latest end "
           "%lu ms after a deadline; %lu log lines\n",
           atomic_load(&runs), atomic_load(&outcomes[TM_TASK_OK]),
           atomic_load(&outcomes[TM_TASK_ERROR]),
           atomic_load(&outcomes[TM_TASK_REJECT]), atomic_load(&worst_late),
           atomic_load(&logs));
    /* the interpreter and its watchdog stay: end without unloading */
    fflush(stdout);
    _exit(atomic_load(&failed) ? 1 : 0);
}

/* wedge.c - test plugin for runs that outlive their deadline in the
 * thread pool: a run never looks at should_stop(). Body {"ms": N}:
 *   N >= 0  sleeps N ms in one piece, then reads its body again, logs
 *           (through the host, which names the message), checks that
 *           its worker data (cb_worker_init) is still alive and
 *           succeeds with {"slept": N}: a run the daemon settled at its
 *           deadline meanwhile uses all of these after the settlement
 *   N < 0   never returns (sleeps in a loop): wedged code
 * Worker data is stamped live by cb_worker_init and cleared by
 * cb_worker_fini, so a run whose worker data was finalised under it
 * fails with an error saying so. Config key "worker_inits": N lets the
 * first N worker inits of the task succeed and refuses the others (no
 * limit without it). */
#define _POSIX_C_SOURCE 200809L
#include <taskmill.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Stamp of live worker data; fini clears it before freeing. */
#define WEDGE_WORKER_MAGIC 0x57454447u /* "WEDG" */

/* what cb_init read from the config */
struct wedge_task {
    int64_t worker_inits; /* -1: no limit */
    atomic_llong inits;   /* worker inits so far */
};

static int cb_init(const struct tm_task_env *env, void **task_data)
{
    struct wedge_task *t = malloc(sizeof *t);
    if (t == NULL)
        return -1;
    t->worker_inits = -1;
    atomic_init(&t->inits, 0);
    if (env->config_json != NULL &&
        tm_json_get_int_range(env->host, env->config_json, "worker_inits",
                              0, 1000000, &t->worker_inits) == TM_JSON_BAD_TEXT) {
        free(t);
        return -1;
    }
    *task_data = t;
    return 0;
}

static void cb_fini(void *task_data)
{
    free(task_data);
}

static int cb_worker_init(void *task_data, void **worker_data)
{
    struct wedge_task *t = task_data;
    long long n = atomic_fetch_add(&t->inits, 1) + 1;
    if (t->worker_inits >= 0 && n > t->worker_inits)
        return -1;
    uint32_t *w = malloc(sizeof *w);
    if (w == NULL)
        return -1;
    *w = WEDGE_WORKER_MAGIC;
    *worker_data = w;
    return 0;
}

static void cb_worker_fini(void *task_data, void *worker_data)
{
    (void)task_data;
    uint32_t *w = worker_data;
    *w = 0;
    free(w);
}

static void nap(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int cb_run(struct tm_call *call)
{
    int64_t ms = 0;
    if (tm_json_get_int_range(call->host, call->body, "ms", -1, 600000,
                              &ms) != TM_JSON_OK) {
        tm_error(call, "field 'ms' must be an integer from -1 to 600000");
        return TM_TASK_REJECT;
    }
    if (ms < 0)
        for (;;)
            nap(1000);
    nap((long)ms);
    int64_t again = -2;
    if (tm_json_get_int_range(call->host, call->body, "ms", -1, 600000,
                              &again) != TM_JSON_OK ||
        again != ms) {
        tm_error(call, "the body changed under a running call");
        return TM_TASK_ERROR;
    }
    tm_log(call, TM_LOG_INFO, "slept %lld ms on message %s",
           (long long)ms, call->id);
    const uint32_t *w = call->worker_data;
    if (w == NULL || *w != WEDGE_WORKER_MAGIC) {
        tm_error(call, "worker data was finalised under a running call");
        return TM_TASK_ERROR;
    }
    char out[64];
    snprintf(out, sizeof out, "{\"slept\":%lld}", (long long)ms);
    return tm_result(call, out) == 0 ? TM_TASK_OK : TM_TASK_ERROR;
}

TM_TASK_DECLARE(
    .name = "test-wedge",
    .version = "1.0.0",
    .description = "test plugin: sleeps ignoring should_stop(), or never "
                   "returns",
    .cb_init = cb_init,
    .cb_fini = cb_fini,
    .cb_worker_init = cb_worker_init,
    .cb_worker_fini = cb_worker_fini,
    .cb_run = cb_run,
)

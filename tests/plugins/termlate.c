/* termlate.c - test plugin for the fork pool's timeouts: a run that
 * outlives its limit but answers after the parent's SIGTERM, then a run
 * that only just started when the SIGKILL lands. Body {"mode": M}:
 *   "late"  waits (up to 30 s) for SIGTERM, which its worker process
 *           catches, then 100 ms more, and returns success
 *   "nap"   sleeps 1500 ms, not looking at should_stop(), then succeeds
 * cb_worker_init installs the SIGTERM handler: use it in fork pools only.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include <taskmill.h>

static volatile sig_atomic_t term_seen;

static void on_term(int sig)
{
    (void)sig;
    term_seen = 1;
}

static int cb_worker_init(void *task_data, void **worker_data)
{
    (void)task_data;
    *worker_data = NULL;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGTERM, &sa, NULL) == 0 ? 0 : -1;
}

static void nap_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000,
                          .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int cb_run(struct tm_call *call)
{
    if (strstr(call->body, "\"mode\":\"late\"") != NULL) {
        for (int i = 0; i < 3000 && !term_seen; i++)
            nap_ms(10);
        nap_ms(100); /* clearly past the limit, by its own clock too */
        return TM_TASK_OK;
    }
    if (strstr(call->body, "\"mode\":\"nap\"") != NULL) {
        nap_ms(1500);
        return TM_TASK_OK;
    }
    tm_error(call, "unknown mode; expected \"late\" or \"nap\"");
    return TM_TASK_REJECT;
}

TM_TASK_DECLARE(
    .name = "test-termlate",
    .version = "0.0.1",
    .description = "test plugin: answers after SIGTERM",
    .cb_worker_init = cb_worker_init,
    .cb_run = cb_run,
)

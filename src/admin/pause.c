/* pause.c - pausing and resuming a task's intake on every daemon, through
 * the state the broker keeps. */
#include "admin/admin.h"

#include <assert.h>
#include <pthread.h>

#include "daemon/daemon.h"

int tm_admin_pause(struct tm_broker *b, const struct tm_cfg_task *t,
                   int paused, struct tm_admin_err *e)
{
    if (b->ops->pause->pause_set == NULL) {
        tm_admin_error(e, TM_ADMIN_E_NO_PAUSE, "the %s broker cannot pause "
                       "a task", b->ops->kind);
        return -1;
    }
    if (b->ops->pause->pause_set(b, t, paused) != 0) {
        tm_admin_error(e, TM_ADMIN_E_BROKER, "%s", b->errstr);
        return -1;
    }
    return 0;
}

void tm_admin_pause_note(struct tm_daemon *d, const char *task, int paused)
{
    /* the intake to tell is the one running now: the task of that name
     * in the configuration published now, whose index is that of
     * d->broker's task (a quick local call, made under gen_lock) */
    pthread_rwlock_rdlock(&d->gen_lock);
    const struct tm_cfg_task *now = tm_cfg_find_task(d->cfg, task);
    if (now != NULL && d->broker != NULL &&
        d->broker->ops->pause->pause_note != NULL) {
        size_t i = (size_t)(now - d->cfg->tasks);
        assert(i < d->cfg->ntasks);
        d->broker->ops->pause->pause_note(d->broker, i, paused);
    }
    pthread_rwlock_unlock(&d->gen_lock);
}

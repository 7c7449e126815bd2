/* plugin_watch.c - reload when .so files in plugin_dir change. */
#include "daemon_private.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "util/log.h"
#include "util/util.h"

/* tm_plugin_watch_main asks for a reload when a .so file in plugin_dir is written,
 * replaced, added or removed; bursts (a copy, then a rename) are merged. */
void *tm_plugin_watch_main(void *arg)
{
    struct tm_daemon *d = arg;
    /* d->cfg is swapped by a reload and the old one freed once retired:
     * read it under gen_lock, once. plugin_dir needs a restart to change,
     * so the copy stays right for the life of the thread. */
    pthread_rwlock_rdlock(&d->gen_lock);
    char *dir = tm_strdup(d->cfg->plugin_dir);
    pthread_rwlock_unlock(&d->gen_lock);
    int fd = inotify_init1(IN_CLOEXEC);
    if (fd < 0 ||
        inotify_add_watch(fd, dir,
                          IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE |
                              IN_DELETE | IN_MOVED_FROM | IN_ATTRIB) < 0) {
        char eb[TM_STRERRNO_BUF];
        tm_log_err(TM_DAEMON_SRC, "plugin_watch: cannot watch %s: %s",
                   dir, tm_strerror(errno, eb, sizeof eb));
        goto out;
    }
    tm_log_info(TM_DAEMON_SRC, "plugin_watch: watching %s", dir);
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            break;
        }
        int hit = 0;
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *e = (struct inotify_event *)(void *)p;
            size_t len = e->len ? strlen(e->name) : 0;
            if (len > 3 && strcmp(e->name + len - 3, ".so") == 0)
                hit = 1;
            p += sizeof *e + e->len;
        }
        if (!hit)
            continue;
        /* let the rest of an install land before reloading */
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        while (poll(&pfd, 1, 300) > 0 && read(fd, buf, sizeof buf) > 0) {
        }
        tm_log_info(TM_DAEMON_SRC, "plugin_watch: plugins changed in %s; reloading",
                    dir);
        atomic_store(&d->reload, 1);
        pthread_mutex_lock(&d->stop_mu);
        pthread_cond_broadcast(&d->stop_cv);
        pthread_mutex_unlock(&d->stop_mu);
    }
out:
    if (fd >= 0)
        close(fd);
    tm_free(dir);
    return NULL;
}

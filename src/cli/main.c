/* cli/main.c - the entry point: picks the command (src/cli/) or the daemon. */
#include "daemon/daemon.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include "cli/cli.h"
#include "http/http.h"
#include "util/crash.h"
#include "util/log.h"
#include "util/util.h"

/* raise_nofile lifts the soft descriptor limit to the hard one: the
 * daemon holds broker connections, plugin files, pool sockets and HTTP
 * connections, and its HTTP server sizes itself to what is allowed. Only
 * epoll and poll are used, so descriptors past FD_SETSIZE are fine. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == rl.rlim_max)
        return;
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        char eb[TM_STRERRNO_BUF];
        tm_log_warn("daemon", "cannot raise the descriptor limit from %llu "
                    "to %llu: %s", (unsigned long long)was,
                    (unsigned long long)rl.rlim_max,
                    tm_strerror(errno, eb, sizeof eb));
    }
}

/* keep_private makes the process non-dumpable, before anything is read:
 * then its /proc/PID/environ, mem, maps and fd links are open only to
 * processes with CAP_SYS_PTRACE (root), not to others of the same uid such
 * as task code (exec commands, Python subprocesses) that would otherwise
 * read the broker URL's password or the HTTP token there. The flag is kept
 * across fork (the fork pool's workers) and reset by execve (an exec
 * command is dumpable again, which exposes only its own environment). It
 * also means no core dump and no ptrace attach by the same uid: with
 * TASKMILL_DUMPABLE=1 in the environment the process stays dumpable (see
 * docs/operations.md). */
static void keep_private(void)
{
    const char *keep = getenv("TASKMILL_DUMPABLE");
    if (keep != NULL && strcmp(keep, "1") == 0)
        return;
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
        char eb[TM_STRERRNO_BUF];
        tm_log_warn("daemon", "cannot make the process non-dumpable: %s",
                    tm_strerror(errno, eb, sizeof eb));
    }
}

int main(int argc, char **argv)
{
    keep_private();
    if (argc >= 2 && (strcmp(argv[1], "--version") == 0 ||
                      strcmp(argv[1], "-V") == 0)) {
        printf("taskmill %s\n", TM_VERSION);
        return TM_EXIT_OK;
    }
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 ||
                      strcmp(argv[1], "-h") == 0)) {
        fputs(tm_cli_usage, stdout);
        return TM_EXIT_OK;
    }
    /* no argument at all: help, rather than a daemon started by accident */
    if (argc < 2) {
        fputs(tm_cli_usage, stderr);
        return TM_EXIT_USAGE;
    }
    struct tm_cli_args a;
    int rc = tm_cli_parse(argc, argv, &a);
    if (rc != 0)
        return rc;
    if (strcmp(a.cmd, "run") == 0 && a.npos != 0)
        return tm_cli_usage_error("unexpected argument '%s'", a.pos[0]);
    struct tm_cfg *cfg = tm_cli_load_config(&a);
    if (cfg == NULL)
        return TM_EXIT_USAGE;
    tm_log_setup(cfg->log_level, cfg->log_format);
    tm_crash_install();
    if (strcmp(a.cmd, "check") == 0)
        return tm_cli_check(cfg);
    if (strcmp(a.cmd, "emit") == 0)
        return tm_cli_emit(cfg, &a);
    if (strcmp(a.cmd, "invoke") == 0)
        return tm_cli_invoke(cfg, &a);
    if (strcmp(a.cmd, "dlq") == 0)
        return tm_cli_dlq(cfg, &a);
    if (strcmp(a.cmd, "delayed") == 0)
        return tm_cli_delayed(cfg, &a);
    if (strcmp(a.cmd, "pause") == 0 || strcmp(a.cmd, "resume") == 0)
        return tm_cli_pause(cfg, &a);
    if (strcmp(a.cmd, "schedules") == 0)
        return tm_cli_schedules(cfg, &a);
    raise_nofile();
    static const struct tm_daemon_http http = { tm_http_start, tm_http_stop };
    return tm_daemon_run(cfg, &http);
}

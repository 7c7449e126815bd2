/* config_fixture.h - what the configuration's unit tests share
 * (test_config*.c, one binary each): a scratch directory for the YAML
 * files they load, loading a text, expecting an error at a position,
 * and running a suite (unit_main.h) in that directory. */
#ifndef TASKMILL_TEST_CONFIG_FIXTURE_H
#define TASKMILL_TEST_CONFIG_FIXTURE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* mkdtemp, setenv */
#endif

#include "config/config.h"
#include "daemon/daemon.h" /* tm_broker_load_config */

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "unit_main.h"
#include "util/util.h"

/* The scratch directory every test writes its YAML files into. */
static char g_dir[64];

/* write_file writes text to g_dir/name; returns the path (static). */
static inline const char *write_file(const char *name, const char *text)
{
    static char path[PATH_MAX];
    tm_snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

/* load_text loads text as the daemon does: the file, then its broker
 * adapter's check (tm_broker_load_config). */
static inline struct tm_cfg *load_text(const char *text, char *err, size_t errlen)
{
    return tm_broker_load_config(write_file("c.yaml", text), 1, err, errlen,
                                 NULL);
}

/* expect_error loads yaml and checks the error is one line starting with
 * "FILE:POS: " and containing msg. */
static inline void expect_error(const char *yaml, const char *pos, const char *msg)
{
    char err[1024], prefix[PATH_MAX + 32];
    const char *path = write_file("bad.yaml", yaml);
    memset(err, 'x', sizeof err);
    struct tm_cfg *cfg = tm_broker_load_config(path, 1, err, sizeof err, NULL);
    ck_assert_msg(cfg == NULL, "loaded, but expected '%s' at %s:\n%s", msg,
                  pos, yaml);
    if (getenv("TM_TEST_SHOW_ERRORS") != NULL)
        fprintf(stderr, "%s\n", err);
    tm_snprintf(prefix, sizeof prefix, "%s:%s: ", path, pos);
    ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0,
                  "error '%s' does not start with '%s'", err, prefix);
    ck_assert_msg(strstr(err, msg) != NULL,
                  "error '%s' does not contain '%s'", err, msg);
    ck_assert_msg(strchr(err, '\n') == NULL, "error '%s' has a newline",
                  err);
}

#define TASK "tasks:\n  add:\n    plugin: add.so\n"
/* lines 4 to 6 of a config with a schedule; its keys follow on line 7 */
#define SCHED "schedules:\n  nightly:\n    task: add\n"

/* remove_dir removes the scratch directory and every file the tests
 * wrote into it (they write no subdirectories). */
static inline void remove_dir(void)
{
    DIR *d = opendir(g_dir);
    if (d != NULL) {
        struct dirent *e;
        char path[PATH_MAX];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            tm_snprintf(path, sizeof path, "%s/%s", g_dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    if (rmdir(g_dir) != 0)
        perror(g_dir);
}

/* run_in_scratch_dir makes a fresh scratch directory (g_dir), runs s
 * there with tm_unit_run, then removes the directory; the exit status of
 * a test binary. */
static inline int run_in_scratch_dir(Suite *s)
{
    tm_snprintf(g_dir, sizeof g_dir, "/tmp/tm-config-XXXXXX");
    if (mkdtemp(g_dir) == NULL) {
        perror("mkdtemp");
        return EXIT_FAILURE;
    }
    int status = tm_unit_run(s);
    remove_dir();
    return status;
}

#endif

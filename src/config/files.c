/* config/files.c - paths relative to the config file, and reading files it names. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* memrchr */
#endif

#include "config/config_private.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <yaml.h>

#include "taskmill.h" /* TM_LOG_* levels */
#include "util/util.h"

/* --------------------------------------------------------------- paths */

/* tm_cfg_path_join resolves rel against dir (rel as it is when absolute). */
char *tm_cfg_path_join(const char *dir, const char *rel)
{
    if (rel[0] == '/')
        return tm_strdup(rel);
    while (rel[0] == '.' && rel[1] == '/') {
        rel += 2;
        while (*rel == '/')
            rel++;
    }
    if (*rel == '\0' || strcmp(rel, ".") == 0)
        return tm_strdup(dir);
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    if (dl == 1 && dir[0] == '/')
        return tm_asprintf("/%s", rel);
    return tm_asprintf("%.*s/%s", (int)dl, dir, rel);
}

/* tm_cfg_trim_slashes drops trailing slashes, keeping a lone "/". */
void tm_cfg_trim_slashes(char *p)
{
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
}

/* tm_cfg_config_dir returns the absolute directory of the config file, so that
 * relative paths keep working after a chdir. */
char *tm_cfg_config_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir;
    if (slash == NULL)
        dir = tm_strdup(".");
    else if (slash == path)
        dir = tm_strdup("/");
    else
        dir = tm_strndup(path, (size_t)(slash - path));
    if (dir[0] != '/') {
        char cwd[PATH_MAX];
        if (getcwd(cwd, sizeof cwd) != NULL) {
            char *abs = tm_cfg_path_join(cwd, dir);
            tm_free(dir);
            dir = abs;
        }
    }
    tm_cfg_trim_slashes(dir);
    return dir;
}

/* tm_cfg_read_file reads at most max bytes of path into a NUL-terminated buffer.
 * Returns 0, or -1 with errno set and *opened telling open from read. */
int tm_cfg_read_file(const char *path, size_t max, char **out, size_t *len,
                     int *opened)
{
    *opened = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    *opened = 1;
    struct stat st;
    if (fstat(fd, &st) < 0)
        goto fail;
    if (S_ISDIR(st.st_mode)) {
        errno = EISDIR;
        goto fail;
    }
    struct sbuf b = {0};
    char chunk[8192];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            tm_free(b.p);
            errno = e;
            goto fail;
        }
        if (n == 0)
            break;
        if (b.len + (size_t)n > max) {
            tm_free(b.p);
            errno = EFBIG;
            goto fail;
        }
        tm_cfg_sb_add(&b, chunk, (size_t)n);
    }
    close(fd);
    *len = b.len;
    *out = tm_cfg_sb_take(&b);
    return 0;

fail:
    {
        int e = errno;
        close(fd);
        errno = e;
    }
    return -1;
}

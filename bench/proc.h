/* proc.h - the /proc readers shared by the bench/ programs (header only,
 * like bench.h): a process's CPU ticks, its status fields (VmRSS, VmHWM),
 * its process tree and context switches, the host's busy ticks and this
 * program's own CPU. Every reader returns what it could read: a process
 * that is gone reads as -1 (or adds nothing to a sum). */
#ifndef TASKMILL_BENCH_PROC_H
#define TASKMILL_BENCH_PROC_H

#include "bench.h"

#include <dirent.h>
#include <sys/resource.h>

/* the most processes a tree holds for these readers */
#define BENCH_MAX_PROCS 256

/* bench_proc_ticks returns utime+stime of pid, or -1. */
static inline long long bench_proc_ticks(pid_t pid)
{
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* fields after "(comm)": state is field 3, utime 14, stime 15 */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return -1;
    unsigned long long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
               &ut, &st) != 2)
        return -1;
    return (long long)(ut + st);
}

/* bench_host_ticks sums the non-idle columns of /proc/stat's cpu line. */
static inline long long bench_host_ticks(void)
{
    FILE *f = fopen("/proc/stat", "re");
    if (f == NULL)
        return 0;
    unsigned long long v[8] = {0};
    int k = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
                   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (k < 4)
        return 0;
    /* user nice system [idle] [iowait] irq softirq steal */
    return (long long)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
}

static inline double bench_self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* bench_status_kib returns a "Field:" of /proc/pid/status in KiB (VmRSS,
 * VmHWM, ...), or -1. */
static inline long long bench_status_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -1;
    long long v = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, field, fl) == 0 && line[fl] == ':') {
            v = strtoll(line + fl + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* bench_tree_add appends pid and then its descendants (the children files
 * of all its threads, depth first) to out[n..cap); returns the new count. */
static inline size_t bench_tree_add(pid_t pid, pid_t *out, size_t n,
                                    size_t cap)
{
    if (n >= cap)
        return n;
    out[n++] = pid;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return n;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char cpath[300];
        snprintf(cpath, sizeof cpath, "/proc/%d/task/%s/children", (int)pid,
                 e->d_name);
        FILE *f = fopen(cpath, "re");
        if (f == NULL)
            continue;
        int c;
        while (n < cap && fscanf(f, "%d", &c) == 1)
            n = bench_tree_add((pid_t)c, out, n, cap);
        fclose(f);
    }
    closedir(d);
    return n;
}

/* bench_tree_pids fills out[0..cap) with pid (out[0]) and its descendants;
 * returns how many. */
static inline size_t bench_tree_pids(pid_t pid, pid_t *out, size_t cap)
{
    return bench_tree_add(pid, out, 0, cap);
}

/* bench_ctxt_switches sums the voluntary and involuntary context switches
 * of every thread of pid. */
static inline long long bench_ctxt_switches(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    long long sum = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char spath[300], line[256];
        snprintf(spath, sizeof spath, "/proc/%d/task/%s/status", (int)pid,
                 e->d_name);
        FILE *f = fopen(spath, "re");
        if (f == NULL)
            continue;
        while (fgets(line, sizeof line, f) != NULL) {
            const char *v = strchr(line, ':');
            if (v != NULL && strstr(line, "ctxt_switches") != NULL)
                sum += strtoll(v + 1, NULL, 10);
        }
        fclose(f);
    }
    closedir(d);
    return sum;
}

#endif /* TASKMILL_BENCH_PROC_H */

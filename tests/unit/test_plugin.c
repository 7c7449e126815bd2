/* test_plugin.c - unit tests of the plugin loader and example plugins. */
#include <check.h>
#include <fcntl.h>
#include <ftw.h> /* nftw: emptying the scratch directory */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "task/task.h"
#include "task/plugin.h"
#include "util/util.h"

#include "unit_main.h"

/* ERRLEN is the size of the reason buffers, as the daemon uses them. */
#define ERRLEN 512

/* build_dir returns $TM_BUILD, the build directory holding plugins/ and
 * test-plugins/; "build" when unset (run from the source tree). */
static const char *build_dir(void)
{
    const char *b = getenv("TM_BUILD");
    return b != NULL && b[0] != '\0' ? b : "build";
}

/* plugin_path returns "<build>/<sub>/<name>.so" in a static buffer. */
static const char *plugin_path(const char *sub, const char *name)
{
    static char path[PATH_MAX];
    tm_snprintf(path, sizeof path, "%s/%s/%s.so", build_dir(), sub, name);
    return path;
}

/* assert_one_line checks that err is one non-empty line starting with
 * path. */
static void assert_one_line(const char *err, const char *path)
{
    ck_assert_msg(err[0] != '\0', "empty reason for %s", path);
    ck_assert_msg(strchr(err, '\n') == NULL, "reason not one line: %s",
                  err);
    ck_assert_msg(strncmp(err, path, strlen(path)) == 0 &&
                      err[strlen(path)] == ':',
                  "reason does not start with the path: %s", err);
}

/* refused loads path, expects a refusal and returns the reason (static
 * buffer) after checking its shape and that it contains want. */
static const char *refused(const char *path, const char *want)
{
    static char err[ERRLEN];
    struct tm_plugin *p = tm_plugin_load(path, err, sizeof err);
    ck_assert_msg(p == NULL, "%s was loaded", path);
    assert_one_line(err, path);
    ck_assert_msg(strstr(err, want) != NULL, "reason '%s' lacks '%s'", err,
                  want);
    return err;
}

/* load loads path and fails the test when it is refused. */
static struct tm_plugin *load(const char *path)
{
    char err[ERRLEN];
    struct tm_plugin *p = tm_plugin_load(path, err, sizeof err);
    ck_assert_msg(p != NULL, "refused: %s", err);
    return p;
}

/* ---- a scratch directory for mode and symlink tests ---- */

static char scratch[PATH_MAX];

static void scratch_setup(void)
{
    tm_snprintf(scratch, sizeof scratch, "%s/tm-plugin-XXXXXX",
                getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(scratch));
    ck_assert_int_eq(chmod(scratch, 0755), 0);
}

/* remove_entry is the nftw(3) callback that empties the scratch dir. */
static int remove_entry(const char *path, const struct stat *st, int type,
                        struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    if (remove(path) != 0)
        fprintf(stderr, "cannot remove %s\n", path);
    return 0;
}

static void scratch_teardown(void)
{
    nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* copy_file copies from to to, created with mode. */
static void copy_file(const char *from, const char *to, mode_t mode)
{
    char buf[65536];
    int in = open(from, O_RDONLY | O_CLOEXEC);
    ck_assert_msg(in >= 0, "open %s failed", from);
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_msg(out >= 0, "create %s failed", to);
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        ck_assert_int_ge(n, 0);
        if (n == 0)
            break;
        ck_assert_int_eq(write(out, buf, (size_t)n), n);
    }
    close(in);
    close(out);
    ck_assert_int_eq(chmod(to, mode), 0); /* not subject to the umask */
}

/* ---- loading the example plugins ---- */

static const char *const examples[] = {"noop", "add", "sleep", "fail",
                                       "journal"};

START_TEST(test_examples_load)
{
    const char *name = examples[_i];
    const char *path = plugin_path("plugins", name);
    struct tm_plugin *p = load(path);
    ck_assert_str_eq(p->path, path);
    ck_assert_ptr_nonnull(p->dl);
    ck_assert_str_eq(p->desc.name, name);
    ck_assert_str_ne(p->desc.version, "");
    ck_assert_ptr_nonnull(p->desc.description);
    ck_assert_ptr_nonnull(p->desc.cb_run);
    ck_assert_uint_eq(p->desc.magic, TM_TASK_MAGIC);
    ck_assert_uint_eq(p->desc.abi_major, TM_TASK_ABI_MAJOR);
    ck_assert_int_eq(p->inited, 0);
    /* Declared schemas are valid JSON objects. */
    const char *schemas[] = {p->desc.request_schema,
                             p->desc.response_schema};
    for (size_t i = 0; i < 2; i++) {
        if (schemas[i] == NULL)
            continue;
        cJSON *j = cJSON_Parse(schemas[i]);
        ck_assert_msg(cJSON_IsObject(j), "%s: schema %zu is not JSON: %s",
                      name, i, schemas[i]);
        cJSON_Delete(j);
    }
    tm_plugin_free(p);
}
END_TEST

START_TEST(test_add_declares_schemas)
{
    struct tm_plugin *p = load(plugin_path("plugins", "add"));
    ck_assert_ptr_nonnull(p->desc.request_schema);
    ck_assert_ptr_nonnull(p->desc.response_schema);
    cJSON *req = cJSON_Parse(p->desc.request_schema);
    cJSON *req_names = cJSON_GetObjectItem(req, "required");
    ck_assert_int_eq(cJSON_GetArraySize(req_names), 2);
    cJSON *a = cJSON_GetObjectItem(cJSON_GetObjectItem(req, "properties"),
                                   "a");
    ck_assert_str_eq(cJSON_GetObjectItem(a, "type")->valuestring,
                     "integer");
    cJSON *resp = cJSON_Parse(p->desc.response_schema);
    cJSON *sum = cJSON_GetObjectItem(
        cJSON_GetObjectItem(resp, "properties"), "sum");
    ck_assert_str_eq(cJSON_GetObjectItem(sum, "type")->valuestring,
                     "integer");
    cJSON_Delete(req);
    cJSON_Delete(resp);
    tm_plugin_free(p);
}
END_TEST

START_TEST(test_ok_plugin)
{
    struct tm_plugin *p = load(plugin_path("test-plugins", "ok"));
    ck_assert_str_eq(p->desc.name, "test-ok");
    ck_assert_str_eq(p->desc.version, "0.0.1");
    tm_plugin_free(p);
    tm_plugin_free(NULL);
}
END_TEST

START_TEST(test_same_file_twice)
{
    /* Two tasks may use one .so: each gets its own plugin and task data,
     * and they share one loaded copy of the file (its code and statics):
     * 500 tasks of one plugin cost one copy. */
    const char *path = plugin_path("test-plugins", "ok");
    struct tm_plugin *a = load(path);
    struct tm_plugin *b = load(path);
    ck_assert_ptr_eq(a->obj, b->obj);
    ck_assert_ptr_eq(a->dl, b->dl);
    struct tm_task_env env_a = {.struct_size = sizeof env_a, .task = "a",
                                .config_json = "{}",
                                .host = tm_exec_host()};
    struct tm_task_env env_b = env_a;
    env_b.task = "b";
    char err[ERRLEN];
    ck_assert_int_eq(tm_plugin_init(a, &env_a, err, sizeof err), 0);
    ck_assert_int_eq(tm_plugin_init(b, &env_b, err, sizeof err), 0);
    ck_assert_str_eq(a->task_data, "a");
    ck_assert_str_eq(b->task_data, "b");
    tm_plugin_free(a);
    ck_assert_str_eq(b->task_data, "b"); /* still mapped */
    tm_plugin_free(b);
}
END_TEST

START_TEST(test_minor_versions)
{
    /* Older minor: fields past its struct_size read as zero. */
    struct tm_plugin *p = load(plugin_path("test-plugins", "oldminor"));
    ck_assert_str_eq(p->desc.name, "test-oldminor");
    ck_assert_ptr_nonnull(p->desc.cb_run);
    for (size_t i = 0; i < sizeof p->desc.spare / sizeof p->desc.spare[0];
         i++)
        ck_assert_ptr_null(p->desc.spare[i]);
    tm_plugin_free(p);

    /* Newer minor: larger descriptor, the known part is read. */
    p = load(plugin_path("test-plugins", "newminor"));
    ck_assert_str_eq(p->desc.name, "test-newminor");
    ck_assert_uint_eq(p->desc.abi_minor, TM_TASK_ABI_MINOR + 1);
    ck_assert_uint_eq(p->desc.struct_size,
                      sizeof(struct tm_task_plugin) + 4 * sizeof(void *));
    tm_plugin_free(p);
}
END_TEST

/* ---- refusals ---- */

START_TEST(test_refuse_missing_file)
{
    char path[PATH_MAX];
    tm_snprintf(path, sizeof path, "%s/test-plugins/no-such-plugin.so",
                build_dir());
    refused(path, "cannot open: No such file or directory");
}
END_TEST

START_TEST(test_refuse_directory)
{
    char path[PATH_MAX];
    tm_snprintf(path, sizeof path, "%s/test-plugins", build_dir());
    refused(path, "refused: not a regular file");
}
END_TEST

START_TEST(test_refuse_badabi)
{
    char want[128];
    tm_snprintf(want, sizeof want,
                "refused: ABI version %d.0 instead of %d.%d (rebuild "
                "against this taskmill.h)",
                TM_TASK_ABI_MAJOR + 1, TM_TASK_ABI_MAJOR, TM_TASK_ABI_MINOR);
    refused(plugin_path("test-plugins", "badabi"), want);
}
END_TEST

START_TEST(test_refuse_badmagic)
{
    const char *err = refused(plugin_path("test-plugins", "badmagic"),
                              "refused: bad descriptor magic");
    ck_assert_ptr_nonnull(strstr(err, "0xdeadbeef instead of 0x544d504c"));
}
END_TEST

START_TEST(test_refuse_badsig)
{
    char want[128];
    tm_snprintf(want, sizeof want,
                "refused: not binary compatible (signature 0x0404 instead "
                "of 0x%04x)",
                (unsigned)TM_TASK_SIGNATURE);
    refused(plugin_path("test-plugins", "badsig"), want);
}
END_TEST

START_TEST(test_refuse_nosymbol)
{
    refused(plugin_path("test-plugins", "nosymbol"),
            "not a taskmill plugin: no tm_task_descriptor symbol");
}
END_TEST

START_TEST(test_refuse_nulldesc)
{
    refused(plugin_path("test-plugins", "nulldesc"),
            "refused: tm_task_descriptor() returned NULL");
}
END_TEST

START_TEST(test_refuse_small)
{
    char want[128];
    tm_snprintf(want, sizeof want,
                "refused: descriptor size %zu, expected at least %zu",
                offsetof(struct tm_task_plugin, version),
                offsetof(struct tm_task_plugin, cb_run) + sizeof(void *));
    refused(plugin_path("test-plugins", "small"), want);
}
END_TEST

START_TEST(test_refuse_noname)
{
    refused(plugin_path("test-plugins", "noname"),
            "refused: descriptor has no name");
}
END_TEST

START_TEST(test_refuse_noversion)
{
    refused(plugin_path("test-plugins", "noversion"),
            "refused: plugin 'test-noversion' has no version");
}
END_TEST

START_TEST(test_refuse_norun)
{
    refused(plugin_path("test-plugins", "norun"),
            "refused: plugin 'test-norun' has no cb_run");
}
END_TEST

START_TEST(test_refuse_undefined)
{
    const char *path = plugin_path("test-plugins", "undefined");
    const char *err = refused(path, ": cannot load: ");
    ck_assert_ptr_nonnull(strstr(err, "tm_test_symbol_defined_nowhere"));
    ck_assert_ptr_nonnull(strstr(err, "; check its dependencies with "
                                      "ldd(1)"));
    /* dlerror()'s own copy of the path is dropped: it appears once. */
    ck_assert_ptr_null(strstr(err + strlen(path), path));
}
END_TEST

/* A text file named .so is told it is no shared object, with no advice
 * about its dependencies (ldd cannot help). */
START_TEST(test_refuse_text_file)
{
    char path[PATH_MAX];
    tm_snprintf(path, sizeof path, "%s/notes.so", scratch);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("this is not a plugin\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(path, 0644), 0);
    const char *err = refused(path, ": cannot load: not a shared object "
                                    "(no ELF header)");
    ck_assert_ptr_null(strstr(err, "ldd"));
}
END_TEST

START_TEST(test_refuse_group_writable_file)
{
    char path[PATH_MAX];
    tm_snprintf(path, sizeof path, "%s/ok.so", scratch);
    copy_file(plugin_path("test-plugins", "ok"), path, 0664);
    char want[PATH_MAX + 128];
    tm_snprintf(want, sizeof want,
                "refused: file is writable by group or others (mode 0664); "
                "run chmod go-w %s",
                path);
    refused(path, want);

    ck_assert_int_eq(chmod(path, 0646), 0);
    refused(path, "(mode 0646)");

    ck_assert_int_eq(chmod(path, 0644), 0);
    tm_plugin_free(load(path));
}
END_TEST

START_TEST(test_refuse_group_writable_dir)
{
    char path[PATH_MAX];
    tm_snprintf(path, sizeof path, "%s/ok.so", scratch);
    copy_file(plugin_path("test-plugins", "ok"), path, 0644);
    ck_assert_int_eq(chmod(scratch, 0775), 0);
    char want[PATH_MAX + 128];
    tm_snprintf(want, sizeof want,
                "refused: directory %s is writable by group or others "
                "(mode 0775); run chmod go-w %s",
                scratch, scratch);
    refused(path, want);

    /* the plugin's own directory may not be sticky and world-writable */
    ck_assert_int_eq(chmod(scratch, 01777), 0);
    refused(path, "(mode 1777)");

    ck_assert_int_eq(chmod(scratch, 0755), 0);
    tm_plugin_free(load(path));
}
END_TEST

START_TEST(test_refuse_writable_ancestor)
{
    /* scratch/a/b/ok.so: every directory up to / counts */
    char a[PATH_MAX], b[PATH_MAX], path[PATH_MAX];
    tm_snprintf(a, sizeof a, "%s/a", scratch);
    tm_snprintf(b, sizeof b, "%s/a/b", scratch);
    tm_snprintf(path, sizeof path, "%s/a/b/ok.so", scratch);
    ck_assert_int_eq(mkdir(a, 0755), 0);
    ck_assert_int_eq(mkdir(b, 0755), 0);
    copy_file(plugin_path("test-plugins", "ok"), path, 0644);
    tm_plugin_free(load(path));

    ck_assert_int_eq(chmod(a, 0775), 0);
    char want[PATH_MAX + 128];
    tm_snprintf(want, sizeof want,
                "refused: directory %s is writable by group or others "
                "(mode 0775); run chmod go-w %s",
                a, a);
    refused(path, want);
    ck_assert_int_eq(chmod(a, 0757), 0);
    refused(path, "(mode 0757)");

    /* a sticky ancestor (like /tmp) is accepted: others cannot rename or
     * remove what they do not own in it */
    ck_assert_int_eq(chmod(a, 01777), 0);
    tm_plugin_free(load(path));
    ck_assert_int_eq(chmod(a, 0755), 0);
}
END_TEST

START_TEST(test_refuse_names_every_problem)
{
    char path[PATH_MAX];
    tm_snprintf(path, sizeof path, "%s/ok.so", scratch);
    copy_file(plugin_path("test-plugins", "ok"), path, 0664);
    ck_assert_int_eq(chmod(scratch, 0775), 0);
    char want[3 * PATH_MAX + 256];
    tm_snprintf(want, sizeof want,
                "%s: refused: file is writable by group or others (mode "
                "0664); directory %s is writable by group or others (mode "
                "0775); run chmod go-w %s %s",
                path, scratch, path, scratch);
    const char *err = refused(path, "refused: ");
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(chmod(scratch, 0755), 0);
}
END_TEST

START_TEST(test_refuse_foreign_owner)
{
    /* the file and every directory above it belong to root or to the
     * daemon's user; chown needs root */
    if (geteuid() != 0)
        return;
    const uid_t nobody = 65534;
    char path[PATH_MAX];
    tm_snprintf(path, sizeof path, "%s/ok.so", scratch);
    copy_file(plugin_path("test-plugins", "ok"), path, 0644);
    ck_assert_int_eq(chown(path, nobody, (gid_t)-1), 0);
    char want[PATH_MAX + 128];
    tm_snprintf(want, sizeof want,
                "refused: file is owned by uid 65534, neither root nor uid "
                "0; run chown root %s",
                path);
    refused(path, want);

    ck_assert_int_eq(chown(path, 0, (gid_t)-1), 0);
    ck_assert_int_eq(chown(scratch, nobody, (gid_t)-1), 0);
    tm_snprintf(want, sizeof want,
                "refused: directory %s is owned by uid 65534, neither root "
                "nor uid 0; run chown root %s",
                scratch, scratch);
    refused(path, want);

    ck_assert_int_eq(chown(scratch, 0, (gid_t)-1), 0);
    tm_plugin_free(load(path));
}
END_TEST

START_TEST(test_refuse_symlink)
{
    /* the configured name must be the file itself: a link could be
     * turned to other code between check and use */
    char target[PATH_MAX], link[PATH_MAX];
    tm_snprintf(target, sizeof target, "%s/real.so", scratch);
    tm_snprintf(link, sizeof link, "%s/ok.so", scratch);
    copy_file(plugin_path("test-plugins", "ok"), target, 0644);
    ck_assert_int_eq(symlink(target, link), 0);
    refused(link, "refused: is a symbolic link");
    tm_plugin_free(load(target));
}
END_TEST

START_TEST(test_symlinked_directory_judged_by_target)
{
    /* a link among the directories is judged by where it leads */
    char unsafe[PATH_MAX], target[PATH_MAX], dirlink[PATH_MAX],
        path[PATH_MAX];
    tm_snprintf(unsafe, sizeof unsafe, "%s/unsafe", scratch);
    tm_snprintf(target, sizeof target, "%s/unsafe/ok.so", scratch);
    tm_snprintf(dirlink, sizeof dirlink, "%s/safe", scratch);
    tm_snprintf(path, sizeof path, "%s/safe/ok.so", scratch);
    ck_assert_int_eq(mkdir(unsafe, 0755), 0);
    copy_file(plugin_path("test-plugins", "ok"), target, 0644);
    ck_assert_int_eq(symlink(unsafe, dirlink), 0);
    tm_plugin_free(load(path));

    ck_assert_int_eq(chmod(unsafe, 0775), 0);
    const char *err = refused(path, "is writable by group or others "
                                    "(mode 0775)");
    ck_assert_ptr_nonnull(strstr(err, "directory "));
    ck_assert_ptr_nonnull(strstr(err, "/unsafe "));
}
END_TEST

START_TEST(test_cp_over_loaded_plugin)
{
    /* cp writes into the file in place (same inode): the code already
     * loaded is a copy, untouched; loading the file again gets the new
     * code as an object of its own. */
    char path[PATH_MAX];
    tm_snprintf(path, sizeof path, "%s/ok.so", scratch);
    copy_file(plugin_path("test-plugins", "ok"), path, 0644);
    struct tm_plugin *p = load(path);
    struct tm_task_env env = {.struct_size = sizeof env, .task = "t1",
                              .config_json = "{}",
                              .host = tm_exec_host()};
    char err[ERRLEN];
    ck_assert_int_eq(tm_plugin_init(p, &env, err, sizeof err), 0);
    ck_assert_int_eq(tm_plugin_changed(p), 0);

    struct stat before, after;
    ck_assert_int_eq(stat(path, &before), 0);
    copy_file(plugin_path("plugins", "noop"), path, 0644);
    ck_assert_int_eq(stat(path, &after), 0);
    ck_assert_uint_eq(before.st_ino, after.st_ino);
    ck_assert_int_eq(tm_plugin_changed(p), 1);

    /* the running code and its read-only data are what was loaded */
    ck_assert_str_eq(p->desc.name, "test-ok");
    ck_assert_str_eq(p->desc.version, "0.0.1");
    struct tm_call call = {.struct_size = sizeof call, .body = "{}",
                           .body_len = 2, .id = "1-0", .attempt = 1,
                           .task_data = p->task_data,
                           .host = tm_exec_host()};
    ck_assert_int_eq(p->desc.cb_run(&call), TM_TASK_OK);

    struct tm_plugin *q = load(path);
    ck_assert_str_eq(q->desc.name, "noop");
    ck_assert_str_eq(p->desc.name, "test-ok");
    ck_assert_ptr_ne(q->obj, p->obj); /* a changed file is a new copy */
    struct tm_plugin *r = load(path); /* the unchanged one is shared */
    ck_assert_ptr_eq(r->obj, q->obj);
    tm_plugin_free(r);
    ck_assert_str_eq(q->desc.name, "noop"); /* q's copy is still loaded */
    tm_plugin_free(q);
    tm_plugin_free(p); /* cb_fini of the old code frees its task data */
}
END_TEST

START_TEST(test_name_without_slash)
{
    /* "ok.so" is the file in the working directory, never a search of
     * the library path. */
    char path[PATH_MAX], cwd[PATH_MAX];
    tm_snprintf(path, sizeof path, "%s/ok.so", scratch);
    copy_file(plugin_path("test-plugins", "ok"), path, 0644);
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(scratch), 0);
    char err[ERRLEN];
    struct tm_plugin *p = tm_plugin_load("ok.so", err, sizeof err);
    struct tm_plugin *none = tm_plugin_load("nosuch.so", err, sizeof err);
    ck_assert_int_eq(chdir(cwd), 0);
    ck_assert_msg(p != NULL, "refused: %s", err);
    ck_assert_str_eq(p->path, "ok.so");
    ck_assert_str_eq(p->desc.name, "test-ok");
    tm_plugin_free(p);
    ck_assert_ptr_null(none);
    ck_assert_str_eq(err, "nosuch.so: cannot open: No such file or "
                          "directory");
}
END_TEST

START_TEST(test_reason_truncated_safely)
{
    char err[24];
    const char *path = plugin_path("test-plugins", "badabi");
    ck_assert_ptr_null(tm_plugin_load(path, err, sizeof err));
    ck_assert_uint_eq(strlen(err), sizeof err - 1);
    ck_assert_ptr_null(tm_plugin_load(path, NULL, 0));
    err[0] = 'x';
    ck_assert_ptr_null(tm_plugin_load(path, err, 0));
    ck_assert_int_eq(err[0], 'x');
}
END_TEST

/* ---- init and fini ---- */

START_TEST(test_init_fail)
{
    const char *path = plugin_path("test-plugins", "initfail");
    struct tm_plugin *p = load(path);
    struct tm_task_env env = {.struct_size = sizeof env, .task = "doomed",
                              .queue = "taskmill.doomed",
                              .config_json = "{}",
                              .host = tm_exec_host()};
    char err[ERRLEN];
    ck_assert_int_eq(tm_plugin_init(p, &env, err, sizeof err), -1);
    assert_one_line(err, path);
    ck_assert_ptr_nonnull(strstr(err, ": init failed for task 'doomed'"));
    ck_assert_int_eq(p->inited, 0);
    /* cb_fini must not run after a failed cb_init (it would crash). */
    tm_plugin_free(p);
}
END_TEST

START_TEST(test_init_ok_and_fini)
{
    struct tm_plugin *p = load(plugin_path("test-plugins", "ok"));
    struct tm_task_env env = {.struct_size = sizeof env, .task = "t1",
                              .config_json = "{}",
                              .host = tm_exec_host()};
    char err[ERRLEN];
    ck_assert_int_eq(tm_plugin_init(p, &env, err, sizeof err), 0);
    ck_assert_int_eq(p->inited, 1);
    ck_assert_str_eq(p->task_data, "t1");
    /* A second init is refused rather than leaking the first. */
    ck_assert_int_eq(tm_plugin_init(p, &env, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "already initialised"));
    ck_assert_str_eq(p->task_data, "t1");
    /* cb_fini frees task_data: the leak checker sees if it is skipped. */
    tm_plugin_free(p);
}
END_TEST

START_TEST(test_init_without_cb_init)
{
    struct tm_plugin *p = load(plugin_path("plugins", "noop"));
    struct tm_task_env env = {.struct_size = sizeof env, .task = "noop",
                              .config_json = "{}",
                              .host = tm_exec_host()};
    char err[ERRLEN];
    ck_assert_int_eq(tm_plugin_init(p, &env, err, sizeof err), 0);
    ck_assert_int_eq(p->inited, 1);
    ck_assert_ptr_null(p->task_data);
    tm_plugin_free(p);
}
END_TEST

/* ---- running the example plugins through tm_exec_run ---- */

/* struct fixture is one task bound to a loaded, initialised plugin. */
struct fixture {
    struct tm_cfg_task cfg;
    struct tm_task task;
    char err[ERRLEN];
};

/* fixture_init loads plugins/<name>.so for a task of the same name with
 * config (JSON) and timeout; returns tm_plugin_init()'s result. */
static int fixture_init(struct fixture *f, const char *name,
                        const char *config, int64_t timeout_ms)
{
    memset(f, 0, sizeof *f);
    f->cfg.name = (char *)name;
    f->cfg.queue = (char *)"taskmill.test";
    f->cfg.max_payload = 1024 * 1024;
    f->cfg.timeout_ms = timeout_ms;
    f->cfg.config_json = (char *)config;
    f->task.cfg = &f->cfg;
    f->task.plugin = load(plugin_path("plugins", name));
    struct tm_task_env env = {.struct_size = sizeof env, .task = name,
                              .queue = f->cfg.queue, .config_json = config,
                              .host = tm_exec_host()};
    return tm_plugin_init(f->task.plugin, &env, f->err, sizeof f->err);
}

static void fixture_free(struct fixture *f)
{
    tm_plugin_free(f->task.plugin);
}

/* run runs body (with message id) through the fixture's plugin; the
 * caller releases the message's error and result with run_done(). */
static struct tm_msg run(struct fixture *f, const char *id,
                         const char *body)
{
    struct tm_msg m = {.task = &f->task, .id = id, .id_len = strlen(id),
                       .body = body, .body_len = strlen(body),
                       .attempt = 1};
    tm_exec_run(&m, NULL);
    m.body = NULL; /* borrowed for the run only */
    return m;
}

static void run_done(struct tm_msg *m)
{
    tm_free(m->error);
    tm_free(m->result);
}

/* expect runs body and checks the outcome, and the result or the error
 * (substring) where given. */
static void expect(struct fixture *f, const char *body,
                   enum tm_outcome outcome, const char *result,
                   const char *error)
{
    struct tm_msg m = run(f, "1-0", body);
    ck_assert_msg(m.outcome == outcome, "%s: outcome %s, expected %s (%s)",
                  body, tm_outcome_label(m.outcome),
                  tm_outcome_label(outcome),
                  m.error != NULL ? m.error : "no error");
    if (result != NULL) {
        ck_assert_ptr_nonnull(m.result);
        ck_assert_str_eq(m.result, result);
        ck_assert_uint_eq(m.result_len, strlen(result));
    }
    if (error != NULL) {
        ck_assert_msg(m.error != NULL && strstr(m.error, error) != NULL,
                      "%s: error '%s' lacks '%s'", body,
                      m.error != NULL ? m.error : "(none)", error);
    }
    if (outcome == TM_OUT_SUCCESS)
        ck_assert_ptr_null(m.error);
    run_done(&m);
}

START_TEST(test_run_noop)
{
    struct fixture f;
    ck_assert_int_eq(fixture_init(&f, "noop", "{}", 0), 0);
    expect(&f, "{}", TM_OUT_SUCCESS, NULL, NULL);
    expect(&f, "{\"anything\":[1,2,{\"x\":null}]}", TM_OUT_SUCCESS, NULL,
           NULL);
    fixture_free(&f);
}
END_TEST

START_TEST(test_run_add)
{
    struct fixture f;
    ck_assert_int_eq(fixture_init(&f, "add", "{}", 30000), 0);
    expect(&f, "{\"a\":2,\"b\":3}", TM_OUT_SUCCESS, "{\"sum\":5}", NULL);
    expect(&f, " { \"b\" : -7 ,\n \"a\" : 0 } ", TM_OUT_SUCCESS,
           "{\"sum\":-7}", NULL);
    expect(&f, "{\"a\":9223372036854775807,\"b\":-1}", TM_OUT_SUCCESS,
           "{\"sum\":9223372036854775806}", NULL);
    expect(&f, "{\"a\":-9223372036854775808,\"b\":0}", TM_OUT_SUCCESS,
           "{\"sum\":-9223372036854775808}", NULL);
    /* Keys inside nested values and strings are not top-level keys. */
    expect(&f,
           "{\"x\":{\"a\":100},\"s\":\"}\\\"a\\\":9,\",\"l\":[{\"b\":1}],"
           "\"a\":1,\"b\":1}",
           TM_OUT_SUCCESS, "{\"sum\":2}", NULL);

    expect(&f, "{\"a\":2}", TM_OUT_REJECTED, NULL, "field 'b' is missing");
    expect(&f, "{}", TM_OUT_REJECTED, NULL, "field 'a' is missing");
    expect(&f, "{\"a\":2.5,\"b\":1}", TM_OUT_REJECTED, NULL,
           "field 'a' is not an integer");
    expect(&f, "{\"a\":2,\"b\":1e3}", TM_OUT_REJECTED, NULL,
           "field 'b' is not an integer");
    expect(&f, "{\"a\":\"2\",\"b\":1}", TM_OUT_REJECTED, NULL,
           "field 'a' is not an integer");
    expect(&f, "{\"a\":true,\"b\":1}", TM_OUT_REJECTED, NULL,
           "field 'a' is not an integer");
    expect(&f, "{\"a\":null,\"b\":1}", TM_OUT_REJECTED, NULL,
           "field 'a' is not an integer");
    expect(&f, "{\"a\":[1],\"b\":1}", TM_OUT_REJECTED, NULL,
           "field 'a' is not an integer");
    expect(&f, "{\"a\":9223372036854775808,\"b\":1}", TM_OUT_REJECTED,
           NULL, "field 'a' does not fit in a 64-bit integer");
    expect(&f, "{\"a\":9223372036854775807,\"b\":1}", TM_OUT_REJECTED,
           NULL, "sum does not fit in a 64-bit integer");
    expect(&f, "{\"a\":-9223372036854775808,\"b\":-1}", TM_OUT_REJECTED,
           NULL, "sum does not fit in a 64-bit integer");
    expect(&f, "{\"a\":1,\"a\":2,\"b\":1}", TM_OUT_REJECTED, NULL,
           "unique keys");
    /* Not an object at all: the daemon itself refuses it. */
    expect(&f, "[1,2]", TM_OUT_INVALID, NULL, "not a JSON object");
    fixture_free(&f);
}
END_TEST

START_TEST(test_run_fail)
{
    struct fixture f;
    ck_assert_int_eq(fixture_init(&f, "fail", "{}", 0), 0);
    expect(&f, "{\"mode\":\"error\"}", TM_OUT_ERROR, NULL,
           "requested failure");
    expect(&f, "{\"mode\":\"reject\"}", TM_OUT_REJECTED, NULL,
           "requested reject");
    expect(&f, "{\"mode\":\"explode\"}", TM_OUT_REJECTED, NULL,
           "unknown mode");
    expect(&f, "{\"mode\":\"errors\"}", TM_OUT_REJECTED, NULL,
           "unknown mode");
    expect(&f, "{\"mode\":3}", TM_OUT_REJECTED, NULL, "unknown mode");
    expect(&f, "{}", TM_OUT_REJECTED, NULL, "field 'mode' is missing");
    fixture_free(&f);
}
END_TEST

START_TEST(test_run_sleep)
{
    struct fixture f;
    ck_assert_int_eq(fixture_init(&f, "sleep", "{}", 0), 0);
    int64_t t0 = tm_now_ms();
    expect(&f, "{\"ms\":20}", TM_OUT_SUCCESS, NULL, NULL);
    ck_assert_int_ge(tm_now_ms() - t0, 20);
    expect(&f, "{\"ms\":0}", TM_OUT_SUCCESS, NULL, NULL);
    expect(&f, "{\"ms\":-1}", TM_OUT_REJECTED, NULL, "field 'ms'");
    expect(&f, "{\"ms\":\"20\"}", TM_OUT_REJECTED, NULL, "field 'ms'");
    expect(&f, "{\"ms\":86400001}", TM_OUT_REJECTED, NULL, "field 'ms'");
    expect(&f, "{}", TM_OUT_REJECTED, NULL, "field 'ms' is missing");
    fixture_free(&f);
}
END_TEST

START_TEST(test_run_sleep_deadline)
{
    /* The task's timeout cuts a long sleep short: should_stop() answers
     * yes at the deadline and the plugin returns promptly. */
    struct fixture f;
    ck_assert_int_eq(fixture_init(&f, "sleep", "{}", 50), 0);
    int64_t t0 = tm_now_ms();
    struct tm_msg m = run(&f, "1-0", "{\"ms\":10000}");
    int64_t took = tm_now_ms() - t0;
    /* Returning in the very millisecond of the deadline may be filed as
     * the plugin's own "interrupted" error rather than a timeout; either
     * way the run stopped there. */
    ck_assert_msg(m.outcome == TM_OUT_TIMEOUT ||
                      (m.outcome == TM_OUT_ERROR &&
                       strcmp(m.error, "interrupted") == 0),
                  "outcome %s (%s)", tm_outcome_label(m.outcome),
                  m.error != NULL ? m.error : "no error");
    run_done(&m);
    ck_assert_int_ge(took, 50);
    ck_assert_int_lt(took, 5000);
    fixture_free(&f);
}
END_TEST

static void *abandon_soon(void *arg)
{
    atomic_int *flag = arg;
    tm_sleep_ms(30);
    atomic_store(flag, 1);
    return NULL;
}

START_TEST(test_run_sleep_abandoned)
{
    /* No deadline, but the task's generation abandons its running work;
     * a task of another generation (another flag) runs on. */
    struct fixture f, other;
    atomic_int flag = 0, other_flag = 0;
    ck_assert_int_eq(fixture_init(&f, "sleep", "{}", 0), 0);
    ck_assert_int_eq(fixture_init(&other, "sleep", "{}", 0), 0);
    f.task.abandon = &flag;
    other.task.abandon = &other_flag;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, abandon_soon, &flag), 0);
    int64_t t0 = tm_now_ms();
    expect(&f, "{\"ms\":10000}", TM_OUT_ERROR, NULL, "interrupted");
    ck_assert_int_lt(tm_now_ms() - t0, 5000);
    pthread_join(th, NULL);
    ck_assert_int_eq(atomic_load(&flag), 1);
    expect(&other, "{\"ms\":50}", TM_OUT_SUCCESS, NULL, NULL);
    fixture_free(&f);
    fixture_free(&other);
}
END_TEST

/* read_file returns the whole file as a new string (tm_free it). */
static char *read_file(const char *path)
{
    FILE *fp = fopen(path, "re");
    ck_assert_msg(fp != NULL, "open %s failed", path);
    size_t cap = 4096, len = 0;
    char *s = tm_malloc(cap);
    for (;;) {
        size_t n = fread(s + len, 1, cap - len - 1, fp);
        if (n == 0)
            break;
        len += n;
        if (cap - len - 1 == 0) {
            cap *= 2;
            s = tm_realloc(s, cap);
        }
    }
    fclose(fp);
    s[len] = '\0';
    return s;
}

START_TEST(test_run_journal)
{
    char path[PATH_MAX], config[PATH_MAX + 32];
    tm_snprintf(path, sizeof path, "%s/journal.log", scratch);
    tm_snprintf(config, sizeof config, "{\"other\":[\"path\"],"
                "\"path\":\"%s\"}", path);
    struct fixture f;
    ck_assert_int_eq(fixture_init(&f, "journal", config, 0), 0);

    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0644 & ~(unsigned)umask(022));

    struct tm_msg m = run(&f, "1700000000000-0", "{\"x\":1}");
    ck_assert_int_eq(m.outcome, TM_OUT_SUCCESS);
    run_done(&m);
    /* Raw line breaks (JSON white space) never split the line. */
    m = run(&f, "1700000000000-1", "{\"y\":\n[1,\r\n2]}");
    ck_assert_int_eq(m.outcome, TM_OUT_SUCCESS);
    run_done(&m);

    char *text = read_file(path);
    ck_assert_str_eq(text, "1700000000000-0 {\"x\":1}\n"
                           "1700000000000-1 {\"y\": [1,  2]}\n");
    tm_free(text);
    fixture_free(&f);

    /* A second task appends to the same file. */
    ck_assert_int_eq(fixture_init(&f, "journal", config, 0), 0);
    m = run(&f, "abc", "{}");
    ck_assert_int_eq(m.outcome, TM_OUT_SUCCESS);
    run_done(&m);
    fixture_free(&f);
    text = read_file(path);
    ck_assert_ptr_nonnull(strstr(text, "}\nabc {}\n"));
    tm_free(text);
}
END_TEST

START_TEST(test_journal_escaped_path)
{
    /* The config path is a JSON string: escapes are decoded. */
    char config[PATH_MAX + 64];
    tm_snprintf(config, sizeof config,
                "{\"path\":\"%s\\/caf\\u00e9 \\ud83d\\ude00.log\"}",
                scratch);
    struct fixture f;
    ck_assert_int_eq(fixture_init(&f, "journal", config, 0), 0);
    fixture_free(&f);
    char path[PATH_MAX];
    tm_snprintf(path, sizeof path, "%s/caf\xc3\xa9 \xf0\x9f\x98\x80.log",
                scratch);
    ck_assert_int_eq(access(path, F_OK), 0);
}
END_TEST

START_TEST(test_journal_bad_config)
{
    static const char *const configs[] = {
        "{}",                      /* path missing */
        "{\"path\":\"\"}",         /* empty */
        "{\"path\":42}",           /* not a string */
        "{\"path\":\"a\\u0000b\"}", /* NUL inside */
        "{\"path\":\"/nonexistent-dir-tm/x.log\"}", /* cannot open */
    };
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        struct fixture f;
        ck_assert_msg(fixture_init(&f, "journal", configs[i], 0) == -1,
                      "config %s accepted", configs[i]);
        ck_assert_ptr_nonnull(strstr(f.err, "init failed for task "
                                            "'journal'"));
        ck_assert_int_eq(f.task.plugin->inited, 0);
        fixture_free(&f);
    }
}
END_TEST

START_TEST(test_journal_write_fails)
{
    char config[64];
    if (access("/dev/full", W_OK) != 0)
        return; /* no /dev/full here */
    tm_snprintf(config, sizeof config, "{\"path\":\"/dev/full\"}");
    struct fixture f;
    ck_assert_int_eq(fixture_init(&f, "journal", config, 0), 0);
    expect(&f, "{}", TM_OUT_ERROR, NULL, "write failed: No space left");
    fixture_free(&f);
}
END_TEST

/* Concurrent appends: every line stays whole (one write(2) each). */
#define JOURNAL_THREADS 4
#define JOURNAL_RUNS 250

/* big_body is large so that a line split over several writes would
 * show up torn; filled before the threads start. */
static char big_body[16384];

struct journal_worker {
    struct fixture *f;
    int n;
};

static void *journal_worker(void *arg)
{
    struct journal_worker *w = arg;
    for (int i = 0; i < JOURNAL_RUNS; i++) {
        char id[32];
        tm_snprintf(id, sizeof id, "w%d-%d", w->n, i);
        struct tm_msg m = run(w->f, id, big_body);
        if (m.outcome != TM_OUT_SUCCESS)
            fprintf(stderr, "journal run failed: %s\n", m.error);
        run_done(&m);
    }
    return NULL;
}

START_TEST(test_journal_concurrent)
{
    char path[PATH_MAX], config[PATH_MAX + 32];
    tm_snprintf(path, sizeof path, "%s/journal.log", scratch);
    tm_snprintf(config, sizeof config, "{\"path\":\"%s\"}", path);
    size_t pad = sizeof big_body - 16;
    memcpy(big_body, "{\"pad\":\"", 8);
    memset(big_body + 8, 'x', pad);
    memcpy(big_body + 8 + pad, "\"}", 3);
    size_t body_len = strlen(big_body);

    struct fixture f;
    ck_assert_int_eq(fixture_init(&f, "journal", config, 0), 0);
    pthread_t th[JOURNAL_THREADS];
    struct journal_worker w[JOURNAL_THREADS];
    for (int i = 0; i < JOURNAL_THREADS; i++) {
        w[i] = (struct journal_worker){.f = &f, .n = i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, journal_worker, &w[i]),
                         0);
    }
    for (int i = 0; i < JOURNAL_THREADS; i++)
        pthread_join(th[i], NULL);
    fixture_free(&f);

    char *text = read_file(path);
    int lines = 0;
    for (char *line = text; *line != '\0'; lines++) {
        char *nl = strchr(line, '\n');
        ck_assert_ptr_nonnull(nl);
        *nl = '\0';
        int wn, i, off = 0;
        ck_assert_msg(sscanf(line, "w%d-%d %n", &wn, &i, &off) == 2 &&
                          off > 0 && strlen(line + off) == body_len &&
                          strcmp(line + off, big_body) == 0,
                      "torn line %d", lines);
        line = nl + 1;
    }
    ck_assert_int_eq(lines, JOURNAL_THREADS * JOURNAL_RUNS);
    tm_free(text);
}
END_TEST

static Suite *plugin_suite(void)
{
    Suite *s = suite_create("plugin");

    TCase *tc = tcase_create("load");
    tcase_add_loop_test(tc, test_examples_load, 0,
                        (int)(sizeof examples / sizeof examples[0]));
    tcase_add_test(tc, test_add_declares_schemas);
    tcase_add_test(tc, test_ok_plugin);
    tcase_add_test(tc, test_same_file_twice);
    tcase_add_test(tc, test_minor_versions);
    suite_add_tcase(s, tc);

    tc = tcase_create("refuse");
    tcase_add_checked_fixture(tc, scratch_setup, scratch_teardown);
    tcase_add_test(tc, test_refuse_missing_file);
    tcase_add_test(tc, test_refuse_directory);
    tcase_add_test(tc, test_refuse_badabi);
    tcase_add_test(tc, test_refuse_badmagic);
    tcase_add_test(tc, test_refuse_badsig);
    tcase_add_test(tc, test_refuse_nosymbol);
    tcase_add_test(tc, test_refuse_nulldesc);
    tcase_add_test(tc, test_refuse_small);
    tcase_add_test(tc, test_refuse_noname);
    tcase_add_test(tc, test_refuse_noversion);
    tcase_add_test(tc, test_refuse_norun);
    tcase_add_test(tc, test_refuse_undefined);
    tcase_add_test(tc, test_refuse_text_file);
    tcase_add_test(tc, test_refuse_group_writable_file);
    tcase_add_test(tc, test_refuse_group_writable_dir);
    tcase_add_test(tc, test_refuse_writable_ancestor);
    tcase_add_test(tc, test_refuse_names_every_problem);
    tcase_add_test(tc, test_refuse_foreign_owner);
    tcase_add_test(tc, test_refuse_symlink);
    tcase_add_test(tc, test_symlinked_directory_judged_by_target);
    tcase_add_test(tc, test_cp_over_loaded_plugin);
    tcase_add_test(tc, test_name_without_slash);
    tcase_add_test(tc, test_reason_truncated_safely);
    suite_add_tcase(s, tc);

    tc = tcase_create("init");
    tcase_add_test(tc, test_init_fail);
    tcase_add_test(tc, test_init_ok_and_fini);
    tcase_add_test(tc, test_init_without_cb_init);
    suite_add_tcase(s, tc);

    tc = tcase_create("run");
    tcase_add_checked_fixture(tc, scratch_setup, scratch_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_run_noop);
    tcase_add_test(tc, test_run_add);
    tcase_add_test(tc, test_run_fail);
    tcase_add_test(tc, test_run_sleep);
    tcase_add_test(tc, test_run_sleep_deadline);
    tcase_add_test(tc, test_run_sleep_abandoned);
    tcase_add_test(tc, test_run_journal);
    tcase_add_test(tc, test_journal_escaped_path);
    tcase_add_test(tc, test_journal_bad_config);
    tcase_add_test(tc, test_journal_write_fails);
    tcase_add_test(tc, test_journal_concurrent);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(plugin_suite)

/* cli.h - the command line: arguments, bodies and the commands. */
#ifndef TASKMILL_CLI_H
#define TASKMILL_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

/* Exit statuses (docs/cli.md): 0 success, 1 runtime failure, 2 usage or
 * configuration error. */
#define TM_EXIT_OK 0
#define TM_EXIT_FAIL 1
#define TM_EXIT_USAGE 2

/* Most positional arguments a command takes (dlq ACTION TASK ID). */
#define TM_CLI_MAX_POS 4

/* Most configuration errors one command reports; the rest are counted. */
#define TM_CLI_MAX_CFG_ERRORS 20

/* The config file used without -c and without $TASKMILL_CONFIG: where
 * `make install` puts the configuration (SYSCONFDIR/taskmill). */
#ifndef TM_DEFAULT_CONFIG
#define TM_DEFAULT_CONFIG "/etc/taskmill/taskmill.yaml"
#endif

/* Where the config path came from, for the hint when it cannot be read. */
enum tm_cli_config_from {
    TM_CLI_CONFIG_FLAG = 1,    /* -c FILE */
    TM_CLI_CONFIG_ENV = 2,     /* $TASKMILL_CONFIG */
    TM_CLI_CONFIG_DEFAULT = 3  /* TM_DEFAULT_CONFIG */
};

/* struct tm_cli_args is the parsed command line; every string is borrowed
 * from argv or the environment. */
struct tm_cli_args {
    const char *cmd;           /* "run", "check", "emit", "invoke", "dlq",
                                  "pause", "resume", "schedules",
                                  "delayed" */
    const char *config;        /* never NULL after tm_cli_parse */
    enum tm_cli_config_from config_from;
    const char *pos[TM_CLI_MAX_POS];
    int npos;
    const char *wait;          /* --wait SECONDS, or NULL */
    const char *priority;      /* --priority N, or NULL */
    const char *delay;         /* --delay DURATION, or NULL */
    const char *at;            /* --at TIME, or NULL */
    const char *dedup_key;     /* --dedup-key KEY, or NULL */
    const char *grep;          /* dlq: --grep TEXT, or NULL */
    const char *since;         /* dlq: --since TIME, or NULL */
    const char *until;         /* dlq: --until TIME, or NULL */
    int yes;                   /* --yes given */
};

/* tm_cli_usage is the text of --help. */
extern const char tm_cli_usage[];

/* tm_cli_usage_error prints "taskmill: MESSAGE" and the usage to stderr;
 * returns TM_EXIT_USAGE. */
int tm_cli_usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* tm_cli_parse fills *a from argv (argv[0] is the program). Returns 0, or
 * the exit status after printing why the command line is wrong. */
int tm_cli_parse(int argc, char **argv, struct tm_cli_args *a);

/* tm_cli_load_config loads a->config, printing every configuration error
 * (up to TM_CLI_MAX_CFG_ERRORS) to stderr, and a hint when the file came
 * from the environment or the default. Returns the config (the caller
 * frees it with tm_cfg_free) or NULL. */
struct tm_cfg *tm_cli_load_config(const struct tm_cli_args *a);

/* tm_cli_find_task returns the task named name, or NULL after listing the
 * tasks of cfg on stderr. */
const struct tm_cfg_task *tm_cli_find_task(const struct tm_cfg *cfg,
                                           const char *name);

struct tm_broker;

/* tm_cli_broker creates the broker adapter of cfg (it connects on its
 * first command), or prints "taskmill: REASON" to stderr and returns NULL;
 * the caller chooses the exit status. tm_cli_broker_close destroys b
 * (NULL is accepted). */
struct tm_broker *tm_cli_broker(const struct tm_cfg *cfg);
void tm_cli_broker_close(struct tm_broker *b);

/*
 * tm_cli_body gets a message body: arg itself, or, when arg is "-", all of
 * standard input. A body longer than t->max_payload is refused when
 * enforce_max is set; standard input is never read past max_payload + 1
 * bytes. Returns 0 with *body (NUL-terminated, the caller frees with
 * tm_free) and *len set, or TM_EXIT_USAGE / TM_EXIT_FAIL after saying why
 * on stderr.
 */
int tm_cli_body(const char *arg, const struct tm_cfg_task *t,
                int enforce_max, char **body, size_t *len);

/* tm_cli_check_body accepts a UTF-8 JSON object of len bytes, or says on
 * stderr what is wrong with it (for JSON, at which byte). Returns 0 or
 * -1. */
int tm_cli_check_body(const char *body, size_t len);

/* The commands. Each takes ownership of cfg (freed before returning) and
 * returns the process exit status. */
int tm_cli_check(struct tm_cfg *cfg);
int tm_cli_emit(struct tm_cfg *cfg, const struct tm_cli_args *a);
int tm_cli_invoke(struct tm_cfg *cfg, const struct tm_cli_args *a);
int tm_cli_dlq(struct tm_cfg *cfg, const struct tm_cli_args *a);
/* tm_cli_delayed is `delayed list TASK`, `delayed run-now TASK ID` and
 * `delayed delete TASK ID` (delayed.c). */
int tm_cli_delayed(struct tm_cfg *cfg, const struct tm_cli_args *a);

/* tm_cli_pause is `pause` and `resume` (a->cmd says which). */
int tm_cli_pause(struct tm_cfg *cfg, const struct tm_cli_args *a);
int tm_cli_schedules(struct tm_cfg *cfg, const struct tm_cli_args *a);

#endif /* TASKMILL_CLI_H */

/* args.c - the command line's arguments, the config file and the tasks. */
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin/admin.h"
#include "broker/broker.h"
#include "daemon/daemon.h" /* tm_broker_load_config */
#include "util/util.h"

const char tm_cli_usage[] =
    "usage: taskmill [run] [-c FILE]          run in the foreground\n"
    "       taskmill check [-c FILE]          validate the config, load "
    "every plugin\n"
    "       taskmill emit [-c FILE] TASK (JSON | -) [--wait SECONDS] "
    "[--priority N]\n"
    "                [--delay DURATION | --at TIME] [--dedup-key KEY]\n"
    "       taskmill invoke [-c FILE] TASK (JSON | -)   run one body "
    "through the\n"
    "                                         task's plugin, no broker\n"
    "       taskmill dlq [-c FILE] list [TASK [FILTER]]\n"
    "       taskmill dlq [-c FILE] show TASK ID\n"
    "       taskmill dlq [-c FILE] (replay | purge) TASK [ID | FILTER] "
    "[--yes]\n"
    "       taskmill delayed [-c FILE] list TASK | (run-now | delete) TASK "
    "ID\n"
    "       taskmill (pause | resume) [-c FILE] TASK   stop / restart intake "
    "of TASK\n"
    "                                         on every daemon\n"
    "       taskmill schedules [-c FILE]      each schedule with its last "
    "and next slot\n"
    "       taskmill --version | --help\n"
    "\n"
    "-c defaults to $TASKMILL_CONFIG, then " TM_DEFAULT_CONFIG ".\n"
    "A body of - is read from standard input (up to the task's "
    "max_payload).\n"
    "emit --delay (30s, 5m, 1h) or --at (RFC 3339 with a zone, e.g.\n"
    "2026-12-01T03:00:00Z, or epoch ms) makes a delayed message.\n"
    "emit --dedup-key: with the task's dedup_ttl, a key that already "
    "succeeded\n"
    "within it is not run again.\n"
    "dlq list without TASK counts the dead letters of every task. purge "
    "without\n"
    "an ID removes them all; on a terminal it needs --yes.\n"
    "FILTER: --grep TEXT (in the error or the body, case-sensitive),\n"
    "--since TIME, --until TIME (failed_at, inclusive; TIME as --at).\n"
    "\n"
    "Exit status: 0 success, 1 runtime failure, 2 usage or configuration "
    "error.\n";

int tm_cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "taskmill: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n%s", tm_cli_usage);
    return TM_EXIT_USAGE;
}

/* option_value takes the value of option argv[*i], moving *i past it;
 * NULL when the command line ends first. */
static const char *option_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc)
        return NULL;
    (*i)++;
    return argv[*i];
}

int tm_cli_parse(int argc, char **argv, struct tm_cli_args *a)
{
    static const char *const cmds[] = {"run", "check", "emit", "invoke",
                                       "dlq", "pause", "resume",
                                       "schedules", "delayed"};
    memset(a, 0, sizeof *a);
    int i = 1;
    if (i < argc && argv[i][0] != '-') {
        for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++)
            if (strcmp(argv[i], cmds[k]) == 0)
                a->cmd = cmds[k];
        if (a->cmd == NULL)
            return tm_cli_usage_error("unknown command '%s'", argv[i]);
        i++;
    }
    if (a->cmd == NULL)
        a->cmd = "run";
    for (; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "-c") == 0 || strcmp(s, "--config") == 0) {
            a->config = option_value(argc, argv, &i);
            if (a->config == NULL)
                return tm_cli_usage_error("%s needs a file", s);
            a->config_from = TM_CLI_CONFIG_FLAG;
        } else if (strcmp(s, "--wait") == 0) {
            a->wait = option_value(argc, argv, &i);
            if (a->wait == NULL)
                return tm_cli_usage_error("%s needs a number of seconds",
                                          s);
        } else if (strcmp(s, "--priority") == 0) {
            a->priority = option_value(argc, argv, &i);
            if (a->priority == NULL)
                return tm_cli_usage_error("%s needs a number", s);
        } else if (strcmp(s, "--delay") == 0) {
            a->delay = option_value(argc, argv, &i);
            if (a->delay == NULL)
                return tm_cli_usage_error("%s needs a duration (30s, 5m, "
                                          "1h)", s);
        } else if (strcmp(s, "--at") == 0) {
            a->at = option_value(argc, argv, &i);
            if (a->at == NULL)
                return tm_cli_usage_error("%s needs a time (RFC 3339 with "
                                          "a zone, or epoch ms)", s);
        } else if (strcmp(s, "--dedup-key") == 0) {
            a->dedup_key = option_value(argc, argv, &i);
            if (a->dedup_key == NULL)
                return tm_cli_usage_error("%s needs a key", s);
        } else if (strcmp(s, "--grep") == 0 || strcmp(s, "--since") == 0 ||
                   strcmp(s, "--until") == 0) {
            const char *v = option_value(argc, argv, &i);
            if (v == NULL)
                return tm_cli_usage_error("%s needs %s", s,
                                          s[2] == 'g' ? "a text"
                                                      : "a time (RFC 3339 "
                                                        "with a zone, or "
                                                        "epoch ms)");
            if (strcmp(a->cmd, "dlq") != 0)
                return tm_cli_usage_error("%s is an option of dlq", s);
            *(s[2] == 'g' ? &a->grep : s[2] == 's' ? &a->since : &a->until) =
                v;
        } else if (strcmp(s, "--yes") == 0 || strcmp(s, "-y") == 0) {
            a->yes = 1;
        } else if (s[0] == '-' && s[1] != '\0') {
            return tm_cli_usage_error("unknown option '%s'", s);
        } else {
            /* "-" alone is a positional argument: the standard input */
            if (a->npos >= TM_CLI_MAX_POS)
                return tm_cli_usage_error("unexpected argument '%s'", s);
            a->pos[a->npos++] = s;
        }
    }
    if (a->config == NULL) {
        const char *env = getenv("TASKMILL_CONFIG");
        if (env != NULL && env[0] != '\0') {
            a->config = env;
            a->config_from = TM_CLI_CONFIG_ENV;
        } else {
            a->config = TM_DEFAULT_CONFIG;
            a->config_from = TM_CLI_CONFIG_DEFAULT;
        }
    }
    return 0;
}

struct tm_cfg *tm_cli_load_config(const struct tm_cli_args *a)
{
    /* TM_CLI_MAX_CFG_ERRORS lines of at most a few hundred bytes each */
    char err[TM_CLI_MAX_CFG_ERRORS * 1024];
    size_t n = 0;
    struct tm_cfg *cfg = tm_broker_load_config(
        a->config, TM_CLI_MAX_CFG_ERRORS, err, sizeof err, &n);
    if (cfg != NULL)
        return cfg;
    fprintf(stderr, "%s\n", err);
    if (n >= TM_CLI_MAX_CFG_ERRORS)
        fprintf(stderr, "taskmill: %s: stopped after %d errors\n",
                a->config, TM_CLI_MAX_CFG_ERRORS);
    if (a->config_from != TM_CLI_CONFIG_FLAG && access(a->config, F_OK) != 0)
        fprintf(stderr, "taskmill: no -c FILE given; the config file comes "
                "from %s\n", a->config_from == TM_CLI_CONFIG_ENV
                                 ? "$TASKMILL_CONFIG"
                                 : "the default place (TASKMILL_CONFIG "
                                   "is not set)");
    return NULL;
}

const struct tm_cfg_task *tm_cli_find_task(const struct tm_cfg *cfg,
                                           const char *name)
{
    const struct tm_cfg_task *t = tm_cfg_find_task(cfg, name);
    if (t == NULL) {
        fprintf(stderr, "taskmill: no task '%s' in %s; tasks:", name,
                cfg->path);
        for (size_t i = 0; i < cfg->ntasks; i++)
            fprintf(stderr, " %s", cfg->tasks[i].name);
        fprintf(stderr, "\n");
    }
    return t;
}

struct tm_broker *tm_cli_broker(const struct tm_cfg *cfg)
{
    char err[512];
    struct tm_broker *b = tm_admin_broker(cfg, err, sizeof err);
    if (b == NULL)
        fprintf(stderr, "taskmill: %s\n", err);
    return b;
}

void tm_cli_broker_close(struct tm_broker *b)
{
    tm_admin_broker_close(b);
}

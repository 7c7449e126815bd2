/* config/load.c - loading a config file: YAML errors, the result, lookups. */
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

/* ------------------------------------------------------------- loading */

static struct tm_mark offset_mark(const char *data, size_t len, size_t off)
{
    struct tm_mark m = { 1, 1 };
    if (off > len)
        off = len;
    for (size_t i = 0; i < off; i++) {
        if (data[i] == '\n') {
            m.line++;
            m.col = 1;
        } else if (((unsigned char)data[i] & 0xc0) != 0x80) {
            m.col++;
        }
    }
    return m;
}

/* yaml_fail reports a libyaml error at its problem mark. */
static void yaml_fail(struct ctx *c, const yaml_parser_t *p,
                      const char *data, size_t len)
{
    struct tm_mark at = { (int)p->problem_mark.line + 1,
                          (int)p->problem_mark.column + 1 };
    const char *problem = p->problem ? p->problem : "unknown error";
    const char *hint = "";
    size_t index = p->problem_mark.index;
    if (strstr(problem, "could not find expected ':'") != NULL)
        hint = "; is a ':' missing after a key?";
    else if (strstr(problem, "mapping values are not allowed") != NULL)
        hint = "; is a ':' missing on a line above, or does a value "
               "containing ': ' need quotes?";
    else if (index < len && data[index] == '\t')
        hint = "; indent with spaces, not tabs";
    switch (p->error) {
    case YAML_MEMORY_ERROR: {
        struct tm_mark none = { 0, 0 };
        tm_cfg_fail(c, none, "out of memory while parsing YAML");
        break;
    }
    case YAML_READER_ERROR:
        at = offset_mark(data, len, p->problem_offset);
        if (p->problem_value != -1)
            tm_cfg_fail(c, at, "%s (byte 0x%02x); the file must be UTF-8",
                     problem, (unsigned)p->problem_value & 0xffu);
        else
            tm_cfg_fail(c, at, "%s", problem);
        break;
    default:
        if (p->context != NULL)
            tm_cfg_fail(c, at, "%s (%s at line %d, column %d)%s", problem,
                     p->context, (int)p->context_mark.line + 1,
                     (int)p->context_mark.column + 1, hint);
        else
            tm_cfg_fail(c, at, "%s%s", problem, hint);
        break;
    }
}

struct tm_cfg *tm_cfg_load_all(const char *path, size_t max_errors,
                               char *err, size_t errlen, size_t *nerrors)
{
    struct ctx c = {0};
    struct tm_cfg *cfg = tm_calloc(1, sizeof *cfg);
    char *data = NULL;
    size_t len = 0;
    yaml_parser_t parser;
    yaml_document_t doc;
    bool parser_ok = false, doc_ok = false;
    char ebuf[TM_STRERRNO_BUF];
    int opened;

    tm_cfg_errors_init(&c.errs, path, max_errors, err, errlen);
    c.cfg = cfg;
    cfg->path = tm_strdup(path);
    cfg->dir = tm_cfg_config_dir(path);
    cfg->broker_url = tm_strdup(DEFAULT_BROKER_URL);
    cfg->tls.verify = true;
    cfg->redis_mode = TM_REDIS_STANDALONE;
    cfg->amqp_queue_type = TM_AMQP_CLASSIC;
    cfg->amqp_heartbeat_ms = 30000;
    cfg->pool_kind = TM_POOL_THREAD;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    cfg->pool_size = ncpu < 1 ? 1 : ncpu > 1024 ? 1024 : (unsigned)ncpu;
    cfg->shutdown_timeout_ms = 30000;
    cfg->log_level = TM_LOG_INFO;
    cfg->log_format = TM_LOG_TEXT;
    cfg->otel_sample_ratio = 1.0;

    if (tm_cfg_read_file(path, CFG_MAX_FILE, &data, &len, &opened) < 0) {
        /* no position to give: one line "cannot open FILE: reason" */
        const char *why = tm_strerror(errno, ebuf, sizeof ebuf);
        c.errs.failed = true;
        c.errs.nerrors = 1;
        if (err != NULL && errlen > 0)
            tm_snprintf(err, errlen, "cannot %s %s: %s",
                        opened ? "read" : "open", path, why);
        goto fail;
    }
    if (!yaml_parser_initialize(&parser)) {
        struct tm_mark none = { 0, 0 };
        tm_cfg_fail(&c, none, "out of memory while parsing YAML");
        goto fail;
    }
    parser_ok = true;
    yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_fail(&c, &parser, data, len);
        goto fail;
    }
    doc_ok = true;
    c.doc = &doc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root == NULL || tm_cfg_is_null(root)) {
        struct tm_mark top = { 1, 1 };
        tm_cfg_fail(&c, top, "the config is empty; expected a mapping with "
                 "a 'tasks' key");
        goto fail;
    }
    if (root->type != YAML_MAPPING_NODE) {
        tm_cfg_fail(&c, tm_cfg_mark_of(root), "expected a mapping at the top level, "
                 "got %s", tm_cfg_node_kind(root));
        goto fail;
    }
    {
        /* A second document would be ignored silently: refuse it. */
        yaml_document_t extra;
        if (!yaml_parser_load(&parser, &extra)) {
            yaml_fail(&c, &parser, data, len);
            goto fail;
        }
        bool more = yaml_document_get_root_node(&extra) != NULL;
        struct tm_mark at = { (int)extra.start_mark.line + 1,
                              (int)extra.start_mark.column + 1 };
        yaml_document_delete(&extra);
        if (more) {
            tm_cfg_fail(&c, at, "only one YAML document is allowed");
            goto fail;
        }
    }
    /* tm_cfg_parse_top goes on after errors up to the cap; tm_cfg_check_whole then
     * skips what already failed */
    if (tm_cfg_parse_top(&c, root) < 0 && (tm_cfg_stop(&c) || !c.errs.failed))
        goto fail;
    if (tm_cfg_check_whole(&c, root) < 0 || c.errs.failed)
        goto fail;

    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    tm_free(c.marks);
    tm_free(data);
    if (nerrors != NULL)
        *nerrors = 0;
    return cfg;

fail:
    if (c.errs.nerrors == 0) {
        /* every failure path reports its reason; this is a safety net */
        struct tm_mark none = { 0, 0 };
        tm_cfg_fail(&c, none, "invalid configuration");
    }
    if (nerrors != NULL)
        *nerrors = c.errs.nerrors;
    if (doc_ok)
        yaml_document_delete(&doc);
    if (parser_ok)
        yaml_parser_delete(&parser);
    tm_free(c.marks);
    tm_free(data);
    tm_cfg_free(cfg);
    return NULL;
}

struct tm_cfg *tm_cfg_load(const char *path, char *err, size_t errlen)
{
    return tm_cfg_load_all(path, 1, err, errlen, NULL);
}

void tm_cfg_free(struct tm_cfg *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < cfg->ntasks; i++) {
        struct tm_cfg_task *t = &cfg->tasks[i];
        tm_free(t->name);
        tm_free(t->plugin);
        tm_free(t->plugin_path);
        tm_free(t->queue);
        tm_free(t->group);
        tm_free(t->dead_letter);
        tm_free(t->config_json);
        for (size_t k = 0; k < t->nconfig_keys; k++)
            tm_free(t->config_keys[k].name);
        tm_free(t->config_keys);
    }
    tm_free(cfg->tasks);
    for (size_t i = 0; i < cfg->nschedules; i++)
        tm_cfg_schedule_clear(&cfg->schedules[i]);
    tm_free(cfg->schedules);
    tm_free(cfg->path);
    tm_free(cfg->dir);
    tm_free(cfg->broker_url);
    tm_cfg_clear_nodes(cfg);
    tm_free(cfg->password_file);
    tm_free(cfg->tls.ca_file);
    tm_free(cfg->tls.cert_file);
    tm_free(cfg->tls.key_file);
    tm_free(cfg->tls.server_name);
    tm_free(cfg->redis_master);
    tm_free(cfg->plugin_dir);
    tm_free(cfg->instance);
    tm_free(cfg->http_listen);
    tm_free(cfg->http_token);
    for (size_t i = 0; i < cfg->http_nallowed_hosts; i++)
        tm_free(cfg->http_allowed_hosts[i]);
    tm_free(cfg->http_allowed_hosts);
    tm_cfg_clear_telemetry(cfg);
    tm_free(cfg);
}


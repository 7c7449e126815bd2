/* emit.c - adding messages: when one is due, whether its body is one,
 * publish now or at a time, and request/reply. */
#include "admin/admin.h"

#include <errno.h>
#include <string.h>

#include "daemon/daemon.h" /* tm_broker_ops_for */
#include "otel/otel.h"
#include "util/json.h"
#include "util/util.h"

int tm_admin_can_delay(enum tm_broker_kind kind)
{
    const struct tm_broker_ops *ops = tm_broker_ops_for(kind);
    return ops != NULL && ops->produce->publish_at != NULL;
}

int tm_admin_can_request(enum tm_broker_kind kind)
{
    const struct tm_broker_ops *ops = tm_broker_ops_for(kind);
    return ops != NULL && ops->produce->request != NULL;
}

int tm_admin_due(enum tm_broker_kind kind, const char *delay,
                 const char *at, int64_t now, int bound, int64_t *due_ms,
                 struct tm_admin_err *e)
{
    int64_t v = 0;
    *due_ms = 0;
    if (delay == NULL && at == NULL)
        return 0;
    if (delay != NULL && at != NULL) {
        tm_admin_error(e, TM_ADMIN_E_DUE_BOTH, "delay and at exclude each "
                       "other");
        return -1;
    }
    if (!tm_admin_can_delay(kind)) {
        const struct tm_broker_ops *ops = tm_broker_ops_for(kind);
        tm_admin_error(e, TM_ADMIN_E_NO_DELAY, "the %s broker has no "
                       "delayed messages",
                       ops != NULL ? ops->kind : "configured");
        return -1;
    }
    if (delay != NULL) {
        if (tm_parse_delay(delay, &v) != 0) {
            tm_admin_error(e, TM_ADMIN_E_DELAY_SYNTAX, "delay: expected a "
                           "duration such as 250ms, 30s, 5m or 1h, not "
                           "'%.64s'", delay);
            return -1;
        }
        if (bound && v > TM_ADMIN_DELAY_MAX_MS) {
            tm_admin_error(e, TM_ADMIN_E_TOO_FAR, "delay: '%.64s' is over "
                           "30 days, the longest delay", delay);
            return -1;
        }
        *due_ms = now + v;
        return 0;
    }
    if (tm_parse_at(at, &v) != 0) {
        tm_admin_error(e, TM_ADMIN_E_AT_SYNTAX, "at: expected an RFC 3339 "
                       "time with a zone (2026-12-01T03:00:00Z) or epoch "
                       "milliseconds, not '%.64s'", at);
        return -1;
    }
    if (bound && v - now > TM_ADMIN_DELAY_MAX_MS) {
        tm_admin_error(e, TM_ADMIN_E_TOO_FAR, "at: '%.64s' is more than 30 "
                       "days ahead, the longest delay", at);
        return -1;
    }
    *due_ms = v;
    return 0;
}

int tm_admin_body_check(const char *body, size_t len,
                        struct tm_admin_err *e)
{
    size_t at = 0;
    if (len == 0 || body == NULL) {
        tm_admin_error(e, TM_ADMIN_E_BODY_EMPTY, "the message body is "
                       "empty: send the task's JSON object");
        return -1;
    }
    const char *nul = memchr(body, '\0', len);
    if (nul != NULL) {
        tm_admin_error(e, TM_ADMIN_E_BODY_NUL, "the message body contains "
                       "a NUL byte");
        e->at = (size_t)(nul - body);
        return -1;
    }
    if (!tm_utf8_valid(body, len)) {
        tm_admin_error(e, TM_ADMIN_E_BODY_UTF8, "the message body is not "
                       "valid UTF-8");
        return -1;
    }
    switch (tm_json_check_at(body, len, &at)) {
    case TM_JSON_OBJECT:
        return 0;
    case TM_JSON_OTHER:
        tm_admin_error(e, TM_ADMIN_E_BODY_OTHER, "the message body must be "
                       "a JSON object");
        return -1;
    case TM_JSON_INVALID:
        break;
    }
    tm_admin_error(e, TM_ADMIN_E_BODY_JSON, "the message body is not valid "
                   "JSON (at byte %zu)", at);
    e->at = at;
    return -1;
}

int tm_admin_emit(struct tm_broker *b, const struct tm_cfg_task *t,
                  const char *body, size_t len, const struct tm_pub *pub,
                  int64_t due_ms, char *id, size_t idlen,
                  struct tm_admin_err *e)
{
    const struct tm_broker_produce_ops *p = b->ops->produce;
    if (due_ms != 0 && p->publish_at == NULL) {
        tm_admin_error(e, TM_ADMIN_E_NO_DELAY, "the %s broker has no "
                       "delayed messages", b->ops->kind);
        return -1;
    }
    int rc = due_ms != 0
                 ? p->publish_at(b, t, body, len, pub, due_ms, id, idlen)
                 : p->publish(b, t, body, len, pub, id, idlen);
    if (rc != 0) {
        tm_admin_error(e, TM_ADMIN_E_BROKER, "%s", b->errstr);
        return -1;
    }
    return 0;
}

int tm_admin_emit_traced(struct tm_otel *o, struct tm_broker *b,
                         const struct tm_cfg_task *t, const char *body,
                         size_t len, const struct tm_pub *pub, int64_t due_ms,
                         char *id, size_t idlen, struct tm_admin_err *e)
{
    if (o == NULL)
        return tm_admin_emit(b, t, body, len, pub, due_ms, id, idlen, e);
    struct tm_trace_ctx ctx;
    char tp[TM_TRACEPARENT_SIZE];
    tm_otel_send_begin(o, &ctx, tp);
    struct tm_pub traced = {.priority = -1};
    if (pub != NULL)
        traced = *pub;
    traced.traceparent = tp;
    int64_t start = tm_now_ns();
    int rc = tm_admin_emit(b, t, body, len, &traced, due_ms, id, idlen, e);
    tm_otel_send_span(o, &ctx,
                      strcmp(b->ops->kind, "amqp") == 0 ? "rabbitmq"
                                                        : "redis",
                      t->queue, t->name, rc == 0 ? id : NULL, start,
                      tm_now_ns(), rc == 0 ? NULL : e->msg);
    return rc;
}

int tm_admin_request(struct tm_broker *b, const struct tm_cfg_task *t,
                     const char *body, size_t len, const struct tm_pub *pub,
                     int64_t timeout_ms, char *id, size_t idlen,
                     char **reply, int *task_failed, struct tm_admin_err *e)
{
    *reply = NULL;
    *task_failed = 0;
    if (idlen > 0)
        id[0] = '\0';
    if (b->ops->produce->request == NULL) {
        tm_admin_error(e, TM_ADMIN_E_NO_REQUEST, "the %s broker has no "
                       "request/reply", b->ops->kind);
        return -1;
    }
    if (b->ops->produce->request(b, t, body, len, pub, timeout_ms, id, idlen,
                                 reply, task_failed) == 0)
        return 0;
    if (b->err == ETIMEDOUT && idlen > 0 && id[0] != '\0')
        tm_admin_error(e, TM_ADMIN_E_TIMEOUT, "no reply from task '%s' in "
                       "time; the request %s stays queued and will run, "
                       "but its result is lost", t->name, id);
    else
        tm_admin_error(e, TM_ADMIN_E_BROKER, "%s", b->errstr);
    return -1;
}

/* asyncapi.c - the AsyncAPI 3.0.0 document of the running task map. */
#include "asyncapi.h"

#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "util.h"

/* Longest channel or operation id; longer task names are cut. */
#define TM_AA_ID_MAX 200

/* make_id writes into out an id for name plus suffix that AsyncAPI
 * accepts as a key (^[A-Za-z0-9_-]+$: a task name's '.' becomes '_')
 * and that taken (an object keyed by ids) does not hold yet. */
static void make_id(const char *name, const char *suffix, const cJSON *taken,
                    char *out, size_t size)
{
    char base[TM_AA_ID_MAX];
    size_t k = 0;
    for (const char *p = name; *p != '\0' && k + 1 < sizeof base; p++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
        base[k++] = ok ? ch : '_';
    }
    base[k] = '\0';
    tm_snprintf(out, size, "%s%s", base, suffix);
    for (int n = 2; cJSON_GetObjectItemCaseSensitive(taken, out) != NULL;
         n++)
        tm_snprintf(out, size, "%s%s-%d", base, suffix, n);
}

/* rebase_refs rewrites the schema's local references ("#..." $ref values,
 * which point into the schema itself) to point at the same place inside
 * the document, at the JSON pointer base where the schema is embedded. */
static void rebase_refs(cJSON *node, const char *base)
{
    for (cJSON *c = node != NULL ? node->child : NULL; c != NULL;
         c = c->next) {
        if (cJSON_IsString(c) && c->string != NULL &&
            strcmp(c->string, "$ref") == 0 && c->valuestring[0] == '#') {
            char *v = tm_asprintf("#%s%s", base, c->valuestring + 1);
            cJSON_SetValuestring(c, v);
            tm_free(v);
        } else if (cJSON_IsObject(c) || cJSON_IsArray(c)) {
            rebase_refs(c, base);
        }
    }
}

/* schema_of parses a plugin's JSON Schema text, to be embedded at the
 * JSON pointer base. A schema that is not a JSON object (unparsable, or a
 * boolean schema) counts as none. Returns a new item, or NULL when there
 * is no usable schema. */
static cJSON *schema_of(const char *text, const char *base)
{
    if (text == NULL)
        return NULL;
    cJSON *s = cJSON_Parse(text);
    if (s == NULL)
        return NULL;
    if (!cJSON_IsObject(s)) {
        cJSON_Delete(s);
        return NULL;
    }
    rebase_refs(s, base);
    return s;
}

static cJSON *ref_to(const char *a, const char *b, const char *c)
{
    char path[3 * TM_AA_ID_MAX + 64];
    if (c != NULL)
        tm_snprintf(path, sizeof path, "#/%s/%s/%s/%s", a, b, "messages", c);
    else
        tm_snprintf(path, sizeof path, "#/%s/%s", a, b);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "$ref", path);
    return r;
}

/* server_of describes the broker: host[:port] without credentials. */
static cJSON *server_of(const struct tm_cfg *cfg)
{
    const struct tm_url *u = &cfg->url;
    char host[600];
    if (strchr(u->host, ':') != NULL)
        tm_snprintf(host, sizeof host, "[%s]:%d", u->host, u->port);
    else
        tm_snprintf(host, sizeof host, "%s:%d", u->host, u->port);
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "host", host);
    cJSON_AddStringToObject(s, "protocol", u->scheme);
    if (u->kind == TM_BROKER_REDIS) {
        char path[32];
        tm_snprintf(path, sizeof path, "/%d", u->db);
        cJSON_AddStringToObject(s, "pathname", path);
        cJSON_AddStringToObject(s, "description",
                                "Redis Streams: each channel is a stream "
                                "read through a consumer group; a message "
                                "is an entry whose field `body` holds the "
                                "JSON text.");
    } else {
        if (u->vhost != NULL && strcmp(u->vhost, "/") != 0) {
            char *path = tm_asprintf("/%s", u->vhost);
            cJSON_AddStringToObject(s, "pathname", path);
            tm_free(path);
        }
        cJSON_AddStringToObject(s, "description",
                                "RabbitMQ: each channel is a queue; a "
                                "message body is the JSON text "
                                "(content_type application/json).");
    }
    return s;
}

static cJSON *message_of(const char *name, const char *title,
                         const char *summary, cJSON *payload)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "name", name);
    cJSON_AddStringToObject(m, "title", title);
    if (summary != NULL)
        cJSON_AddStringToObject(m, "summary", summary);
    cJSON_AddStringToObject(m, "contentType", "application/json");
    if (payload == NULL) {
        payload = cJSON_CreateObject();
        cJSON_AddStringToObject(payload, "type", "object");
    }
    cJSON_AddItemToObject(m, "payload", payload);
    return m;
}

/* add_task adds task t's channel, reply channel and operation. */
static void add_task(cJSON *channels, cJSON *operations,
                     const struct tm_task *t)
{
    const struct tm_cfg_task *ct = t->cfg;
    const struct tm_task_plugin *pd =
        t->plugin != NULL ? &t->plugin->desc : NULL;
    char id[TM_AA_ID_MAX + 16], rid[TM_AA_ID_MAX + 32], text[1024];

    make_id(ct->name, "", channels, id, sizeof id);
    cJSON *ch = cJSON_AddObjectToObject(channels, id);
    cJSON_AddStringToObject(ch, "address", ct->queue);
    tm_snprintf(text, sizeof text, "Task %s", ct->name);
    cJSON_AddStringToObject(ch, "title", text);
    if (pd != NULL)
        tm_snprintf(text, sizeof text, "Messages for task '%s' (plugin %s "
                    "%s). %s", ct->name, pd->name, pd->version,
                    pd->description != NULL ? pd->description : "");
    else
        tm_snprintf(text, sizeof text, "Messages for task '%s'.", ct->name);
    cJSON_AddStringToObject(ch, "description", text);
    cJSON *msgs = cJSON_AddObjectToObject(ch, "messages");
    tm_snprintf(text, sizeof text, "%s request", ct->name);
    char base[TM_AA_ID_MAX + 96];
    tm_snprintf(base, sizeof base, "/channels/%s/messages/request/payload",
                id);
    cJSON_AddItemToObject(
        msgs, "request",
        message_of(ct->name, text, "A JSON object the task runs with.",
                   schema_of(pd != NULL ? pd->request_schema : NULL, base)));

    cJSON *op = cJSON_AddObjectToObject(operations, id);
    cJSON_AddStringToObject(op, "action", "receive");
    cJSON_AddItemToObject(op, "channel", ref_to("channels", id, NULL));
    tm_snprintf(text, sizeof text, "taskmill runs task '%s' on each message "
                "of its queue.", ct->name);
    cJSON_AddStringToObject(op, "summary", text);
    cJSON *opm = cJSON_AddArrayToObject(op, "messages");
    cJSON_AddItemToArray(opm, ref_to("channels", id, "request"));

    if (pd == NULL || pd->response_schema == NULL)
        return;
    make_id(ct->name, "_reply", channels, rid, sizeof rid);
    tm_snprintf(base, sizeof base, "/channels/%s/messages/reply/payload",
                rid);
    cJSON *response = schema_of(pd->response_schema, base);
    if (response == NULL)
        return;
    cJSON *rch = cJSON_AddObjectToObject(channels, rid);
    /* a reply goes where the request asks (its reply-to), so the
     * address is only known at run time */
    cJSON_AddNullToObject(rch, "address");
    tm_snprintf(text, sizeof text, "Task %s replies", ct->name);
    cJSON_AddStringToObject(rch, "title", text);
    tm_snprintf(text, sizeof text, "The result of task '%s', sent to the "
                "destination named by the request's reply-to.", ct->name);
    cJSON_AddStringToObject(rch, "description", text);
    cJSON *rmsgs = cJSON_AddObjectToObject(rch, "messages");
    tm_snprintf(text, sizeof text, "%s result", ct->name);
    char rname[TM_AA_ID_MAX + 16];
    tm_snprintf(rname, sizeof rname, "%s.result", ct->name);
    cJSON_AddItemToObject(rmsgs, "reply",
                          message_of(rname, text, "The task's JSON result.",
                                     response));
    cJSON *reply = cJSON_AddObjectToObject(op, "reply");
    cJSON_AddItemToObject(reply, "channel", ref_to("channels", rid, NULL));
    cJSON *rm = cJSON_AddArrayToObject(reply, "messages");
    cJSON_AddItemToArray(rm, ref_to("channels", rid, "reply"));
}

char *tm_asyncapi_render(const struct tm_cfg *cfg, const struct tm_task *tasks,
                         size_t ntasks, size_t *len)
{
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "asyncapi", "3.0.0");
    cJSON *info = cJSON_AddObjectToObject(doc, "info");
    cJSON_AddStringToObject(info, "title", "taskmill");
    cJSON_AddStringToObject(info, "version", TM_VERSION);
    char text[512];
    tm_snprintf(text, sizeof text, "The tasks that taskmill instance '%s' "
                "runs: one channel per task queue, each with the operation "
                "that receives its messages.",
                cfg->instance != NULL ? cfg->instance : "taskmill");
    cJSON_AddStringToObject(info, "description", text);
    cJSON_AddStringToObject(doc, "defaultContentType", "application/json");
    cJSON *servers = cJSON_AddObjectToObject(doc, "servers");
    cJSON_AddItemToObject(servers, "broker", server_of(cfg));
    cJSON *channels = cJSON_AddObjectToObject(doc, "channels");
    cJSON *operations = cJSON_AddObjectToObject(doc, "operations");
    for (size_t i = 0; i < ntasks; i++)
        add_task(channels, operations, &tasks[i]);
    char *out = cJSON_PrintUnformatted(doc);
    cJSON_Delete(doc);
    if (out == NULL) {
        *len = 0;
        return NULL;
    }
    *len = strlen(out);
    return out;
}

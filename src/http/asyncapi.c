/* asyncapi.c - the AsyncAPI 3.0.0 document of the running task map. */
#include "http/asyncapi.h"

#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "admin/admin.h" /* tm_admin_can_request */
#include "broker/broker.h"
#include "util/util.h"

/* Longest channel or operation id; longer task names are cut. */
#define TM_AA_ID_MAX 200

/* Deepest nesting of a plugin schema that gets titles (a guard: plugin
 * schemas are small, and cJSON already bounds the depth it parses). */
#define TM_AA_TITLE_DEPTH 32

/* is_alnum: an ASCII letter or digit (task names are ASCII). */
static int is_alnum(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9');
}

/* pascal writes name in PascalCase into out ("noop.v2" -> "NoopV2",
 * "send_mail" -> "SendMail"): each run of letters and digits starts with
 * a capital, other characters are dropped. "Task" when nothing is left. */
static void pascal(const char *name, char *out, size_t size)
{
    size_t k = 0;
    int start = 1;
    for (const char *p = name; *p != '\0' && k + 1 < size; p++) {
        if (!is_alnum(*p)) {
            start = 1;
            continue;
        }
        char ch = *p;
        if (start && ch >= 'a' && ch <= 'z')
            ch = (char)(ch - 'a' + 'A');
        out[k++] = ch;
        start = 0;
    }
    out[k] = '\0';
    if (k == 0)
        tm_snprintf(out, size, "Task");
}

/* model_base writes into out the base of task name's model names
 * (base + "Request", base + "Response"): its PascalCase, with a number
 * added when another task's already took it. taken collects the bases. */
static void model_base(const char *name, cJSON *taken, char *out,
                       size_t size)
{
    char base[TM_AA_ID_MAX];
    pascal(name, base, sizeof base);
    tm_snprintf(out, size, "%s", base);
    for (int n = 2; cJSON_GetObjectItemCaseSensitive(taken, out) != NULL;
         n++)
        tm_snprintf(out, size, "%s%d", base, n);
    cJSON_AddTrueToObject(taken, out);
}

/* wants_title tells a schema that code generators turn into a type of
 * its own (an object, an enumeration, a choice) and that is not a bare
 * reference. */
static int wants_title(const cJSON *s)
{
    if (!cJSON_IsObject(s) || cJSON_GetObjectItem(s, "$ref") != NULL)
        return 0;
    const cJSON *type = cJSON_GetObjectItem(s, "type");
    return cJSON_GetObjectItem(s, "properties") != NULL ||
           cJSON_GetObjectItem(s, "enum") != NULL ||
           cJSON_GetObjectItem(s, "oneOf") != NULL ||
           cJSON_GetObjectItem(s, "anyOf") != NULL ||
           (cJSON_IsString(type) && strcmp(type->valuestring, "object") == 0);
}

static void title_schema(cJSON *s, const char *title, int depth);

/* title_members titles the schemas held by keyword kw of s: a mapping of
 * named schemas (properties, $defs) named title + Name, one schema
 * (items, additionalProperties) named title + suffix, or a list (oneOf,
 * anyOf, allOf, prefixItems) named title + suffix + index. */
static void title_members(cJSON *s, const char *kw, const char *title,
                          const char *suffix, int depth)
{
    cJSON *m = cJSON_GetObjectItem(s, kw);
    char sub[2 * TM_AA_ID_MAX], part[TM_AA_ID_MAX];
    if (m == NULL)
        return;
    if (suffix == NULL && cJSON_IsObject(m)) {
        for (cJSON *c = m->child; c != NULL; c = c->next) {
            pascal(c->string, part, sizeof part);
            tm_snprintf(sub, sizeof sub, "%s%s", title, part);
            title_schema(c, sub, depth + 1);
        }
    } else if (suffix != NULL && cJSON_IsArray(m)) {
        int i = 1;
        for (cJSON *c = m->child; c != NULL; c = c->next, i++) {
            tm_snprintf(sub, sizeof sub, "%s%s%d", title, suffix, i);
            title_schema(c, sub, depth + 1);
        }
    } else if (suffix != NULL) {
        tm_snprintf(sub, sizeof sub, "%s%s", title, suffix);
        title_schema(m, sub, depth + 1);
    }
}

/* title_schema gives s (when it wants one and has none) and the schemas
 * nested in it a title derived from title, so that code generators name
 * their types after the task rather than "AnonymousSchema". */
static void title_schema(cJSON *s, const char *title, int depth)
{
    if (!cJSON_IsObject(s) || depth > TM_AA_TITLE_DEPTH)
        return;
    if (wants_title(s) && cJSON_GetObjectItem(s, "title") == NULL)
        cJSON_AddStringToObject(s, "title", title);
    title_members(s, "properties", title, NULL, depth);
    title_members(s, "$defs", title, NULL, depth);
    title_members(s, "definitions", title, NULL, depth);
    title_members(s, "items", title, "Item", depth);
    title_members(s, "prefixItems", title, "Item", depth);
    title_members(s, "additionalProperties", title, "Value", depth);
    title_members(s, "oneOf", title, "Option", depth);
    title_members(s, "anyOf", title, "Option", depth);
    title_members(s, "allOf", title, "Part", depth);
}

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
 * JSON pointer base, and names it title (the plugin's own title of the
 * top level, if any, is kept as its description when it has none: two
 * tasks may share a plugin, and their types must not share a name). A
 * schema that is not a JSON object (unparsable, or a boolean schema)
 * counts as none. Returns a new item, or NULL when there is no usable
 * schema. */
static cJSON *schema_of(const char *text, const char *base, const char *title)
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
    cJSON *own = cJSON_DetachItemFromObject(s, "title");
    if (cJSON_IsString(own) && cJSON_GetObjectItem(s, "description") == NULL)
        cJSON_AddStringToObject(s, "description", own->valuestring);
    cJSON_Delete(own);
    cJSON_AddStringToObject(s, "title", title);
    title_schema(s, title, 0);
    return s;
}

/* task_schema returns the schema text of task ct: the plugin's own
 * (fixed), else the JSON object under key in the task's `config:` (how a
 * language host's task, whose plugin cannot know its format, declares
 * it); NULL when neither. Text it makes is stored in *owned for
 * cJSON_free. */
static const char *task_schema(const struct tm_cfg_task *ct,
                               const char *fixed, const char *key,
                               char **owned)
{
    *owned = NULL;
    if (fixed != NULL || ct->config_json == NULL)
        return fixed;
    cJSON *cfg = cJSON_Parse(ct->config_json);
    cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v))
        *owned = cJSON_PrintUnformatted(v);
    cJSON_Delete(cfg);
    return *owned;
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

/* message_of describes a message named name (also the title of its
 * payload when the plugin declares no schema: then any JSON object). */
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
        cJSON_AddStringToObject(payload, "title", name);
        cJSON_AddStringToObject(payload, "type", "object");
    }
    cJSON_AddItemToObject(m, "payload", payload);
    return m;
}

/*
 * add_task adds task t's channel, operation and, when the broker can
 * deliver replies (with_reply; both brokers do), the reply channel, whose
 * address the request names at run time (reply_to). Its messages and
 * payloads are named after the task (AddRequest, AddResponse; models
 * collects the names in use), so code generators produce types with
 * those names.
 */
static void add_task(cJSON *channels, cJSON *operations, cJSON *models,
                     const struct tm_task *t, int with_reply,
                     enum tm_broker_kind kind)
{
    const struct tm_cfg_task *ct = t->cfg;
    const struct tm_task_plugin *pd =
        t->plugin != NULL ? &t->plugin->desc : NULL;
    char id[TM_AA_ID_MAX + 16], rid[TM_AA_ID_MAX + 32], text[1024];
    char model[TM_AA_ID_MAX + 16], name[TM_AA_ID_MAX + 32];
    model_base(ct->name, models, model, sizeof model);

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
    tm_snprintf(text, sizeof text, "Task %s: request", ct->name);
    tm_snprintf(name, sizeof name, "%sRequest", model);
    char base[TM_AA_ID_MAX + 96];
    tm_snprintf(base, sizeof base, "/channels/%s/messages/request/payload",
                id);
    char *req_text, *resp_text;
    const char *req = task_schema(ct, pd != NULL ? pd->request_schema : NULL,
                                  "request_schema", &req_text);
    cJSON_AddItemToObject(
        msgs, "request",
        message_of(name, text, "A JSON object the task runs with.",
                   schema_of(req, base, name)));
    cJSON_free(req_text);

    cJSON *op = cJSON_AddObjectToObject(operations, id);
    cJSON_AddStringToObject(op, "action", "receive");
    cJSON_AddItemToObject(op, "channel", ref_to("channels", id, NULL));
    tm_snprintf(text, sizeof text, "taskmill runs task '%s' on each message "
                "of its queue.", ct->name);
    cJSON_AddStringToObject(op, "summary", text);
    cJSON *opm = cJSON_AddArrayToObject(op, "messages");
    cJSON_AddItemToArray(opm, ref_to("channels", id, "request"));

    if (!with_reply || pd == NULL)
        return;
    const char *resp = task_schema(ct, pd->response_schema,
                                   "response_schema", &resp_text);
    if (resp == NULL)
        return;
    make_id(ct->name, "_reply", channels, rid, sizeof rid);
    tm_snprintf(base, sizeof base, "/channels/%s/messages/reply/payload",
                rid);
    tm_snprintf(name, sizeof name, "%sResponse", model);
    cJSON *response = schema_of(resp, base, name);
    cJSON_free(resp_text);
    if (response == NULL)
        return;
    cJSON *rch = cJSON_AddObjectToObject(channels, rid);
    /* a reply goes where the request asks (its reply-to), so the
     * address is only known at run time */
    cJSON_AddNullToObject(rch, "address");
    tm_snprintf(text, sizeof text, "Task %s replies", ct->name);
    cJSON_AddStringToObject(rch, "title", text);
    if (kind == TM_BROKER_REDIS)
        tm_snprintf(text, sizeof text, "The result of task '%s' for a "
                    "request (an entry with the fields reply_to and, "
                    "optionally, correlation_id): an entry added to the "
                    "stream the request's reply_to names, its field body "
                    "holding this payload (or, when the task failed, an "
                    "error object), beside taskmill_reply (the task's name, "
                    "the first field), outcome, attempts, in_reply_to "
                    "(the request's id) and correlation_id; the stream "
                    "expires after the task's reply_ttl. A reply_to that "
                    "exists and is not such a reply stream is not "
                    "answered.", ct->name);
    else
        tm_snprintf(text, sizeof text, "The result of task '%s' for a "
                    "request (a message with the properties reply_to and "
                    "correlation_id): published to the queue reply_to "
                    "names, with the request's correlation_id and the "
                    "header x-outcome; when the task failed, the body is "
                    "an error object instead.", ct->name);
    cJSON_AddStringToObject(rch, "description", text);
    cJSON *rmsgs = cJSON_AddObjectToObject(rch, "messages");
    tm_snprintf(text, sizeof text, "Task %s: result", ct->name);
    cJSON_AddItemToObject(rmsgs, "reply",
                          message_of(name, text, "The task's JSON result.",
                                     response));
    cJSON *reply = cJSON_AddObjectToObject(op, "reply");
    cJSON *raddr = cJSON_AddObjectToObject(reply, "address");
    cJSON_AddStringToObject(raddr, "description",
                            kind == TM_BROKER_REDIS
                                ? "The stream named by the request entry's "
                                  "field reply_to."
                                : "The queue named by the request's "
                                  "reply_to property.");
    cJSON_AddStringToObject(raddr, "location", "$message.header#/reply_to");
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
    /* replies only where the broker adapter can deliver them */
    int with_reply = tm_admin_can_request(cfg->url.kind);
    cJSON *models = cJSON_CreateObject();
    for (size_t i = 0; i < ntasks; i++)
        add_task(channels, operations, models, &tasks[i], with_reply,
                 cfg->url.kind);
    cJSON_Delete(models);
    char *out = cJSON_PrintUnformatted(doc);
    cJSON_Delete(doc);
    if (out == NULL) {
        *len = 0;
        return NULL;
    }
    *len = strlen(out);
    return out;
}

/* host_json.h - the JSON helpers the host table serves to plugins. */
#ifndef TASKMILL_HOST_JSON_H
#define TASKMILL_HOST_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "taskmill.h"

/*
 * The functions behind struct tm_host's json_* members (ABI 1.1); their
 * contracts are the ones taskmill.h states for the members and for the
 * tm_json_*() wrappers. They hold no global state, so they work the same
 * in the daemon, in a fork-pool child and in `taskmill invoke`.
 *
 * Reading (host_json_read.c) scans the text in place with the strict
 * validator of json.c: one pass per lookup, no allocation, exact 64-bit
 * integers (cJSON reads every number as a double), keys compared after
 * unescaping, a duplicated key refused rather than resolved either way.
 */
int tm_hjson_find(const char *json, size_t len, const char *key,
                  const char **val, size_t *val_len);
int tm_hjson_string(const char *val, size_t len, char *buf, size_t size,
                    size_t *out_len);
int tm_hjson_int(const char *val, size_t len, int64_t *out);
int tm_hjson_number(const char *val, size_t len, double *out);

/*
 * Building (host_json_build.c) appends to one growing buffer, so the
 * finished text can become the run's result without a copy
 * (tm_hjson_take). The size limit equals the largest result a run may
 * set.
 */
#define TM_HJSON_MAX (16u * 1024u * 1024u)

struct tm_json *tm_hjson_new(void);
void tm_hjson_free(struct tm_json *jb);
int tm_hjson_open(struct tm_json *jb, const char *key, int array);
int tm_hjson_close(struct tm_json *jb);
int tm_hjson_add_string(struct tm_json *jb, const char *key, const char *s,
                        size_t len);
int tm_hjson_add_int(struct tm_json *jb, const char *key, int64_t v);
int tm_hjson_add_double(struct tm_json *jb, const char *key, double v);
int tm_hjson_add_bool(struct tm_json *jb, const char *key, int v);
int tm_hjson_add_null(struct tm_json *jb, const char *key);
int tm_hjson_add_raw(struct tm_json *jb, const char *key, const char *json,
                     size_t len);
const char *tm_hjson_text(struct tm_json *jb, size_t *len);
const char *tm_hjson_error(const struct tm_json *jb);

/*
 * tm_hjson_take finishes the builder (closing what is open), moves its
 * text (NUL-terminated, tm_malloc'd; the caller frees it with tm_free)
 * into *text and its length into *len, and frees the builder. Returns
 * NULL, or the builder's failure (a static string) with *text NULL.
 */
const char *tm_hjson_take(struct tm_json *jb, char **text, size_t *len);

/* TM_HOST_JSON_MEMBERS initialises the json_* members of a struct tm_host
 * but json_result, which the run's owner (run.c) provides. */
#define TM_HOST_JSON_MEMBERS                                              \
    .json_find = tm_hjson_find, .json_string = tm_hjson_string,           \
    .json_int = tm_hjson_int, .json_number = tm_hjson_number,             \
    .json_new = tm_hjson_new, .json_free = tm_hjson_free,                 \
    .json_open = tm_hjson_open, .json_close = tm_hjson_close,             \
    .json_add_string = tm_hjson_add_string,                               \
    .json_add_int = tm_hjson_add_int,                                     \
    .json_add_double = tm_hjson_add_double,                               \
    .json_add_bool = tm_hjson_add_bool,                                   \
    .json_add_null = tm_hjson_add_null,                                   \
    .json_add_raw = tm_hjson_add_raw, .json_text = tm_hjson_text,         \
    .json_error = tm_hjson_error

#endif /* TASKMILL_HOST_JSON_H */

/* json.h - strict validation of JSON text (RFC 8259), without allocation. */
#ifndef TASKMILL_JSON_H
#define TASKMILL_JSON_H

#include <stddef.h>

/* Nesting deeper than this is refused (a guard for hostile input). */
#define TM_JSON_MAX_DEPTH 512

enum tm_json_check {
    TM_JSON_OBJECT = 1,    /* valid, and the value is an object */
    TM_JSON_OTHER = 2,     /* valid, another kind of value */
    TM_JSON_INVALID = 3    /* not JSON (or nested too deep) */
};

/*
 * tm_json_check checks that s[0..len) is exactly one JSON value with only
 * white space around it, strictly as RFC 8259 has it: no comments, no
 * trailing commas, no leading zeros, no raw control characters in
 * strings, only the standard escapes. It does not check UTF-8 (see
 * tm_utf8_valid) and never allocates. cJSON, which the daemon uses to
 * build JSON, accepts some of those forms, so bodies are checked here.
 */
enum tm_json_check tm_json_check(const char *s, size_t len);

/*
 * tm_json_scan checks, as strictly as tm_json_check, the one JSON value
 * that starts s[0..len) (after white space) and returns how many bytes it
 * spans from s, or 0 when none starts there. What follows is not looked
 * at. Never allocates.
 */
size_t tm_json_scan(const char *s, size_t len);

/*
 * tm_json_check_at is tm_json_check that also tells where invalid text
 * goes wrong: for TM_JSON_INVALID, *bad_at (when bad_at is not NULL) is
 * the 0-based byte offset where the scan stopped, at most len (len: the
 * text ended too early); 0 for valid text.
 */
enum tm_json_check tm_json_check_at(const char *s, size_t len,
                                    size_t *bad_at);

/*
 * tm_json_check_utf8 is tm_json_check that also requires the strings to be
 * valid UTF-8 (as tm_utf8_valid has it; all else in JSON text is ASCII):
 * TM_JSON_OBJECT or TM_JSON_OTHER says that s[0..len) is valid UTF-8 and
 * valid JSON, in one pass. Invalid text is TM_JSON_INVALID whatever the
 * fault (tm_utf8_valid and tm_json_check_at tell which).
 */
enum tm_json_check tm_json_check_utf8(const char *s, size_t len);

#endif /* TASKMILL_JSON_H */

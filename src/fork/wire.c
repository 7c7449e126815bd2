/* fork/wire.c - checking the children's replies, frame buffers. */
#include "fork/wire.h"

#include <string.h>

#include "msg.h"
#include "util.h"

/* text_ok says whether n bytes of text are free of NUL and valid UTF-8. */
static int text_ok(const char *s, size_t n)
{
    return memchr(s, '\0', n) == NULL && tm_utf8_valid(s, n);
}

enum tm_fork_check tm_fork_resp_check(const char *buf, size_t len,
                                      const struct tm_fork_expect *ex,
                                      struct tm_fork_resp *out,
                                      size_t *frame_len, const char **why)
{
    struct tm_fork_resp rs;
    uint32_t magic;
    if (len >= sizeof magic) {
        memcpy(&magic, buf, sizeof magic);
        if (magic != TM_FORK_MAGIC_RESP) {
            *why = "bad magic number";
            return TM_FORK_CORRUPT;
        }
    }
    if (len < sizeof rs)
        return TM_FORK_MORE;
    memcpy(&rs, buf, sizeof rs);
    if (rs.seq != ex->seq) {
        *why = "it answers a message it was not running";
        return TM_FORK_CORRUPT;
    }
    if (rs.task_index != ex->task_index) {
        *why = "wrong task index";
        return TM_FORK_CORRUPT;
    }
    if (rs.outcome <= TM_OUT_NONE || rs.outcome >= TM_OUT_COUNT) {
        *why = "no such outcome";
        return TM_FORK_CORRUPT;
    }
    if (rs.error_len > TM_FORK_ERROR_MAX) {
        *why = "error text too long";
        return TM_FORK_CORRUPT;
    }
    if (rs.result_len > TM_FORK_RESULT_MAX) {
        *why = "result too long";
        return TM_FORK_CORRUPT;
    }
    if (rs.t_start_ns < ex->not_before_ns || rs.t_end_ns < rs.t_start_ns ||
        rs.t_end_ns > ex->not_after_ns) {
        *why = "run times outside the run";
        return TM_FORK_CORRUPT;
    }
    /* both lengths are bounded above: no overflow */
    size_t total = sizeof rs + rs.error_len + (size_t)rs.result_len;
    if (len < total)
        return TM_FORK_MORE;
    const char *text = buf + sizeof rs;
    if (!text_ok(text, rs.error_len)) {
        *why = "error text is not UTF-8 text";
        return TM_FORK_CORRUPT;
    }
    if (!text_ok(text + rs.error_len, (size_t)rs.result_len)) {
        *why = "result is not UTF-8 text";
        return TM_FORK_CORRUPT;
    }
    *out = rs;
    *frame_len = total;
    return TM_FORK_FRAME;
}

void tm_fork_buf_put(struct tm_fork_buf *b, const void *data, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        b->p = tm_realloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

/* fork/wire.c - checking the children's replies, frame buffers. */
#include "fork/wire.h"

#include <string.h>

#include "task/msg.h"
#include "util/util.h"

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
    const char *bad = NULL;
    enum tm_fork_check rc = TM_FORK_MORE;

    if (len >= sizeof magic) {
        memcpy(&magic, buf, sizeof magic);
        if (magic != TM_FORK_MAGIC_RESP) {
            bad = "bad magic number";
            goto out;
        }
    }
    if (len < sizeof rs)
        goto out;
    memcpy(&rs, buf, sizeof rs);
    /* every header field before any length is trusted */
    if (rs.seq != ex->seq)
        bad = "it answers a message it was not running";
    else if (rs.task_index != ex->task_index)
        bad = "wrong task index";
    else if (rs.outcome <= TM_OUT_NONE || rs.outcome >= TM_OUT_COUNT)
        bad = "no such outcome";
    else if (rs.error_len > TM_FORK_ERROR_MAX)
        bad = "error text too long";
    else if (rs.result_len > TM_FORK_RESULT_MAX)
        bad = "result too long";
    else if (rs.t_start_ns < ex->not_before_ns ||
             rs.t_end_ns < rs.t_start_ns || rs.t_end_ns > ex->not_after_ns)
        bad = "run times outside the run";
    if (bad != NULL)
        goto out;
    /* both lengths are bounded above: no overflow */
    size_t total = sizeof rs + rs.error_len + (size_t)rs.result_len;
    if (len < total)
        goto out;
    const char *text = buf + sizeof rs;
    if (!text_ok(text, rs.error_len))
        bad = "error text is not UTF-8 text";
    else if (!text_ok(text + rs.error_len, (size_t)rs.result_len))
        bad = "result is not UTF-8 text";
    if (bad != NULL)
        goto out;
    *out = rs;
    *frame_len = total;
    rc = TM_FORK_FRAME;
out:
    if (bad != NULL) {
        *why = bad;
        rc = TM_FORK_CORRUPT;
    }
    return rc;
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

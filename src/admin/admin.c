/* admin.c - the admin layer's ground: a broker of its own for one
 * command, and the one setter of its errors. */
#include "admin/admin.h"

#include <stdarg.h>
#include <stdio.h>

#include "daemon/daemon.h" /* tm_broker_new */

struct tm_broker *tm_admin_broker(const struct tm_cfg *cfg, char *err,
                                  size_t errlen)
{
    return tm_broker_new(cfg, err, errlen);
}

void tm_admin_broker_close(struct tm_broker *b)
{
    if (b != NULL)
        b->ops->destroy(b);
}

void tm_admin_error(struct tm_admin_err *e, enum tm_admin_code code,
                    const char *fmt, ...)
{
    va_list ap;
    e->code = code;
    e->at = 0;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
}

/* notify.h - service manager notification (the sd_notify protocol). */
#ifndef TASKMILL_NOTIFY_H
#define TASKMILL_NOTIFY_H

#include <stdint.h>

/* tm_notify sends one sd_notify(3) state string ("READY=1", "STATUS=...",
 * "STOPPING=1", "WATCHDOG=1") when running under a service manager that
 * set NOTIFY_SOCKET (a path, or an abstract name after @); otherwise it does
 * nothing. Returns 0. */
int tm_notify(const char *state);

/* tm_notify_status sends "STATUS=<formatted text>". */
int tm_notify_status(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* tm_notify_watchdog_ms returns how often WATCHDOG=1 must be sent (half
 * of WATCHDOG_USEC), or 0 when the watchdog is off. */
int64_t tm_notify_watchdog_ms(void);

#endif /* TASKMILL_NOTIFY_H */

/* notify.c - service manager notification through libsystemd. */
#include "notify.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef TM_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

int tm_notify(const char *state)
{
#ifdef TM_HAVE_SYSTEMD
    /* unset_environment = 0: child processes of the fork pool must not
     * notify, but they never call this */
    sd_notify(0, state);
#else
    (void)state;
#endif
    return 0;
}

int tm_notify_status(const char *fmt, ...)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf, "STATUS=");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    return tm_notify(buf);
}

int64_t tm_notify_watchdog_ms(void)
{
#ifdef TM_HAVE_SYSTEMD
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0)
        return (int64_t)(usec / 2000);
#endif
    return 0;
}

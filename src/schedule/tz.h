/* tz.h - time zone rules read from the system tz database (TZif files). */
#ifndef TASKMILL_SCHEDULE_TZ_H
#define TASKMILL_SCHEDULE_TZ_H

#include <stddef.h>
#include <stdint.h>

/* TM_TZ_DIR is where tm_tz_load looks for zones unless TZDIR is set, the
 * directory of the Debian package tzdata. */
#define TM_TZ_DIR "/usr/share/zoneinfo"

/* struct tm_tz is one zone's rules: UTC offsets by instant. Immutable once
 * loaded, so any number of threads may read it. */
struct tm_tz;

/*
 * tm_tz_load reads zone name ("Europe/Berlin") from $TZDIR or TM_TZ_DIR.
 * "UTC" is built in and needs no file. Returns a zone the caller frees
 * with tm_tz_free(), or NULL with a reason in err (unknown zone, unsafe
 * name, damaged or unsupported file).
 */
struct tm_tz *tm_tz_load(const char *name, char *err, size_t errlen);

/*
 * tm_tz_parse builds a zone from the TZif bytes data[0..len) (version 2
 * or later: the 64-bit section and the POSIX TZ footer are used), named
 * name. Returns NULL with a reason in err. The caller frees the zone.
 */
struct tm_tz *tm_tz_parse(const char *name, const unsigned char *data,
                          size_t len, char *err, size_t errlen);

/* tm_tz_free releases a zone; NULL is accepted. */
void tm_tz_free(struct tm_tz *z);

/* tm_tz_name returns the zone's name as given to tm_tz_load. */
const char *tm_tz_name(const struct tm_tz *z);

/* tm_tz_offset returns the UTC offset in seconds (east positive) in
 * effect at the instant u (Unix seconds): local wall time = u + offset. */
int32_t tm_tz_offset(const struct tm_tz *z, int64_t u);

/* tm_tz_next_change returns the first instant after u at which the zone's
 * rules name a transition (the offset may stay the same), or INT64_MAX
 * when none follows. */
int64_t tm_tz_next_change(const struct tm_tz *z, int64_t u);

/* tm_tz_offset_bounds gives the least and greatest offset the zone ever
 * uses (seconds). */
void tm_tz_offset_bounds(const struct tm_tz *z, int32_t *min, int32_t *max);

#endif /* TASKMILL_SCHEDULE_TZ_H */

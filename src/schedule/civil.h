/* civil.h - proleptic Gregorian dates as day numbers from 1970-01-01. */
#ifndef TASKMILL_SCHEDULE_CIVIL_H
#define TASKMILL_SCHEDULE_CIVIL_H

#include <stdbool.h>
#include <stdint.h>

#define TM_DAY_S 86400

/* tm_floor_div is a / b rounded towards minus infinity (b > 0). */
int64_t tm_floor_div(int64_t a, int64_t b);

/* tm_days_from_civil returns the day number of y-m-d (m 1..12, d 1..31),
 * 1970-01-01 being day 0. */
int64_t tm_days_from_civil(int64_t y, int m, int d);

/* tm_civil_from_days is the inverse: the date of day number days. */
void tm_civil_from_days(int64_t days, int64_t *y, int *m, int *d);

/* tm_weekday returns the day of the week of a day number, 0 = Sunday. */
int tm_weekday(int64_t days);

bool tm_is_leap(int64_t y);

/* tm_month_days returns the number of days of month m (1..12) of year y. */
int tm_month_days(int64_t y, int m);

#endif /* TASKMILL_SCHEDULE_CIVIL_H */

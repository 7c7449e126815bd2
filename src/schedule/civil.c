/* civil.c - proleptic Gregorian date arithmetic (H. Hinnant's algorithms,
 * exact for every int64 year the callers use). */
#include "schedule/civil.h"

#include <assert.h>

int64_t tm_floor_div(int64_t a, int64_t b)
{
    assert(b > 0);
    int64_t q = a / b;
    if (a % b < 0)
        q--;
    return q;
}

int64_t tm_days_from_civil(int64_t y, int m, int d)
{
    assert(m >= 1 && m <= 12 && d >= 1 && d <= 31);
    y -= m <= 2;
    int64_t era = tm_floor_div(y, 400);
    int64_t yoe = y - era * 400;                              /* 0..399 */
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;      /* 0..146096 */
    return era * 146097 + doe - 719468;
}

void tm_civil_from_days(int64_t days, int64_t *y, int *m, int *d)
{
    days += 719468;
    int64_t era = tm_floor_div(days, 146097);
    int64_t doe = days - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

int tm_weekday(int64_t days)
{
    /* 1970-01-01 was a Thursday (4) */
    return (int)(days - tm_floor_div(days + 4, 7) * 7 + 4);
}

bool tm_is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int tm_month_days(int64_t y, int m)
{
    static const int len[12] = { 31, 28, 31, 30, 31, 30,
                                 31, 31, 30, 31, 30, 31 };
    assert(m >= 1 && m <= 12);
    return m == 2 && tm_is_leap(y) ? 29 : len[m - 1];
}

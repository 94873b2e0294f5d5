/* clock.c - the clocks of clock.h, the same on every platform (the POSIX
 * clock_gettime, which Windows' pthreads library provides too). */
#include "moontail/clock.h"

int64_t mt_mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double mt_mono_ms_frac(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double mt_mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int64_t mt_wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* From the proleptic Gregorian calendar's cycles (400 years = 146097 days),
 * counted from 0000-03-01 so that the leap day ends a year; the same on
 * every platform, where Windows' gmtime stops at the year 3000. */
bool mt_utc_tm(time_t t, struct tm *out) {
    int64_t s = (int64_t)t, days = s / 86400, rem = s % 86400;
    if (rem < 0) rem += 86400, days--;
    if (days < -1000000000LL || days > 1000000000LL) return false;
    int64_t z = days + 719468; /* days since 0000-03-01 */
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;                                      /* [0, 146096] */
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; /* [0, 399] */
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);               /* [0, 365], from March */
    int64_t mp = (5 * doy + 2) / 153;                                    /* March = 0 */
    int64_t mday = doy - (153 * mp + 2) / 5 + 1, mon = mp < 10 ? mp + 2 : mp - 10;
    int64_t year = yoe + era * 400 + (mon < 2);
    bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    static const int before[12] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};
    *out = (struct tm){.tm_sec = (int)(rem % 60),
                       .tm_min = (int)(rem / 60 % 60),
                       .tm_hour = (int)(rem / 3600),
                       .tm_mday = (int)mday,
                       .tm_mon = (int)mon,
                       .tm_year = (int)(year - 1900),
                       .tm_wday = (int)(((days % 7) + 11) % 7), /* 1970-01-01 was a Thursday */
                       .tm_yday = before[mon] + (int)mday - 1 + (leap && mon > 1)};
    return true;
}

struct timespec mt_mono_after_ms(int64_t ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    return ts;
}

/* schedule.h - pause windows for nodes: "Mon-Fri 09:00-18:00".
 *
 * A schedule is one or more windows separated by ';' or ','. A window is
 * optional days then a time range:
 *   DAYS   "Mon", "Mon-Fri", "Sat-Sun", "Fri-Mon" (wraps), "Mon Wed Fri",
 *          "daily" or nothing (= every day); names are the first three
 *          letters of English day names, any case;
 *   TIME   "HH:MM-HH:MM" in local time, 00:00-24:00 (24:00 only as an
 *          end); a range whose end is earlier than its start runs past
 *          midnight ("22:00-06:00"), and then its early-morning part
 *          belongs to the day after a listed day.
 * Example: "Mon-Fri 09:00-18:00; Sat 10:00-14:00". */
#ifndef MOONTAIL_SCHEDULE_H
#define MOONTAIL_SCHEDULE_H

#include "moontail/error.h"

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

enum { MT_SCHEDULE_MAX_WINDOWS = 16 };

typedef struct mt_schedule_window {
    uint8_t days;       /* bit d set = day d (0 = Sunday, as struct tm) */
    int16_t start, end; /* minutes after midnight, [start, end) */
} mt_schedule_window;

typedef struct mt_schedule {
    int32_t n;
    mt_schedule_window w[MT_SCHEDULE_MAX_WINDOWS];
} mt_schedule;

/* Parses text; errors name the part that is wrong and show the form. */
int mt_schedule_parse(const char *text, mt_schedule *out, mt_error *err);

/* Whether local time *tm falls inside a window. */
bool mt_schedule_active(const mt_schedule *s, const struct tm *tm);

#endif

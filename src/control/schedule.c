/* schedule.c - parsing pause windows and asking whether one is active
 * (schedule.h). */
#include "moontail/schedule.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const day_names[7] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

static const char form[] = "use e.g. \"Mon-Fri 09:00-18:00\" or \"daily 22:00-06:00\"";

static int day_of(const char *s, size_t n) {
    if (n != 3) return -1;
    for (int d = 0; d < 7; d++)
        if (strncasecmp(s, day_names[d], 3) == 0) return d;
    return -1;
}

/* "HH:MM" at *p (advanced past it) -> minutes; -1 if malformed. */
static int clock_of(const char **p) {
    const char *s = *p;
    if (!isdigit((unsigned char)s[0]) || !isdigit((unsigned char)s[1]) || s[2] != ':' ||
        !isdigit((unsigned char)s[3]) || !isdigit((unsigned char)s[4]))
        return -1;
    int h = (s[0] - '0') * 10 + (s[1] - '0'), m = (s[3] - '0') * 10 + (s[4] - '0');
    if (m > 59 || h > 24 || (h == 24 && m != 0)) return -1;
    *p = s + 5;
    return h * 60 + m;
}

static int parse_window(const char *s, size_t len, mt_schedule_window *w, mt_error *err) {
    char buf[128];
    if (len >= sizeof buf) return mt_error_set(err, "schedule window '%.40s...' is too long", s);
    memcpy(buf, s, len);
    buf[len] = 0;
    w->days = 0;
    char *save = NULL, *tok = strtok_r(buf, " \t", &save);
    const char *range = NULL;
    while (tok) {
        if (isdigit((unsigned char)tok[0])) {
            if (range) /* s is not NUL-terminated: it goes on with the next windows */
                return mt_error_set(err, "schedule window '%.*s': two time ranges; %s", (int)len, s,
                                    form);
            range = tok;
        } else if (strcasecmp(tok, "daily") == 0) {
            w->days = 0x7f;
        } else {
            char *dash = strchr(tok, '-');
            int a = day_of(tok, dash ? (size_t)(dash - tok) : strlen(tok));
            int b = dash ? day_of(dash + 1, strlen(dash + 1)) : a;
            if (a < 0 || b < 0)
                return mt_error_set(
                    err, "schedule: '%s' is not a day or day range (Mon, Mon-Fri); %s", tok, form);
            for (int d = a;; d = (d + 1) % 7) {
                w->days |= (uint8_t)(1u << d);
                if (d == b) break;
            }
        }
        tok = strtok_r(NULL, " \t", &save);
    }
    if (!range)
        return mt_error_set(err, "schedule window '%.*s' has no time range; %s", (int)len, s, form);
    const char *p = range;
    int a = clock_of(&p);
    int b = a >= 0 && *p == '-' ? (p++, clock_of(&p)) : -1;
    if (a < 0 || b < 0 || *p)
        return mt_error_set(err, "schedule: '%s' is not a time range HH:MM-HH:MM; %s", range, form);
    if (a == b) return mt_error_set(err, "schedule: time range '%s' is empty", range);
    /* a window past midnight from 24:00 would be one from 00:00 the day after */
    if (a == 24 * 60)
        return mt_error_set(err, "schedule: '%s' starts at 24:00; start at 00:00 the day after",
                            range);
    if (!w->days) w->days = 0x7f;
    w->start = (int16_t)a;
    w->end = (int16_t)b;
    return 0;
}

int mt_schedule_parse(const char *text, mt_schedule *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    const char *p = text;
    while (*p) {
        size_t n = strcspn(p, ";,");
        const char *q = p;
        while (q < p + n && isspace((unsigned char)*q)) q++;
        if (q < p + n) {
            if (out->n == MT_SCHEDULE_MAX_WINDOWS)
                return mt_error_set(err, "schedule: more than %d windows", MT_SCHEDULE_MAX_WINDOWS);
            if (parse_window(q, (size_t)(p + n - q), &out->w[out->n], err)) return -1;
            out->n++;
        }
        p += n;
        if (*p) p++;
    }
    if (out->n == 0) return mt_error_set(err, "schedule is empty; %s", form);
    return 0;
}

bool mt_schedule_active(const mt_schedule *s, const struct tm *tm) {
    int now = tm->tm_hour * 60 + tm->tm_min, today = tm->tm_wday, yesterday = (today + 6) % 7;
    for (int32_t i = 0; i < s->n; i++) {
        const mt_schedule_window *w = &s->w[i];
        if (w->start < w->end) {
            if ((w->days >> today & 1) && now >= w->start && now < w->end) return true;
        } else { /* past midnight: the evening of a listed day, the morning after it */
            if ((w->days >> today & 1) && now >= w->start) return true;
            if ((w->days >> yesterday & 1) && now < w->end) return true;
        }
    }
    return false;
}

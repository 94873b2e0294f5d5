/* fuzz_schedule.c - libFuzzer target for node pause schedules
 * (mt_schedule_parse, schedule.h): the text a node operator or the registry
 * API ("schedule" in POST /v1/nodes/ID/pause) supplies. Input: the text
 * (NUL-terminated copy). A schedule that parses must have 1..16 windows of
 * valid days and minutes, and mt_schedule_active must answer for every hour
 * of a week. */
#include "fuzz_target.h"
#include "moontail/schedule.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    mt_schedule s;
    mt_error err = {0};
    if (mt_schedule_parse(text, &s, &err) == 0) {
        if (s.n < 1 || s.n > MT_SCHEDULE_MAX_WINDOWS) abort();
        for (int i = 0; i < s.n; i++)
            if (!s.w[i].days || s.w[i].days & 0x80 || s.w[i].start < 0 || s.w[i].start > 1440 ||
                s.w[i].end < 0 || s.w[i].end > 1440)
                abort();
        for (int h = 0; h < 7 * 24; h++) {
            struct tm tm = {.tm_wday = h / 24, .tm_hour = h % 24, .tm_min = 30};
            (void)mt_schedule_active(&s, &tm);
        }
    } else if (!err.msg[0]) {
        abort(); /* a refusal says why */
    }
    free(text);
    return 0;
}

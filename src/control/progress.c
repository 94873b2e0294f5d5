/* progress.c - progress bars on terminals, plain lines in logs (progress.h). */
#include "moontail/progress.h"
#include "moontail/clock.h"
#include "moontail/gguf.h"
#include "moontail/sysinfo.h"
#include "moontail/file.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void mt_progress_init(mt_progress *p, FILE *out, const char *label) {
    mt_progress_init_quiet(p, out, label, 0);
}

int mt_progress_env(void) {
    const char *v = getenv("MOONTAIL_PROGRESS");
    if (!v || !*v) return 0;
    return strcmp(v, "0") == 0 ? -1 : 1;
}

void mt_progress_init_quiet(mt_progress *p, FILE *out, const char *label, double quiet_s) {
    memset(p, 0, sizeof *p);
    int env = mt_progress_env();
    if (env < 0) out = NULL;
    if (env > 0) quiet_s = 0;
    p->out = out;
    p->tty = out && isatty(fileno(out));
    p->start_s = mt_mono_s();
    p->quiet_s = quiet_s;
    snprintf(p->label, sizeof p->label, "%s", label);
}

void mt_progress_init_log(mt_progress *p, const mt_log_source *log, const char *label,
                          double quiet_s) {
    mt_progress_init_quiet(p, log->quiet ? NULL : stderr, label, quiet_s);
    p->log = log;
}

void mt_progress_bytes(mt_progress *p, uint64_t done, uint64_t total) {
    double dt = mt_mono_s() - p->start_s, rate = dt > 0 ? (double)done / dt : 0;
    mt_progress_update(p, done, total, rate,
                       rate > 0 && done < total ? (double)(total - done) / rate : -1);
}

/* Whether a report of done of total is due now (a quick step shows none; a terminal is
 * redrawn 10 times a second, a log gets a line every 2 s, and the last one always). */
static bool due(mt_progress *p, bool last) {
    if (!p->out || p->finished) return false;
    double t = mt_mono_s();
    if (!p->shown && t - p->start_s < p->quiet_s) { /* a quick step: nothing to show */
        if (last) p->finished = true;
        return false;
    }
    if (!last && t - p->last_s < (p->tty ? 0.1 : 2.0)) return false;
    p->last_s = t;
    return true;
}

static void bar_of(double frac, char bar[21]) {
    int fill = (int)(frac * 20 + 0.5);
    for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
    bar[20] = 0;
}

/* Writes a report of frac done: on a terminal the bar redrawn with bar_text after it, else a
 * line "label: text", in the log for a part that logs. */
static void emit(mt_progress *p, bool last, double frac, const char *bar_text, const char *text) {
    if (p->tty) {
        char bar[21], who[140] = "";
        bar_of(frac, bar);
        if (p->log)
            snprintf(who, sizeof who, "%s: %s%s", p->log->component, p->log->name,
                     p->log->name[0] ? ": " : "");
        fprintf(p->out, "\r%s%s  [%s] %3.0f%%  %s\033[K%s", who, p->label, bar, frac * 100,
                bar_text, last ? "\n" : "");
        fflush(p->out);
    } else if (p->log) {
        mt_log_as(p->log, MT_LOG_INFO, "%s: %s", p->label, text);
    } else {
        fprintf(p->out, "%s: %s\n", p->label, text);
        fflush(p->out);
    }
    p->shown = true;
    if (last) p->finished = true;
}

void mt_progress_count(mt_progress *p, uint64_t done, uint64_t total, const char *unit) {
    bool last = done >= total;
    if (!due(p, last)) return;
    double frac = total ? (double)done / (double)total : 1.0;
    char bar_text[96], text[128];
    snprintf(bar_text, sizeof bar_text, "%llu/%llu %s", (unsigned long long)done,
             (unsigned long long)total, unit);
    snprintf(text, sizeof text, "%llu of %llu %s (%.0f%%)", (unsigned long long)done,
             (unsigned long long)total, unit, frac * 100);
    emit(p, last, frac, bar_text, text);
}

void mt_progress_update(mt_progress *p, uint64_t done, uint64_t total, double rate, double eta_s) {
    bool last = done >= total;
    if (!due(p, last)) return;
    double frac = total ? (double)done / (double)total : 1.0;
    char eta[32] = "", bar_text[128], text[128];
    if (!last && eta_s >= 0) snprintf(eta, sizeof eta, "  %.0f s left", eta_s);
    snprintf(bar_text, sizeof bar_text, "%.1f/%.1f MB  %.1f MB/s%s", done / 1e6, total / 1e6,
             rate / 1e6, eta);
    snprintf(text, sizeof text, "%.1f of %.1f MB (%.0f%%), %.1f MB/s%s", done / 1e6, total / 1e6,
             frac * 100, rate / 1e6, eta);
    emit(p, last, frac, bar_text, text);
}

/* Memory the kernel could hand out now, page cache included (MemAvailable). */
static double available_bytes(void) {
    return (double)mt_sys_ram_available();
}

void mt_progress_preload(const char *path, FILE *out) {
    if (!out) return;
    /* every file of a split model (gguf_open finds them); a file it cannot read as a
     * model is left to the loader to report */
    mt_error err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    if (!f) return;
    uint64_t total = gguf_total_size(f);
    uint64_t small = mt_progress_env() > 0 ? 0 : 256u << 20; /* shown: read in any size */
    if (total > small && (double)total <= available_bytes() / 2)
        for (uint32_t i = 0; i < f->n_parts; i++) {
            const char *p = f->parts[i].path, *base = strrchr(p, '/');
            char label[160];
            snprintf(label, sizeof label, "loading %.140s", base ? base + 1 : p);
            mt_progress bar;
            mt_progress_init(&bar, out, label);
            mt_progress_warm(p, &bar);
        }
    gguf_close(f);
}

int mt_progress_warm(const char *path, mt_progress *p) {
    int fd = mt_file_open(path, MT_O_READ | MT_O_SEQUENTIAL, 0);
    mt_file_info sb;
    if (fd < 0 || mt_file_fstat(fd, &sb) != 0) {
        if (fd >= 0) mt_file_close(fd);
        return -1;
    }
    const size_t chunk = 4u << 20;
    char *buf = malloc(chunk);
    if (!buf) {
        mt_file_close(fd);
        return -1;
    }
    uint64_t total = sb.size, done = 0;
    double t0 = mt_mono_s();
    ssize_t k;
    while ((k = mt_file_read(fd, buf, chunk)) > 0) {
        done += (uint64_t)k;
        double dt = mt_mono_s() - t0, rate = dt > 0 ? (double)done / dt : 0;
        mt_progress_update(p, done, total, rate, rate > 0 ? (double)(total - done) / rate : -1);
    }
    if (total == 0) mt_progress_update(p, 0, 0, 0, -1);
    free(buf);
    mt_file_close(fd);
    return k < 0 ? -1 : 0;
}

/* Leveled logging; the level may come from $HEARTH_LOG (debug|info|warn|error|off). */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int log_level_cur = -1;

void log_set_level(enum log_level lvl) { log_level_cur = (int)lvl; }

static int log_level_get(void)
{
    if (log_level_cur < 0) {
        const char *e = getenv("HEARTH_LOG");
        log_level_cur = LOG_LEVEL_INFO;
        if (e) {
            static const char *names[] = {"debug", "info", "warn", "error", "off"};
            for (int i = 0; i < 5; i++)
                if (!strcmp(e, names[i]))
                    log_level_cur = i;
        }
    }
    return log_level_cur;
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
    if ((int)lvl < log_level_get())
        return;
    static const char *tags[] = {"debug", "info", "warn", "error", ""};
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%02d:%02d:%02d.%03ld hearth %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
            ts.tv_nsec / 1000000, tags[lvl], msg);
}

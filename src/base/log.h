/* Leveled logging to stderr, one line per message: plain text by default, or one JSON
 * object per line (--log-format json) for log collectors.  Lines with named fields
 * (log_fields: the access log) become "key=value" pairs in text, members in JSON. */
#ifndef HEARTH_BASE_LOG_H
#define HEARTH_BASE_LOG_H

#include <stdbool.h>

enum log_level { LOG_LEVEL_DEBUG, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR, LOG_LEVEL_OFF };

enum log_format { LOG_FORMAT_TEXT, LOG_FORMAT_JSON };

void log_set_level(enum log_level lvl);
bool log_enabled(enum log_level lvl);
void log_set_format(enum log_format fmt);
void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

enum log_field_type {
    LOG_FIELD_STR, /* str; NULL: "-" in text, null in JSON */
    LOG_FIELD_INT, /* i */
    LOG_FIELD_NUM, /* num, printed with 3 decimals; NaN: "-" / null */
    LOG_FIELD_BOOL, /* i != 0: true / false */
};

struct log_field {
    const char *key; /* [a-z_]+: written as is */
    enum log_field_type type;
    const char *str;
    long long i;
    double num;
};

/* One line: msg, then the fields in order.  Strings are escaped (no line breaks get out). */
void log_fields(enum log_level lvl, const char *msg, const struct log_field *fields, int n_fields);

#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif

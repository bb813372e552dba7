/*
 * log — leveled logging to stderr, one line per call.
 *
 * The level is process-wide (set once at start from --verbose). Lines look like
 * "2026-11-30 11:00:00.123 INFO  message". Any thread may log; each line is
 * written with a single write(2) so lines from threads never interleave.
 */
#ifndef LATENTD_UTIL_LOG_H
#define LATENTD_UTIL_LOG_H

enum log_level {
    LOG_DEBUG = 0,
    LOG_INFO = 1,
    LOG_WARNING = 2,
    LOG_ERROR = 3,
    LOG_CRITICAL = 4,
};

void log_set_level(enum log_level level);
enum log_level log_get_level(void);

/* Parse "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL" (ComfyUI's --verbose values). */
int log_parse_level(const char *name, enum log_level *out);

void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_write(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_write(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_write(LOG_WARNING, __VA_ARGS__)
#define log_error(...) log_write(LOG_ERROR, __VA_ARGS__)

#endif

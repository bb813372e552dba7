#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static atomic_int current_level = LOG_INFO;

static const char *const level_names[] = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"};

void log_set_level(enum log_level level)
{
    atomic_store(&current_level, (int)level);
}

enum log_level log_get_level(void)
{
    return (enum log_level)atomic_load(&current_level);
}

int log_parse_level(const char *name, enum log_level *out)
{
    for (int i = 0; i < 5; i++) {
        if (strcasecmp(name, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return -1;
}

void log_write(enum log_level level, const char *fmt, ...)
{
    if ((int)level < atomic_load(&current_level))
        return;
    char line[2048];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    int n = (int)strftime(line, sizeof(line), "%Y-%m-%d %H:%M:%S", &tm);
    n += snprintf(line + n, sizeof(line) - (size_t)n, ".%03d %-7s ", (int)(tv.tv_usec / 1000),
                  level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += m;
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

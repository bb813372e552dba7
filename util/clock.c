/*
 * clock — see clock.h.
 */
#include "clock.h"

int64_t clock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double clock_sec(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double clock_process_cpu_sec(void)
{
    return clock_sec(CLOCK_PROCESS_CPUTIME_ID);
}

double clock_thread_cpu_sec(void)
{
    return clock_sec(CLOCK_THREAD_CPUTIME_ID);
}

double clock_mono_sec(void)
{
    return clock_sec(CLOCK_MONOTONIC);
}

int64_t clock_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void clock_wall_deadline(struct timespec *ts, int64_t after_ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += (time_t)(after_ms / 1000);
    ts->tv_nsec += (long)(after_ms % 1000) * 1000000L;
    ts->tv_sec += ts->tv_nsec / 1000000000L;
    ts->tv_nsec %= 1000000000L;
}

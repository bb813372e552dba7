/*
 * clock — the clocks latentd reads, in one place.
 *
 * Monotonic time measures durations and deadlines (it never jumps with the wall
 * clock); wall time stamps what clients and the job store see (Unix epoch).
 * Threads: any; no shared state.
 */
#ifndef LATENTD_UTIL_CLOCK_H
#define LATENTD_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic time in whole milliseconds: deadlines, throttles, cache ages. */
int64_t clock_mono_ms(void);

/* Monotonic time in seconds with nanosecond resolution: measured durations. */
double clock_mono_sec(void);

/* CPU time in seconds (user + system) of the whole process, all threads: what an op
 * costs on a shared machine, where its wall time grows with other processes' load. */
double clock_process_cpu_sec(void);

/* CPU time in seconds of the calling thread. */
double clock_thread_cpu_sec(void);

/* Wall-clock time in milliseconds since the Unix epoch: timestamps clients see. */
int64_t clock_wall_ms(void);

/* The CLOCK_REALTIME instant `after_ms` from now, for pthread_cond_timedwait. */
void clock_wall_deadline(struct timespec *ts, int64_t after_ms);

#endif

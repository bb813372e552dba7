/*
 * sd_progress — the terminal progress bar ComfyUI's console shows while a
 * sampler runs (tqdm's default format, 10-cell bar):
 *
 *     40%|████      | 8/20 [00:02<00:03,  3.85it/s]
 *
 * Redrawn in place with '\r' on stderr, ended with a newline. Drawn only
 * when stderr is a terminal or LATENTD_PROGRESS_BAR=1 is set, and never when
 * LATENTD_PROGRESS_BAR=0, so logs and tests stay clean.
 *
 * Threads: one bar per sampling run, on the executor thread.
 */
#ifndef LATENTD_NODES_SD_PROGRESS_H
#define LATENTD_NODES_SD_PROGRESS_H

#include <stddef.h>

struct sd_progress {
    int total;         /* steps */
    int enabled;       /* draws at all */
    double start_s;    /* monotonic start time */
    int fd;            /* where to draw (2) */
};

/* Start a bar of `total` steps (draws the 0% line when enabled). */
void sd_progress_begin(struct sd_progress *p, int total);
/* Step n (1..total) is done: redraw; the last step ends the line. */
void sd_progress_update(struct sd_progress *p, int n);
/* End the line early (interrupt, error); no-op after the last step. */
void sd_progress_end(struct sd_progress *p);

/*
 * Format the bar for n of total after elapsed_s seconds into out (size cap),
 * without '\r' or newline. Exposed for tests.
 */
void sd_progress_format(char *out, size_t cap, int n, int total, double elapsed_s);

#endif

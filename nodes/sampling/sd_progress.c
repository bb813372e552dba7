/*
 * sd_progress — a tqdm-style terminal progress bar (see sd_progress.h).
 */
#include "clock.h"
#include "sd_progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* tqdm's format_interval: [H:]MM:SS */
static void fmt_interval(char *out, size_t cap, double s)
{
    long t = (long)s;
    long h = t / 3600, m = (t / 60) % 60, sec = t % 60;
    if (h)
        snprintf(out, cap, "%ld:%02ld:%02ld", h, m, sec);
    else
        snprintf(out, cap, "%02ld:%02ld", m, sec);
}

void sd_progress_format(char *out, size_t cap, int n, int total, double elapsed_s)
{
    static const char *const blocks[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
    const int width = 10;
    double frac = total > 0 ? (double)n / total : 0.0;
    if (frac > 1.0)
        frac = 1.0;
    char bar[width * 4 + 1 + 8];
    size_t bl = 0;
    int eighths = (int)(frac * width * 8);
    int full = eighths / 8, part = eighths % 8, cells = 0;
    for (int i = 0; i < full; i++, cells++) {
        memcpy(bar + bl, "█", 3);
        bl += 3;
    }
    if (part && cells < width) {
        size_t l = strlen(blocks[part]);
        memcpy(bar + bl, blocks[part], l);
        bl += l;
        cells++;
    }
    for (; cells < width; cells++)
        bar[bl++] = ' ';
    bar[bl] = '\0';

    char el[32], rem[32] = "?", rate[32] = "?it/s";
    fmt_interval(el, sizeof el, elapsed_s);
    if (n > 0 && elapsed_s > 0) {
        double r = n / elapsed_s;
        fmt_interval(rem, sizeof rem, (total - n) / r);
        if (r >= 1.0)
            snprintf(rate, sizeof rate, "%5.2fit/s", r);
        else
            snprintf(rate, sizeof rate, "%5.2fs/it", 1.0 / r);
    }
    snprintf(out, cap, "%3.0f%%|%s| %d/%d [%s<%s, %s]", frac * 100.0, bar, n, total, el, rem,
             rate);
}

static void draw(struct sd_progress *p, int n, int end)
{
    char line[256];
    size_t l;
    line[0] = '\r';
    sd_progress_format(line + 1, sizeof line - 2, n, p->total, clock_mono_sec() - p->start_s);
    l = strlen(line);
    if (end)
        line[l++] = '\n';
    /* One write per redraw so that log lines from other threads do not split it. */
    ssize_t rc = write(p->fd, line, l);
    (void)rc;
}

void sd_progress_begin(struct sd_progress *p, int total)
{
    const char *env = getenv("LATENTD_PROGRESS_BAR");
    memset(p, 0, sizeof *p);
    p->total = total;
    p->fd = 2;
    p->start_s = clock_mono_sec();
    if (env && *env)
        p->enabled = strcmp(env, "0") != 0;
    else
        p->enabled = isatty(p->fd);
    if (total <= 0)
        p->enabled = 0;
    if (p->enabled)
        draw(p, 0, 0);
}

void sd_progress_update(struct sd_progress *p, int n)
{
    if (!p->enabled)
        return;
    draw(p, n, n >= p->total);
    if (n >= p->total)
        p->enabled = 0;
}

void sd_progress_end(struct sd_progress *p)
{
    if (!p->enabled)
        return;
    ssize_t rc = write(p->fd, "\n", 1);
    (void)rc;
    p->enabled = 0;
}

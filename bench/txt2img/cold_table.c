/*
 * cold_table — bench_txt2img's cold runs (issue 15): the workflow of bench_txt2img.h
 * from a fresh process to the PNG on disk, per size, for latentd at fp32, latentd at
 * bf16 (--bf16-unet --bf16-vae) and, given --sdcpp PATH (or LATENTD_SDCPP), for
 * stable-diffusion.cpp's CLI on the same checkpoint, size, steps, sampler, CFG, seed,
 * prompts and threads.
 *
 * Why interleaved (fp32, bf16, sd.cpp, fp32, bf16, sd.cpp, ...) and medians: the
 * machine is shared and its load changes by the minute; runs taken back to back see
 * about the same machine, so the ratios of medians are the figures to compare, and each
 * run is printed with the load average at its end. CPU seconds (user + system of the
 * child, all threads) are printed too: on a loaded machine the wall is mostly waiting
 * for a core, and the CPU time moves far less. Load hurts the two programs unequally:
 * sd.cpp's wall grew ~5.5x at load 9 (305 s against 55 s quiet at 256^2, issue 15) and
 * latentd's fp32 ~2.6x (41.7 s against 16.1 s), so wall ratios from a loaded run flatter
 * latentd; read the CPU ratios there.
 *
 * What a child's figures are: wall from fork to its exit (exec, load, sample, decode,
 * PNG written, teardown), CPU and peak RSS from wait4's rusage. fork + exec rather than
 * vfork or posix_spawn because of how Linux counts ru_maxrss across exec: it folds in
 * the high-water mark of the address space the child exec'd from. A forked copy's mark
 * starts at the launcher's resident size at fork time (small: it holds no model by
 * then; printed in the header, since no child can report less); a vfork'd child shares
 * the launcher's address space and would report the launcher's whole-life peak.
 *
 * The checkpoint's pages: every contender finds the file in the page cache, but how it
 * got there could matter to a program that maps it (latentd) and not to one that reads
 * it (sd.cpp). Read from disk, ext4 keeps it in large folios; written (the generator
 * made the file minutes before), in 4 KiB pages, and a fresh process's first touch of
 * all 2 GiB through a mapping took 0.86-1.0 s against 0.05-0.17 s on this VM (Zen 5,
 * /tmp micro-benchmark). End to end it did not show: a cold 512^2 fp32 run from a file
 * just written by cp took 22.04 s against 22.40 s after the reset below (medians of 2,
 * same run). The table still starts from one stated state, the one a user's checkpoint
 * is in after a reboot: written back, evicted (posix_fadvise DONTNEED) and read once; the
 * header says which state ran, and --page-cache as-is keeps whatever state it is in.
 *
 * Each child must leave a PNG of the requested size (checked from its IHDR), so a run
 * that failed quietly cannot pass as a fast one. sd.cpp's output goes to a log next to
 * the checkpoint link; when it fails, the log's tail is printed and the process exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_txt2img.h"
#include "clock.h"
#include "tensor_precision.h"

enum { RUN_FP32, RUN_BF16, RUN_SDCPP, RUN_KINDS };
static const char *const run_name[RUN_KINDS] = {"fp32", "bf16", "sd.cpp"};

#define REPS_MAX 32

/* One child's figures. */
struct run_fig {
    double wall; /* s, fork to exit */
    double cpu;  /* s, user + system */
    double rss;  /* MiB, peak */
    double step; /* s, sd.cpp only (its log): sampling time / steps, a CFG step; else NAN */
    double vae;  /* s, sd.cpp only (its log): VAE decode; else NAN */
};

/* Print the tail of `log` (its last 2-4 KiB, when given) to stderr, then a message; exit 1. */
static void __attribute__((noreturn, format(printf, 2, 3)))
fail(const char *log, const char *fmt, ...)
{
    FILE *f = log ? fopen(log, "r") : NULL;
    if (f) {
        /* The tail: enough to hold sd.cpp's error and the lines before it. */
        static char tail[4096];
        size_t n = 0;
        int c;
        while ((c = fgetc(f)) != EOF) {
            if (n == sizeof tail) {
                memmove(tail, tail + sizeof tail / 2, sizeof tail / 2);
                n = sizeof tail / 2;
            }
            tail[n++] = (char)c;
        }
        fclose(f);
        if (n > 0)
            fprintf(stderr, "--- last output of the child (%s) ---\n%.*s\n---\n", log, (int)n,
                    tail);
    }
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_txt2img: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* Width and height from a PNG's IHDR; -1 when `path` is not a readable PNG. */
static int png_size(const char *path, int *w, int *h)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    uint8_t b[24];
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    if (n != sizeof b || memcmp(b, sig, 8) != 0 || memcmp(b + 12, "IHDR", 4) != 0)
        return -1;
    *w = (int)((uint32_t)b[16] << 24 | (uint32_t)b[17] << 16 | (uint32_t)b[18] << 8 | b[19]);
    *h = (int)((uint32_t)b[20] << 24 | (uint32_t)b[21] << 16 | (uint32_t)b[22] << 8 | b[23]);
    return 0;
}

/*
 * Run argv (argv[0] a path) in a fresh process until it exits; its stdout and stderr go
 * to `log` when given (else they stay ours). It must exit 0 having written a px x px PNG
 * at `png` (removed afterwards).
 */
static void child_run(char *const argv[], const char *log, const char *png, int px,
                      const char *what, struct run_fig *f)
{
    unlink(png); /* a PNG left by an earlier run must not count for this one */
    fflush(stdout);
    fflush(stderr);
    double t0 = clock_mono_sec();
    pid_t pid = fork(); /* not vfork / posix_spawn: see the top of the file (ru_maxrss) */
    if (pid < 0)
        fail(NULL, "fork: %s", strerror(errno));
    if (pid == 0) {
        if (log) {
            int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
                close(fd);
            }
        }
        execv(argv[0], argv);
        fprintf(stderr, "exec '%s': %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status = 0;
    struct rusage ru;
    pid_t r;
    while ((r = wait4(pid, &status, 0, &ru)) < 0 && errno == EINTR)
        ;
    f->wall = clock_mono_sec() - t0;
    if (r != pid)
        fail(log, "wait for %s at %d^2: %s", what, px, strerror(errno));
    if (WIFSIGNALED(status))
        fail(log, "%s at %d^2 died of signal %d", what, px, WTERMSIG(status));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail(log, "%s at %d^2 failed (exit status %d)", what, px, WEXITSTATUS(status));
    f->rss = (double)ru.ru_maxrss / 1024.0;
    f->cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
             1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    int w = 0, h = 0;
    if (png_size(png, &w, &h) < 0)
        fail(log, "%s at %d^2 exited 0 but wrote no PNG at '%s'", what, px, png);
    if (w != px || h != px)
        fail(log, "%s at %d^2 wrote a %dx%d PNG", what, px, w, h);
    unlink(png);
}

/* sd.cpp's own word on what it ran ("sampling using Euler method"), from its first log:
 * printed with the table, so that a flag it ignored or renamed shows. */
static char sdcpp_said[160];

/* The seconds after `key` in sd.cpp's log text ("... completed, taking 48.83s"); NAN when
 * the line is not there. */
static double sdcpp_taking(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    return p ? atof(p + strlen(key)) : NAN;
}

/* Read what sd.cpp's log says about its run into f (step, vae) and sdcpp_said. The whole
 * log is read at once: its progress bars are long lines of carriage returns, which a
 * line-sized buffer could cut in the middle of a key. */
static void sdcpp_note(const char *log, struct run_fig *f)
{
    f->step = f->vae = NAN;
    FILE *fp = fopen(log, "r");
    if (!fp)
        return;
    size_t cap = (size_t)4 << 20, n;
    char *text = malloc(cap + 1);
    if (text) {
        n = fread(text, 1, cap, fp);
        text[n] = 0;
        f->step = sdcpp_taking(text, "sampling completed, taking ") / BENCH_T2I_STEPS;
        f->vae = sdcpp_taking(text, "decode_first_stage completed, taking ");
        const char *p = strstr(text, "sampling using ");
        if (p && !sdcpp_said[0]) {
            snprintf(sdcpp_said, sizeof sdcpp_said, "%s", p);
            sdcpp_said[strcspn(sdcpp_said, "\r\n")] = 0;
        }
        free(text);
    }
    fclose(fp);
}

/* One run of `kind` at px^2 into *f; prints a line with its figures and the load. */
static void run_one(const struct bench_t2i_cold_opts *o, int kind, int px, int rep,
                    struct run_fig *f)
{
    char spx[16], sth[16], png[512], ckpt[512], log[512], seed[32], cfg[32], steps[16];
    snprintf(spx, sizeof spx, "%d", px);
    snprintf(sth, sizeof sth, "%d", o->threads);
    snprintf(png, sizeof png, "%s/cold_%d_%s.png", o->models_dir, px,
             kind == RUN_SDCPP ? "sdcpp" : run_name[kind]);
    f->step = f->vae = NAN;
    if (kind != RUN_SDCPP) {
        char *argv[] = {(char *)o->self,
                        "--cold-child",
                        spx,
                        (char *)run_name[kind],
                        (char *)o->models_dir,
                        sth,
                        png,
                        NULL};
        child_run(argv, NULL, png, px, run_name[kind], f);
    } else {
        snprintf(ckpt, sizeof ckpt, "%s/checkpoints/model.safetensors", o->models_dir);
        snprintf(log, sizeof log, "%s/sdcpp_%d.log", o->models_dir, px);
        snprintf(seed, sizeof seed, "%lld", BENCH_T2I_SEED);
        snprintf(cfg, sizeof cfg, "%g", BENCH_T2I_CFG);
        snprintf(steps, sizeof steps, "%d", BENCH_T2I_STEPS);
        /* Its defaults otherwise ("default build", no --mmap, no --fa): as issue 15's
         * figures were taken. ComfyUI's "normal" scheduler is sd.cpp's "discrete". */
        char *argv[] = {(char *)o->sdcpp,
                        "-m",
                        ckpt,
                        "-p",
                        BENCH_T2I_POSITIVE,
                        "-n",
                        BENCH_T2I_NEGATIVE,
                        "-W",
                        spx,
                        "-H",
                        spx,
                        "--steps",
                        steps,
                        "--cfg-scale",
                        cfg,
                        "--sampling-method",
                        BENCH_T2I_SAMPLER,
                        "--scheduler",
                        "discrete",
                        "-s",
                        seed,
                        "-t",
                        sth,
                        "-o",
                        png,
                        NULL};
        child_run(argv, log, png, px, "stable-diffusion.cpp", f);
        sdcpp_note(log, f);
        unlink(log); /* kept only when the run failed, for its message */
    }
    printf("# %d^2 rep %d/%d %-6s wall %8.2f s  cpu %8.2f s  peak %6.0f MiB  load %.2f\n", px,
           rep + 1, o->reps, run_name[kind], f->wall, f->cpu, f->rss, bench_t2i_load1());
    fflush(stdout);
}

/* Medians over o->reps runs of each kind at one size. */
struct size_row {
    int px;
    struct run_fig m[RUN_KINDS];
};

/* The median over reps of one double field (at byte offset `off`) of kind k's runs. */
static double median_of(struct run_fig runs[][REPS_MAX], int k, int reps, size_t off)
{
    double v[REPS_MAX];
    for (int r = 0; r < reps; r++)
        memcpy(&v[r], (const char *)&runs[k][r] + off, sizeof(double));
    return bench_median(v, reps);
}

static void median_row(struct run_fig runs[][REPS_MAX], int nkinds, int reps, struct size_row *row)
{
    for (int k = 0; k < nkinds; k++) {
        struct run_fig *m = &row->m[k];
        m->wall = median_of(runs, k, reps, offsetof(struct run_fig, wall));
        m->cpu = median_of(runs, k, reps, offsetof(struct run_fig, cpu));
        m->rss = median_of(runs, k, reps, offsetof(struct run_fig, rss));
        m->step = median_of(runs, k, reps, offsetof(struct run_fig, step));
        m->vae = median_of(runs, k, reps, offsetof(struct run_fig, vae));
    }
}

/* "<=0.20 ok" or "<=0.20 MISS": a ratio against issue 15's goal for it. */
static const char *goal_cell(char *buf, size_t n, double ratio, double goal)
{
    snprintf(buf, n, "<=%.2f %s", goal, ratio <= goal ? "ok" : "MISS");
    return buf;
}

static void print_sdcpp_table(const struct bench_t2i_cold_opts *o, const struct size_row *rows,
                              int nrows)
{
    printf("# vs stable-diffusion.cpp (%s): same checkpoint, size, %d %s steps (%s = its "
           "discrete), cfg %g, seed, prompts, %d threads\n",
           o->sdcpp, BENCH_T2I_STEPS, BENCH_T2I_SAMPLER, BENCH_T2I_SCHEDULER, BENCH_T2I_CFG,
           o->threads);
    printf("# sd.cpp's log says: %s\n",
           sdcpp_said[0] ? sdcpp_said : "(no \"sampling using\" line)");
    printf("%-5s %9s %9s %9s %8s %8s %8s %-12s %8s %8s %8s %8s %-12s %8s\n", "size", "sdc_s",
           "sdc_cpu", "sdc_mib", "sdc_step", "sdc_vae", "w32/sdc", "goal", "w16/sdc", "c32/sdc",
           "c16/sdc", "r32/sdc", "goal", "r16/sdc");
    for (int i = 0; i < nrows; i++) {
        const struct run_fig *a = &rows[i].m[RUN_FP32], *b = &rows[i].m[RUN_BF16],
                             *s = &rows[i].m[RUN_SDCPP];
        char g1[32], g2[32];
        /* Issue 15: fp32 cold wall <= 0.2 of sd.cpp's at 256^2, <= 0.12 at 512^2; peak RSS
         * <= sd.cpp's at both sizes. */
        double wall_goal = rows[i].px == 256 ? 0.20 : 0.12;
        printf("%-5d %9.2f %9.2f %9.0f %8.2f %8.2f %8.3f %-12s %8.3f %8.3f %8.3f %8.3f %-12s "
               "%8.3f\n",
               rows[i].px, s->wall, s->cpu, s->rss, s->step, s->vae, a->wall / s->wall,
               goal_cell(g1, sizeof g1, a->wall / s->wall, wall_goal), b->wall / s->wall,
               a->cpu / s->cpu, b->cpu / s->cpu, a->rss / s->rss,
               goal_cell(g2, sizeof g2, a->rss / s->rss, 1.0), b->rss / s->rss);
    }
    printf("# w32/sdc, w16/sdc: latentd fp32 / bf16 cold wall over sd.cpp's (medians); c*: the\n"
           "# same for CPU seconds (the figure to trust on a loaded machine); r*: peak RSS.\n"
           "# Goals (issue 15, 2 threads): fp32 wall <= 0.2 at 256^2 and <= 0.12 at 512^2, peak\n"
           "# RSS <= sd.cpp's; on an AMX machine bf16 wall at 512^2 <= 0.05 (w16/sdc).\n"
           "# sdc_step, sdc_vae: from sd.cpp's log, its sampling time / %d (a CFG step) and its\n"
           "# VAE decode, to set beside step_s and vae_s of the in-process table (nan: not in\n"
           "# its log).\n",
           BENCH_T2I_STEPS);
}

/* The checkpoint as after a reboot (the header comment says why); what was done, for the
 * table's header (static string). */
static const char *page_cache_as_read(const struct bench_t2i_cold_opts *o)
{
    if (o->page_cache_as_is)
        return "as found (--page-cache as-is)";
    char path[600];
    snprintf(path, sizeof path, "%s/checkpoints/model.safetensors", o->models_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return "as found (cannot open the checkpoint)";
    const char *what = "evicted and read back once (as after a reboot)";
    /* a mapping of its own, gone before any fork: the children's peak RSS starts at the
     * launcher's resident size */
    size_t cap = (size_t)8 << 20;
    char *buf = malloc(cap);
    if (!buf || fdatasync(fd) != 0 || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0)
        what = "as found (could not evict it)";
    else
        for (ssize_t n; (n = read(fd, buf, cap)) != 0;)
            if (n < 0 && errno != EINTR) {
                what = "evicted, read back failed";
                break;
            }
    free(buf);
    close(fd);
    return what;
}

void bench_t2i_cold_table(const struct bench_t2i_cold_opts *o)
{
    static const int sizes[2] = {256, 512};
    static struct run_fig runs[RUN_KINDS][REPS_MAX];
    struct size_row rows[2];
    int nrows = 0, nkinds = o->sdcpp ? RUN_KINDS : RUN_SDCPP;
    int reps = o->reps < 1 ? 1 : o->reps > REPS_MAX ? REPS_MAX : o->reps;
    struct bench_t2i_cold_opts oo = *o;
    oo.reps = reps;
    if (o->sdcpp && access(o->sdcpp, X_OK) != 0) /* main checks first; this keeps the contract */
        fail(NULL, "--sdcpp '%s': not an executable file (%s)", o->sdcpp, strerror(errno));
    const char *pc = page_cache_as_read(o);
    printf("# cold runs: exec -> PNG in a fresh process, %d threads, bf16 = --bf16-unet "
           "--bf16-vae (%s); %d rep%s per size, interleaved (fp32 bf16%s), medians; launcher "
           "RSS %.0f MiB; load %.2f; checkpoint's page cache: %s\n",
           o->threads, tensor_bf16_path(), reps, reps > 1 ? "s" : "", o->sdcpp ? " sd.cpp" : "",
           bench_t2i_status_mib("VmRSS:"), bench_t2i_load1(), pc);
    for (int si = 0; si < (o->quick ? 1 : 2); si++) {
        int px = sizes[si];
        if (o->only && px != o->only)
            continue;
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < nkinds; k++)
                run_one(&oo, k, px, r, &runs[k][r]);
        rows[nrows].px = px;
        median_row(runs, nkinds, reps, &rows[nrows++]);
    }
    printf("%-5s %9s %9s %9s %9s %9s %9s %8s %8s %8s\n", "size", "fp32_s", "bf16_s", "fp32_cpu",
           "bf16_cpu", "fp32_mib", "bf16_mib", "wall_r", "cpu_r", "rss_r");
    for (int i = 0; i < nrows; i++) {
        const struct run_fig *a = &rows[i].m[RUN_FP32], *b = &rows[i].m[RUN_BF16];
        printf("%-5d %9.2f %9.2f %9.2f %9.2f %9.0f %9.0f %8.2f %8.2f %8.2f\n", rows[i].px, a->wall,
               b->wall, a->cpu, b->cpu, a->rss, b->rss, b->wall / a->wall, b->cpu / a->cpu,
               b->rss / a->rss);
    }
    printf("# wall_r, cpu_r, rss_r: bf16 / fp32 (cold wall, CPU seconds, peak RSS); cpu_r is the\n"
           "# figure to trust on a loaded machine; bf16 rounds weights per op (no second copy)\n"
           "# unless LATENTD_BF16_CACHE_MB > 0 keeps copies, which then count in its RSS\n");
    if (o->sdcpp)
        print_sdcpp_table(&oo, rows, nrows);
    fflush(stdout);
}

/*
 * gemm_trace.c — an LD_PRELOAD profiling aid: wraps oneDNN's dnnl_sgemm (the CPU
 * GEMM every matmul, linear, convolution and attention block goes through, see
 * tensor/cpu/gemm.c) and prints, at exit, time and GFLOP/s per GEMM shape, so a
 * model's time can be split by shape without call stacks (perf cannot unwind
 * through oneDNN's JIT code, which has no frame pointers).
 *
 *   LD_PRELOAD=<build>/libgemm_trace.so <build>/bench_txt2img --size 256
 *
 * Shapes are those of the single-threaded calls the tensor pool makes, i.e. one
 * panel of a split GEMM (M x N x K per call, row-major, T = transposed operand).
 * Times are the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so time slices
 * lost to other processes on a shared machine do not count; with 2 pool threads the
 * GEMM wall time on an idle machine is about the sum / 2. Programs may call gemm_trace_mark("label") (a weak symbol:
 * a no-op without the preload) to file the following calls under another label;
 * bench_txt2img marks its KSampler run "ksampler". Output goes to stderr, or to
 * $GEMM_TRACE_OUT. Not thread-safe for marks (call it between parallel regions).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t,
                        const float *, int64_t, float, float *, int64_t);

struct shape {
    char label[24];
    char ta, tb;
    int64_t m, n, k;
    int64_t calls;
    double secs;
};

#define MAX_SHAPES 4096
static struct shape shapes[MAX_SHAPES];
static int n_shapes;
static char cur_label[24] = "-";
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static sgemm_fn real_sgemm;

void gemm_trace_mark(const char *label);
void gemm_trace_mark(const char *label)
{
    pthread_mutex_lock(&lock);
    snprintf(cur_label, sizeof cur_label, "%s", label ? label : "-");
    pthread_mutex_unlock(&lock);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int dnnl_sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
               int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
int dnnl_sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
               int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (!real_sgemm)
        real_sgemm = (sgemm_fn)dlsym(RTLD_NEXT, "dnnl_sgemm");
    double t0 = now_s();
    int st = real_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    double dt = now_s() - t0;
    pthread_mutex_lock(&lock);
    int i;
    for (i = 0; i < n_shapes; i++) {
        struct shape *s = &shapes[i];
        if (s->m == m && s->n == n && s->k == k && s->ta == ta && s->tb == tb &&
            !strcmp(s->label, cur_label))
            break;
    }
    if (i == n_shapes && n_shapes < MAX_SHAPES) {
        struct shape *s = &shapes[n_shapes++];
        memset(s, 0, sizeof *s);
        snprintf(s->label, sizeof s->label, "%s", cur_label);
        s->ta = ta, s->tb = tb, s->m = m, s->n = n, s->k = k;
    }
    if (i < MAX_SHAPES) {
        shapes[i].calls++;
        shapes[i].secs += dt;
    }
    pthread_mutex_unlock(&lock);
    return st;
}

static int by_time(const void *x, const void *y)
{
    const struct shape *a = x, *b = y;
    int l = strcmp(a->label, b->label);
    if (l)
        return l;
    return a->secs < b->secs ? 1 : a->secs > b->secs ? -1 : 0;
}

__attribute__((destructor)) static void report(void)
{
    const char *path = getenv("GEMM_TRACE_OUT");
    FILE *f = path ? fopen(path, "w") : stderr;
    if (!f)
        f = stderr;
    qsort(shapes, (size_t)n_shapes, sizeof shapes[0], by_time);
    fprintf(f, "# gemm_trace: thread CPU time per dnnl_sgemm shape (row-major M x N x K)\n");
    fprintf(f, "%-10s %2s %6s %6s %6s %8s %9s %7s %6s\n", "label", "op", "M", "N", "K", "calls",
            "thread_s", "GF/thr", "share");
    for (int i = 0; i < n_shapes;) {
        int j = i;
        double tot = 0, fl = 0;
        while (j < n_shapes && !strcmp(shapes[j].label, shapes[i].label)) {
            tot += shapes[j].secs;
            fl += 2.0 * (double)shapes[j].m * (double)shapes[j].n * (double)shapes[j].k *
                  (double)shapes[j].calls;
            j++;
        }
        for (int q = i; q < j; q++) {
            const struct shape *s = &shapes[q];
            double sfl = 2.0 * (double)s->m * (double)s->n * (double)s->k * (double)s->calls;
            if (q - i < 200)
                fprintf(f, "%-10s %c%c %6lld %6lld %6lld %8lld %9.3f %7.1f %5.1f%%\n", s->label,
                        s->ta, s->tb, (long long)s->m, (long long)s->n, (long long)s->k,
                        (long long)s->calls, s->secs, sfl / s->secs / 1e9, 100.0 * s->secs / tot);
        }
        fprintf(f, "%-10s total: %d shapes, %.3f thread-s, %.1f GFLOP, %.1f GFLOP/s per thread\n",
                shapes[i].label, j - i, tot, fl / 1e9, fl / tot / 1e9);
        i = j;
    }
    if (f != stderr)
        fclose(f);
}

/*
 * gemm.c — the CPU GEMM every matmul, linear and convolution goes through.
 *
 * Why oneDNN first: Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) picks its kernel
 * from cpuid at load time, and on this project's machines it falls back to the
 * SSE3 "Prescott" kernel (~70 GFLOP/s on 2 cores) unless OPENBLAS_CORETYPE is
 * set, while oneDNN's JIT sgemm detects AVX-512 itself (~330 GFLOP/s, same
 * machine, n = 2048). We may not change the environment for the user, so we
 * use oneDNN when the build found it and OpenBLAS otherwise (or when
 * LATENTD_GEMM=openblas is set, for comparisons).
 *
 * bf16 (issue 15): a GEMM one of whose operands is a weight bound to its bf16 copy
 * (gemm_bf16.h: the op's precision was bf16) runs as bf16 x bf16 -> f32 through the
 * same panel split, the other operand rounded to bf16 once per call.
 *
 * Threads: every library call is single-threaded; parallelism comes from our
 * pool only (see cpu_sgemm below), so the cores are never oversubscribed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#ifdef LATENTD_HAVE_DNNL
#include <dnnl.h>
#include <omp.h>
#endif

#include "adapt.h"
#include "alloc.h"
#include "altstack.h"
#include "gemm_amx.h"
#include "gemm_bf16.h"
#include "../tensor_impl.h"

static int use_dnnl = -1;

static void pick(void)
{
#ifdef LATENTD_HAVE_DNNL
    const char *g = getenv("LATENTD_GEMM");
    use_dnnl = !(g && strcmp(g, "openblas") == 0);
#else
    use_dnnl = 0;
#endif
}

const char *cpu_gemm_backend(void)
{
    static char buf[96];
    if (use_dnnl < 0)
        pick();
    if (use_dnnl)
        return "onednn";
    snprintf(buf, sizeof(buf), "openblas (%s)", openblas_get_corename());
    return buf;
}

static _Thread_local int blas_saved = -1;

void cpu_gemm_pool_enter(void)
{
    if (use_dnnl < 0)
        pick();
    if (!use_dnnl) {
        blas_saved = openblas_get_num_threads();
        openblas_set_num_threads(1);
    }
}

void cpu_gemm_pool_leave(void)
{
    if (!use_dnnl && blas_saved > 0) {
        openblas_set_num_threads(blas_saved);
        blas_saved = -1;
    }
}

static void sgemm1(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                   int64_t ldc, int threads)
{
    altstack_ensure(); /* oneDNN's sgemm may run with rsp on the heap (util/altstack.h) */
#ifdef LATENTD_HAVE_DNNL
    if (use_dnnl) {
        int saved = 0;
        if (threads == 1) {
            saved = omp_get_max_threads();
            omp_set_num_threads(1);
        }
        dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha,
                                      a, lda, b, ldb, beta, c, ldc);
        if (threads == 1)
            omp_set_num_threads(saved);
        if (st != dnnl_success)
            PANIC("dnnl_sgemm failed (%d) for %lldx%lldx%lld", (int)st, (long long)m,
                  (long long)n, (long long)k);
        return;
    }
#endif
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n, (blasint)k, alpha, a,
                (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}

/*
 * The pool splits a large GEMM into one panel of C per thread (columns when C is wide,
 * rows otherwise) and each panel runs single-threaded. So the BLAS library never
 * starts its own team: OpenMP workers that spin after a parallel region would fight
 * the pool's workers for the two cores on every GEMM / elementwise alternation (we
 * measured a 3x slowdown of a chunked convolution on a loaded machine).
 */
struct gemm_job {
    int ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *c;
    int by_cols;
    int64_t step;
    const uint16_t *a16, *b16; /* both set: the bf16 GEMM on these instead of a, b */
    const float *ra, *rb;      /* bf16: this f32 operand is rounded per panel instead */
    const uint16_t *apk;       /* column panels on AMX: all of A, packed (gemm_amx.h) */
};

/* One panel: f32, or bf16 on the same element offsets (a16/b16 share a/b's layout). */
static void gemm_panel(const struct gemm_job *j, int64_t oa, int64_t ob, int64_t oc, int64_t m,
                       int64_t n)
{
    if (j->apk) /* column panels: oa is 0 */
        cpu_gemm_amx_packed(j->tb, m, n, j->k, j->alpha, j->apk, j->b16 + ob, j->ldb, j->beta,
                            j->c + oc, j->ldc);
    else if (j->a16)
        cpu_gemm_bf16_1(j->ta, j->tb, m, n, j->k, j->alpha, j->a16 + oa, j->lda, j->b16 + ob,
                        j->ldb, j->beta, j->c + oc, j->ldc);
    else
        sgemm1(j->ta, j->tb, m, n, j->k, j->alpha, j->a + oa, j->lda, j->b + ob, j->ldb, j->beta,
               j->c + oc, j->ldc, 1);
}

/* Panel p of a split job: its first row or column in *lo, its length (<= 0: none). */
static int64_t panel_span(const struct gemm_job *j, int64_t p, int64_t *lo)
{
    *lo = p * j->step;
    int64_t len = (j->by_cols ? j->n : j->m) - *lo;
    return len < j->step ? len : j->step;
}

static void gemm_task(void *ctx, int64_t beg, int64_t end, int tid)
{
    struct gemm_job *j = ctx;
    for (int64_t p = beg; p < end; p++) {
        int64_t lo, len = panel_span(j, p, &lo);
        if (len <= 0)
            continue;
        if (j->by_cols)
            gemm_panel(j, 0, j->tb ? lo * j->ldb : lo, lo, j->m, len);
        else
            gemm_panel(j, j->ta ? lo : lo * j->lda, 0, lo * j->ldc, len, j->n);
    }
}

#define PANEL16_MAX ((int64_t)1 << 20)

/*
 * A bf16 panel whose unbound operand is split with it (B's columns of a column panel,
 * A's rows of a row panel) rounds just its slice into the pool thread's scratch. Rounding
 * all of it up front took a buffer as large as the operand: a VAE decoder's 1x1
 * shortcut at 512^2 has a 256 x 262144 activation, 128 MiB of bf16 per call.
 */
static void gemm16_task(void *ctx, int64_t beg, int64_t end, int tid)
{
    (void)tid;
    struct gemm_job *j = ctx;
    for (int64_t p = beg; p < end; p++) {
        int64_t lo, len = panel_span(j, p, &lo);
        if (len <= 0)
            continue;
        const uint16_t *a = j->a16, *b = j->b16;
        int64_t lda = j->lda, ldb = j->ldb;
        if (j->by_cols) {
            if (j->rb) {
                int64_t rows = j->tb ? len : j->k, cols = j->tb ? j->k : len;
                uint16_t *d = cpu_bf16_scratch(1, (size_t)(rows * cols));
                cpu_bf16_pack(d, j->tb ? j->rb + lo * j->ldb : j->rb + lo, rows, cols, j->ldb);
                b = d;
                ldb = cols;
            } else {
                b += j->tb ? lo * j->ldb : lo;
            }
            if (j->apk)
                cpu_gemm_amx_packed(j->tb, j->m, len, j->k, j->alpha, j->apk, b, ldb, j->beta,
                                    j->c + lo, j->ldc);
            else
                cpu_gemm_bf16_1(j->ta, j->tb, j->m, len, j->k, j->alpha, a, lda, b, ldb, j->beta,
                                j->c + lo, j->ldc);
        } else {
            if (j->ra) {
                int64_t rows = j->ta ? j->k : len, cols = j->ta ? len : j->k;
                uint16_t *d = cpu_bf16_scratch(0, (size_t)(rows * cols));
                cpu_bf16_pack(d, j->ta ? j->ra + lo : j->ra + lo * j->lda, rows, cols, j->lda);
                a = d;
                lda = cols;
            } else {
                a += j->ta ? lo : lo * j->lda;
            }
            cpu_gemm_bf16_1(j->ta, j->tb, len, j->n, j->k, j->alpha, a, lda, b, ldb, j->beta,
                            j->c + lo * j->ldc, j->ldc);
        }
    }
}

/* Run j as panels over the pool (the caller is the executor). */
static void gemm_split(struct gemm_job *j, int nt)
{
    int64_t len = j->by_cols ? j->n : j->m;
    /* panels of 16-multiple width keep the kernels' vector tails out of the split */
    /* two panels per thread so a descheduled thread's work can be taken over */
    j->step = ((len + 2 * nt - 1) / (2 * nt) + 15) / 16 * 16;
    /* a per-panel bf16 slice at most ~PANEL16_MAX elements (the thread keeps it as its
     * scratch), but at least 256 wide */
    if ((j->ra || j->rb) && j->step * j->k > PANEL16_MAX) {
        int64_t s = (PANEL16_MAX / j->k + 15) / 16 * 16;
        j->step = s < 256 ? 256 : s;
    }
    int64_t parts = (len + j->step - 1) / j->step;
    cpu_gemm_pool_enter();
    tensor__pool_for(parts, j->ra || j->rb ? gemm16_task : gemm_task, j);
    cpu_gemm_pool_leave();
}

/* Largest operand (elements) rounded into a thread's kept bf16 scratch; beyond, a
 * buffer for the call (a pool task's im2col chunk is ~2 Mi elements). */
#define BF16_SCRATCH_MAX ((size_t)8 << 20)

struct pack_job {
    uint16_t *dst;
    const float *src;
    int64_t cols, ld;
};

static void pack_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    struct pack_job *j = ctx;
    cpu_bf16_pack(j->dst + b * j->cols, j->src + b * j->ld, e - b, j->cols, j->ld);
}

/* AMX with A packed (the op's weight) and a narrow f32 B: B rounded into tiles once by column
 * groups, then row panels of whole 32-row blocks (executor). */
struct amx_rows_job {
    const uint16_t *apk;
    const float *b32; /* B at f32, rounded as it is packed */
    uint16_t *bpk;
    int64_t m, n, k, ldb, ldc, step;
    float alpha, beta;
    float *c;
};

static void amx_packb_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    struct amx_rows_job *j = ctx;
    for (int64_t g = b; g < e; g++)
        cpu_amx_pack_b_f32(j->bpk, j->b32, j->ldb, j->n, j->k, g * 32, 32);
}

static void amx_rows_task(void *ctx, int64_t b, int64_t e, int tid)
{
    (void)tid;
    struct amx_rows_job *j = ctx;
    size_t blk = cpu_amx_packed_elems(32, j->k);
    for (int64_t t = b; t < e; t++) {
        int64_t r0 = t * j->step, r = j->m - r0 < j->step ? j->m - r0 : j->step;
        if (r > 0)
            cpu_gemm_amx_packed_ab(r, j->n, j->k, j->alpha, j->apk + (size_t)(r0 / 32) * blk,
                                   j->bpk, j->beta, j->c + r0 * j->ldc, j->ldc);
    }
}

/* The packed B, kept by the calling (executor) thread between calls: fresh pages for
 * it were a page fault per 4 KiB per conv (11 MiB at 16^2 x 1280 channels). */
static _Thread_local struct cpu_scratch rows_bpk;

uint16_t *cpu_gemm_amx_bscratch(size_t elems)
{
    return (uint16_t *)cpu_scratch_grow(&rows_bpk, elems / 2 + 16);
}

static void amx_rows(int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *apk,
                     const float *b32, int64_t ldb, float beta, float *c, int64_t ldc, int nt)
{
    struct amx_rows_job j = {apk, b32, NULL, m, n, k, ldb, ldc, 0, alpha, beta, c};
    j.bpk = cpu_gemm_amx_bscratch(cpu_amx_packed_b_elems(n, k));
    j.step = ((m + 2 * nt - 1) / (2 * nt) + 31) / 32 * 32; /* two panels per thread */
    cpu_gemm_pool_enter();
    tensor__pool_for((n + 31) / 32, amx_packb_task, &j);
    tensor__pool_for((m + j.step - 1) / j.step, amx_rows_task, &j);
    cpu_gemm_pool_leave();
}

size_t cpu_gemm_amx_rows_release(void)
{
    return cpu_scratch_drop(&rows_bpk);
}

/*
 * The bf16 GEMM: the bound operand(s) from their copies, the other one rounded here.
 * A pool task (threads 1) rounds into its own scratch; the executor rounds once for the
 * whole call (in parallel) and splits the panels as the f32 path does.
 */
static void gemm_bf16(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, const uint16_t *a16, int64_t lda, const float *b,
                      const uint16_t *b16, int64_t ldb, float beta, float *c, int64_t ldc,
                      int threads)
{
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int a_bound = a16 != NULL, b_bound = b16 != NULL;
    int nt = tensor__pool_threads();
    int whole = threads == 1 || nt == 1 || (double)m * (double)n * (double)k < 4e6;
    int by_cols = n >= m || n >= 64 * nt; /* gemm_split's panels, when not whole */
    uint16_t *own[2] = {NULL, NULL};
    const float *src[2] = {a16 ? NULL : a, b16 ? NULL : b};
    const float *per_panel[2] = {NULL, NULL}; /* rounded by gemm16_task, slice by slice */
    /* AMX, A the op's weight and B narrower than A is tall (a conv over small images:
     * 1280 x 11520 by 128 columns at 8^2, 512 at 16^2): B rounded into tiles once, the
     * rows split, so W is read once; column panels read all of W each (4 x 29 MB) */
    const uint16_t *apk = NULL;
    if (!whole && !ta && a16 && !b16 && !tb && m >= n && cpu_bf16_amx() &&
        (apk = cpu_bf16_packed_a(a16, m, k, lda)) != NULL) {
        amx_rows(m, n, k, alpha, apk, b, ldb, beta, c, ldc, nt);
        return;
    }
    if (!whole && src[1] && by_cols) {
        per_panel[1] = src[1];
        src[1] = NULL;
    }
    if (!whole && src[0] && !by_cols) {
        per_panel[0] = src[0];
        src[0] = NULL;
    }
    int64_t rows[2] = {ar, br}, cols[2] = {ac, bc}, ld[2] = {lda, ldb};
    for (int i = 0; i < 2; i++) {
        if (!src[i])
            continue;
        uint16_t *d;
        size_t elems = (size_t)(rows[i] * cols[i]);
        if (whole && elems <= BF16_SCRATCH_MAX) {
            d = cpu_bf16_scratch(i, elems);
            cpu_bf16_pack(d, src[i], rows[i], cols[i], ld[i]);
        } else if (whole) { /* once, not kept: the thread's scratch stays small */
            d = own[i] = xmalloc_aligned(64, elems * 2 + 64);
            cpu_bf16_pack(d, src[i], rows[i], cols[i], ld[i]);
        } else {
            d = own[i] = xmalloc_aligned(64, elems * 2 + 64);
            struct pack_job pj = {d, src[i], cols[i], ld[i]};
            tensor__pool_for(rows[i], pack_task, &pj);
        }
        if (i == 0) {
            a16 = d;
            lda = ac;
        } else {
            b16 = d;
            ldb = bc;
        }
    }
    /* A is the op's bound weight: on AMX, packed once for all its GEMMs */
    apk = !ta && !src[0] && !per_panel[0] && cpu_bf16_amx() ? cpu_bf16_packed_a(a16, m, k, lda)
                                                            : NULL;
    /* a bound operand read other than packed needs its copy written */
    if (a_bound && !(apk && (whole || by_cols)))
        cpu_bf16_fill(a16);
    if (b_bound)
        cpu_bf16_fill(b16);
    if (whole) {
        if (threads != 1)
            cpu_gemm_pool_enter(); /* the emulated path calls the f32 library */
        if (apk)
            cpu_gemm_amx_packed(tb, m, n, k, alpha, apk, b16, ldb, beta, c, ldc);
        else
            cpu_gemm_bf16_1(ta, tb, m, n, k, alpha, a16, lda, b16, ldb, beta, c, ldc);
        if (threads != 1)
            cpu_gemm_pool_leave();
        xfree_aligned(own[0]);
        xfree_aligned(own[1]);
        return;
    }
    struct gemm_job j = {
        ta,   tb,   m, n,       k, lda, ldb, ldc,          alpha,        beta,
        NULL, NULL, c, by_cols, 0, a16, b16, per_panel[0], per_panel[1], by_cols ? apk : NULL};
    gemm_split(&j, nt);
    xfree_aligned(own[0]);
    xfree_aligned(own[1]);
}

void cpu_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
               int64_t ldc, int threads)
{
    if (use_dnnl < 0)
        pick();
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
    if (atomic_load_explicit(&cpu_bf16_nbound, memory_order_relaxed) > 0) {
        const uint16_t *a16 = cpu_bf16_shadow_of(a), *b16 = cpu_bf16_shadow_of(b);
        if (a16 || b16) {
            gemm_bf16(trans_a, trans_b, m, n, k, alpha, a, a16, lda, b, b16, ldb, beta, c, ldc,
                      threads);
            return;
        }
    }
    int nt = tensor__pool_threads();
    if (threads == 1) { /* a pool task: the executor already bracketed the job */
        sgemm1(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1);
        return;
    }
    if (nt == 1 || (double)m * (double)n * (double)k < 4e6) {
        cpu_gemm_pool_enter(); /* OpenBLAS would otherwise thread (and spin) on its own */
        sgemm1(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1);
        cpu_gemm_pool_leave();
        return;
    }
    struct gemm_job j = {trans_a, trans_b, m,    n,    k,    lda, ldb,
                         ldc,     alpha,   beta, a,    b,    c,   n >= m || n >= 64 * nt,
                         0,       NULL,    NULL, NULL, NULL, NULL};
    gemm_split(&j, nt);
}

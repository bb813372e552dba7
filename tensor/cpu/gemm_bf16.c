/*
 * gemm_bf16.c — bf16 x bf16 -> f32 GEMM on the CPU (gemm_bf16.h), and the run-time
 * choice of how (tensor_bf16_path).
 *
 * Why oneDNN's matmul primitive: Debian's oneDNN 2.6 has no BLAS-like bf16 GEMM in its
 * C API, but its matmul primitive with bf16 src/weights and an f32 dst JITs a brgemm
 * kernel for the CPU it finds: AMX tiles (tdpbf16ps) where the CPU and kernel allow
 * them, AVX-512 BF16 (vdpbf16ps) on Zen 4/5 and Cooper Lake. Where it would fall back
 * to its reference kernel (no AVX-512 at all), we round the operands to bf16 instead,
 * widen them back and call the fp32 GEMM: the same numbers, no speed-up, and the log
 * says so.
 *
 * Primitives are made per shape (m, n, k, leading dims, transposes, alpha, beta) and
 * kept: making one costs 40-150 us even when oneDNN's own cache has it (measured),
 * and the conv chunks and linear tiles repeat a few shapes thousands of times. They
 * are made and run with one OpenMP thread: parallelism comes from our pool's panels,
 * as for the fp32 GEMM (gemm.c says why), and a primitive made under a 2-thread ICV
 * would start its own team. The scratchpad is ours (per thread), so one primitive can
 * run on several pool threads at once.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>

#include "alloc.h"
#include "altstack.h"
#include "log.h"
#include "gemm_amx.h"
#include "gemm_bf16.h"
#include "../tensor_precision.h"

#ifdef LATENTD_HAVE_DNNL
#include <dnnl.h>
#include <omp.h>
#endif

/* ---- rounding ---------------------------------------------------------------------- */

static inline uint16_t round1(uint32_t u)
{
    uint16_t r = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40) : r;
}

static void round_scalar(uint16_t *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        dst[i] = round1(u);
    }
}

/*
 * vcvtneps2bf16: 16 floats per instruction, round to nearest even, NaN kept quiet, as
 * round1. It differs only on f32 subnormals (|x| < 2^-126), which it flushes to zero
 * where round1 keeps a bf16 subnormal: far below anything a GEMM input resolves. This
 * runs on every activation operand of a bf16 GEMM (a profile of the portable loop
 * showed rounding at 22 % of a bf16 txt2img).
 */
__attribute__((target("avx512f,avx512bf16,avx512vl"))) static void round_avx512(uint16_t *dst,
                                                                               const float *src,
                                                                               int64_t n)
{
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512bh r = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512((void *)(dst + i), (__m512i)r);
    }
    for (; i + 16 <= n; i += 16) {
        __m256bh r = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
        _mm256_storeu_si256((__m256i *)(dst + i), (__m256i)r);
    }
    round_scalar(dst + i, src + i, n - i);
}

int cpu_avx512bf16_usable(void)
{
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16") &&
               __builtin_cpu_supports("fma");
    }
    return have;
}

void cpu_bf16_round(uint16_t *dst, const float *src, int64_t n)
{
    if (cpu_avx512bf16_usable())
        round_avx512(dst, src, n);
    else
        round_scalar(dst, src, n);
}

/*
 * f16 -> bf16 in one pass: widen 16 halves (exact) and round them, in registers. This
 * runs on every f16 weight of a bf16 op when copies are not kept (the default since the
 * per-call mode: the whole UNet once per eval), so it must run at memory speed.
 */
__attribute__((target("avx512f,avx512bf16,avx512vl"))) static void f16_avx512(uint16_t *dst,
                                                                             const uint16_t *src,
                                                                             int64_t n)
{
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 lo = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m512 hi = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i + 16)));
        _mm512_storeu_si512((void *)(dst + i), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
    for (; i < n; i++) {
        float f = tensor_f16_to_f32(src[i]);
        round_scalar(dst + i, &f, 1);
    }
}

void cpu_bf16_from_f16(uint16_t *dst, const uint16_t *src, int64_t n)
{
    if (cpu_avx512bf16_usable()) {
        f16_avx512(dst, src, n);
        return;
    }
    float tmp[1024];
    for (int64_t s = 0; s < n; s += 1024) {
        int64_t c = n - s < 1024 ? n - s : 1024;
        tensor_convert_host(tmp, TENSOR_F32, src + s, TENSOR_F16, (size_t)c);
        round_scalar(dst + s, tmp, c);
    }
}

void cpu_bf16_pack(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t r = 0; r < rows; r++)
        cpu_bf16_round(dst + r * cols, src + r * ld, cols);
}

/* ---- per-thread scratch -------------------------------------------------------------- */

struct bf16_tls {
    uint16_t *b[2];  /* owned (xmalloc_aligned) */
    size_t bcap[2];  /* elements */
    float *f[2];     /* owned: widened operands of the emulated path */
    size_t fcap[2];
    void *pad;       /* owned: oneDNN scratchpad */
    size_t padcap;   /* bytes */
    int keyed;
#ifdef LATENTD_HAVE_DNNL
    dnnl_stream_t stream; /* owned; a stream is not thread-safe */
#endif
};

static _Thread_local struct bf16_tls tls;
static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void tls_free(struct bf16_tls *s)
{
    for (int i = 0; i < 2; i++) {
        xfree_aligned(s->b[i]);
        xfree_aligned(s->f[i]);
    }
    xfree_aligned(s->pad);
    cpu_gemm_amx_release(); /* s is this thread's: tls_free runs on its own thread */
#ifdef LATENTD_HAVE_DNNL
    if (s->stream)
        dnnl_stream_destroy(s->stream);
#endif
    memset(s, 0, sizeof(*s));
}

static void tls_at_exit(void *p) { tls_free(p); }

static void tls_key_init(void)
{
    if (pthread_key_create(&tls_key, tls_at_exit) != 0)
        PANIC("pthread_key_create failed");
}

static void tls_register(void)
{
    if (!tls.keyed) {
        pthread_once(&tls_once, tls_key_init);
        pthread_setspecific(tls_key, &tls);
        tls.keyed = 1;
    }
}

static void *grow(void **p, size_t *cap, size_t bytes)
{
    if (bytes > *cap) {
        tls_register();
        xfree_aligned(*p);
        *p = xmalloc_aligned(64, bytes + 64);
        *cap = bytes;
    }
    return *p;
}

uint16_t *cpu_bf16_scratch(int slot, size_t elems)
{
    size_t cap = tls.bcap[slot] * 2;
    uint16_t *p = grow((void **)&tls.b[slot], &cap, elems * 2);
    tls.bcap[slot] = cap / 2;
    return p;
}

static float *f32_scratch(int slot, size_t elems)
{
    size_t cap = tls.fcap[slot] * 4;
    float *p = grow((void **)&tls.f[slot], &cap, elems * 4);
    tls.fcap[slot] = cap / 4;
    return p;
}

void cpu_bf16_release(void)
{
    int keyed = tls.keyed; /* the exit destructor stays registered */
    tls_free(&tls);
    tls.keyed = keyed;
}

/* ---- the emulated path ---------------------------------------------------------------- */

/* A stored bf16 matrix (rows x cols, ld) widened to compact f32. */
static void widen_mat(float *dst, const uint16_t *src, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[r * cols + c] = tensor_bf16_to_f32(src[r * ld + c]);
}

static void gemm_emulated(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                          float beta, float *c, int64_t ldc)
{
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    float *fa = f32_scratch(0, (size_t)(ar * ac)), *fb = f32_scratch(1, (size_t)(br * bc));
    widen_mat(fa, a, ar, ac, lda);
    widen_mat(fb, b, br, bc, ldb);
    cpu_sgemm(ta, tb, m, n, k, alpha, fa, ac, fb, bc, beta, c, ldc, 1);
}

/* ---- oneDNN ----------------------------------------------------------------------------- */

enum path { PATH_UNKNOWN, PATH_AMX, PATH_DNNL, PATH_EMULATED };
static enum path path = PATH_UNKNOWN;
static char path_name[160];
static pthread_once_t path_once = PTHREAD_ONCE_INIT;

#ifdef LATENTD_HAVE_DNNL

struct prim_key {
    int64_t m, n, k, lda, ldb, ldc;
    int ta, tb;
    float alpha, beta;
};

struct prim {
    struct prim_key key;
    dnnl_primitive_t p;   /* owned; lives until exit */
    dnnl_memory_desc_t a, b, c, pad;
    size_t pad_bytes;
};

#define PRIM_MAX 1024 /* distinct shapes; past it, primitives are made per call */

static dnnl_engine_t engine;
static const struct prim *prim_find(const struct prim_key *k, struct prim *tmp);
static struct prim prims[PRIM_MAX];
static int nprims;
static pthread_mutex_t prim_mu = PTHREAD_MUTEX_INITIALIZER;

/* Make k's primitive with one OpenMP thread; 0, or -1 when oneDNN refuses. */
static int prim_make(const struct prim_key *k, struct prim *out, const char **impl)
{
    dnnl_dims_t ad = {k->m, k->k}, bd = {k->k, k->n}, cd = {k->m, k->n};
    dnnl_dims_t as = {k->ta ? 1 : k->lda, k->ta ? k->lda : 1};
    dnnl_dims_t bs = {k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1};
    dnnl_dims_t cs = {k->ldc, 1};
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int ok = dnnl_memory_desc_init_by_strides(&out->a, 2, ad, dnnl_bf16, as) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&out->b, 2, bd, dnnl_bf16, bs) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&out->c, 2, cd, dnnl_f32, cs) == dnnl_success &&
             dnnl_matmul_desc_init(&md, &out->a, &out->b, NULL, &out->c) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success &&
             dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) ==
                 dnnl_success;
    if (ok && k->alpha != 1.0f)
        ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha) == dnnl_success;
    if (ok && k->beta != 0.0f)
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, k->beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL) == dnnl_success;
    if (ok && impl)
        ok = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, impl) == dnnl_success;
    if (ok) {
        const dnnl_memory_desc_t *s = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        out->pad = *s;
        out->pad_bytes = dnnl_memory_desc_get_size(s);
        ok = dnnl_primitive_create(&out->p, pd) == dnnl_success;
    }
    omp_set_num_threads(saved);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    out->key = *k;
    return ok ? 0 : -1;
}

/* The calling thread's last primitives: a Winograd task runs 16 GEMMs of one shape and
 * a conv's chunks repeat one, so most lookups end here without the table's lock. */
#define MRU_N 4
static _Thread_local const struct prim *mru[MRU_N];

static const struct prim *prim_get(const struct prim_key *k, struct prim *tmp)
{
    for (int i = 0; i < MRU_N; i++)
        if (mru[i] && memcmp(&mru[i]->key, k, sizeof(*k)) == 0)
            return mru[i];
    const struct prim *hit = prim_find(k, tmp);
    if (hit != tmp) {
        memmove(&mru[1], &mru[0], (MRU_N - 1) * sizeof(mru[0]));
        mru[0] = hit;
    }
    return hit;
}

static const struct prim *prim_find(const struct prim_key *k, struct prim *tmp)
{
    pthread_mutex_lock(&prim_mu);
    for (int i = 0; i < nprims; i++)
        if (memcmp(&prims[i].key, k, sizeof(*k)) == 0) {
            pthread_mutex_unlock(&prim_mu);
            return &prims[i]; /* entries never move nor die before exit */
        }
    struct prim *p = nprims < PRIM_MAX ? &prims[nprims] : tmp;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (prim_make(k, p, NULL) < 0)
        PANIC("bf16 matmul primitive failed for %lldx%lldx%lld", (long long)k->m,
              (long long)k->n, (long long)k->k);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (p != tmp)
        nprims++;
    /* Each new shape is a JIT compile: on a cold run these add up (LATENTD's --verbose
     * DEBUG shows them). */
    log_debug("bf16 GEMM: primitive %d for %lldx%lldx%lld made in %.1f ms", nprims,
              (long long)k->m, (long long)k->n, (long long)k->k,
              (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6);
    pthread_mutex_unlock(&prim_mu);
    return p;
}

static void gemm_dnnl(const struct prim_key *k, const uint16_t *a, const uint16_t *b, float *c)
{
    struct prim tmp = {0};
    const struct prim *p = prim_get(k, &tmp);
    if (!tls.stream) {
        tls_register();
        if (dnnl_stream_create(&tls.stream, engine, dnnl_stream_default_flags) != dnnl_success)
            PANIC("dnnl_stream_create failed");
    }
    void *pad = p->pad_bytes ? grow(&tls.pad, &tls.padcap, p->pad_bytes) : NULL;
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, mp = NULL;
    if (dnnl_memory_create(&ma, &p->a, engine, (void *)a) != dnnl_success ||
        dnnl_memory_create(&mb, &p->b, engine, (void *)b) != dnnl_success ||
        dnnl_memory_create(&mc, &p->c, engine, c) != dnnl_success ||
        (pad && dnnl_memory_create(&mp, &p->pad, engine, pad) != dnnl_success))
        PANIC("dnnl_memory_create failed");
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc},
                               {DNNL_ARG_SCRATCHPAD, mp}};
    altstack_ensure(); /* a signal inside oneDNN must not land on its rsp (util/altstack.h) */
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    dnnl_status_t st = dnnl_primitive_execute(p->p, tls.stream, mp ? 4 : 3, args);
    if (st == dnnl_success)
        st = dnnl_stream_wait(tls.stream);
    omp_set_num_threads(saved);
    if (st != dnnl_success)
        PANIC("bf16 matmul failed (%d) for %lldx%lldx%lld", (int)st, (long long)k->m,
              (long long)k->n, (long long)k->k);
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
    if (mp)
        dnnl_memory_destroy(mp);
    if (tmp.p)
        dnnl_primitive_destroy(tmp.p);
}

static const char *isa_name(void)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if (isa >= dnnl_cpu_isa_avx512_core_amx)
        return "AMX-BF16";
    if (isa >= dnnl_cpu_isa_avx512_core_bf16)
        return "AVX-512 BF16";
    return "no AVX-512 BF16/AMX: oneDNN emulates bf16 on AVX-512";
}
#endif

static void path_pick(void)
{
    /* Linux gates AMX tile data per process: cpu_amx_usable asks for it, for oneDNN's
     * AMX kernels too (LATENTD_BF16_PATH=dnnl) */
    int amx = cpu_amx_usable();
    path = PATH_EMULATED;
    snprintf(path_name, sizeof(path_name),
             "emulated: operands rounded to bf16, fp32 GEMM (oneDNN not built in)");
    /* "emulated", "dnnl": tests and A/B comparisons; otherwise the fastest there is */
    const char *force = getenv("LATENTD_BF16_PATH");
    if ((!force || strcmp(force, "amx") == 0) && amx) {
        /* measured against oneDNN's AMX matmul: gemm_amx.c says by how much */
        path = PATH_AMX;
        snprintf(path_name, sizeof(path_name), "AMX tiles, our kernel (gemm_amx.c)");
        log_info("bf16 GEMM: %s", path_name);
        return;
    }
#ifdef LATENTD_HAVE_DNNL
    if (force && strcmp(force, "emulated") == 0) {
        snprintf(path_name, sizeof(path_name),
                 "emulated: operands rounded to bf16, fp32 GEMM (LATENTD_BF16_PATH)");
        log_info("bf16 GEMM: %s", path_name);
        return;
    }
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
        snprintf(path_name, sizeof(path_name),
                 "emulated: operands rounded to bf16, fp32 GEMM (no oneDNN engine)");
        return;
    }
    struct prim_key k = {64, 64, 64, 64, 64, 64, 0, 0, 1.0f, 0.0f};
    struct prim probe = {0};
    const char *impl = NULL;
    if (prim_make(&k, &probe, &impl) < 0 || !impl || strncmp(impl, "ref", 3) == 0) {
        snprintf(path_name, sizeof(path_name),
                 "emulated: operands rounded to bf16, fp32 GEMM (oneDNN has only '%s')",
                 impl ? impl : "nothing");
    } else {
        path = PATH_DNNL;
        snprintf(path_name, sizeof(path_name), "oneDNN matmul %s (%s)", impl, isa_name());
    }
    if (probe.p)
        dnnl_primitive_destroy(probe.p);
#endif
    log_info("bf16 GEMM: %s", path_name);
}

int cpu_bf16_amx(void)
{
    pthread_once(&path_once, path_pick);
    return path == PATH_AMX;
}

const char *tensor_bf16_path(void)
{
    pthread_once(&path_once, path_pick);
    return path_name;
}

void cpu_gemm_bf16_1(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb, float beta,
                     float *c, int64_t ldc)
{
    pthread_once(&path_once, path_pick);
    if (m <= 0 || n <= 0)
        return;
    if (path == PATH_AMX) {
        tls_register(); /* its packing scratch is freed with the thread's (tls_free) */
        cpu_gemm_amx(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
#ifdef LATENTD_HAVE_DNNL
    if (path == PATH_DNNL && k > 0) {
        struct prim_key key = {m, n, k, lda, ldb, ldc, ta, tb, alpha, beta};
        gemm_dnnl(&key, a, b, c);
        return;
    }
#endif
    gemm_emulated(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/*
 * tensor_impl — private contract between the tensor/ sources and the compute
 * backends in tensor/cpu/ and tensor/cuda/. Not for other layers.
 *
 * The CPU kernels work on raw, contiguous f32 host buffers (so they are tested
 * without any device); the CPU backend's ops (cpu/op_*.c, cpu/adapt.h) turn tensors
 * into such buffers (converting dtypes and strides through temporaries when needed).
 * The op entry points pick a backend through the table in backend_impl.h.
 *
 * Threads: as tensor.h (one caller at a time; kernels use the internal pool).
 */
#ifndef LATENTD_TENSOR_IMPL_H
#define LATENTD_TENSOR_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

struct tensor_storage {
    struct dev *dev;                      /* borrowed: outlives the storage */
    void *data;                           /* device memory (owned unless release set) */
    size_t bytes;                         /* size of data */
    atomic_int refs;                      /* tensors referring to it */
    void (*release)(void *user, void *data); /* external memory: called at last unref */
    void *user;
    int external;                         /* 1: never dev_free data */
};

/* Byte address of element 0 of t. */
static inline char *tensor__ptr(const struct tensor *t)
{
    return (char *)t->_storage->data + (size_t)t->offset * tensor_dtype_size(t->dtype);
}

/* Host-side strided element walk: converts t (any dtype/strides, host memory) into a
 * contiguous f32 buffer, and back. */
void tensor__gather_f32(float *dst, const struct tensor *t);
void tensor__scatter_f32(struct tensor *t, const float *src);

/* Row-major contiguous strides for a shape. */
void tensor__contig_strides(int ndim, const int64_t *shape, int64_t *stride);
/* t's shape and strides right-aligned into 4 dims (leading dims 1, stride 0). */
void tensor__as4d(const struct tensor *t, int64_t *sh, int64_t *st);

/* Host-memory tensors outside any device (storage dev NULL), for staging copies:
 * tensor__host_new allocates (freed by tensor_free; ERR_DEVICE_OOM with e filled
 * when the host has no room: the size follows the request); tensor__host_wrap fills a
 * caller-owned struct over caller memory and tensor__host_unwrap releases it. */
int tensor__host_new(enum tensor_dtype dt, int ndim, const int64_t *shape, struct tensor **out,
                     struct err *e);
void tensor__host_wrap(struct tensor *t, float *data, int ndim, const int64_t *shape);
void tensor__host_unwrap(struct tensor *t);

/* PyTorch nearest index map: map[d] = min(floor(d * (float)in / out), in - 1). */
void tensor__nearest_map(int64_t *map, int64_t in, int64_t out);

/* ---- profile (prof.c, LATENTD_PROFILE=1) ---------------------------------------------- */

enum {
    TENSOR__PROF_CONV3, TENSOR__PROF_IM2COL, TENSOR__PROF_CONV1, TENSOR__PROF_LINEAR,
    TENSOR__PROF_MATMUL, TENSOR__PROF_ATTN, TENSOR__PROF_GN, TENSOR__PROF_LN, TENSOR__PROF_BIN,
    TENSOR__PROF_ACT, TENSOR__PROF_COPY, TENSOR__PROF_UPSAMPLE,
    TENSOR__PROF_N
};
extern int tensor__prof_on; /* -1 until the environment was read */
int tensor__prof_init(void);
double tensor__prof_now(void);
double tensor__prof_start(void);
void tensor__prof_add(int cls, double t0, double flops);

/* Start of an op's timed section: 0 when profiling is off (then prof_end does nothing). */
static inline double tensor__prof_t0(void)
{
    int on = tensor__prof_on;
    if (__builtin_expect(on == 0, 1))
        return 0;
    if (on < 0 && !tensor__prof_init())
        return 0;
    return tensor__prof_start();
}

static inline void tensor__prof_end(int cls, double t0, double flops)
{
    if (t0 != 0)
        tensor__prof_add(cls, t0, flops);
}

/* ---- CPU thread pool (cpu/pool.c) ----------------------------------------------------- */

/* Run fn(ctx, begin, end, tid) over [0, n) in contiguous pieces shared out dynamically
 * (tid: 0 for the caller, 1.. for workers; a thread may get several pieces). Returns
 * when all pieces are done. Not reentrant: a task
 * must not call tensor__pool_for itself (it runs the nested loop inline instead). */
typedef void (*tensor_pool_fn)(void *ctx, int64_t begin, int64_t end, int tid);
void tensor__pool_for(int64_t n, tensor_pool_fn fn, void *ctx);
int tensor__pool_threads(void);
void tensor__pool_shutdown(void);
/* One 64-byte-aligned block of `bytes` per pool thread, indexed by a task's tid (the
 * caller's, for the tasks of its next tensor__pool_for calls); NULL-terminated, freed
 * with tensor__pool_scratch_free. */
void **tensor__pool_scratch_new(size_t bytes);
void tensor__pool_scratch_free(void **blocks);

/* ---- CPU GEMM (cpu/gemm.c) ------------------------------------------------------------ */

/*
 * Row-major C[M,N] = alpha * op(A) op(B) + beta * C with leading dims in elements,
 * like cblas_sgemm. Uses oneDNN's sgemm when built with it (it picks AVX-512 kernels
 * from cpuid whatever OPENBLAS_CORETYPE says), else OpenBLAS (or when the environment
 * has LATENTD_GEMM=openblas). `threads` 0: split into panels over the pool's threads,
 * each running the library single-threaded (caller is the executor); 1: one
 * single-threaded call on the calling thread (caller is a pool task).
 */
void cpu_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
               int64_t ldc, int threads);
const char *cpu_gemm_backend(void); /* "onednn" or "openblas (<core>)" */
/* Bracket a pool job whose tasks call cpu_sgemm(..., threads = 1); executor only. */
void cpu_gemm_pool_enter(void);
void cpu_gemm_pool_leave(void);

/* ---- CPU kernels over contiguous f32 (tensor/cpu/) ----------------------------------------- */

/* x [n, c, hw] -> y; gamma/beta [c] or NULL. y may equal x. */
void cpu_group_norm(float *y, const float *x, int64_t n, int64_t c, int64_t hw, int groups,
                    const float *gamma, const float *beta, float eps, int silu);
/* The same GroupNorm as per-channel affines: y[i, c] = x[i, c] * a[i * c + c] + b[...]
 * (before the SiLU), bit for bit what cpu_group_norm applies. a, b: [n, c]. */
void cpu_group_norm_coefs(float *a, float *b, const float *x, int64_t n, int64_t c, int64_t hw,
                          int groups, const float *gamma, const float *beta, float eps);
/* rows x [rows, c] normalised over c. y may equal x. */
void cpu_layer_norm(float *y, const float *x, int64_t rows, int64_t c, const float *gamma,
                    const float *beta, float eps);

enum cpu_act {
    CPU_ACT_SILU,
    CPU_ACT_GELU,
    CPU_ACT_QUICK_GELU,
};
void cpu_activation(float *y, const float *x, int64_t n, enum cpu_act act);
/* x [rows, 2c] -> y [rows, c] = x[:, :c] * gelu(x[:, c:]). */
void cpu_geglu(float *y, const float *x, int64_t rows, int64_t c);
/* y [rows, h] = geglu(x [rows, k] @ w^T + bias), w [2h, k], bias [2h] or NULL (linear.c). */
void cpu_linear_geglu(float *y, const float *x, const float *w, const float *bias, int64_t rows,
                      int64_t k, int64_t h);
extern int cpu_linear_geglu_fused; /* 0: the CPU runs the other backends' chunked path (tests) */
/* In-place-capable softmax of rows [rows, c]. */
void cpu_softmax(float *y, const float *x, int64_t rows, int64_t c);

/* Vector helpers used by several kernels (runtime-dispatched AVX-512 / AVX2 / scalar). */
float cpu_vec_max(const float *x, int64_t n);
/* y[i] = exp(x[i] - m), returns the sum. y may equal x. */
float cpu_vec_exp_sum(float *y, const float *x, int64_t n, float m);
void cpu_vec_scale(float *y, const float *x, float s, int64_t n);
/* y = a * gelu(g) (cpu_geglu's row). */
void cpu_vec_geglu(float *y, const float *a, const float *g, int64_t n);
/* Sums of (x - shift) and (x - shift)^2 (shift: any value near the mean). */
void cpu_vec_moments(const float *x, int64_t n, float shift, double *sum, double *sumsq);
/* y = x * a + b, then SiLU when silu != 0. */
void cpu_vec_affine(float *y, const float *x, int64_t n, float a, float b, int silu);
/* y = (x - m) * r * g + b; g, b vectors or NULL. */
void cpu_vec_ln_apply(float *y, const float *x, int64_t n, float m, float r, const float *g,
                      const float *b);
/* Tests: cap the ISA level (0 scalar, 1 AVX2, 2 AVX-512) to exercise every path. */
void cpu_vec_force_isa(int level);

/* out [n, co, ho, wo] = conv(x [n, ci, h, w], w [co, ci, kh, kw]) + bias. */
void cpu_conv2d(float *out, const float *x, const float *w, const float *bias, int64_t n,
                int64_t ci, int64_t h, int64_t wd, int64_t co, int64_t kh, int64_t kw,
                const struct tensor_conv2d_opts *o);

/*
 * Few output pixels (the UNet's 8x8 and 4x4 levels; cpu_conv2d_is_wn says which shapes):
 * im2col of all images side by side, then gemm_wn.c's GEMM, which reads the weight as
 * stored (wdt: f32, f16 or bf16, contiguous) instead of a widened copy. fp32. cpu_conv_wn
 * = 0 (tests, bench_ops) leaves those shapes to cpu_conv2d.
 */
/*
 * bf16 precision on AMX, images up to 16x16 (conv.c says why): the weight as stored (wdt:
 * f32, f16 or bf16, contiguous), never bound to a bf16 copy. -1 when the shape, precision
 * or CPU is not one it takes (nothing done).
 */
int cpu_conv2d_amx_small(float *out, const float *x, const void *w, enum tensor_dtype wdt,
                         const float *bias, int64_t n, int64_t ci, int64_t h, int64_t wd,
                         int64_t co, int64_t kh, int64_t kw, const struct tensor_conv2d_opts *o);

/* The same on AVX-512 BF16 without AMX (linear_avx512bf16.c's GEMM), for images of at
 * most cpu_conv_bf16v_max_px output pixels; -1 where it does not apply. */
int cpu_conv2d_bf16v_small(float *out, const float *x, const void *w, enum tensor_dtype wdt,
                           const float *bias, int64_t n, int64_t ci, int64_t h, int64_t wd,
                           int64_t co, int64_t kh, int64_t kw, const struct tensor_conv2d_opts *o);
extern int cpu_conv_bf16v_max_px;

extern int cpu_conv_wn;
int cpu_conv2d_is_wn(int64_t n, int64_t ci, int64_t co, int64_t kh, int64_t kw, int64_t ho,
                     int64_t wo, const struct tensor_conv2d_opts *o);
void cpu_conv2d_wn(float *out, const float *x, const void *w, enum tensor_dtype wdt,
                   const float *bias, int64_t n, int64_t ci, int64_t h, int64_t wd, int64_t co,
                   int64_t kh, int64_t kw, const struct tensor_conv2d_opts *o);

/*
 * Attention over one batch: q [tq, q_rs] (row stride q_rs), k [tk, k_rs], v [tk, v_rs],
 * out [tq, o_rs]; `heads` heads of width d (q, k) and dv (v, out).
 */
void cpu_attention(float *out, int64_t o_rs, const float *q, int64_t q_rs, const float *k,
                   int64_t k_rs, const float *v, int64_t v_rs, int64_t tq, int64_t tk,
                   int heads, int64_t d, int64_t dv, float scale, int causal);
/* The same with S = Q K^T and P V on AMX tiles in bf16 (attn_amx.c), for ops whose
 * precision is bf16, non-causal; -1 (nothing done) where the bf16 GEMM path is not AMX. */
int cpu_attention_amx(float *out, int64_t o_rs, const float *q, int64_t q_rs, const float *k,
                      int64_t k_rs, const float *v, int64_t v_rs, int64_t tq, int64_t tk, int heads,
                      int64_t d, int64_t dv, float scale);
/* Free the calling thread's kept K/V packing of cpu_attention_amx; returns the bytes. */
size_t cpu_attn_amx_release(void);
/* The same on AVX-512 BF16 (vdpbf16ps: attn_avx512bf16.c) for CPUs without AMX; -1
 * (nothing done) where the CPU lacks it or d is odd. */
int cpu_attention_avx512bf16(float *out, int64_t o_rs, const float *q, int64_t q_rs, const float *k,
                             int64_t k_rs, const float *v, int64_t v_rs, int64_t tq, int64_t tk,
                             int heads, int64_t d, int64_t dv, float scale);
size_t cpu_attn_avx512bf16_release(void);
/* The fused AVX-512F kernel behind cpu_attention (attn_avx512.c), same contract; call
 * only when cpu_attention_avx512_usable() (the CPU has AVX-512F, checked once). */
void cpu_attention_avx512(float *out, int64_t o_rs, const float *q, int64_t q_rs,
                          const float *k, int64_t k_rs, const float *v, int64_t v_rs, int64_t tq,
                          int64_t tk, int heads, int64_t d, int64_t dv, float scale, int causal);
int cpu_attention_avx512_usable(void);
/* The same kernel in AVX2 + FMA (attn_avx2.c), same contract; call only when
 * cpu_attention_avx2_usable() (the CPU has AVX2 and FMA, checked once).
 * cpu_attn_avx2_runs counts its calls (atomically), so tests can tell it ran. */
void cpu_attention_avx2(float *out, int64_t o_rs, const float *q, int64_t q_rs, const float *k,
                        int64_t k_rs, const float *v, int64_t v_rs, int64_t tq, int64_t tk,
                        int heads, int64_t d, int64_t dv, float scale, int causal);
int cpu_attention_avx2_usable(void);
extern long cpu_attn_avx2_runs;

/* The same convolution for kh = kw = 3, stride 1, by Winograd F(2x2, 3x3) or F(4x4, 3x3)
 * (winograd.c, cpu_wino_tile):
 * 0, or -1 (out untouched) when it cannot allocate its transformed weights or the
 * shape is not one it handles. cpu_conv2d calls it where it pays. */
int cpu_conv2d_winograd(float *out, const float *x, const float *w, const float *bias, int64_t n,
                        int64_t ci, int64_t h, int64_t wd, int64_t co,
                        const struct tensor_conv2d_opts *o);

/* cpu_conv2d_winograd of silu?(x * na[i, c] + nb[i, c]) (na, nb: [n, ci], per image and
 * channel; cpu_group_norm_coefs; NULL: x as it is), applied as the input is read:
 * GroupNorm (+SiLU) then the conv, without the normalised tensor. Same return. The
 * weight is given as stored (wdt: f32, f16 or bf16, contiguous [co, ci, 3, 3]): each
 * output channel's kernels are widened right before their transform, so an f16 weight
 * is never widened whole (a pass writing and reading back 4 bytes per weight, 59 MB at
 * 1280 channels) only to be transformed; widening is exact, so the result is the
 * f32 weight's. */
/* cpu_conv2d_winograd (pad 1) of x's nearest 2x upsample, read as the input transform
 * fills its patches: x is [n, ci, h, wd], out [n, co, 2h, 2wd]; the upsampled tensor
 * (268 MB at the 512^2 VAE decoder's last level) is never made. Any precision; the op
 * uses it under bf16 (fp32 has wino_up2.c's cheaper phase form). Same return. */
int cpu_conv2d_winograd_up2x(float *out, const float *x, const void *w, enum tensor_dtype wdt,
                             const float *bias, int64_t n, int64_t ci, int64_t h, int64_t wd,
                             int64_t co);
int cpu_conv2d_winograd_gn(float *out, const float *x, const void *w, enum tensor_dtype wdt,
                           const float *bias, int64_t n, int64_t ci, int64_t h, int64_t wd,
                           int64_t co, const struct tensor_conv2d_opts *o, const float *na,
                           const float *nb, int silu);

/* out [n, co, 2h, 2wd] = conv(upsample_nearest_2x(x [n, ci, h, wd]), w [co, ci, 3, 3]) +
 * bias, stride 1, pad 1, without the upsampled x: F(2x2, 3x3) per output phase on x
 * (wino_up2.c), fp32; w as for cpu_conv2d_winograd_gn. 0, or -1 (out untouched) when
 * its buffers cannot be allocated. */
int cpu_conv2d_up2_winograd(float *out, const float *x, const void *w, enum tensor_dtype wdt,
                            const float *bias, int64_t n, int64_t ci, int64_t h, int64_t wd,
                            int64_t co);

/* Tuning knobs (tests and the benchmark set them; defaults are for SD1.5 shapes). */
extern size_t cpu_conv_cols_bytes; /* im2col chunk size, bytes */
extern int cpu_conv_winograd;      /* 0 never Winograd (reference), 1 where it pays, 2 always */
extern size_t cpu_wino_chunk_bytes; /* Winograd: V + M bytes per task */
extern int cpu_wino_bf16;          /* 0: Winograd stays fp32 under bf16 precision */
extern int cpu_wino_avx512; /* Winograd transforms: -1 AVX-512 when the CPU has it, 0 scalar */
extern int cpu_wino_avx2;   /* else AVX2: -1 when the CPU has it, 0 scalar */
/* fp32 Winograd's tile (winograd.c): F(4,3) where it keeps the error bound (<= 512 input
 * channels) and pays, else F(2,3). cpu_wino_f43: -1 (default) 1 unless LATENTD_WINO=f23
 * is set; 0 F(2,3) only; 1 F(4,3) where it pays; 2 wherever the bound allows (tests).
 * cpu_wino_tile returns the output tile size cpu_conv2d_winograd will use: 2 or 4. */
extern int cpu_wino_f43;
int cpu_wino_tile(int64_t ci, int64_t co, int64_t ho, int64_t wo);
/* The tile under bf16 precision: F(4,3) from 64^2 output pixels at any channel count
 * off AMX (its error is bf16's rounding, not fp32's bound), F(2,3) on AMX or with
 * cpu_wino_f43 = 0. */
int cpu_wino_tile_bf16(int64_t ci, int64_t co, int64_t ho, int64_t wo);
/* Free the calling thread's Winograd buffers (kept between calls); returns the bytes. */
size_t cpu_wino_release(void);
/* 1 when cpu_conv2d will take the Winograd path for this shape (the op then hands it an
 * f32 image of the weight even under bf16: Winograd transforms and rounds it itself). */
int cpu_conv2d_is_winograd(int64_t ci, int64_t co, int64_t kh, int64_t kw, int64_t ho,
                           int64_t wo, const struct tensor_conv2d_opts *o);
/* oneDNN's convolution primitive (conv_dnnl.c): 0, or -1 when unavailable, switched off
 * or failed (the caller falls back to im2col). Opt-in: cpu_conv_dnnl_on = 1, or -1 (the
 * default) and LATENTD_CONV=onednn in the environment; then cpu_conv2d uses it for
 * non-1x1 convs with at least cpu_conv_dnnl_min_px output pixels per image. */
int cpu_conv2d_dnnl(float *out, const float *x, const float *w, const float *bias, int64_t n,
                    int64_t ci, int64_t h, int64_t wd, int64_t co, int64_t kh, int64_t kw,
                    const struct tensor_conv2d_opts *o);
void cpu_conv_dnnl_release(void);
/* Give the calling thread and the OpenMP team it would start with `threads` threads an
 * alternate signal stack each (omp_altstack.c, util/altstack.h). */
void cpu_omp_altstacks(int threads);
extern int64_t cpu_conv_dnnl_min_px;
extern int cpu_conv_dnnl_on;
extern int cpu_attn_bq;            /* attention query rows per tile */
extern int cpu_attn_bk;            /* attention keys per tile */
extern int cpu_attn_fused;         /* 0: reference path; 1: best fused kernel; 2: force AVX2 one */
extern int cpu_fattn_bk;           /* fused attention (AVX-512 and AVX2): keys per block */

/* y = sum_k coef[k] * in[k] over n elements; y may alias any input. */
void cpu_lincomb(float *y, int n_in, const float *coef, const float *const *in, int64_t n);

#endif

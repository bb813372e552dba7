/*
 * blas.cu — the CUDA backend's GEMM-based ops: matmul, linear, conv2d (im2col +
 * GEMM) and attention, through cublasGemmEx / cublasGemmStridedBatchedEx with
 * the storage dtype in and CUBLAS_COMPUTE_32F (f32 accumulation, sd15.md §8.5).
 * cuBLAS is reached through cu__cublas() (cublas_lazy.h: loaded on the first GEMM).
 *
 * Row-major data in a column-major library: C = A B (row-major) is computed as
 * C^T = B^T A^T, i.e. the operands are passed swapped and every row-major
 * matrix is read as its own transpose.
 *
 * Attention is tiled over queries: for a chunk of query rows the scores of all
 * heads for that chunk ([heads, chunk, Tk], f32) are computed by one batched
 * GEMM, softmaxed in place in f32 (probabilities written in the value dtype),
 * and multiplied by V by a second batched GEMM. The chunk is sized so that the
 * score buffer stays under ATTN_SCORE_BYTES: the full 4096 x 4096 score matrix
 * of a head is never materialised.
 */
#include <math.h>

#include "cublas_lazy.h"
#include "cuda_common.cuh"

#define ATTN_SCORE_BYTES TENSOR__CUDA_ATTN_SCORE_BYTES
#define MAX_DEVS 16

static struct {
    struct dev *dev;
    cublasHandle_t h;
} handles[MAX_DEVS];

cudaStream_t cu_stream(const struct tensor *t)
{
    return (cudaStream_t)dev_stream_native(dev_compute_stream(tensor_dev(t)));
}

cublasHandle_t cu_blas(const struct tensor *t)
{
    struct dev *d = tensor_dev(t);
    int i;
    for (i = 0; i < MAX_DEVS && handles[i].dev; i++)
        if (handles[i].dev == d)
            break;
    if (i == MAX_DEVS)
        PANIC("more than %d CUDA devices", MAX_DEVS);
    if (!handles[i].dev) {
        CUBLAS_CHECK(cu__cublas()->create(&handles[i].h));
        handles[i].dev = d;
    }
    CUBLAS_CHECK(cu__cublas()->set_stream(handles[i].h, cu_stream(t)));
    return handles[i].h;
}

void tensor__cuda_shutdown(void)
{
    for (int i = 0; i < MAX_DEVS && handles[i].dev; i++) {
        cu__cublas()->destroy(handles[i].h);
        handles[i].dev = NULL;
    }
}

/* Row-major C[b] (m x n, ldc) = alpha op(A[b]) op(B[b]) + beta C[b] over `batch` matrices. */
static void gemm_rm(cublasHandle_t h, int ta, int tb, int64_t m, int64_t n, int64_t k,
                    float alpha, const void *a, cudaDataType_t at, int64_t lda, int64_t sa,
                    const void *b, cudaDataType_t bt, int64_t ldb, int64_t sb, float beta, void *c,
                    cudaDataType_t ct, int64_t ldc, int64_t sc, int64_t batch)
{
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1)
        CUBLAS_CHECK(cu__cublas()->gemm_ex(h, ob, oa, (int)n, (int)m, (int)k, &alpha, b, bt, (int)ldb, a,
                                  at, (int)lda, &beta, c, ct, (int)ldc, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
    else
        CUBLAS_CHECK(cu__cublas()->gemm_strided_batched_ex(
            h, ob, oa, (int)n, (int)m, (int)k, &alpha, b, bt, (int)ldb, sb, a, at, (int)lda, sa,
            &beta, c, ct, (int)ldc, sc, (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static size_t esize(enum tensor_dtype dt)
{
    return tensor_dtype_size(dt);
}

/* ---- matmul ------------------------------------------------------------------------------ */

int tensor__cuda_matmul(struct tensor *out, const struct tensor *a, const struct tensor *b,
                        int trans_a, int trans_b, float alpha, struct err *e)
{
    enum tensor_dtype dt = out->dtype;
    struct tensor *ta = NULL, *tb = NULL, *to = NULL;
    const struct tensor *ca, *cb, *co;
    int rc;
    if ((rc = cu_contig(a, dt, &ta, &ca, e)) < 0 || (rc = cu_contig(b, dt, &tb, &cb, e)) < 0 ||
        (rc = cu_contig(out, dt, &to, &co, e)) < 0)
        goto out;
    {
        int64_t m = out->shape[out->ndim - 2], n = out->shape[out->ndim - 1];
        int64_t k = trans_a ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
        int64_t lda = a->shape[a->ndim - 1], ldb = b->shape[b->ndim - 1];
        /* Batch dims right-aligned to two; a size-1 batch dim broadcasts (stride 0). */
        int64_t on[2], a4[2], b4[2], as[2], bs[2];
        for (int i = 0; i < 2; i++) {
            int d = out->ndim - 4 + i, da = a->ndim - 4 + i, db = b->ndim - 4 + i;
            on[i] = d >= 0 ? out->shape[d] : 1;
            a4[i] = da >= 0 ? a->shape[da] : 1;
            b4[i] = db >= 0 ? b->shape[db] : 1;
        }
        as[1] = a4[1] == 1 ? 0 : m * k;
        as[0] = a4[0] == 1 ? 0 : a4[1] * m * k;
        bs[1] = b4[1] == 1 ? 0 : k * n;
        bs[0] = b4[0] == 1 ? 0 : b4[1] * k * n;
        cublasHandle_t h = cu_blas(out);
        cudaDataType_t t = cu_dtype(dt);
        for (int64_t i0 = 0; i0 < on[0]; i0++)
            gemm_rm(h, trans_a, trans_b, m, n, k, alpha,
                    (const char *)tensor_data(ca) + (size_t)(i0 * as[0]) * esize(dt), t, lda,
                    as[1], (const char *)tensor_data(cb) + (size_t)(i0 * bs[0]) * esize(dt), t,
                    ldb, bs[1], 0.0f,
                    (char *)tensor_data(co) + (size_t)(i0 * on[1] * m * n) * esize(dt), t, n,
                    m * n, on[1]);
    }
    if (to)
        tensor__cuda_copy(out, to, e);
out:
    tensor_free(ta);
    tensor_free(tb);
    tensor_free(to);
    return rc;
}

/* ---- linear --------------------------------------------------------------------------------- */

__global__ void k_bias_rows(void *o, int odt, const void *b, int bdt, int64_t n, int64_t total)
{
    CU_FOR(i, total) st(o, odt, i, b ? ld(b, bdt, i % n) : 0.0f);
}

int tensor__cuda_linear(struct tensor *out, const struct tensor *x, const struct tensor *w,
                        const struct tensor *bias, struct err *e)
{
    enum tensor_dtype dt = out->dtype;
    struct tensor *tx = NULL, *tw = NULL, *to = NULL, *tb = NULL;
    const struct tensor *cx, *cw, *co, *cb;
    int rc;
    if ((rc = cu_contig(x, dt, &tx, &cx, e)) < 0 || (rc = cu_contig(w, dt, &tw, &cw, e)) < 0 ||
        (rc = cu_contig(out, dt, &to, &co, e)) < 0 ||
        (rc = cu_contig(bias, bias ? bias->dtype : dt, &tb, &cb, e)) < 0)
        goto out;
    {
        int64_t k = w->shape[1], n = w->shape[0], rows = tensor_numel(x) / k;
        int64_t total = rows * n;
        k_bias_rows<<<cu_blocks(total, 256), 256, 0, cu_stream(out)>>>(
            tensor_data(co), dt, cb ? tensor_data(cb) : NULL, cb ? cb->dtype : 0, n, total);
        LAUNCH_CHECK();
        gemm_rm(cu_blas(out), 0, 1, rows, n, k, 1.0f, tensor_data(cx), cu_dtype(dt), k, 0,
                tensor_data(cw), cu_dtype(dt), k, 0, 1.0f, tensor_data(co), cu_dtype(dt), n, 0, 1);
    }
    if (to)
        tensor__cuda_copy(out, to, e);
out:
    tensor_free(tx);
    tensor_free(tw);
    tensor_free(to);
    tensor_free(tb);
    return rc;
}

/* ---- conv2d ------------------------------------------------------------------------------ */

/* cols [ci*kh*kw, ho*wo] for one image */
__global__ void k_im2col(void *cols, int dt, const void *x, int64_t ci, int64_t h, int64_t w,
                         int64_t kh, int64_t kw, int64_t ho, int64_t wo, int s, int pt, int pl,
                         int64_t total)
{
    CU_FOR(i, total)
    {
        int64_t p = i % (ho * wo), r = i / (ho * wo);
        int64_t kx = r % kw, ky = r / kw % kh, c = r / (kw * kh);
        int64_t oy = p / wo, ox = p % wo;
        int64_t iy = oy * s - pt + ky, ix = ox * s - pl + kx;
        float v = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? ld(x, dt, (c * h + iy) * w + ix) : 0.0f;
        st(cols, dt, i, v);
    }
}

__global__ void k_bias_planes(void *o, int odt, const void *b, int bdt, int64_t co, int64_t p,
                              int64_t total)
{
    CU_FOR(i, total) st(o, odt, i, b ? ld(b, bdt, i / p % co) : 0.0f);
}

int tensor__cuda_conv2d(struct tensor *out, const struct tensor *x, const struct tensor *w,
                        const struct tensor *bias, const struct tensor_conv2d_opts *o,
                        struct err *e)
{
    enum tensor_dtype dt = out->dtype;
    struct tensor *tx = NULL, *tw = NULL, *to = NULL, *tb = NULL, *cols = NULL;
    const struct tensor *cx, *cw, *co, *cb;
    int rc;
    if ((rc = cu_contig(x, dt, &tx, &cx, e)) < 0 || (rc = cu_contig(w, dt, &tw, &cw, e)) < 0 ||
        (rc = cu_contig(out, dt, &to, &co, e)) < 0 ||
        (rc = cu_contig(bias, bias ? bias->dtype : dt, &tb, &cb, e)) < 0)
        goto out;
    {
        int64_t n = x->shape[0], ci = x->shape[1], h = x->shape[2], wd = x->shape[3];
        int64_t cout = w->shape[0], kh = w->ndim == 4 ? w->shape[2] : 1;
        int64_t kw = w->ndim == 4 ? w->shape[3] : 1;
        int64_t ho = out->shape[2], wo = out->shape[3], k = ci * kh * kw, p = ho * wo;
        int direct = kh == 1 && kw == 1 && o->stride == 1 && !o->pad_top && !o->pad_left &&
                     !o->pad_bottom && !o->pad_right;
        int64_t cshape[2] = {k, p};
        if (!direct && (rc = tensor_new(tensor_dev(out), dt, 2, cshape, &cols, e)) < 0)
            goto out;
        int64_t total = n * cout * p;
        k_bias_planes<<<cu_blocks(total, 256), 256, 0, cu_stream(out)>>>(
            tensor_data(co), dt, cb ? tensor_data(cb) : NULL, cb ? cb->dtype : 0, cout, p, total);
        LAUNCH_CHECK();
        cublasHandle_t hb = cu_blas(out);
        for (int64_t b = 0; b < n; b++) {
            const char *xb = (const char *)tensor_data(cx) + (size_t)(b * ci * h * wd) * esize(dt);
            const void *src = xb;
            if (!direct) {
                k_im2col<<<cu_blocks(k * p, 256), 256, 0, cu_stream(out)>>>(
                    tensor_data(cols), dt, xb, ci, h, wd, kh, kw, ho, wo, o->stride, o->pad_top,
                    o->pad_left, k * p);
                LAUNCH_CHECK();
                src = tensor_data(cols);
            }
            gemm_rm(hb, 0, 0, cout, p, k, 1.0f, tensor_data(cw), cu_dtype(dt), k, 0, src,
                    cu_dtype(dt), p, 0, 1.0f,
                    (char *)tensor_data(co) + (size_t)(b * cout * p) * esize(dt), cu_dtype(dt), p,
                    0, 1);
        }
    }
    if (to)
        tensor__cuda_copy(out, to, e);
out:
    tensor_free(cols);
    tensor_free(tb);
    tensor_free(tx);
    tensor_free(tw);
    tensor_free(to);
    return rc;
}

/* ---- attention ---------------------------------------------------------------------------- */

/* Softmax over rows of S (f32, [heads, rows, tk]) written as P in dtype pdt (same layout).
 * Causal rows see keys <= q0 + row. One block per (head, row). */
__global__ void k_attn_softmax(void *P, int pdt, const float *S, int64_t rows, int64_t tk,
                               int64_t q0, int causal)
{
    int64_t r = blockIdx.x % rows;
    const float *s = S + (int64_t)blockIdx.x * tk;
    int64_t nv = causal ? (q0 + r + 1 < tk ? q0 + r + 1 : tk) : tk;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x)
        m = fmaxf(m, s[j]);
    __shared__ float sh[32];
    int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0)
        sh[wi] = m;
    __syncthreads();
    m = lane < nw ? sh[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    __syncthreads();
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x)
        sum += expf(s[j] - m);
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0)
        sh[wi] = sum;
    __syncthreads();
    sum = lane < nw ? sh[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float inv = 1.0f / sum;
    int64_t base = (int64_t)blockIdx.x * tk;
    for (int64_t j = threadIdx.x; j < tk; j += blockDim.x)
        st(P, pdt, base + j, j < nv ? expf(s[j] - m) * inv : 0.0f);
}

int tensor__cuda_attention(struct tensor *out, const struct tensor *q, const struct tensor *k,
                           const struct tensor *v, int heads, float scale, unsigned flags,
                           struct err *e)
{
    enum tensor_dtype dt = out->dtype;
    struct tensor *tq = NULL, *tk_ = NULL, *tv = NULL, *to = NULL, *S = NULL, *P = NULL;
    const struct tensor *cq, *ck, *cv, *co;
    int rc;
    if ((rc = cu_contig(q, dt, &tq, &cq, e)) < 0 || (rc = cu_contig(k, dt, &tk_, &ck, e)) < 0 ||
        (rc = cu_contig(v, dt, &tv, &cv, e)) < 0 || (rc = cu_contig(out, dt, &to, &co, e)) < 0)
        goto out;
    {
        int64_t B = q->shape[0], TQ = q->shape[1], TK = k->shape[1];
        int64_t C = q->shape[2], CV = v->shape[2], d = C / heads, dv = CV / heads;
        int64_t chunk = tensor__cuda_attn_chunk(heads, TQ, TK);
        struct dev *dd = tensor_dev(out);
        int64_t sshape[3] = {heads, chunk, TK};
        if ((rc = tensor_new(dd, TENSOR_F32, 3, sshape, &S, e)) < 0 ||
            (rc = tensor_new(dd, dt, 3, sshape, &P, e)) < 0)
            goto out;
        cublasHandle_t h = cu_blas(out);
        cudaDataType_t t = cu_dtype(dt);
        size_t es = esize(dt);
        for (int64_t b = 0; b < B; b++)
            for (int64_t q0 = 0; q0 < TQ; q0 += chunk) {
                int64_t rows = TQ - q0 < chunk ? TQ - q0 : chunk;
                const char *qb = (const char *)tensor_data(cq) + (size_t)((b * TQ + q0) * C) * es;
                const char *kb = (const char *)tensor_data(ck) + (size_t)(b * TK * C) * es;
                const char *vb = (const char *)tensor_data(cv) + (size_t)(b * TK * CV) * es;
                char *ob = (char *)tensor_data(co) + (size_t)((b * TQ + q0) * CV) * es;
                /* S[h] (rows x TK) = scale * Q_h (rows x d, ld C) K_h^T; heads strided by d */
                gemm_rm(h, 0, 1, rows, TK, d, scale, qb, t, C, d, kb, t, C, d, 0.0f,
                        tensor_data(S), CUDA_R_32F, TK, rows * TK, heads);
                k_attn_softmax<<<(unsigned)(heads * rows), 256, 0, cu_stream(out)>>>(
                    tensor_data(P), dt, (const float *)tensor_data(S), rows, TK, q0,
                    !!(flags & TENSOR_ATTN_CAUSAL));
                LAUNCH_CHECK();
                /* O_h (rows x dv, ld CV) = P_h (rows x TK) V_h (TK x dv, ld CV) */
                gemm_rm(h, 0, 0, rows, dv, TK, 1.0f, tensor_data(P), t, TK, rows * TK, vb, t, CV,
                        dv, 0.0f, ob, t, CV, dv, heads);
            }
    }
    if (to)
        tensor__cuda_copy(out, to, e);
out:
    tensor_free(S);
    tensor_free(P);
    tensor_free(tq);
    tensor_free(tk_);
    tensor_free(tv);
    tensor_free(to);
    return rc;
}

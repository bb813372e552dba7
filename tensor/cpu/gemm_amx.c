/*
 * gemm_amx.c — bf16 x bf16 -> f32 GEMM on AMX tiles (gemm_amx.h).
 *
 * Why our own: oneDNN 2.6's matmul primitive on plain (row-major) operands reached
 * 0.06-0.2 of the AMX peak on a 2-core Sapphire Rapids class VM (bench_ops --only bf16:
 * SD1.5's 8192 x 320 -> 1280 Linear at 0.10); it re-lays B out on every call and our
 * panels call it thousands of times per step.
 *
 * The layout AMX wants: tdpbf16ps multiplies A, a 16 x 32 bf16 tile (rows of 64 bytes),
 * by B, 32 x 16 stored as 16 rows of 16 bf16 pairs (row r holds B[2r][j], B[2r+1][j]
 * for each column j: "VNNI"), accumulating into a 16 x 16 f32 tile. Both operands are
 * packed per call into those tiles, zero-padded to 32 rows / 32 columns / 32 of K, so
 * the inner loop has no tails; the 32 x 32 block of C goes through a small buffer where
 * alpha, beta and C's edges are applied.
 *
 * Blocking (2 MiB of L2 per core on these CPUs): op(A) is read in place where it is
 * row-major with K a multiple of 32, else packed once per call (32-row blocks, each
 * 32 x K); B a chunk of columns at a time, as many as keep the
 * chunk within ~512 KiB; for each A block the chunk's 32-column blocks run with the A
 * block and the chunk both in L2. The micro-kernel is 2 x 2 tiles (four accumulators,
 * two A and two B tiles per step of 32 in K): four tdpbf16ps per four tile loads.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <immintrin.h>

#include "alloc.h"
#include "gemm_amx.h"
#include "../tensor.h"

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

#define B_CHUNK_BYTES (512 * 1024) /* B's chunk, kept in L2 */
#define K_BLOCK 24                 /* steps of 32 in K per block */
#define A_ONCE_BYTES (8u << 20)    /* all of A packed up front up to this */
#define K_SLICE 12                 /* steps of 32 in K per slice: A's 32 x 384 in L1 */

int cpu_amx_usable(void)
{
    static int usable = -1; /* a benign race: every thread computes the same answer */
    if (usable < 0) {
        int ok = __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16") &&
                 __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
        /* Linux lends tile state only to processes that ask; without it the first tile
         * instruction is SIGILL. Asking again is harmless. */
        if (ok)
            ok = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
        usable = ok;
    }
    return usable;
}

/* ---- per-thread packing scratch ------------------------------------------------------ */

struct buf {
    uint16_t *p;
    size_t cap; /* elements */
};

static _Thread_local struct buf pack_a, pack_b, pack_c;

static uint16_t *buf_get(struct buf *b, size_t elems)
{
    if (elems > b->cap) {
        xfree_aligned(b->p);
        b->p = xmalloc_aligned(64, elems * 2);
        b->cap = elems;
    }
    return b->p;
}

void cpu_gemm_amx_release(void)
{
    xfree_aligned(pack_a.p);
    xfree_aligned(pack_b.p);
    xfree_aligned(pack_c.p);
    memset(&pack_a, 0, sizeof(pack_a));
    memset(&pack_b, 0, sizeof(pack_b));
    memset(&pack_c, 0, sizeof(pack_c));
}

/* ---- packing ------------------------------------------------------------------------- */

/* interleave two rows of 16 (x0 in the low half, x1 in the high): out[2c] = x0[c],
 * out[2c + 1] = x1[c] */
static const uint16_t zip[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

/*
 * op(A)'s rows [0, rows) (rows <= 32) as a 32-row block: for each step s of 32 in K a
 * 32 x 32 bf16 square (columns s*32..), zero beyond rows and k.
 */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
pack_a_block(uint16_t *dst, int ta, const uint16_t *a, int64_t lda, int64_t rows, int64_t k,
             int64_t ks)
{
    for (int64_t s = 0; s < ks; s++) {
        uint16_t *sq = dst + s * 1024;
        int64_t k0 = s * 32, left = k - k0;
        __mmask32 mk = left >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << left) - 1;
        for (int64_t r = 0; r < 32; r++) {
            uint16_t *o = sq + r * 32;
            if (r >= rows) {
                _mm512_storeu_si512(o, _mm512_setzero_si512());
            } else if (!ta) {
                _mm512_storeu_si512(o, _mm512_maskz_loadu_epi16(mk, a + r * lda + k0));
            } else {
                for (int64_t cc = 0; cc < 32; cc++)
                    o[cc] = k0 + cc < k ? a[(k0 + cc) * lda + r] : 0;
            }
        }
    }
}

/*
 * One VNNI tile from a B stored as columns (tb: column j's K values contiguous): row r
 * takes pair r of each of the 16 columns' 32 values, i.e. the 16 x 16 transpose of the
 * columns read as 32-bit pairs (unpack 32, unpack 64, then 128-bit lanes twice).
 */
/* Tile row i = pair i of each of the 16 rows r[] (each 32 bf16): the 16 x 16 transpose of
 * r read as 32-bit pairs (unpack 32, unpack 64, then 128-bit lanes twice), stored at t. */
__attribute__((target("avx512f"))) static void vnni_store(uint16_t *t, __m512i r[16])
{
    __m512i u[16];
    for (int i = 0; i < 16; i += 2) {
        u[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        u[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(u[i], u[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(u[i], u[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(u[i + 1], u[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(u[i + 1], u[i + 3]);
    }
    /* then 128-bit lanes across the groups of four columns, twice: r[i] ends up holding
     * pair i of all 16 columns (test_tensor_amx checks it against a scalar transpose) */
    for (int i = 0; i < 4; i++) {
        u[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);     /* lanes 0,2 | 0,2 */
        u[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd); /* lanes 1,3 | 1,3 */
        u[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
        u[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(u[i], u[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(u[i], u[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_i32x4(u[i + 4], u[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_i32x4(u[i + 4], u[i + 12], 0xdd);
    }
    for (int i = 0; i < 16; i++)
        _mm512_storeu_si512(t + i * 32, r[i]);
}

/*
 * One VNNI tile from a B stored as columns (tb: column j's K values contiguous): row r
 * takes pair r of each of the 16 columns' 32 values.
 */
__attribute__((target("avx512f"))) void cpu_amx_vnni_cols(uint16_t *t, const uint16_t *src,
                                                          int64_t ld)
{
    __m512i r[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_si512(src + i * ld);
    vnni_store(t, r);
}

/* 32 values of a weight row at its stored dtype (mk: which of them exist) as bf16, rounded
 * as cpu_bf16_round / cpu_bf16_from_f16 round them; zero where mk is clear. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static __m512i
row32(enum tensor_dtype dt, const void *src, __mmask32 mk)
{
    if (dt == TENSOR_BF16)
        return _mm512_maskz_loadu_epi16(mk, src);
    __m512 lo, hi;
    if (dt == TENSOR_F16) {
        __m512i h = _mm512_maskz_loadu_epi16(mk, src);
        lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
        hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
    } else {
        lo = _mm512_maskz_loadu_ps((__mmask16)mk, src);
        hi = _mm512_maskz_loadu_ps((__mmask16)(mk >> 16), (const float *)src + 16);
    }
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

static __mmask32 mask32(int64_t left)
{
    return left >= 32 ? ~(__mmask32)0 : left > 0 ? ((__mmask32)1 << left) - 1 : 0;
}

/* W's rows [j0, j0 + cols) x K values [0, k) (rows ldw elements apart) as B tiles, tile
 * (jb, s) at ((jb - jb0) * ks + s) * 512. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
pack_w(uint16_t *dst, enum tensor_dtype dt, const void *w, int64_t ldw, int64_t n, int64_t k,
       int64_t j0, int64_t cols, int64_t jb0)
{
    int64_t ks = (k + 31) / 32;
    size_t es = tensor_dtype_size(dt);
    for (int64_t jb = j0 / 16; jb < (j0 + cols) / 16; jb++) {
        for (int64_t s = 0; s < ks; s++) {
            __m512i r[16];
            __mmask32 mk = mask32(k - s * 32);
            for (int i = 0; i < 16; i++) {
                int64_t j = jb * 16 + i;
                r[i] = j < n ? row32(dt, (const char *)w + ((size_t)(j * ldw + s * 32)) * es, mk)
                             : _mm512_setzero_si512();
            }
            vnni_store(dst + ((jb - jb0) * ks + s) * 512, r);
        }
    }
}

void cpu_amx_pack_w(uint16_t *dst, enum tensor_dtype dt, const void *w, int64_t n, int64_t k,
                    int64_t j0, int64_t cols)
{
    pack_w(dst, dt, w, k, n, k, j0, cols, 0);
}

void cpu_amx_pack_w_block(uint16_t *dst, enum tensor_dtype dt, const void *w, int64_t n, int64_t k,
                          int64_t k0, int64_t kk, int64_t j0, int64_t cols)
{
    pack_w(dst, dt, (const char *)w + (size_t)k0 * tensor_dtype_size(dt), k, n, kk, j0, cols,
           j0 / 16);
}

/* A's rows [0, rows) (rows <= 32) at their stored dtype, rounded, as pack_a_block lays
 * them out. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void
cpu_amx_pack_a_rows(uint16_t *dst, enum tensor_dtype dt, const void *a, int64_t lda, int64_t rows,
                    int64_t k)
{
    int64_t ks = (k + 31) / 32;
    size_t es = tensor_dtype_size(dt);
    /* square by square: the stores run front to back (rows first took 18 % more time
     * at 1280 x 11520, measured) */
    for (int64_t s = 0; s < ks; s++) {
        __mmask32 mk = mask32(k - s * 32);
        for (int64_t r = 0; r < 32; r++) {
            uint16_t *o = dst + s * 1024 + r * 32;
            if (r >= rows)
                _mm512_storeu_si512(o, _mm512_setzero_si512());
            else
                _mm512_storeu_si512(o, row32(dt, (const char *)a + (size_t)(r * lda + s * 32) * es, mk));
        }
    }
}

/*
 * Columns [j0, j0 + nc) of op(B) (nc a multiple of 32) into 16-column VNNI tiles:
 * tile (jb, s) row r = B[s*32 + 2r][j], B[s*32 + 2r + 1][j] for the 16 columns j;
 * zero beyond n and k.
 */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
pack_b_chunk(uint16_t *dst, int tb, const uint16_t *b, int64_t ldb, int64_t n, int64_t k,
             int64_t ks, int64_t j0, int64_t nc)
{
    __m512i idx = _mm512_loadu_si512(zip);
    if (!tb) { /* row pairs outer: both source rows are read front to back */
        for (int64_t s = 0; s < ks; s++) {
            for (int r = 0; r < 16; r++) {
                int64_t k0 = s * 32 + 2 * r;
                const uint16_t *r0 = b + k0 * ldb + j0, *r1 = r0 + ldb;
                for (int64_t jb = 0; jb < nc / 16; jb++) {
                    int64_t left = n - (j0 + jb * 16);
                    __mmask16 mj = left >= 16 ? (__mmask16)0xffff
                                   : left > 0 ? (__mmask16)((1u << left) - 1)
                                              : 0;
                    __m256i x0 = k0 < k ? _mm256_maskz_loadu_epi16(mj, r0 + jb * 16)
                                        : _mm256_setzero_si256();
                    __m256i x1 = k0 + 1 < k ? _mm256_maskz_loadu_epi16(mj, r1 + jb * 16)
                                            : _mm256_setzero_si256();
                    __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(x0), x1, 1);
                    _mm512_storeu_si512(dst + ((jb * ks + s) * 16 + r) * 32,
                                        _mm512_permutexvar_epi16(idx, both));
                }
            }
        }
        return;
    }
    for (int64_t jb = 0; jb < nc / 16; jb++) {
        int64_t jlo = j0 + jb * 16;
        for (int64_t s = 0; s < ks; s++) {
            uint16_t *t = dst + (jb * ks + s) * 512;
            if (jlo + 16 <= n && s * 32 + 32 <= k) { /* whole: a 16 x 16 dword transpose */
                cpu_amx_vnni_cols(t, b + jlo * ldb + s * 32, ldb);
                continue;
            }
            for (int r = 0; r < 16; r++) {
                int64_t k0 = s * 32 + 2 * r;
                uint16_t *o = t + r * 32;
                for (int c = 0; c < 16; c++) {
                    int64_t j = jlo + c;
                    const uint16_t *col = b + j * ldb;
                    o[2 * c] = j < n && k0 < k ? col[k0] : 0;
                    o[2 * c + 1] = j < n && k0 + 1 < k ? col[k0 + 1] : 0;
                }
            }
        }
    }
}

/* ---- the kernel ---------------------------------------------------------------------- */

struct tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* Every tile 16 rows x 64 bytes: tmm0-3 accumulate, tmm4-5 hold A, tmm6-7 B. */
__attribute__((target("amx-tile"))) void cpu_amx_tiles_begin(void)
{
    struct tilecfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    /* GCC 12 does not tell the optimiser that ldtilecfg reads cfg: without this the
     * stores above are dropped as dead (measured: a SIGSEGV on the config) */
    __asm__ volatile("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

__attribute__((target("amx-tile"))) void cpu_amx_tiles_end(void)
{
    _tile_release();
}

/* C's rows [0, rows) x columns [0, cols) = alpha * acc + beta * C (acc: rows of w). */
__attribute__((target("avx512f"))) static void store_rows(const float *acc, int64_t w, float *c,
                                                          int64_t ldc, int64_t rows, int64_t cols,
                                                          float alpha, float beta)
{
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < cols; j += 16) {
            int64_t left = cols - j;
            __mmask16 mk = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            __m512 v = _mm512_mul_ps(va, _mm512_loadu_ps(acc + r * w + j));
            float *o = c + r * ldc + j;
            if (beta != 0.0f)
                v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mk, o), v);
            _mm512_mask_storeu_ps(o, mk, v);
        }
    }
}

/*
 * C's 32-row block over one chunk of B (w columns; B's 16-column tiles bjs elements
 * apart, each ks steps of 32 in K): for each slice of K (A's 32 x 384
 * slice kept in L1 while it meets every 32-column block of the chunk, B's tiles from
 * L2) the four accumulator tiles start from the block's partial sums in acc (rows of
 * ld bytes), or, on the first slice, from zero or (load) from acc as it is, and go back
 * to acc. acc is C itself where alpha is 1 and beta 0 or 1 (load), else a buffer.
 */
__attribute__((target("amx-tile,amx-bf16"))) static void
row_block(const uint16_t *ap, const uint16_t *bp, int64_t bjs, int64_t ks, int64_t w, float *acc,
          int64_t ld, int load, const float *bias)
{
    int64_t row16 = 16 * (ld / 4); /* elements from acc's first 16 rows to the next 16 */
    for (int64_t s0 = 0; s0 < ks; s0 += K_SLICE) {
        int64_t s1 = s0 + K_SLICE < ks ? s0 + K_SLICE : ks;
        for (int64_t jb = 0; jb < w / 16; jb += 2) {
            float *c0 = acc + jb * 16;
            const uint16_t *b0 = bp + jb * bjs, *b1 = b0 + bjs;
            if (s0 == 0 && !load && bias) { /* stride 0: every row is the bias */
                _tile_loadd(0, bias + jb * 16, 0);
                _tile_loadd(1, bias + jb * 16 + 16, 0);
                _tile_loadd(2, bias + jb * 16, 0);
                _tile_loadd(3, bias + jb * 16 + 16, 0);
            } else if (s0 == 0 && !load) {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            } else {
                _tile_loadd(0, c0, ld);
                _tile_loadd(1, c0 + 16, ld);
                _tile_loadd(2, c0 + row16, ld);
                _tile_loadd(3, c0 + row16 + 16, ld);
            }
            for (int64_t s = s0; s < s1; s++) {
                _tile_loadd(4, ap + s * 1024, 64);
                _tile_loadd(5, ap + s * 1024 + 512, 64);
                _tile_loadd(6, b0 + s * 512, 64);
                _tile_loadd(7, b1 + s * 512, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, c0, ld);
            _tile_stored(1, c0 + 16, ld);
            _tile_stored(2, c0 + row16, ld);
            _tile_stored(3, c0 + row16 + 16, ld);
        }
    }
}

void cpu_amx_rows(const uint16_t *ap, const uint16_t *bp, int64_t bjs, int64_t ks, int64_t w,
                  float *acc, int64_t ld_bytes, int load, const float *bias)
{
    row_block(ap, bp, bjs, ks, w, acc, ld_bytes, load, bias);
}

size_t cpu_amx_packed_elems(int64_t m, int64_t k)
{
    return (size_t)((m + 31) / 32 * ((k + 31) / 32)) * 1024;
}

void cpu_amx_pack(uint16_t *dst, const uint16_t *a, int64_t lda, int64_t m, int64_t k)
{
    int64_t ks = (k + 31) / 32;
    for (int64_t i = 0; i < m; i += 32)
        pack_a_block(dst + i / 32 * ks * 1024, 0, a + i * lda, lda, m - i < 32 ? m - i : 32, k, ks);
}

/* The GEMM, with op(A) from a (packed here), already packed in `packed`, or (araw) a
 * row-major A at dtype adt converted block by block as it is met. */
static void gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a,
                 int64_t lda, const uint16_t *packed, const uint16_t *b, int64_t ldb,
                 const uint16_t *bpacked, float beta, float *c, int64_t ldc, enum tensor_dtype adt,
                 const void *araw)
{
    if (m <= 0 || n <= 0)
        return;
    int64_t ks = (k + 31) / 32;
    if (ks == 0) { /* k == 0: C = beta C */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
    /* K in blocks of K_BLOCK steps: a block's B chunk and A's rows for it stay in L2
     * (a conv's packed weight, 1.8 MiB at 320 channels, does not as a whole); C sums
     * the blocks (each after the first adds to it) */
    int64_t kbs = ks < K_BLOCK ? ks : K_BLOCK, nkb = (ks + kbs - 1) / kbs;
    int64_t nc = B_CHUNK_BYTES / (kbs * 32 * 2) / 32 * 32;
    if (nc < 32)
        nc = 32;
    int64_t np = (n + 31) / 32 * 32;
    if (nc > np || bpacked) /* packed B: one chunk, all of it */
        nc = np;
    /* all of A packed once where it is met more than once and is small, else one
     * 32-row block at a time, again for every chunk of B */
    int64_t mb = (m + 31) / 32;
    int once =
        packed || (!araw && (nc < np || nkb > 1) && (size_t)(mb * ks) * 2048 <= A_ONCE_BYTES);
    uint16_t *ap = (uint16_t *)packed;
    if (!packed) {
        ap = buf_get(&pack_a, (size_t)((once ? mb * ks : kbs) * 1024));
        if (once)
            for (int64_t i = 0; i < mb; i++)
                pack_a_block(ap + i * ks * 1024, ta, ta ? a + i * 32 : a + i * 32 * lda, lda,
                             m - i * 32 < 32 ? m - i * 32 : 32, k, ks);
    }
    uint16_t *bp = bpacked ? NULL : buf_get(&pack_b, (size_t)(nc / 16 * kbs * 512));
    float *cacc = (float *)buf_get(&pack_c, (size_t)(32 * nc * 2));
    int in_c = alpha == 1.0f && (beta == 0.0f || beta == 1.0f); /* C is the accumulator */
    cpu_amx_tiles_begin();
    for (int64_t s0 = 0; s0 < ks; s0 += kbs) {
        int64_t ss = ks - s0 < kbs ? ks - s0 : kbs, k0 = s0 * 32;
        int64_t kk = k - k0 < ss * 32 ? k - k0 : ss * 32;
        float bt = s0 == 0 ? beta : 1.0f; /* later K blocks add to C */
        for (int64_t j0 = 0; j0 < n; j0 += nc) {
            int64_t w = n - j0 < nc ? (n - j0 + 31) / 32 * 32 : nc, bjs = ss * 512;
            const uint16_t *bk = bp;
            if (bpacked) { /* this K block's steps of every tile column */
                bk = bpacked + s0 * 512;
                bjs = ks * 512;
            } else {
                pack_b_chunk(bp, tb, tb ? b + k0 : b + k0 * ldb, ldb, n, kk, ss, j0, w);
            }
            for (int64_t i = 0; i < m; i += 32) {
                int64_t rows = m - i < 32 ? m - i : 32, cols = n - j0 < w ? n - j0 : w;
                const uint16_t *ablk = once ? ap + (i / 32 * ks + s0) * 1024 : ap;
                if (araw)
                    cpu_amx_pack_a_rows(ap, adt,
                                        (const char *)araw +
                                            (size_t)(i * lda + k0) * tensor_dtype_size(adt),
                                        lda, rows, kk);
                else if (!once)
                    pack_a_block(ap, ta, ta ? a + k0 * lda + i : a + i * lda + k0, lda, rows, kk,
                                 ss);
                if (in_c && rows == 32 && cols == w) {
                    row_block(ablk, bk, bjs, ss, w, c + i * ldc + j0, ldc * 4, bt != 0.0f, NULL);
                } else {
                    row_block(ablk, bk, bjs, ss, w, cacc, w * 4, 0, NULL);
                    store_rows(cacc, w, c + i * ldc + j0, ldc, rows, cols, alpha, bt);
                }
            }
        }
    }
    cpu_amx_tiles_end();
}

void cpu_gemm_amx(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a,
                  int64_t lda, const uint16_t *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    gemm(ta, tb, m, n, k, alpha, a, lda, NULL, b, ldb, NULL, beta, c, ldc, TENSOR_BF16, NULL);
}

void cpu_gemm_amx_packed(int tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const uint16_t *packed, const uint16_t *b, int64_t ldb, float beta,
                         float *c, int64_t ldc)
{
    gemm(0, tb, m, n, k, alpha, NULL, 0, packed, b, ldb, NULL, beta, c, ldc, TENSOR_BF16, NULL);
}

size_t cpu_amx_packed_b_elems(int64_t n, int64_t k)
{
    return (size_t)((n + 31) / 32 * 2 * ((k + 31) / 32)) * 512;
}

void cpu_amx_pack_b(uint16_t *dst, int tb, const uint16_t *b, int64_t ldb, int64_t n, int64_t k,
                    int64_t j0, int64_t w)
{
    int64_t ks = (k + 31) / 32;
    pack_b_chunk(dst + j0 / 16 * ks * 512, tb, b, ldb, n, k, ks, j0, w);
}

/* Step s (of ks) of cpu_amx_pack_b's layout from a row-major f32 B's rows s*32.. (at b,
 * krows <= 32 of them valid), columns [j0, j0 + w): two rows of 16 values rounded to
 * bf16 and interleaved per tile row. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void
cpu_amx_pack_b_f32_step(uint16_t *dst, int64_t ks, int64_t s, const float *b, int64_t ldb,
                        int64_t n, int64_t krows, int64_t j0, int64_t w)
{
    for (int64_t jb = j0 / 16; jb < (j0 + w) / 16; jb++) {
        int64_t left = n - jb * 16;
        __mmask16 mj = left >= 16 ? (__mmask16)0xffff
                       : left > 0 ? (__mmask16)((1u << left) - 1)
                                  : 0;
        uint16_t *t = dst + (jb * ks + s) * 512;
        for (int r = 0; r < 16; r++) {
            const float *r0 = b + 2 * r * ldb + jb * 16;
            __m512 x0 = 2 * r < krows ? _mm512_maskz_loadu_ps(mj, r0) : _mm512_setzero_ps();
            __m512 x1 =
                2 * r + 1 < krows ? _mm512_maskz_loadu_ps(mj, r0 + ldb) : _mm512_setzero_ps();
            _mm512_storeu_si512(t + r * 32, cpu_amx_vnni_pair(x0, x1));
        }
    }
}

void cpu_amx_pack_b_f32(uint16_t *dst, const float *b, int64_t ldb, int64_t n, int64_t k,
                        int64_t j0, int64_t w)
{
    int64_t ks = (k + 31) / 32;
    for (int64_t s = 0; s < ks; s++)
        cpu_amx_pack_b_f32_step(dst, ks, s, b + s * 32 * ldb, ldb, n,
                                k - s * 32 < 32 ? k - s * 32 : 32, j0, w);
}

void cpu_gemm_amx_packed_ab(int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *apk,
                            const uint16_t *bpk, float beta, float *c, int64_t ldc)
{
    gemm(0, 0, m, n, k, alpha, NULL, 0, apk, NULL, 0, bpk, beta, c, ldc, TENSOR_BF16, NULL);
}

void cpu_gemm_amx_raw_a(int64_t m, int64_t n, int64_t k, enum tensor_dtype dt, const void *a,
                        int64_t lda, const uint16_t *bpk, float *c, int64_t ldc)
{
    gemm(0, 0, m, n, k, 1.0f, NULL, lda, NULL, NULL, 0, bpk, 0.0f, c, ldc, dt, a);
}

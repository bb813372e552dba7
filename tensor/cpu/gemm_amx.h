/*
 * gemm_amx — a single-threaded bf16 x bf16 -> f32 GEMM on Intel AMX tiles (private to
 * tensor/cpu/; gemm_bf16.c picks it where the CPU and kernel allow AMX).
 *
 * Threads: any; each thread keeps its own packing scratch and tile configuration.
 */
#ifndef LATENTD_TENSOR_CPU_GEMM_AMX_H
#define LATENTD_TENSOR_CPU_GEMM_AMX_H

#include <stddef.h>
#include <stdint.h>

#include <immintrin.h>

#include "../tensor.h"

/* Whether this CPU has AMX-BF16 and the kernel lent this process the tile state
 * (arch_prctl ARCH_REQ_XCOMP_PERM; asked once). */
int cpu_amx_usable(void);

/* cpu_gemm_bf16_1's contract: C = alpha op(A) op(B) + beta C, row-major, leading
 * dimensions in elements; beta == 0 never reads C. Only where cpu_amx_usable(). */
void cpu_gemm_amx(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb, float beta,
                  float *c, int64_t ldc);

/*
 * An A used by many GEMMs (a weight) packed once: cpu_amx_pack writes the row-major
 * m x k matrix a (leading dim lda) into dst, cpu_amx_packed_elems(m, k) elements (64-byte
 * aligned), and cpu_gemm_amx_packed is cpu_gemm_amx with op(A) = that A, read packed.
 */
size_t cpu_amx_packed_elems(int64_t m, int64_t k);
void cpu_amx_pack(uint16_t *dst, const uint16_t *a, int64_t lda, int64_t m, int64_t k);
void cpu_gemm_amx_packed(int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                         const uint16_t *packed, const uint16_t *b, int64_t ldb, float beta,
                         float *c, int64_t ldc);

/* And B too, for GEMMs that share it (a conv's row panels): op(B) (k x n; stored as
 * cpu_gemm_amx's b, ldb, trans_b) packed takes cpu_amx_packed_b_elems(n, k) elements
 * (64-byte aligned); cpu_amx_pack_b writes its columns [j0, j0 + w) (j0 and w multiples
 * of 32; any thread, so the columns can be split) and cpu_gemm_amx_packed_ab multiplies
 * packed A by packed B. */
size_t cpu_amx_packed_b_elems(int64_t n, int64_t k);
void cpu_amx_pack_b(uint16_t *dst, int trans_b, const uint16_t *b, int64_t ldb, int64_t n,
                    int64_t k, int64_t j0, int64_t w);
/* cpu_amx_pack_b from a row-major (not transposed) f32 B, rounded to bf16 as it is
 * packed; _step writes step s of the ks steps of 32 in K alone, from B's rows s*32..
 * (b pointing at the first, krows <= 32 of them valid; a caller staging B 32 rows at a
 * time). */
void cpu_amx_pack_b_f32(uint16_t *dst, const float *b, int64_t ldb, int64_t n, int64_t k,
                        int64_t j0, int64_t w);
void cpu_amx_pack_b_f32_step(uint16_t *dst, int64_t ks, int64_t s, const float *b, int64_t ldb,
                             int64_t n, int64_t krows, int64_t j0, int64_t w);
void cpu_gemm_amx_packed_ab(int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *apk,
                            const uint16_t *bpk, float beta, float *c, int64_t ldc);

/* C (m x n) = A B with B packed (cpu_amx_pack_b's layout) and A a row-major m x k
 * matrix at its stored dtype (f32, f16, bf16; a weight as the file holds it), converted
 * 32 rows x one K block at a time as the GEMM meets it: A is read once, never written
 * packed. */
void cpu_gemm_amx_raw_a(int64_t m, int64_t n, int64_t k, enum tensor_dtype dt, const void *a,
                        int64_t lda, const uint16_t *bpk, float *c, int64_t ldc);

/* Two rows of 16 f32 of a B (lo: K row 2r, hi: row 2r + 1) rounded to bf16 (nearest
 * even) and interleaved as one VNNI tile row: out[2j] = lo[j], out[2j + 1] = hi[j]. */
static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512bf16"))) __m512i
cpu_amx_vnni_pair(__m512 lo, __m512 hi)
{
    const __m512i zip = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(zip, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

/* Building blocks for other AMX kernels (attn_amx.c). The calling thread's tiles: every
 * one 16 rows x 64 bytes (tmm0-7), until cpu_amx_tiles_end. */
void cpu_amx_tiles_begin(void);
void cpu_amx_tiles_end(void);
/* One B tile (32 x 16, VNNI) from 16 columns stored as rows of 32 bf16 (src, ld elements
 * apart): tile row r = pair r of each column. */
void cpu_amx_vnni_cols(uint16_t *tile, const uint16_t *src, int64_t ld);

/*
 * Building blocks for a Linear (linear_amx.c), y = x W^T with W [n, k] row-major:
 * cpu_amx_pack_w writes W's rows [j0, j0 + cols) (j0, cols multiples of 32) at W's stored
 * dtype (f32, f16, bf16; rounded to bf16 as cpu_bf16_round does) as B's tiles, in
 * cpu_amx_pack_b's layout (cpu_amx_packed_b_elems(n, k) for all of W; 16-column tile jb,
 * step s of 32 in K at (jb * ks + s) * 512); cpu_amx_pack_a_rows rounds the rows [0, rows)
 * (rows <= 32) of a row-major A at its stored dtype (x: f32; a weight: f32, f16, bf16) into
 * one 32-row A block (cpu_amx_packed_elems(32, k)).
 * cpu_amx_rows is the micro-kernel between tiles_begin/_end: one 32-row A block (ap, ks
 * steps) times w columns of B (bp; 16-column tiles bjs elements apart) into acc (rows
 * ld_bytes apart), starting from acc itself (load), else from bias (w values, every row;
 * the accumulators start as it) or zero.
 */
void cpu_amx_pack_w(uint16_t *dst, enum tensor_dtype dt, const void *w, int64_t n, int64_t k,
                    int64_t j0, int64_t cols);
void cpu_amx_pack_a_rows(uint16_t *dst, enum tensor_dtype dt, const void *a, int64_t lda,
                         int64_t rows, int64_t k);
/* One block of that B: W's rows [j0, j0 + cols) x K values [k0, k0 + kk), tile (jb, s)
 * at ((jb - j0 / 16) * ceil(kk / 32) + s) * 512 (a GEMM's chunk of columns and K block,
 * converted as it is met). */
void cpu_amx_pack_w_block(uint16_t *dst, enum tensor_dtype dt, const void *w, int64_t n, int64_t k,
                          int64_t k0, int64_t kk, int64_t j0, int64_t cols);
void cpu_amx_rows(const uint16_t *ap, const uint16_t *bp, int64_t bjs, int64_t ks, int64_t w,
                  float *acc, int64_t ld_bytes, int load, const float *bias);

/* Free the calling thread's packing scratch (cpu_bf16_release's). */
void cpu_gemm_amx_release(void);

#endif

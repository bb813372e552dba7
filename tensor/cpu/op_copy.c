/*
 * op_copy.c — the CPU backend's copy between host-memory tensors (any dtypes and
 * layouts): a plain move when nothing changes, a blocked transpose for the permuted
 * views attention makes, else an element walk through f32.
 */
#include <string.h>

#include "adapt.h"
#include "cpu_backend.h"

/*
 * The copy every transformer block makes twice, [B, C, HW] <-> [B, HW, C] through a
 * permuted view: f32 on both sides, dst contiguous, src's last two dims swapped (its
 * second-to-last dim has stride 1). Done as a blocked transpose on the pool: the
 * element-wise strided walk was ~8 ms per 2 x 320 x 4096 on one core.
 */
#define TR_TILE 32

struct tr_job {
    float *dst;
    const float *src;
    int64_t sh[4], st[4]; /* src layout, 4-D right-aligned; st[2] == 1 */
    int64_t tiles_r, tiles_c;
};

static void tr_task(void *ctx, int64_t beg, int64_t end, int tid)
{
    struct tr_job *j = ctx;
    int64_t R = j->sh[2], C = j->sh[3], per = j->tiles_r * j->tiles_c;
    for (int64_t t = beg; t < end; t++) {
        int64_t b = t / per, tr = t % per / j->tiles_c, tc = t % j->tiles_c;
        int64_t b0 = b / j->sh[1], b1 = b % j->sh[1];
        const float *s = j->src + b0 * j->st[0] + b1 * j->st[1];
        float *d = j->dst + b * R * C;
        int64_t r1 = (tr + 1) * TR_TILE < R ? (tr + 1) * TR_TILE : R;
        int64_t c1 = (tc + 1) * TR_TILE < C ? (tc + 1) * TR_TILE : C;
        /* dst[r][c] = src[r + c * st3]: read along r (contiguous in src) in the inner loop */
        for (int64_t c = tc * TR_TILE; c < c1; c++)
            for (int64_t r = tr * TR_TILE; r < r1; r++)
                d[r * C + c] = s[r + c * j->st[3]];
    }
}

static int try_transpose(struct tensor *dst, const struct tensor *src)
{
    if (src->dtype != TENSOR_F32 || dst->dtype != TENSOR_F32 || !tensor_is_contiguous(dst) ||
        src->ndim < 2 || tensor_numel(dst) < 4096)
        return 0;
    struct tr_job j;
    tensor__as4d(src, j.sh, j.st);
    if (j.st[2] != 1 || j.st[3] == 1 || j.sh[2] < 2 || j.sh[3] < 2)
        return 0;
    j.dst = (float *)tensor__ptr(dst);
    j.src = (const float *)tensor__ptr(src);
    j.tiles_r = (j.sh[2] + TR_TILE - 1) / TR_TILE;
    j.tiles_c = (j.sh[3] + TR_TILE - 1) / TR_TILE;
    tensor__pool_for(j.sh[0] * j.sh[1] * j.tiles_r * j.tiles_c, tr_task, &j);
    return 1;
}

int tensor__cpu_copy(struct tensor *dst, const struct tensor *src, struct err *e)
{
    double pt0 = tensor__prof_t0();
    if (src->dtype == dst->dtype && tensor_is_contiguous(src) && tensor_is_contiguous(dst)) {
        memmove(tensor__ptr(dst), tensor__ptr(src), tensor_nbytes(dst));
    } else if (!try_transpose(dst, src)) {
        struct hbuf h;
        const float *p = hin(src, &h);
        tensor__scatter_f32(dst, p);
        hfree(&h);
    }
    tensor__prof_end(TENSOR__PROF_COPY, pt0, 0);
    return 0;
}

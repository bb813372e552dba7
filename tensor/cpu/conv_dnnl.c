/*
 * conv_dnnl.c — 2-D convolution through oneDNN's convolution primitive (when the
 * build has oneDNN and the GEMM backend is oneDNN).
 *
 * Opt-in (LATENTD_CONV=onednn), off by default: measured on this 2-core shared
 * machine it is not reliably faster. oneDNN's direct convolution (brgconv, blocked
 * nChw16c layout) alone computes a 3x3 conv at 350-395 GFLOP/s on 2 threads where
 * im2col + sgemm reaches 260-330, and with every reorder counted it won at
 * 2x640x16x16 (+20 %), 2x640x32x32 (+20 %), 2x320x64x64 (+10 %), but lost at
 * 2x1280x16x16 (-20 %: reordering a 59 MB W every call; weights are not cached since
 * LoRA patches them in place), 1x128x256x256 (-55 %: the NCHW <-> blocked reorders)
 * and, under load, everywhere: OpenMP's static split waits for a descheduled thread
 * where the pool's dynamic split does not (2x320x32x32: 86 vs 125 GFLOP per CPU s).
 *
 * Threads: the primitive runs on oneDNN's OpenMP team, sized to the pool's thread
 * count for the call; the pool's own workers sleep meanwhile (they never spin).
 * Every oneDNN object but the engine and stream is made and destroyed per call
 * (oneDNN caches the compiled primitives by shape).
 */
#include <stdlib.h>
#include <string.h>

#include "../tensor_impl.h"

#ifdef LATENTD_HAVE_DNNL
#include <dnnl.h>
#include <omp.h>

static dnnl_engine_t engine;
static dnnl_stream_t stream;
static int state; /* 0 untried, 1 ready, -1 unusable */
int cpu_conv_dnnl_on = -1; /* -1: LATENTD_CONV=onednn decides (read once) */

static int ready(void)
{
    if (cpu_conv_dnnl_on < 0) {
        const char *c = getenv("LATENTD_CONV");
        cpu_conv_dnnl_on = c && strcmp(c, "onednn") == 0;
    }
    if (!cpu_conv_dnnl_on)
        return 0;
    if (state)
        return state > 0;
    state = -1;
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success)
        return 0;
    if (dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(engine);
        return 0;
    }
    state = 1;
    return 1;
}

void cpu_conv_dnnl_release(void)
{
    if (state > 0) {
        dnnl_stream_destroy(stream);
        dnnl_engine_destroy(engine);
    }
    state = 0;
}

static int reorder(dnnl_memory_t from, dnnl_memory_t to)
{
    const dnnl_memory_desc_t *a, *b;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t p = NULL;
    int ok = dnnl_memory_get_memory_desc(from, &a) == dnnl_success &&
             dnnl_memory_get_memory_desc(to, &b) == dnnl_success &&
             dnnl_reorder_primitive_desc_create(&pd, a, engine, b, engine, NULL) == dnnl_success &&
             dnnl_primitive_create(&p, pd) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
        ok = dnnl_primitive_execute(p, stream, 2, args) == dnnl_success;
    }
    if (p)
        dnnl_primitive_destroy(p);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return ok;
}

int cpu_conv2d_dnnl(float *out, const float *x, const float *w, const float *bias, int64_t n,
                    int64_t ci, int64_t h, int64_t wd, int64_t co, int64_t kh, int64_t kw,
                    const struct tensor_conv2d_opts *o)
{
    if (!ready())
        return -1;
    int64_t ho, wo;
    tensor_conv2d_out_hw(o, h, wd, kh, kw, &ho, &wo);
    dnnl_memory_desc_t xs, ws, bs, os, xa, wa, oa;
    dnnl_dims_t dx = {n, ci, h, wd}, dw = {co, ci, kh, kw}, db = {co}, dout = {n, co, ho, wo};
    dnnl_dims_t st = {o->stride, o->stride}, pl = {o->pad_top, o->pad_left},
                pr = {o->pad_bottom, o->pad_right};
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t conv = NULL;
    dnnl_memory_t mx = NULL, mw = NULL, mb = NULL, mo = NULL, bx = NULL, bw = NULL, bo = NULL;
    int ok = dnnl_memory_desc_init_by_tag(&xs, 4, dx, dnnl_f32, dnnl_nchw) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&ws, 4, dw, dnnl_f32, dnnl_oihw) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&bs, 1, db, dnnl_f32, dnnl_x) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&os, 4, dout, dnnl_f32, dnnl_nchw) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&xa, 4, dx, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&wa, 4, dw, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&oa, 4, dout, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
             dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                dnnl_convolution_direct, &xa, &wa,
                                                bias ? &bs : NULL, &oa, st, pl, pr) == dnnl_success &&
             dnnl_primitive_desc_create(&pd, &cd, NULL, engine, NULL) == dnnl_success &&
             dnnl_primitive_create(&conv, pd) == dnnl_success;
    if (ok) {
        const dnnl_memory_desc_t *xq = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0),
                                 *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0),
                                 *oq = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
        ok = dnnl_memory_create(&mx, &xs, engine, (void *)x) == dnnl_success &&
             dnnl_memory_create(&mw, &ws, engine, (void *)w) == dnnl_success &&
             dnnl_memory_create(&mo, &os, engine, out) == dnnl_success &&
             (!bias || dnnl_memory_create(&mb, &bs, engine, (void *)bias) == dnnl_success) &&
             dnnl_memory_create(&bx, xq, engine, DNNL_MEMORY_ALLOCATE) == dnnl_success &&
             dnnl_memory_create(&bw, wq, engine, DNNL_MEMORY_ALLOCATE) == dnnl_success &&
             dnnl_memory_create(&bo, oq, engine, DNNL_MEMORY_ALLOCATE) == dnnl_success;
    }
    if (ok) {
        int saved = omp_get_max_threads();
        omp_set_num_threads(tensor__pool_threads());
        /* The reorder reads the weights, maybe from a model file's mapping, in OpenMP's
         * threads: each needs its alternate signal stack (util/altstack.h). */
        cpu_omp_altstacks(tensor__pool_threads());
        ok = reorder(mx, bx) && reorder(mw, bw);
        if (ok) {
            dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, bx}, {DNNL_ARG_WEIGHTS, bw},
                                       {DNNL_ARG_DST, bo}, {DNNL_ARG_BIAS, mb}};
            ok = dnnl_primitive_execute(conv, stream, bias ? 4 : 3, args) == dnnl_success &&
                 reorder(bo, mo) && dnnl_stream_wait(stream) == dnnl_success;
        }
        omp_set_num_threads(saved);
    }
    dnnl_memory_t ms[7] = {mx, mw, mb, mo, bx, bw, bo};
    for (int i = 0; i < 7; i++)
        if (ms[i])
            dnnl_memory_destroy(ms[i]);
    if (conv)
        dnnl_primitive_destroy(conv);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return ok ? 0 : -1;
}
#else
int cpu_conv_dnnl_on = 0;

int cpu_conv2d_dnnl(float *out, const float *x, const float *w, const float *bias, int64_t n,
                    int64_t ci, int64_t h, int64_t wd, int64_t co, int64_t kh, int64_t kw,
                    const struct tensor_conv2d_opts *o)
{
    (void)out, (void)x, (void)w, (void)bias, (void)n, (void)ci, (void)h, (void)wd, (void)co;
    (void)kh, (void)kw, (void)o;
    return -1;
}

void cpu_conv_dnnl_release(void)
{
}
#endif

/*
 * precision.c — the calling thread's GEMM precision scope (tensor_precision.h). The
 * CPU backend reads it when an op adapts its weight (cpu/widen.c); the rest of the
 * bf16 machinery lives in cpu/gemm_bf16*.c.
 */
#include "tensor_precision.h"

static _Thread_local enum tensor_precision cur = TENSOR_PRECISION_F32;

enum tensor_precision tensor_precision_set(enum tensor_precision p)
{
    enum tensor_precision old = cur;
    cur = p;
    return old;
}

enum tensor_precision tensor_precision_get(void) { return cur; }

const char *tensor_precision_name(enum tensor_precision p)
{
    return p == TENSOR_PRECISION_BF16 ? "bf16" : "fp32";
}

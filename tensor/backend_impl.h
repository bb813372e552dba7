/*
 * backend_impl — the compute-backend interface (private to tensor/): one table of
 * operations per backend, as device/dev_backend.h's dev_ops is one per device (and
 * ggml's ggml_backend_i in ggml-backend-impl.h).
 *
 * The public op entry points (tensor/ops_*.c, copy.c) check operands and shapes once,
 * find the backend that computes on the operands' device and call its member. A member
 * has the contract of the public op of the same name (tensor.h) with the arguments
 * already checked and every operand on that one device; backends check nothing again.
 *
 * Which backend: each names the device kinds it computes on (dev_kinds); the registry
 * (backend.c, the only file that names backends) returns the first that serves a
 * device. Host memory outside any device (staging tensors) counts as DEV_KIND_CPU.
 *
 * What a backend runs: an op member left NULL is unsupported (the op fails with
 * ERR_UNSUPPORTED) unless its comment gives a fallback; `supports` may also decline
 * an op for a dtype.
 *
 * A new backend is a folder tensor/<name>/ holding its kernels and a `const struct
 * tensor__backend`, plus its entry in backend.c (and its device kind in device/).
 *
 * Threads: as tensor.h (the executor thread). Tables are immutable.
 * C and C++ (nvcc) both include this header.
 */
#ifndef LATENTD_TENSOR_BACKEND_IMPL_H
#define LATENTD_TENSOR_BACKEND_IMPL_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ops of the table, for supports() and messages. */
enum tensor__op {
    TENSOR__OP_COPY,
    TENSOR__OP_FILL,
    TENSOR__OP_MATMUL,
    TENSOR__OP_LINEAR,
    TENSOR__OP_LINEAR_GEGLU,
    TENSOR__OP_CONV2D,
    TENSOR__OP_GROUP_NORM,
    TENSOR__OP_LAYER_NORM,
    TENSOR__OP_UNARY,
    TENSOR__OP_GEGLU,
    TENSOR__OP_SOFTMAX,
    TENSOR__OP_ATTENTION,
    TENSOR__OP_BINARY,
    TENSOR__OP_LINCOMB,
    TENSOR__OP_UPSAMPLE,
    TENSOR__OP_EMBEDDING,
    TENSOR__OP_PRELU,
    TENSOR__OP_PIXEL_SHUFFLE,
    TENSOR__OP_N
};

/* The elementwise maps behind tensor_silu/gelu/quick_gelu/scale/clamp. */
enum tensor__unary {
    TENSOR__SILU,
    TENSOR__GELU,
    TENSOR__QUICK_GELU,
    TENSOR__SCALE, /* p0 = factor */
    TENSOR__CLAMP, /* [p0, p1] */
    TENSOR__LEAKY_RELU, /* p0 = negative slope */
};

/* How a binary op's operands broadcast to its output, worked out by the entry point so
 * that a backend need not again: out's shape right-aligned to 4-D, and a's and b's
 * element strides against it (0 along a broadcast dim). */
struct tensor__bcast {
    int64_t shape[4];
    int64_t stride_a[4], stride_b[4];
};

struct tensor__backend {
    const char *name;   /* "CPU", "CUDA": for messages */
    unsigned dev_kinds; /* 1 << DEV_KIND_x for each kind of device it computes on */
    /* Optional: NULL accepts every op whose member is set, in every dtype (dt: out's). */
    int (*supports)(enum tensor__op op, enum tensor_dtype dt);

    /* tensor_copy within the backend's memory (both sides on one device, or both host
     * memory for the cpu backend); host <-> device staging is done by copy.c. */
    int (*copy)(struct tensor *dst, const struct tensor *src, struct err *e);
    int (*fill)(struct tensor *t, float value, struct err *e);
    int (*matmul)(struct tensor *out, const struct tensor *a, const struct tensor *b,
                  int trans_a, int trans_b, float alpha, struct err *e);
    int (*linear)(struct tensor *out, const struct tensor *x, const struct tensor *w,
                  const struct tensor *bias, struct err *e);
    /* Optional: NULL runs linear then geglu in row chunks (tensor__linear_geglu_chunked). */
    int (*linear_geglu)(struct tensor *out, const struct tensor *x, const struct tensor *w,
                        const struct tensor *bias, struct err *e);
    int (*conv2d)(struct tensor *out, const struct tensor *x, const struct tensor *w,
                  const struct tensor *bias, const struct tensor_conv2d_opts *o, struct err *e);
    /* Optional: NULL runs upsample then conv2d through a temporary
     * (tensor__conv2d_up2_unfused). */
    int (*conv2d_up2)(struct tensor *out, const struct tensor *x, const struct tensor *w,
                      const struct tensor *bias, const struct tensor_conv2d_opts *o,
                      struct err *e);
    /* Optional: NULL runs group_norm then conv2d through a temporary
     * (tensor__conv2d_gn_unfused). */
    int (*conv2d_gn)(struct tensor *out, const struct tensor *x, const struct tensor_gn_opts *gn,
                     const struct tensor *w, const struct tensor *bias,
                     const struct tensor_conv2d_opts *o, struct err *e);
    int (*group_norm)(struct tensor *out, const struct tensor *x, int groups,
                      const struct tensor *gamma, const struct tensor *beta, float eps,
                      int fuse_silu, struct err *e);
    int (*layer_norm)(struct tensor *out, const struct tensor *x, const struct tensor *gamma,
                      const struct tensor *beta, float eps, struct err *e);
    int (*unary)(struct tensor *out, const struct tensor *x, enum tensor__unary kind, float p0,
                 float p1, struct err *e);
    int (*geglu)(struct tensor *out, const struct tensor *x, struct err *e);
    int (*softmax)(struct tensor *out, const struct tensor *x, struct err *e);
    /* scale is resolved (never 0). */
    int (*attention)(struct tensor *out, const struct tensor *q, const struct tensor *k,
                     const struct tensor *v, int heads, float scale, unsigned flags,
                     struct err *e);
    /* out = a + b (mul 0) or a * b (mul 1), numpy broadcasting as `bc` says. */
    int (*binary)(struct tensor *out, const struct tensor *a, const struct tensor *b,
                  const struct tensor__bcast *bc, int mul, struct err *e);
    int (*lincomb)(struct tensor *out, int n, const float *coef, const struct tensor *const *in,
                   struct err *e);
    int (*upsample)(struct tensor *out, const struct tensor *x, struct err *e);
    int (*embedding)(struct tensor *out, const struct tensor *table, const int32_t *ids,
                     int64_t n, struct err *e);
    /* slope has x's channel count of elements. */
    int (*prelu)(struct tensor *out, const struct tensor *x, const struct tensor *slope,
                 struct err *e);
    /* tensor_pixel_shuffle (inverse 0) or tensor_pixel_unshuffle (inverse 1). */
    int (*pixel_shuffle)(struct tensor *out, const struct tensor *x, int r, int inverse,
                         struct err *e);
    /* Optional: drop per-process state (thread pool, handles, workspaces); NULL: none. */
    void (*shutdown)(void);
};

/* The backend that computes on device d (NULL: host memory), or NULL when this build
 * has none for d's kind. Borrowed (static). */
const struct tensor__backend *tensor__backend_for(const struct dev *d);

/* Call every registered backend's shutdown (tensor_shutdown). */
void tensor__backends_shutdown(void);

/* ERR_UNSUPPORTED with a message naming the op, the backend and the dtype. */
int tensor__backend_unsupported(const struct tensor__backend *b, enum tensor__op op,
                                enum tensor_dtype dt, struct err *e);

/* 0 when b runs op on dtype dt (`has` says whether its member is set), else
 * ERR_UNSUPPORTED. */
static inline int tensor__backend_check(const struct tensor__backend *b, int has,
                                        enum tensor__op op, enum tensor_dtype dt,
                                        struct err *e)
{
    if (__builtin_expect(has && (!b->supports || b->supports(op, dt)), 1))
        return 0;
    return tensor__backend_unsupported(b, op, dt, e);
}

/* tensor_conv2d_up2 as its two ops, the upsampled x in a temporary on out's device
 * (arguments checked): the fallback of backends without a fused conv2d_up2, and of the
 * CPU's for shapes it does not fuse (ops_linalg.c). */
int tensor__conv2d_up2_unfused(struct tensor *out, const struct tensor *x,
                               const struct tensor *w, const struct tensor *bias,
                               const struct tensor_conv2d_opts *o, struct err *e);
/* tensor_conv2d_gn as its two ops (arguments checked), the normalised x in a temporary
 * on out's device (ops_linalg.c). */
int tensor__conv2d_gn_unfused(struct tensor *out, const struct tensor *x,
                              const struct tensor_gn_opts *gn, const struct tensor *w,
                              const struct tensor *bias, const struct tensor_conv2d_opts *o,
                              struct err *e);
/* tensor_linear then tensor_geglu through a device temporary, in row chunks: the
 * fallback for backends without a fused linear_geglu (ops_linalg.c). */
int tensor__linear_geglu_chunked(struct tensor *out, const struct tensor *x,
                                 const struct tensor *w, const struct tensor *bias,
                                 struct err *e);

#ifdef __cplusplus
}
#endif

#endif

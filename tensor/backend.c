/*
 * backend.c — the registry of compute backends: the one place that names them, each
 * behind the build flag that compiles it (STYLE.md: CUDA is chosen where backends are
 * registered, nowhere else). Adding a backend is one entry in `backends`.
 */
#include "backend_impl.h"

extern const struct tensor__backend tensor__cpu_backend;
#ifdef TENSOR_HAVE_CUDA
extern const struct tensor__backend tensor__cuda_backend;
#endif

/* In order of preference: the first that serves a device's kind computes on it. */
static const struct tensor__backend *const backends[] = {
    &tensor__cpu_backend,
#ifdef TENSOR_HAVE_CUDA
    &tensor__cuda_backend,
#endif
};
#define N_BACKENDS (sizeof(backends) / sizeof(backends[0]))

static const char *const op_names[TENSOR__OP_N] = {
    [TENSOR__OP_COPY] = "copy",           [TENSOR__OP_FILL] = "fill",
    [TENSOR__OP_MATMUL] = "matmul",       [TENSOR__OP_LINEAR] = "linear",
    [TENSOR__OP_LINEAR_GEGLU] = "linear_geglu", [TENSOR__OP_CONV2D] = "conv2d",
    [TENSOR__OP_GROUP_NORM] = "group_norm", [TENSOR__OP_LAYER_NORM] = "layer_norm",
    [TENSOR__OP_UNARY] = "activation",    [TENSOR__OP_GEGLU] = "geglu",
    [TENSOR__OP_SOFTMAX] = "softmax",     [TENSOR__OP_ATTENTION] = "attention",
    [TENSOR__OP_BINARY] = "add/mul",      [TENSOR__OP_LINCOMB] = "lincomb",
    [TENSOR__OP_UPSAMPLE] = "upsample",   [TENSOR__OP_EMBEDDING] = "embedding",
    [TENSOR__OP_PRELU] = "prelu",         [TENSOR__OP_PIXEL_SHUFFLE] = "pixel_shuffle",
};

const struct tensor__backend *tensor__backend_for(const struct dev *d)
{
    unsigned kind = 1u << (d ? dev_kind(d) : DEV_KIND_CPU);
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (backends[i]->dev_kinds & kind)
            return backends[i];
    return NULL;
}

void tensor__backends_shutdown(void)
{
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (backends[i]->shutdown)
            backends[i]->shutdown();
}

int tensor__backend_unsupported(const struct tensor__backend *b, enum tensor__op op,
                                enum tensor_dtype dt, struct err *e)
{
    return err_set(e, ERR_UNSUPPORTED, "%s: not supported by the %s backend for %s",
                   op_names[op], b->name, tensor_dtype_name(dt));
}

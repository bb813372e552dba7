/*
 * tensor — n-d arrays (up to 4-D, NCHW) on a device, and the ops SD1.5 needs.
 *
 * DESIGN
 *
 * A tensor is metadata (shape, strides, dtype, offset) plus a reference to a
 * refcounted *storage*: one device buffer (device/device.h) holding the
 * elements. Views (reshape, slice, permute, ...) are new tensor objects that
 * share the storage and take a reference; the storage is released (dev_free,
 * or the caller's release callback for external memory) when the last tensor
 * referring to it is freed. So a view may outlive the tensor it was made from.
 *
 * Shapes are row-major, the last dimension varies fastest: an image batch is
 * [N, C, H, W], a token sequence [B, T, C], a linear weight [out, in], a conv
 * weight [Co, Ci, kh, kw] (PyTorch layout, as in the checkpoint). Dimensions
 * past ndim are 1 and strides are in elements, not bytes.
 *
 * Dtypes: storage may be f32, f16 or bf16. The CPU backend computes in f32:
 * any f16/bf16 or non-contiguous operand is converted into a temporary f32
 * copy (so converting weights once at load is faster than per call, but both
 * work). The CUDA backend computes in the storage dtype with f32 accumulation
 * (cuBLAS compute type 32F), and in f32 for softmax and norm statistics.
 *
 * Ops write into an `out` tensor the caller allocated with the right shape
 * (no op allocates its result), so the memory planner sees every activation.
 * Ops may allocate temporary workspace (host memory on cpu/sim, device memory
 * on CUDA: that can fail with ERR_DEVICE_OOM). Unless an op says otherwise,
 * `out` may alias an input exactly (in place) but must not partly overlap one.
 * Every operand of one op must live on the same device; that device's kind
 * picks the compute backend (the registry in tensor/backend.c), whose table of
 * ops (tensor/backend_impl.h) the op calls after checking its arguments.
 *
 * Errors: every op returns 0, or a negative ERR_* code (util/err.h) and fills
 * `e` (may be NULL) with a message such as
 * "conv2d: weight shape [320,4,3,3] does not match input channels 8".
 * Bad shapes, dtypes or devices are errors, never crashes.
 *
 * Threads: tensors and ops are used by one thread at a time, normally the
 * executor (STYLE.md "Concurrency"); the storage refcount is atomic, so
 * tensors sharing a storage may be freed from different threads. CPU ops
 * run on an internal persistent thread pool (tensor_threads_set) and return
 * when the result is complete. CUDA ops are queued on the device's compute
 * stream and return before they finish; a later copy to host waits for them.
 */
#ifndef LATENTD_TENSOR_TENSOR_H
#define LATENTD_TENSOR_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "err.h"

#define TENSOR_MAX_DIMS 4

enum tensor_dtype {
    TENSOR_F32 = 0,
    TENSOR_F16 = 1,
    TENSOR_BF16 = 2,
};

struct tensor_storage; /* opaque, refcounted */

/*
 * Callers read the first five fields; they never write any field (use the
 * view functions). A tensor is always a heap object from this module.
 */
struct tensor {
    int ndim;                         /* 1..TENSOR_MAX_DIMS */
    enum tensor_dtype dtype;
    int64_t shape[TENSOR_MAX_DIMS];   /* elements per dim; 1 past ndim */
    int64_t stride[TENSOR_MAX_DIMS];  /* elements; 0 allowed (broadcast view) */
    int64_t offset;                   /* elements from the storage start */
    struct tensor_storage *_storage;  /* one reference, owned */
};

/* ---- dtypes ----------------------------------------------------------------------- */

size_t tensor_dtype_size(enum tensor_dtype dt); /* bytes per element: 4 or 2 */
const char *tensor_dtype_name(enum tensor_dtype dt); /* "f32", "f16", "bf16" */

/* Convert n elements between host buffers (any pair of dtypes; src == dst allowed
 * only for same-size dtypes). f32 -> f16/bf16 rounds to nearest even; NaN stays NaN. */
void tensor_convert_host(void *dst, enum tensor_dtype dst_dt, const void *src,
                         enum tensor_dtype src_dt, size_t n);

float tensor_f16_to_f32(uint16_t h);
uint16_t tensor_f32_to_f16(float f);
float tensor_bf16_to_f32(uint16_t b);
uint16_t tensor_f32_to_bf16(float f);

/* ---- creation and lifetime -------------------------------------------------------------- */

/*
 * A new contiguous tensor of `ndim` dims on `d`, contents undefined. Returns 0 and
 * sets *out (caller frees with tensor_free), ERR_DEVICE_OOM when the device's budget
 * is exhausted, ERR_INVALID for a bad shape (ndim outside 1..4, a dim < 1).
 */
int tensor_new(struct dev *d, enum tensor_dtype dt, int ndim, const int64_t *shape,
               struct tensor **out, struct err *e);

/* Same as tensor_new, then zero-filled. */
int tensor_new_zeros(struct dev *d, enum tensor_dtype dt, int ndim, const int64_t *shape,
                     struct tensor **out, struct err *e);

/* A new contiguous tensor with t's device and shape and dtype `dt`. */
int tensor_new_like(const struct tensor *t, enum tensor_dtype dt, struct tensor **out,
                    struct err *e);

/*
 * A contiguous tensor over memory the caller owns (an mmap'd checkpoint, a slot of
 * the streamer's ring). `data` must be memory of device `d` (host memory for cpu/sim)
 * and hold the whole tensor. When the last reference goes, release(user, data) is
 * called if release is not NULL; the memory is never dev_free'd by this module.
 */
int tensor_new_external(struct dev *d, enum tensor_dtype dt, int ndim, const int64_t *shape,
                        void *data, void (*release)(void *user, void *data), void *user,
                        struct tensor **out, struct err *e);

/* Drop this tensor object and its storage reference. tensor_free(NULL) is a no-op. */
void tensor_free(struct tensor *t);

/* ---- inspection ----------------------------------------------------------------------- */

struct dev *tensor_dev(const struct tensor *t);    /* borrowed */
int64_t tensor_numel(const struct tensor *t);
size_t tensor_nbytes(const struct tensor *t);      /* numel * dtype size */
int tensor_is_contiguous(const struct tensor *t);  /* row-major, no gaps */
int tensor_same_shape(const struct tensor *a, const struct tensor *b);

/* Address of element 0 (device memory on CUDA). Borrowed from the storage. */
void *tensor_data(const struct tensor *t);

/* "[2,320,64,64] f16" into buf (always NUL-terminated); returns buf. For messages. */
const char *tensor_shape_str(const struct tensor *t, char *buf, size_t size);

/* ---- views (new tensor objects sharing the storage; caller frees each) ---------------- */

/* Same elements, new shape; t must be contiguous and numel must match. One dim of
 * `shape` may be -1 (inferred). */
int tensor_reshape(const struct tensor *t, int ndim, const int64_t *shape,
                   struct tensor **out, struct err *e);

/* Elements [start, start+len) along dim `dim` (the other dims unchanged). */
int tensor_slice(const struct tensor *t, int dim, int64_t start, int64_t len,
                 struct tensor **out, struct err *e);

/* Dims reordered: out dim i is t's dim perm[i] (perm a permutation of 0..ndim-1). */
int tensor_permute(const struct tensor *t, const int *perm, struct tensor **out,
                   struct err *e);

/* Fully general view: caller-chosen shape, strides and offset (elements, relative to
 * t's storage start, not t's offset); must stay inside the storage. */
int tensor_view(const struct tensor *t, int ndim, const int64_t *shape, const int64_t *stride,
                int64_t offset, struct tensor **out, struct err *e);

/* ---- data movement -------------------------------------------------------------------- */

/*
 * dst = src element by element: same shape, any dtypes (converted), any strides, and any
 * pair of devices except two different CUDA devices (ERR_UNSUPPORTED): host<->device
 * goes through dev_copy after draining the device's compute stream; a permuted view
 * becomes contiguous. Synchronous with respect to the host when either side is host
 * memory. dst must not partly overlap src.
 */
int tensor_copy(struct tensor *dst, const struct tensor *src, struct err *e);

/* Host f32 buffer <-> tensor (n must equal numel; the tensor may be any dtype, device or
 * layout; elements in row-major order). tensor_read_f32 waits for queued work. */
int tensor_write_f32(struct tensor *t, const float *src, int64_t n, struct err *e);
int tensor_read_f32(const struct tensor *t, float *dst, int64_t n, struct err *e);

int tensor_fill(struct tensor *t, float value, struct err *e);

/* ---- linear algebra ------------------------------------------------------------------- */

/*
 * Batched matmul: out[..., M, N] = alpha * op(a)[..., M, K] @ op(b)[..., K, N], where
 * op(x) is x or its last-two-dims transpose (trans_a / trans_b). Leading (batch) dims
 * broadcast numpy-style (a batch dim of 1 repeats). Operands may be strided views as
 * long as one of their last two dims has stride 1 (others are copied first). out must
 * not alias a or b.
 */
int tensor_matmul(struct tensor *out, const struct tensor *a, const struct tensor *b,
                  int trans_a, int trans_b, float alpha, struct err *e);

/*
 * out[..., N] = x[..., K] @ w^T + bias, w [N, K] (PyTorch Linear), bias [N] or NULL.
 * out must not alias x.
 */
int tensor_linear(struct tensor *out, const struct tensor *x, const struct tensor *w,
                  const struct tensor *bias, struct err *e);

/*
 * out[..., N] = geglu(x @ w^T + bias), w [2N, K], bias [2N] or NULL: tensor_linear then
 * tensor_geglu in one op (the transformer's feed-forward input). On the CPU the [.., 2N]
 * product only ever exists a tile at a time in cache; other backends run the two ops
 * through a temporary on the device. out must not alias x.
 */
int tensor_linear_geglu(struct tensor *out, const struct tensor *x, const struct tensor *w,
                        const struct tensor *bias, struct err *e);

struct tensor_conv2d_opts {
    int stride;                 /* 1 or 2 (same for both axes) */
    int pad_top, pad_bottom;    /* zero padding, rows */
    int pad_left, pad_right;    /* zero padding, columns */
};

/* Output spatial size for input h x w, kernel kh x kw. */
void tensor_conv2d_out_hw(const struct tensor_conv2d_opts *o, int64_t h, int64_t w,
                          int64_t kh, int64_t kw, int64_t *out_h, int64_t *out_w);

/*
 * 2-D convolution (cross-correlation, as PyTorch): x [N, Ci, H, W], w [Co, Ci, kh, kw]
 * (or [Co, Ci] for a 1x1 conv stored 2-D), bias [Co] or NULL, out [N, Co, Ho, Wo]
 * (tensor_conv2d_out_hw). SD1.5: 3x3 pad 1; downsample stride 2 pad 1 (UNet) or pad
 * bottom/right 1 only (VAE); 1x1 pad 0. out must not alias x.
 */
int tensor_conv2d(struct tensor *out, const struct tensor *x, const struct tensor *w,
                  const struct tensor *bias, const struct tensor_conv2d_opts *o,
                  struct err *e);

/*
 * tensor_conv2d of x upsampled 2x nearest (tensor_upsample_nearest to [N, Ci, 2H, 2W]):
 * the "Upsample" block of SD's VAE decoder and UNet (interpolate, then a 3x3 pad-1
 * conv). out [N, Co, Ho, Wo] is tensor_conv2d_out_hw of 2H x 2W. The result equals the
 * two ops within float rounding; a backend may fuse them (the CPU does for 3x3 stride-1
 * pad-1 convs that take the Winograd path: four 2x2 convolutions of x, one per output
 * pixel phase, never holding the upsampled tensor), others run the two ops through a
 * temporary on out's device. out must not alias x.
 */
int tensor_conv2d_up2(struct tensor *out, const struct tensor *x, const struct tensor *w,
                      const struct tensor *bias, const struct tensor_conv2d_opts *o,
                      struct err *e);

/* The GroupNorm (+ SiLU) in front of a conv (tensor_conv2d_gn): tensor_group_norm's
 * arguments. */
struct tensor_gn_opts {
    int groups;
    const struct tensor *gamma, *beta; /* [Ci] or NULL */
    float eps;
    int silu;
};

/*
 * tensor_conv2d of tensor_group_norm(x) (SD's "norm, SiLU, conv" in every ResnetBlock).
 * The result equals the two ops; the CPU fuses them for convs that take the Winograd
 * path (the norm's per-channel affine applied as the conv reads x, so the normalised
 * tensor is never written: bit for bit the same values), other cases and backends run
 * the two ops through a temporary on out's device. out must not alias x.
 */
int tensor_conv2d_gn(struct tensor *out, const struct tensor *x, const struct tensor_gn_opts *gn,
                     const struct tensor *w, const struct tensor *bias,
                     const struct tensor_conv2d_opts *o, struct err *e);

/* ---- normalisation and activations ---------------------------------------------------- */

/*
 * GroupNorm over x [N, C, ...] (C split into `groups` contiguous groups; mean and
 * biased variance over group x spatial, f32 statistics), then y = xhat * gamma[c] +
 * beta[c]; gamma/beta [C] or NULL (1 / 0). fuse_silu != 0 applies SiLU to the result.
 */
int tensor_group_norm(struct tensor *out, const struct tensor *x, int groups,
                      const struct tensor *gamma, const struct tensor *beta, float eps,
                      int fuse_silu, struct err *e);

/* LayerNorm over the last dim (biased variance), gamma/beta [C] or NULL. */
int tensor_layer_norm(struct tensor *out, const struct tensor *x, const struct tensor *gamma,
                      const struct tensor *beta, float eps, struct err *e);

int tensor_silu(struct tensor *out, const struct tensor *x, struct err *e);       /* x*sigmoid(x) */
int tensor_gelu(struct tensor *out, const struct tensor *x, struct err *e);       /* exact erf */
int tensor_quick_gelu(struct tensor *out, const struct tensor *x, struct err *e); /* x*sigmoid(1.702x) */

/* LeakyReLU: out = x >= 0 ? x : slope * x (ESRGAN's RRDBNet uses slope 0.2). */
int tensor_leaky_relu(struct tensor *out, const struct tensor *x, float slope, struct err *e);

/*
 * PReLU with one learned slope per channel (torch.nn.PReLU(num_parameters=C)):
 * x [N, C, ...], slope [C] (any shape with C elements), out = x >= 0 ? x : slope[c] * x.
 */
int tensor_prelu(struct tensor *out, const struct tensor *x, const struct tensor *slope,
                 struct err *e);

/* x [..., 2n] -> out [..., n] = x[..., :n] * gelu(x[..., n:]) (value first, gate second). */
int tensor_geglu(struct tensor *out, const struct tensor *x, struct err *e);

/* Softmax over the last dim (row max subtracted, f32 accumulation). */
int tensor_softmax(struct tensor *out, const struct tensor *x, struct err *e);

/* ---- attention ------------------------------------------------------------------------ */

enum tensor_attn_flags {
    TENSOR_ATTN_CAUSAL = 1 << 0, /* query i sees keys 0..i only (CLIP) */
};

/*
 * Multi-head scaled-dot-product attention. q [B, Tq, H*d], k [B, Tk, H*d],
 * v [B, Tk, H*dv], out [B, Tq, H*dv]; feature f belongs to head f / d (§8.2).
 * Per head: softmax(q k^T * scale) v with scale = 1/sqrt(d) when `scale` is 0.
 * Scores are never materialised whole: keys are processed in blocks with an online
 * (running max / sum) softmax, so memory is O(Tq-block x key-block) per thread.
 * Rows may be strided (views into a fused projection), but each row's features must
 * be contiguous. out must not alias q, k or v.
 */
int tensor_attention(struct tensor *out, const struct tensor *q, const struct tensor *k,
                     const struct tensor *v, int heads, float scale, unsigned flags,
                     struct err *e);

/* ---- elementwise (numpy broadcasting: dims aligned from the right) ---------------------- */

int tensor_add(struct tensor *out, const struct tensor *a, const struct tensor *b,
               struct err *e);
int tensor_mul(struct tensor *out, const struct tensor *a, const struct tensor *b,
               struct err *e);
int tensor_scale(struct tensor *out, const struct tensor *x, float s, struct err *e);
int tensor_clamp(struct tensor *out, const struct tensor *x, float lo, float hi, struct err *e);

/* out = alpha * x + beta * y (x, y, out the same shape); the sampler's axpy update. */
int tensor_axpby(struct tensor *out, float alpha, const struct tensor *x, float beta,
                 const struct tensor *y, struct err *e);

/* out = sum_i coef[i] * in[i], n in 1..8, all the same shape (multistep samplers). */
int tensor_lincomb(struct tensor *out, int n, const float *coef,
                   const struct tensor *const *in, struct err *e);

/* ---- shape ops ------------------------------------------------------------------------ */

/* out = concat(a, b) along dim (channels: dim 1 for NCHW; a first, then b); other dims
 * must match. out must not alias a or b. */
int tensor_concat(struct tensor *out, const struct tensor *a, const struct tensor *b, int dim,
                  struct err *e);

/*
 * Nearest-neighbour resize of x [N, C, H, W] to out's [N, C, Ho, Wo] with PyTorch's
 * rule per axis: src = min(floor(dst * (float)in / out), in - 1) (sd15.md §3.5); exactly
 * 2x gives src = dst / 2. out must not alias x.
 */
int tensor_upsample_nearest(struct tensor *out, const struct tensor *x, struct err *e);

/*
 * torch.nn.functional.pixel_shuffle: x [N, C*r*r, H, W] -> out [N, C, H*r, W*r] with
 * out[n, c, h*r + i, w*r + j] = x[n, c*r*r + i*r + j, h, w] (r >= 1). out must not alias x.
 */
int tensor_pixel_shuffle(struct tensor *out, const struct tensor *x, int r, struct err *e);

/*
 * The inverse, torch.nn.functional.pixel_unshuffle, of x reflect-padded at the bottom
 * and right to multiples of r first (F.pad(x, (0, pw, 0, ph), "reflect"), as ESRGAN's
 * scale-1/2 models do): x [N, C, H, W] -> out [N, C*r*r, ceil(H/r), ceil(W/r)]. A padded
 * row H + k reads row H - 2 - k (clamped to 0 for H < 2, where PyTorch refuses).
 * out must not alias x.
 */
int tensor_pixel_unshuffle(struct tensor *out, const struct tensor *x, int r, struct err *e);

/* ---- embeddings ----------------------------------------------------------------------- */

/* out[i, :] = table[ids[i], :] for i < n; table [V, D], out [..., D] with numel = n*D.
 * ids live in host memory; an id outside [0, V) is ERR_INVALID. */
int tensor_embedding(struct tensor *out, const struct tensor *table, const int32_t *ids,
                     int64_t n, struct err *e);

/*
 * Sinusoidal timestep embedding (sd15.md §3.2): out [B, dim] (dim even), half = dim/2,
 * freq[k] = exp(-ln(10000) * k / half) in f32, a = t[b] * freq[k],
 * out[b] = [cos(a[0..half)), sin(a[0..half))] (cosine half first). t: B host floats.
 */
int tensor_timestep_embedding(struct tensor *out, const float *t, int64_t b, struct err *e);

/* ---- workspace (for the memory planner) -------------------------------------------------- */

/*
 * Bytes of device memory the op allocates temporarily while it runs on a device of
 * `kind`, for contiguous operands that share the output's dtype (other operands add a
 * converted copy of themselves). 0 on cpu/sim, whose scratch is host memory.
 * conv2d: the im2col buffer (none for an unpadded stride-1 1x1 conv).
 * attention: the query-chunk score (f32) and probability (dt) buffers.
 */
size_t tensor_conv2d_workspace_bytes(enum dev_kind kind, enum tensor_dtype dt, int64_t ci,
                                     int64_t kh, int64_t kw, int64_t out_h, int64_t out_w,
                                     const struct tensor_conv2d_opts *o);
size_t tensor_attention_workspace_bytes(enum dev_kind kind, enum tensor_dtype dt, int heads,
                                        int64_t tq, int64_t tk);

/* ---- runtime -------------------------------------------------------------------------- */

/* Number of CPU worker threads for ops (default: online cores). Call from the executor
 * before or between ops, never during one. n < 1 means the default. */
void tensor_threads_set(int n);
int tensor_threads_get(void);

/* Per-op-class timing of the CPU ops, for performance work: on when the environment has
 * LATENTD_PROFILE=1 (read once), otherwise these do nothing and ops pay one branch.
 * reset starts a measurement, print writes a table (time, share, GFLOP/s per op class,
 * and the time no op claims) to stderr. Executor thread only, like every op. */
int tensor_profile_enabled(void);
void tensor_profile_reset(void);
void tensor_profile_print(const char *label);

/* Free the calling thread's CPU weight scratch: the f32 buffer that f16/bf16 weights
 * are widened into by matmul/linear/conv (as large as the largest weight widened so
 * far: 59 MB for SD1.5's UNet). The next op that needs it allocates it again at its
 * own size. The memory manager calls it at each node's plan, so that the scratch
 * follows the models in use (a VAE decode does not keep the UNet's). Returns the
 * bytes freed. Any thread; not during an op on the same thread. */
size_t tensor_cpu_scratch_release(void);

/* Stop the CPU pool and drop per-device backend state (cuBLAS handles, workspaces).
 * Optional at exit; ops restart what they need afterwards. */
void tensor_shutdown(void);

#endif

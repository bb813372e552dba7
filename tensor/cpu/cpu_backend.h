/*
 * cpu_backend — the CPU backend's op members (private to tensor/cpu/): each has the
 * contract of its member in struct tensor__backend (backend_impl.h), arguments already
 * checked by the entry point, operands in host memory (cpu or sim device, or none).
 * They adapt tensors to the f32 kernels (adapt.h) and time themselves (prof.c).
 */
#ifndef LATENTD_TENSOR_CPU_BACKEND_H
#define LATENTD_TENSOR_CPU_BACKEND_H

#include "../backend_impl.h"

/* op_copy.c */
int tensor__cpu_copy(struct tensor *dst, const struct tensor *src, struct err *e);
/* op_elem.c */
int tensor__cpu_fill(struct tensor *t, float value, struct err *e);
int tensor__cpu_binary(struct tensor *out, const struct tensor *a, const struct tensor *b,
                       const struct tensor__bcast *bc, int mul, struct err *e);
int tensor__cpu_lincomb(struct tensor *out, int n, const float *coef,
                        const struct tensor *const *in, struct err *e);
int tensor__cpu_upsample(struct tensor *out, const struct tensor *x, struct err *e);
int tensor__cpu_embedding(struct tensor *out, const struct tensor *table, const int32_t *ids,
                          int64_t n, struct err *e);
int tensor__cpu_pixel_shuffle(struct tensor *out, const struct tensor *x, int r, int inverse,
                              struct err *e);
/* op_linalg.c */
int tensor__cpu_matmul(struct tensor *out, const struct tensor *a, const struct tensor *b,
                       int trans_a, int trans_b, float alpha, struct err *e);
int tensor__cpu_linear(struct tensor *out, const struct tensor *x, const struct tensor *w,
                       const struct tensor *bias, struct err *e);
int tensor__cpu_linear_geglu(struct tensor *out, const struct tensor *x, const struct tensor *w,
                             const struct tensor *bias, struct err *e);
int tensor__cpu_conv2d(struct tensor *out, const struct tensor *x, const struct tensor *w,
                       const struct tensor *bias, const struct tensor_conv2d_opts *o,
                       struct err *e);
int tensor__cpu_conv2d_up2(struct tensor *out, const struct tensor *x, const struct tensor *w,
                           const struct tensor *bias, const struct tensor_conv2d_opts *o,
                           struct err *e);
int tensor__cpu_conv2d_gn(struct tensor *out, const struct tensor *x,
                          const struct tensor_gn_opts *gn, const struct tensor *w,
                          const struct tensor *bias, const struct tensor_conv2d_opts *o,
                          struct err *e);
/* op_attn.c */
int tensor__cpu_attention(struct tensor *out, const struct tensor *q, const struct tensor *k,
                          const struct tensor *v, int heads, float scale, unsigned flags,
                          struct err *e);
/* op_nn.c */
int tensor__cpu_group_norm(struct tensor *out, const struct tensor *x, int groups,
                           const struct tensor *gamma, const struct tensor *beta, float eps,
                           int fuse_silu, struct err *e);
int tensor__cpu_layer_norm(struct tensor *out, const struct tensor *x,
                           const struct tensor *gamma, const struct tensor *beta, float eps,
                           struct err *e);
int tensor__cpu_unary(struct tensor *out, const struct tensor *x, enum tensor__unary kind,
                      float p0, float p1, struct err *e);
int tensor__cpu_geglu(struct tensor *out, const struct tensor *x, struct err *e);
int tensor__cpu_prelu(struct tensor *out, const struct tensor *x, const struct tensor *slope,
                      struct err *e);
int tensor__cpu_softmax(struct tensor *out, const struct tensor *x, struct err *e);

#endif

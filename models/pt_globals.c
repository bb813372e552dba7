/*
 * pt_globals.c — the allow-list of the restricted unpickler (see pt_pickle.h).
 *
 * It is torch's own default list for weights_only=True (_get_allowed_globals in
 * torch/_weights_only_unpickler.py: containers, torch.Size/Tensor/device, storage
 * types, dtypes, the tensor rebuild functions, _codecs.encode, bytearray, set,
 * complex), narrowed to CPU tensor types, plus the globals ComfyUI adds with
 * torch.serialization.add_safe_globals in comfy/utils.py so that SD checkpoints
 * saved by pytorch-lightning load: ModelCheckpoint (a callback's saved state),
 * numpy.core.multiarray.scalar, numpy.dtype and Float64DType (a callback's
 * best score). Those can only ever become inert PT_OBJECTs here.
 */
#include <string.h>

#include "pt_pickle.h"

#define NO_DTYPE (-1)

static const struct pt_global allowed[] = {
    /* containers and small types */
    {"collections.OrderedDict", PT_G_ORDERED_DICT, NO_DTYPE},
    {"collections.Counter", PT_G_ORDERED_DICT, NO_DTYPE},
    {"torch.Size", PT_G_SIZE, NO_DTYPE},
    {"torch.Tensor", PT_G_TENSOR_TYPE, NO_DTYPE},
    {"torch.nn.parameter.Parameter", PT_G_PARAMETER, NO_DTYPE},
    {"torch.device", PT_G_INERT, NO_DTYPE},
    {"torch.serialization._get_layout", PT_G_INERT, NO_DTYPE},
    {"_codecs.encode", PT_G_INERT, NO_DTYPE},
    {"builtins.bytearray", PT_G_INERT, NO_DTYPE},
    {"builtins.set", PT_G_INERT, NO_DTYPE},
    {"builtins.complex", PT_G_INERT, NO_DTYPE},
    /* rebuild functions */
    {"torch._utils._rebuild_tensor", PT_G_REBUILD_V1, NO_DTYPE},
    {"torch._utils._rebuild_tensor_v2", PT_G_REBUILD_V2, NO_DTYPE},
    {"torch._utils._rebuild_tensor_v3", PT_G_REBUILD_V3, NO_DTYPE},
    {"torch._utils._rebuild_parameter", PT_G_REBUILD_PARAM, NO_DTYPE},
    {"torch._utils._rebuild_parameter_with_state", PT_G_REBUILD_PARAM, NO_DTYPE},
    {"torch._tensor._rebuild_from_type_v2", PT_G_FROM_TYPE, NO_DTYPE},
    {"torch._utils._rebuild_qtensor", PT_G_OTHER_TENSOR, NO_DTYPE},
    {"torch._utils._rebuild_sparse_tensor", PT_G_OTHER_TENSOR, NO_DTYPE},
    {"torch._utils._rebuild_meta_tensor_no_storage", PT_G_OTHER_TENSOR, NO_DTYPE},
    {"torch._utils._rebuild_wrapper_subclass", PT_G_OTHER_TENSOR, NO_DTYPE},
    {"torch._utils._rebuild_device_tensor_from_numpy", PT_G_OTHER_TENSOR, NO_DTYPE},
    {"torch._utils._rebuild_device_tensor_from_cpu_tensor", PT_G_OTHER_TENSOR, NO_DTYPE},
    /* storage types (torch.storage._dtype_to_storage_type_map, and untyped) */
    {"torch.DoubleStorage", PT_G_STORAGE_TYPE, ST_DTYPE_F64},
    {"torch.FloatStorage", PT_G_STORAGE_TYPE, ST_DTYPE_F32},
    {"torch.HalfStorage", PT_G_STORAGE_TYPE, ST_DTYPE_F16},
    {"torch.BFloat16Storage", PT_G_STORAGE_TYPE, ST_DTYPE_BF16},
    {"torch.LongStorage", PT_G_STORAGE_TYPE, ST_DTYPE_I64},
    {"torch.IntStorage", PT_G_STORAGE_TYPE, ST_DTYPE_I32},
    {"torch.ShortStorage", PT_G_STORAGE_TYPE, ST_DTYPE_I16},
    {"torch.CharStorage", PT_G_STORAGE_TYPE, ST_DTYPE_I8},
    {"torch.ByteStorage", PT_G_STORAGE_TYPE, ST_DTYPE_U8},
    {"torch.BoolStorage", PT_G_STORAGE_TYPE, ST_DTYPE_BOOL},
    {"torch.ComplexDoubleStorage", PT_G_STORAGE_TYPE, NO_DTYPE},
    {"torch.ComplexFloatStorage", PT_G_STORAGE_TYPE, NO_DTYPE},
    {"torch.QUInt8Storage", PT_G_STORAGE_TYPE, NO_DTYPE},
    {"torch.QInt8Storage", PT_G_STORAGE_TYPE, NO_DTYPE},
    {"torch.QInt32Storage", PT_G_STORAGE_TYPE, NO_DTYPE},
    {"torch.QUInt4x2Storage", PT_G_STORAGE_TYPE, NO_DTYPE},
    {"torch.QUInt2x4Storage", PT_G_STORAGE_TYPE, NO_DTYPE},
    {"torch.UntypedStorage", PT_G_STORAGE_TYPE, ST_DTYPE_U8},
    {"torch.storage.UntypedStorage", PT_G_STORAGE_TYPE, ST_DTYPE_U8},
    /* dtypes (str(torch.float16) == "torch.float16") */
    {"torch.float64", PT_G_DTYPE, ST_DTYPE_F64},
    {"torch.float32", PT_G_DTYPE, ST_DTYPE_F32},
    {"torch.float16", PT_G_DTYPE, ST_DTYPE_F16},
    {"torch.bfloat16", PT_G_DTYPE, ST_DTYPE_BF16},
    {"torch.int64", PT_G_DTYPE, ST_DTYPE_I64},
    {"torch.int32", PT_G_DTYPE, ST_DTYPE_I32},
    {"torch.int16", PT_G_DTYPE, ST_DTYPE_I16},
    {"torch.int8", PT_G_DTYPE, ST_DTYPE_I8},
    {"torch.uint8", PT_G_DTYPE, ST_DTYPE_U8},
    {"torch.uint16", PT_G_DTYPE, ST_DTYPE_U16},
    {"torch.uint32", PT_G_DTYPE, ST_DTYPE_U32},
    {"torch.uint64", PT_G_DTYPE, ST_DTYPE_U64},
    {"torch.bool", PT_G_DTYPE, ST_DTYPE_BOOL},
    {"torch.float8_e4m3fn", PT_G_DTYPE, ST_DTYPE_F8_E4M3},
    {"torch.float8_e5m2", PT_G_DTYPE, ST_DTYPE_F8_E5M2},
    {"torch.complex64", PT_G_DTYPE, NO_DTYPE},
    {"torch.complex128", PT_G_DTYPE, NO_DTYPE},
    {"torch.float8_e4m3fnuz", PT_G_DTYPE, NO_DTYPE},
    {"torch.float8_e5m2fnuz", PT_G_DTYPE, NO_DTYPE},
    /* CPU tensor classes (torch._tensor_classes) and quantisation schemes */
    {"torch.FloatTensor", PT_G_INERT, NO_DTYPE},
    {"torch.DoubleTensor", PT_G_INERT, NO_DTYPE},
    {"torch.HalfTensor", PT_G_INERT, NO_DTYPE},
    {"torch.BFloat16Tensor", PT_G_INERT, NO_DTYPE},
    {"torch.LongTensor", PT_G_INERT, NO_DTYPE},
    {"torch.IntTensor", PT_G_INERT, NO_DTYPE},
    {"torch.ShortTensor", PT_G_INERT, NO_DTYPE},
    {"torch.CharTensor", PT_G_INERT, NO_DTYPE},
    {"torch.ByteTensor", PT_G_INERT, NO_DTYPE},
    {"torch.BoolTensor", PT_G_INERT, NO_DTYPE},
    {"torch.per_tensor_affine", PT_G_INERT, NO_DTYPE},
    {"torch.per_tensor_symmetric", PT_G_INERT, NO_DTYPE},
    {"torch.per_channel_affine", PT_G_INERT, NO_DTYPE},
    {"torch.per_channel_symmetric", PT_G_INERT, NO_DTYPE},
    {"torch.per_channel_affine_float_qparams", PT_G_INERT, NO_DTYPE},
    /* ComfyUI's additions (comfy/utils.py) for pytorch-lightning checkpoints */
    {"pytorch_lightning.callbacks.model_checkpoint.ModelCheckpoint", PT_G_INERT, NO_DTYPE},
    {"numpy.core.multiarray.scalar", PT_G_INERT, NO_DTYPE},
    {"numpy.dtype", PT_G_INERT, NO_DTYPE},
    {"numpy.dtypes.Float64DType", PT_G_INERT, NO_DTYPE},
};

static int name_is(const char *a, const char *b, size_t b_len)
{
    return strlen(a) == b_len && memcmp(a, b, b_len) == 0;
}

const struct pt_global *pt_global_find(const char *name, size_t name_len)
{
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
        if (name_is(allowed[i].name, name, name_len))
            return &allowed[i];
    return NULL;
}

int pt_global_blocked(const char *name, size_t name_len)
{
    static const char *const blocked[] = {"sys", "os", "posix", "nt"};
    const char *dot = memchr(name, '.', name_len);
    size_t module_len = dot ? (size_t)(dot - name) : name_len;
    for (size_t i = 0; i < sizeof(blocked) / sizeof(blocked[0]); i++)
        if (name_is(blocked[i], name, module_len))
            return 1;
    return 0;
}

#!/usr/bin/env python3
"""pt_write — write PyTorch checkpoints (torch.save's zip format) without torch.

The pickle is made by Python's own pickler at protocol 2 with torch.save's
persistent_id, over stand-in objects whose __reduce_ex__ returns what torch's do
(Tensor -> torch._utils._rebuild_tensor_v2, Parameter -> _rebuild_parameter, storages
-> ('storage', torch.<Type>Storage, key, 'cpu', numel)), so data.pkl holds the bytes
torch.save would write for the same state dict. The zip is laid out as
caffe2/serialize/inline_container.cc writes it: every record STORED under one folder,
data aligned to 64 bytes by an "FB" extra field, ZIP64 on request.

Usage:
  pt_write.py convert IN.safetensors OUT.ckpt [--nested] [--param] [--zip64]
      the same tensors (same dtype and bytes) as a torch checkpoint; --nested wraps them
      as a pytorch-lightning checkpoint {"state_dict": ..., "global_step": ...}
  pt_write.py strip IN.safetensors OUT.safetensors
      the same tensors without __metadata__: what a torch checkpoint can carry (gen_ckpt's
      shrunk configs say their head counts there, which no .ckpt can)
  pt_write.py lora CKPT.safetensors OUT_DIR
      a small kohya LoRA for that checkpoint's UNet as lora.safetensors and lora.pt
(tools/pt_fixtures.py uses this module to write tests/fixtures/ckpt.)

Only the standard library is used (no numpy, no torch).
"""
import collections
import io
import json
import pickle
import struct
import sys
import types
import zlib

# ---- stand-ins for the torch objects torch.save pickles --------------------------

_DTYPES = {  # safetensors dtype -> (storage class name, element size, torch dtype)
    "F64": ("DoubleStorage", 8), "F32": ("FloatStorage", 4), "F16": ("HalfStorage", 2),
    "BF16": ("BFloat16Storage", 2), "I64": ("LongStorage", 8), "I32": ("IntStorage", 4),
    "I16": ("ShortStorage", 2), "I8": ("CharStorage", 1), "U8": ("ByteStorage", 1),
    "BOOL": ("BoolStorage", 1),
}


def _module(name, **attrs):
    """A module in sys.modules, so that pickle names attrs as name.<attr>."""
    parts = name.split(".")
    for i in range(1, len(parts)):  # parents too: importing a dotted name imports them
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    m = sys.modules.get(name) or types.ModuleType(name)
    for k, v in attrs.items():
        if isinstance(v, types.FunctionType):
            v.__module__, v.__qualname__ = name, k
        elif isinstance(v, type):
            v.__module__, v.__qualname__ = name, k
        setattr(m, k, v)
    sys.modules[name] = m
    return m


def _never_called(*args):
    raise AssertionError("stand-in called")


def _storage_class(name):
    return type(name, (), {})


torch = _module("torch", **{n: _storage_class(n) for n, _ in _DTYPES.values()})
_utils = _module("torch._utils", _rebuild_tensor_v2=lambda *a: None,
                 _rebuild_parameter=lambda *a: None)


class Storage:
    """One storage: bytes of one dtype."""

    def __init__(self, dtype, data):
        self.dtype, self.data = dtype, bytes(data)

    @property
    def numel(self):
        return len(self.data) // _DTYPES[self.dtype][1]


class Tensor:
    """A view of a storage, pickled as torch.Tensor.__reduce_ex__ does."""

    def __init__(self, storage, shape, offset=0, stride=None):
        self.storage, self.shape, self.offset = storage, tuple(shape), offset
        if stride is None:
            stride, acc = [], 1
            for d in reversed(self.shape):
                stride.insert(0, acc)
                acc *= d
        self.stride = tuple(stride)

    def __reduce_ex__(self, proto):
        args = (self.storage, self.offset, self.shape, self.stride, False,
                collections.OrderedDict())
        return (_utils._rebuild_tensor_v2, args)


class Parameter:
    """torch.nn.Parameter: _rebuild_parameter(data, requires_grad, hooks)."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __reduce_ex__(self, proto):
        return (_utils._rebuild_parameter, (self.tensor, True, collections.OrderedDict()))


def torch_pickle(obj):
    """data.pkl of obj and its storages by key, as torch.save's _save makes them."""
    buf, keys = io.BytesIO(), {}

    class Pickler(pickle.Pickler):
        def persistent_id(self, o):
            if not isinstance(o, Storage):
                return None
            key = keys.setdefault(id(o), (str(len(keys)), o))[0]
            cls = getattr(torch, _DTYPES[o.dtype][0])
            return ("storage", cls, key, "cpu", o.numel)

    Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue(), {k: s for k, s in keys.values()}


# ---- the zip container ----------------------------------------------------------------

def _local_extra(offset, name, zip64):
    """The 'FB' padding field that puts the data at a multiple of 64 (plus ZIP64)."""
    z64 = struct.pack("<HHQQ", 1, 16, 0, 0) if zip64 else b""
    start = offset + 30 + len(name) + len(z64) + 4
    pad = (-start) % 64
    return z64 + b"FB" + struct.pack("<H", pad) + b"Z" * pad


def write_zip(path, records, zip64=False):
    """records: [(name, bytes, method)], method 0 (stored) or 8 (deflate, for tests)."""
    out, central = io.BytesIO(), []
    for name, data, method in records:
        name_b = name.encode()
        crc = zlib.crc32(data)
        body = data if method == 0 else zlib.compress(data)[2:-4]
        off = out.tell()
        extra = _local_extra(off, name_b, zip64)
        if zip64:  # sizes in the ZIP64 field, as miniz writes them past 4 GiB
            extra = struct.pack("<HHQQ", 1, 16, len(data), len(body)) + extra[20:]
        sizes = (0xffffffff, 0xffffffff) if zip64 else (len(body), len(data))
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034b50, 45 if zip64 else 20, 0, method, 0,
                              0x21, crc, sizes[0], sizes[1], len(name_b), len(extra)))
        out.write(name_b + extra + body)
        central.append((name_b, crc, len(body), len(data), off, method))
    cd_off = out.tell()
    for name_b, crc, csize, usize, off, method in central:
        if zip64:
            cextra = struct.pack("<HHQQQ", 1, 24, usize, csize, off)
            fields = (0xffffffff, 0xffffffff, 0xffffffff)
        else:
            cextra, fields = b"", (csize, usize, off)
        out.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 45, 45 if zip64 else 20, 0,
                              method, 0, 0x21, crc, fields[0], fields[1], len(name_b),
                              len(cextra), 0, 0, 0, 0, fields[2]))
        out.write(name_b + cextra)
    cd_size = out.tell() - cd_off
    n = len(central)
    if zip64:
        eocd64 = out.tell()
        out.write(struct.pack("<IQHHIIQQQQ", 0x06064b50, 44, 45, 45, 0, 0, n, n, cd_size,
                              cd_off))
        out.write(struct.pack("<IIQI", 0x07064b50, 0, eocd64, 1))
        out.write(struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, 0xffff, 0xffff, 0xffffffff,
                              0xffffffff, 0))
    else:
        out.write(struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, n, n, cd_size, cd_off, 0))
    with open(path, "wb") as f:
        f.write(out.getvalue())


def save(path, obj, archive="archive", zip64=False, byteorder="little", pkl=None,
         method=0):
    """torch.save(obj, path): data.pkl, byteorder, data/<key>..., version, serialization_id."""
    data, storages = torch_pickle(obj)
    records = [(f"{archive}/data.pkl", pkl if pkl is not None else data, method),
               (f"{archive}/byteorder", byteorder.encode(), 0)]
    for key in sorted(storages, key=int):
        records.append((f"{archive}/data/{key}", storages[key].data, 0))
    records.append((f"{archive}/version", b"3\n", 0))
    records.append((f"{archive}/.data/serialization_id", b"0" * 40, 0))
    write_zip(path, records, zip64)


# ---- safetensors ---------------------------------------------------------------------

def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = collections.OrderedDict()
    for name in sorted(header, key=lambda k: header[k]["data_offsets"][0]):
        h = header[name]
        b, e = h["data_offsets"]
        out[name] = (h["dtype"], h["shape"], raw[base + b:base + e])
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def state_dict(tensors, param=False):
    """An nn.Module.state_dict(): an OrderedDict with _metadata, one storage per tensor."""
    sd = collections.OrderedDict()
    for name, (dtype, shape, data) in tensors.items():
        t = Tensor(Storage(dtype, data), shape)
        sd[name] = Parameter(t) if param else t
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    return sd


def convert(src, dst, nested=False, param=False, zip64=False):
    sd = state_dict(read_safetensors(src), param)
    obj = {"epoch": 0, "global_step": 470000, "pytorch-lightning_version": "1.4.2",
           "state_dict": sd} if nested else sd
    save(dst, obj, zip64=zip64)


def lora(ckpt, out_dir):
    """A rank-2 kohya LoRA on one attention projection and one conv of ckpt's UNet."""
    src = read_safetensors(ckpt)
    targets = [("lora_unet_input_blocks_1_1_transformer_blocks_0_attn1_to_q",
                "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight"),
               ("lora_unet_input_blocks_1_0_in_layers_2",
                "model.diffusion_model.input_blocks.1.0.in_layers.2.weight")]
    out, seed = collections.OrderedDict(), 1
    for prefix, key in targets:
        shape = src[key][1]
        rest = shape[1:]
        down, up = [2] + list(rest), [shape[0], 2] + [1] * (len(shape) - 2)
        for suffix, sh in (("lora_down.weight", down), ("lora_up.weight", up)):
            n = 1
            for d in sh:
                n *= d
            vals = [((seed * 7919 + i * 104729) % 2001 - 1000) / 4000.0 for i in range(n)]
            seed += 1
            out[f"{prefix}.{suffix}"] = ("F32", sh, struct.pack(f"<{n}f", *vals))
        out[f"{prefix}.alpha"] = ("F32", [], struct.pack("<f", 1.0))
    write_safetensors(f"{out_dir}/lora.safetensors", out)
    save(f"{out_dir}/lora.pt", state_dict(out))


def main(argv):
    if len(argv) >= 3 and argv[0] == "convert":
        flags = set(argv[3:])
        convert(argv[1], argv[2], "--nested" in flags, "--param" in flags, "--zip64" in flags)
    elif len(argv) == 3 and argv[0] == "strip":
        write_safetensors(argv[2], read_safetensors(argv[1]))
    elif len(argv) == 3 and argv[0] == "lora":
        lora(argv[1], argv[2])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

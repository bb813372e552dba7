#!/usr/bin/env python3
"""pt_fixtures — write tests/fixtures/ckpt: small torch checkpoints, valid and hostile.

Usage: pt_fixtures.py OUT_DIR   (tests/fixtures/ckpt/README.md lists every file)

Valid files hold the tensors of small.safetensors / small_f16.safetensors (written
here too) in the shapes torch.save gives them. Hostile files are hand-assembled or
made by Python's pickler from objects whose __reduce__ names a dangerous callable; a
payload, if it ran, would create /tmp/latentd_pwned.
"""
import collections
import os
import pickle
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pt_write as W  # noqa: E402

PAYLOAD = "touch /tmp/latentd_pwned"


def f32(vals):
    return struct.pack(f"<{len(vals)}f", *vals)


def f16(vals):
    return struct.pack(f"<{len(vals)}e", *vals)


def bf16(vals):
    return b"".join(struct.pack("<f", v)[2:] for v in vals)


def small_tensors():
    """name -> (dtype, shape, bytes); a.weight and a.bias share one storage in the .ckpt."""
    return collections.OrderedDict([
        ("a.weight", ("F32", [2, 3], f32([0.5 * i for i in range(6)]))),
        ("a.bias", ("F32", [3], f32([-1.0, 2.5, 1e-3]))),
        ("scalar", ("F32", [], f32([3.25]))),
        ("ints", ("I64", [4], struct.pack("<4q", 1, 2, 3, -4))),
        ("empty", ("F32", [0, 4], b"")),
    ])


def small_state_dict(param=False):
    """As nn.Module.state_dict() would pickle it, with a weight and bias in one storage."""
    t = small_tensors()
    shared = W.Storage("F32", t["a.weight"][2] + t["a.bias"][2])
    sd = W.state_dict(collections.OrderedDict(list(t.items())[2:]), param)
    views = [("a.weight", W.Tensor(shared, [2, 3])), ("a.bias", W.Tensor(shared, [3], 6))]
    out = collections.OrderedDict(
        (k, W.Parameter(v) if param else v) for k, v in views)
    out.update(sd)
    out._metadata = sd._metadata
    return out


def f16_tensors():
    return collections.OrderedDict([
        ("h", ("F16", [2, 2], f16([1.0, -2.0, 0.099976, 65504.0]))),
        ("b", ("BF16", [3], bf16([1.0, -0.5, 3.0e38]))),
    ])


# ---- pytorch-lightning extras ---------------------------------------------------------

class ModelCheckpoint:
    """pytorch_lightning's callback: pickled by NEWOBJ + BUILD at protocol 2."""


W._module("pytorch_lightning.callbacks.model_checkpoint", ModelCheckpoint=ModelCheckpoint)


class NumpyDtype:
    def __reduce__(self):
        return (NumpyDtypeClass, ("f8", False, True), (3, "<", None, None, None, -1, -1, 0))


class NumpyDtypeClass:
    pass


def _scalar(*a):
    raise AssertionError


W._module("numpy", dtype=NumpyDtypeClass)
W._module("numpy.core.multiarray", scalar=_scalar)


class NumpyScalar:
    """numpy.float64(v): scalar(dtype('f8'), bytes) with bytes via _codecs.encode."""

    def __init__(self, v):
        self.v = v

    def __reduce__(self):
        return (_scalar, (NumpyDtype(), struct.pack("<d", self.v)))


def lightning(sd):
    cb = ModelCheckpoint()
    cb.__dict__.update({"monitor": None, "best_model_score": NumpyScalar(0.25),
                        "best_model_path": "", "save_top_k": 1})
    return {"epoch": 6, "global_step": 470000, "pytorch-lightning_version": "1.4.2",
            "state_dict": sd, "callbacks": {"ModelCheckpoint": cb},
            "optimizer_states": [], "lr_schedulers": []}


# ---- hostile pickles ------------------------------------------------------------------

class Evil:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def p(*parts):
    """Hand-assembled pickle: protocol 2 header, the parts, STOP."""
    return b"\x80\x02" + b"".join(parts) + b"."


def u(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


OD = b"ccollections\nOrderedDict\n"
V2 = b"ctorch._utils\n_rebuild_tensor_v2\n"


def tensor_op(key, typ, numel, offset, shape, stride):
    ints = lambda xs: b"(" + b"".join(b"J" + struct.pack("<i", x) for x in xs) + b"t"
    pid = b"(" + u("storage") + b"ctorch\n" + typ + b"\n" + u(key) + u("cpu") + \
        b"J" + struct.pack("<i", numel) + b"tQ"
    return V2 + b"(" + pid + b"J" + struct.pack("<i", offset) + ints(shape) + \
        ints(stride) + b"\x89" + OD + b")Rt" + b"R"


def with_storage(name, pkl, data):
    W.write_zip(name, [("archive/data.pkl", pkl, 0), ("archive/data/0", data, 0),
                       ("archive/version", b"3\n", 0)])


def hostile(out):
    h = lambda name, pkl: W.save(os.path.join(out, name), {}, pkl=pkl)
    h("os_system.ckpt", pickle.dumps(Evil(os.system, PAYLOAD), protocol=2))
    h("os_system_global.ckpt", p(b"cos\nsystem\n", u(PAYLOAD), b"\x85R"))
    h("eval.ckpt", pickle.dumps(Evil(eval, f"__import__('os').system('{PAYLOAD}')"),
                                protocol=2))
    h("exec_stack_global.ckpt", pickle.dumps(Evil(exec, PAYLOAD), protocol=4))
    # A REDUCE whose callable is what an earlier REDUCE returned.
    h("nested_reduce.ckpt", p(OD, b")R", b")R"))
    # An allowed call whose argument is made by a disallowed one.
    h("nested_reduce_disallowed.ckpt",
      p(OD, b"(cbuiltins\ngetattr\n", u("x"), u("y"), b"\x86Rt", b"R"))
    h("reduce_str.ckpt", p(u("os.system"), u(PAYLOAD), b"\x85R"))
    h("memo_get.ckpt", p(b"}h\x05"))
    h("memo_put_huge.ckpt", p(b"}r\xff\xff\xff\xff"))
    h("huge_len.ckpt", b"\x80\x02X\xff\xff\xff\x7fabc")
    h("truncated_pkl.ckpt", pickle.dumps({"a": [1, 2, 3], "b": "x" * 40}, protocol=2)[:30])
    h("deep_list.ckpt", p(b"]" * 20000 + b"a" * 19999))
    h("self_ref.ckpt", p(b"}q\x00h\x00h\x00s"))
    h("mark_bomb.ckpt", b"\x80\x02" + b"(" * 30000 + b".")
    h("setitem_list.ckpt", p(b"]", u("k"), u("v"), b"s"))
    h("append_dict.ckpt", p(b"}", u("v"), b"a"))
    h("build_list.ckpt", p(b"]", b"}", b"b"))
    h("build_dict.ckpt", p(b"}", b"}", b"b"))
    h("inst.ckpt", p(b"(ios\nsystem\n"))
    h("persid_module.ckpt", p(b"(", u("module"), u("os"), b"tQ"))
    h("newobj_function.ckpt", p(V2, b")\x81"))
    h("legacy_tensor.ckpt", p(b"ctorch\nTensor\n", b")R"))
    h("not_dict.ckpt", p(b"]"))
    h("empty_pkl.ckpt", b"")


def bad_tensors(out):
    o = lambda n: os.path.join(out, n)
    data = f32([1.0] * 6)
    with_storage(o("out_of_bounds.ckpt"),
                 p(b"}", u("t"), tensor_op("0", b"FloatStorage", 6, 2, [2, 3], [3, 1]), b"s"),
                 data)
    with_storage(o("storage_size.ckpt"),
                 p(b"}", u("t"), tensor_op("0", b"FloatStorage", 8, 0, [2, 3], [3, 1]), b"s"),
                 data)
    with_storage(o("missing_storage.ckpt"),
                 p(b"}", u("t"), tensor_op("7", b"FloatStorage", 6, 0, [2, 3], [3, 1]), b"s"),
                 data)
    with_storage(o("noncontig.ckpt"),
                 p(b"}", u("t"), tensor_op("0", b"FloatStorage", 6, 0, [3, 2], [1, 3]), b"s"),
                 data)
    with_storage(o("complex.ckpt"),
                 p(b"}", u("t"), tensor_op("0", b"ComplexFloatStorage", 3, 0, [3], [1]), b"s"),
                 data)
    W.save(o("big_endian.ckpt"), small_state_dict(), byteorder="big")
    W.save(o("deflate.ckpt"), small_state_dict(), method=8)
    with open(o("legacy.pt"), "wb") as f:  # torch < 1.6: magic number, then pickles
        pickle.dump(0x1950a86a20f9469cfc6c, f, protocol=2)
        pickle.dump({}, f, protocol=2)
    with open(o("small.ckpt"), "rb") as f:
        raw = f.read()
    with open(o("truncated_file.ckpt"), "wb") as f:
        f.write(raw[:len(raw) // 2])


def main(argv):
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    out = argv[0]
    os.makedirs(out, exist_ok=True)
    o = lambda n: os.path.join(out, n)
    W.write_safetensors(o("small.safetensors"), small_tensors())
    W.write_safetensors(o("small_f16.safetensors"), f16_tensors())
    W.save(o("small.ckpt"), small_state_dict())
    W.save(o("small_f16.pt"), W.state_dict(f16_tensors()))
    W.save(o("lightning.ckpt"), lightning(small_state_dict()))
    W.save(o("single_key.pt"), {"model": small_state_dict()})
    W.save(o("parameter.pth"), small_state_dict(param=True))
    W.save(o("zip64.ckpt"), small_state_dict(), zip64=True)
    hostile(out)
    bad_tensors(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

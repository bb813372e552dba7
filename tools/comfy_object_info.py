#!/usr/bin/env python3
"""Build /object_info fixtures from a ComfyUI comfy_extras/nodes_*.py source file.

Run once per ComfyUI update; the e2e tests compare latentd's /object_info with the
output (tests/fixtures/object_info/<module>.json). ComfyUI itself needs torch, so
the file is read with `ast` instead of imported: each V1 node class's INPUT_TYPES
return expression is evaluated with stand-ins for the names it uses, and
RETURN_TYPES / RETURN_NAMES / CATEGORY / OUTPUT_NODE / DESCRIPTION are taken from
the class or its bases, as server.py's node_info() does. Combo lists computed at
run time (comfy.samplers.SAMPLER_NAMES, SCHEDULER_NAMES) become ["$SAMPLER_NAMES"]
and ["$SCHEDULER_NAMES"]: latentd lists the subset it implements; LoadLatent's
file list becomes ["$INPUT_LATENTS"].

V3 nodes (io.ComfyNode with define_schema, e.g. nodes_latent.py) are rendered as
server.py does for them: asdict(Schema.get_v1_info()), evaluated with stand-ins
for comfy_api.latest.io (V3_IO below) that reproduce its as_dict() rules. The
python_module follows the path: nodes.py -> "nodes", comfy_extras/x.py ->
"comfy_extras.x", custom_nodes/x.py -> "custom_nodes.x". --classes A,B keeps
only those classes (nodes.py has many whose INPUT_TYPES read folders). Display names of
comfy_extras classes also come from ../nodes.py next to the file, when it is there.

usage: comfy_object_info.py [--classes A,B,...] path/to/comfy_extras/nodes_custom_sampler.py > out.json
"""
import ast
import enum
import json
import os
import sys
from types import SimpleNamespace


class _Names:
    """IO.MODEL -> "MODEL", IO.COMBO -> "COMBO"."""

    def __getattr__(self, name):
        return name


MAX_RESOLUTION = 16384


def _prune(d):
    return {k: v for k, v in d.items() if v is not None}


class _V3Input:
    """comfy_api.latest._io.Input / WidgetInput and the widget subclasses' as_dict()."""

    def __init__(self, io_type, kind, id, *args, **kw):
        self.io_type, self.kind, self.id = io_type, kind, id
        if kind == "COMBO" and args:
            kw["options"] = args[0]
        self.kw = kw

    def as_dict(self):
        k = self.kw
        d = _prune({"display_name": k.get("display_name"), "optional": k.get("optional", False),
                    "tooltip": k.get("tooltip"), "lazy": k.get("lazy")}) | _prune(k.get("extra_dict") or {})
        if self.kind is None:
            return d
        d |= _prune({"default": k.get("default"), "socketless": k.get("socketless"),
                     "widgetType": None, "forceInput": k.get("force_input")})
        if self.kind == "INT":
            d |= _prune({n: k.get(n) for n in ("min", "max", "step", "control_after_generate")})
            d |= _prune({"display": k.get("display_mode")})
        elif self.kind == "FLOAT":
            d |= _prune({n: k.get(n) for n in ("min", "max", "step", "round")})
            d |= _prune({"display": k.get("display_mode")})
        elif self.kind == "BOOLEAN":
            d |= _prune({n: k.get(n) for n in ("label_on", "label_off")})
        elif self.kind == "STRING":
            d |= _prune({"multiline": k.get("multiline", False), "placeholder": k.get("placeholder"),
                         "dynamicPrompts": k.get("dynamic_prompts")})
        elif self.kind == "COMBO":
            d |= _prune({"multiselect": False, "options": k.get("options"),
                         "control_after_generate": k.get("control_after_generate")})
        return d


class _V3Output:
    def __init__(self, io_type, id=None, display_name=None, tooltip=None, is_output_list=False, **kw):
        self.io_type, self.display_name, self.tooltip, self.is_output_list = io_type, display_name, tooltip, is_output_list


class _V3Type:
    def __init__(self, io_type):
        widget = io_type if io_type in ("INT", "FLOAT", "BOOLEAN", "STRING", "COMBO") else None
        self.Input = lambda *a, **kw: _V3Input(io_type, widget, *a, **kw)
        self.Output = lambda *a, **kw: _V3Output(io_type, *a, **kw)


class _V3Schema:
    def __init__(self, node_id, display_name=None, category="sd", inputs=None, outputs=None, hidden=None,
                 description="", is_output_node=False, is_deprecated=False, is_experimental=False,
                 is_api_node=False, **kw):
        self.__dict__.update(locals())
        del self.__dict__["self"]

    def v1_info(self, module):
        """Schema.finalize() + get_v1_info() + dataclasses.asdict()."""
        inputs = {"required": {}}
        for i in self.inputs or []:
            d = i.as_dict()
            d.pop("optional", None)
            inputs.setdefault("optional" if i.kw.get("optional") else "required", {})[i.id] = [i.io_type, d]
        hidden = list(self.hidden or [])
        if self.is_output_node:
            hidden += [h for h in ("PROMPT", "EXTRA_PNGINFO") if h not in hidden]
        for h in hidden:
            inputs.setdefault("hidden", {})[h.lower()] = [h]
        outs = self.outputs or []
        return {
            "input": inputs,
            "input_order": {g: list(v.keys()) for g, v in inputs.items()},
            "output": [o.io_type for o in outs],
            "output_is_list": [o.is_output_list for o in outs],
            "output_name": [o.display_name or o.io_type for o in outs],
            "output_tooltips": [o.tooltip or None for o in outs],
            "name": self.node_id,
            "display_name": self.display_name,
            "category": self.category,
            "description": self.description,
            "output_node": self.is_output_node,
            "deprecated": self.is_deprecated,
            "experimental": self.is_experimental,
            "api_node": self.is_api_node,
            "python_module": module,
        }


class _V3IO:
    """comfy_api.latest.io: io.Latent -> LATENT, io.Int -> INT, io.Schema, ..."""

    Schema = _V3Schema
    NAMES = {"Int": "INT", "Float": "FLOAT", "Boolean": "BOOLEAN", "String": "STRING", "Combo": "COMBO",
             "Latent": "LATENT", "Image": "IMAGE", "Mask": "MASK", "Model": "MODEL", "Clip": "CLIP",
             "Vae": "VAE", "Conditioning": "CONDITIONING", "Sigmas": "SIGMAS", "Sampler": "SAMPLER",
             "Noise": "NOISE", "Guider": "GUIDER", "LatentOperation": "LATENT_OPERATION",
             "UpscaleModel": "UPSCALE_MODEL"}

    def __getattr__(self, name):
        return _V3Type(self.NAMES[name])


NAMESPACE = {
    "MAX_RESOLUTION": MAX_RESOLUTION,
    "files": ["$INPUT_LATENTS"],  # LoadLatent: the .latent files in the input directory
    # A model folder's listing: ["$UPSCALE_MODELS"] for "upscale_models" (tests fill it in).
    "folder_paths": SimpleNamespace(get_filename_list=lambda folder: ["$" + folder.upper()]),
    "nodes": SimpleNamespace(MAX_RESOLUTION=MAX_RESOLUTION),
    "sys": SimpleNamespace(maxsize=2**63 - 1),  # PrimitiveInt's min/max
    "io": _V3IO(),
    "IO": _Names(),
    "comfy": SimpleNamespace(samplers=SimpleNamespace(
        SAMPLER_NAMES=["$SAMPLER_NAMES"], SCHEDULER_NAMES=["$SCHEDULER_NAMES"],
        KSampler=SimpleNamespace(SAMPLERS=["$SAMPLER_NAMES"], SCHEDULERS=["$SCHEDULER_NAMES"]))),
}


def literal(node, cls=None):
    """Evaluate an expression; `s.x` / `cls.x` read the class's own literal attributes
    (ImageScaleToMaxDimension's upscale_methods)."""
    ns = dict(NAMESPACE)
    if cls is not None:
        attrs = {}
        for item in cls.body:
            if isinstance(item, ast.Assign) and len(item.targets) == 1 and isinstance(item.targets[0], ast.Name):
                try:
                    attrs[item.targets[0].id] = literal(item.value)
                except Exception:
                    pass
        ns["s"] = ns["cls"] = SimpleNamespace(**attrs)
    if isinstance(node, ast.FunctionDef):  # an INPUT_TYPES that builds its dict in statements
        fn = ast.FunctionDef(name=node.name, args=node.args, body=node.body, decorator_list=[],
                             returns=None, type_comment=None, type_params=[])
        exec(compile(ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[])), "<ast>",
                     "exec"), ns)
        return ns[node.name](ns.get("s"))
    return eval(compile(ast.Expression(node), "<ast>", "eval"), ns)


def class_attrs(cls):
    attrs = {}
    for item in cls.body:
        if isinstance(item, ast.Assign) and len(item.targets) == 1 and isinstance(item.targets[0], ast.Name):
            attrs[item.targets[0].id] = item.value
        elif isinstance(item, ast.FunctionDef) and item.name == "INPUT_TYPES":
            rets = [n for n in ast.walk(item) if isinstance(n, ast.Return)]
            # A bare `return {...}` is evaluated as an expression; anything else (ModelMergeSD1
            # fills arg_dict in a loop) runs as a function.
            attrs["INPUT_TYPES"] = rets[0].value if len(item.body) == 1 else item
    return attrs


ROOT = None  # ComfyUI's root (the parent of comfy_extras/), for bases in other modules


def other_module_class(base):
    """The class a base such as comfy_extras.nodes_model_merging.ModelMergeBlocks names,
    and its module's classes; (None, None) when the file is not there."""
    parts = []
    while isinstance(base, ast.Attribute):
        parts.insert(0, base.attr)
        base = base.value
    if not isinstance(base, ast.Name) or ROOT is None:
        return None, None
    src = os.path.join(ROOT, base.id, *parts[:-1]) + ".py"
    if not os.path.exists(src):
        return None, None
    tree = ast.parse(open(src, encoding="utf-8").read())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    return classes.get(parts[-1]), classes


def lookup(classes, cls, key):
    """The attribute from the class or, as Python's MRO would, its first base that has it."""
    while cls is not None:
        attrs = class_attrs(cls)
        if key in attrs:
            return attrs[key]
        bases = [b.id for b in cls.bases if isinstance(b, ast.Name) and b.id in classes]
        if bases:
            cls = classes[bases[0]]
            continue
        other = [b for b in cls.bases if isinstance(b, ast.Attribute)]
        cls, classes = other_module_class(other[0]) if other else (None, None)
    return None


def as_json(v):
    if isinstance(v, tuple):
        return [as_json(x) for x in v]
    if isinstance(v, list):
        return [as_json(x) for x in v]
    if isinstance(v, dict):
        return {k: as_json(x) for k, x in v.items()}
    return v


def node_info(module, classes, name, display):
    cls = classes[name]
    inputs = as_json(literal(lookup(classes, cls, "INPUT_TYPES"), cls))
    get = lambda k, d=None: literal(lookup(classes, cls, k)) if lookup(classes, cls, k) is not None else d
    outputs = list(get("RETURN_TYPES", ()))
    return {
        "input": inputs,
        "input_order": {g: list(v.keys()) for g, v in inputs.items()},
        "output": outputs,
        "output_is_list": list(get("OUTPUT_IS_LIST", [False] * len(outputs))),
        "output_name": list(get("RETURN_NAMES", outputs)),
        "name": name,
        "display_name": display.get(name, name),
        "description": get("DESCRIPTION", ""),
        "python_module": module,
        "category": get("CATEGORY", "sd"),
        "output_node": bool(get("OUTPUT_NODE", False)),
        **({"output_tooltips": list(get("OUTPUT_TOOLTIPS"))} if get("OUTPUT_TOOLTIPS") else {}),
        # server.py adds these only when set (ControlNetApply is DEPRECATED)
        **({"deprecated": True} if get("DEPRECATED", False) else {}),
        **({"experimental": True} if get("EXPERIMENTAL", False) else {}),
    }


def v3_schema(cls):
    """The io.Schema(...) that define_schema returns, evaluated."""
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "define_schema":
            rets = [n for n in ast.walk(item) if isinstance(n, ast.Return)]
            return literal(rets[0].value, cls)
    return None


def v3_node_list(tree):
    """The class names get_node_list returns, in order (ComfyExtension files)."""
    for n in ast.walk(tree):
        if isinstance(n, ast.AsyncFunctionDef) and n.name == "get_node_list":
            rets = [r for r in ast.walk(n) if isinstance(r, ast.Return)]
            return [e.id for e in rets[0].value.elts]
    return []


def module_of(path):
    parts = path.replace("\\", "/").rsplit("/", 2)
    name = parts[-1][:-3]
    if name == "nodes" and (len(parts) < 2 or parts[-2] not in ("comfy_extras", "custom_nodes")):
        return "nodes"
    return (parts[-2] if len(parts) >= 2 and parts[-2] == "custom_nodes" else "comfy_extras") + "." + name


def main(argv):
    only = None
    if argv[:1] == ["--classes"]:
        only, argv = set(argv[1].split(",")), argv[2:]
    path = argv[0]
    tree = ast.parse(open(path, encoding="utf-8").read())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    # Module-level Enums (nodes_compositing's PorterDuffMode) for combo lists built from them.
    for n in classes.values():
        if any(isinstance(b, ast.Name) and b.id == "Enum" for b in n.bases):
            members = {t.targets[0].id: literal(t.value) for t in n.body
                       if isinstance(t, ast.Assign) and isinstance(t.targets[0], ast.Name)}
            NAMESPACE[n.name] = enum.Enum(n.name, members)
    # Literal constants imported from ComfyUI's own modules next to the file
    # (nodes_controlnet's UNION_CONTROLNET_TYPES from comfy/cldm/control_types.py).
    global ROOT
    root = ROOT = os.path.join(os.path.dirname(os.path.abspath(path)), "..")
    for n in tree.body:
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("comfy."):
            src = os.path.join(root, *n.module.split(".")) + ".py"
            if not os.path.exists(src):
                continue
            wanted = {a.name for a in n.names}
            for d in ast.parse(open(src, encoding="utf-8").read()).body:
                if isinstance(d, ast.Assign) and isinstance(d.targets[0], ast.Name) and \
                        d.targets[0].id in wanted:
                    try:
                        NAMESPACE[d.targets[0].id] = literal(d.value)
                    except Exception:
                        pass
    mappings, display = {}, {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name):
            if n.targets[0].id == "NODE_CLASS_MAPPINGS":
                mappings = {k.value: v.id for k, v in zip(n.value.keys, n.value.values)}
            elif n.targets[0].id == "NODE_DISPLAY_NAME_MAPPINGS":
                display = literal(n.value)
    module = module_of(path)
    # ComfyUI merges every module's display names into nodes.NODE_DISPLAY_NAME_MAPPINGS,
    # whose own entries name some extras' classes ("ImageCrop": "Image Crop").
    core = os.path.join(os.path.dirname(os.path.abspath(path)), "..", "nodes.py")
    if module.startswith("comfy_extras.") and os.path.exists(core):
        for n in ast.parse(open(core, encoding="utf-8").read()).body:
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and \
                    n.targets[0].id == "NODE_DISPLAY_NAME_MAPPINGS":
                display = literal(n.value) | display
    out = {}
    for key, cls_name in mappings.items():
        if only is not None and key not in only:
            continue
        out[key] = node_info(module, classes, cls_name, display)
        # server.py names a class by its mapping key ("ModelMergeSubtract" for the class
        # ModelSubtract), for the display name too when no display mapping has it.
        out[key]["name"] = key
        out[key]["display_name"] = display.get(key, key)
    for cls_name in v3_node_list(tree):
        schema = v3_schema(classes[cls_name])
        if only is None or schema.node_id in only:
            out[schema.node_id] = schema.v1_info(module)
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])

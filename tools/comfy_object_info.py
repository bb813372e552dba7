#!/usr/bin/env python3
"""Build /object_info fixtures from a ComfyUI comfy_extras/nodes_*.py source file.

Run once per ComfyUI update; the e2e tests compare latentd's /object_info with the
output (tests/fixtures/object_info/<module>.json). ComfyUI itself needs torch, so
the file is read with `ast` instead of imported: each V1 node class's INPUT_TYPES
return expression is evaluated with stand-ins for the names it uses, and
RETURN_TYPES / RETURN_NAMES / CATEGORY / OUTPUT_NODE / DESCRIPTION are taken from
the class or its bases, as server.py's node_info() does. Combo lists computed at
run time (comfy.samplers.SAMPLER_NAMES, SCHEDULER_NAMES) become ["$SAMPLER_NAMES"]
and ["$SCHEDULER_NAMES"]: latentd lists the subset it implements.

usage: comfy_object_info.py path/to/comfy_extras/nodes_custom_sampler.py > out.json
"""
import ast
import json
import sys
from types import SimpleNamespace


class _Names:
    """IO.MODEL -> "MODEL", IO.COMBO -> "COMBO"."""

    def __getattr__(self, name):
        return name


NAMESPACE = {
    "IO": _Names(),
    "comfy": SimpleNamespace(samplers=SimpleNamespace(
        SAMPLER_NAMES=["$SAMPLER_NAMES"], SCHEDULER_NAMES=["$SCHEDULER_NAMES"],
        KSampler=SimpleNamespace(SAMPLERS=["$SAMPLER_NAMES"], SCHEDULERS=["$SCHEDULER_NAMES"]))),
}


def literal(node):
    return eval(compile(ast.Expression(node), "<ast>", "eval"), dict(NAMESPACE))


def class_attrs(cls):
    attrs = {}
    for item in cls.body:
        if isinstance(item, ast.Assign) and len(item.targets) == 1 and isinstance(item.targets[0], ast.Name):
            attrs[item.targets[0].id] = item.value
        elif isinstance(item, ast.FunctionDef) and item.name == "INPUT_TYPES":
            rets = [n for n in ast.walk(item) if isinstance(n, ast.Return)]
            attrs["INPUT_TYPES"] = rets[0].value
    return attrs


def lookup(classes, cls, key):
    """The attribute from the class or, as Python's MRO would, its first base that has it."""
    while cls is not None:
        attrs = class_attrs(cls)
        if key in attrs:
            return attrs[key]
        bases = [b.id for b in cls.bases if isinstance(b, ast.Name) and b.id in classes]
        cls = classes[bases[0]] if bases else None
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
    inputs = as_json(literal(lookup(classes, cls, "INPUT_TYPES")))
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
    }


def main(path):
    tree = ast.parse(open(path, encoding="utf-8").read())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    mappings, display = {}, {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name):
            if n.targets[0].id == "NODE_CLASS_MAPPINGS":
                mappings = {k.value: v.id for k, v in zip(n.value.keys, n.value.values)}
            elif n.targets[0].id == "NODE_DISPLAY_NAME_MAPPINGS":
                display = literal(n.value)
    module = "comfy_extras." + path.rsplit("/", 1)[-1][:-3]
    out = {}
    for key, cls_name in mappings.items():
        out[key] = node_info(module, classes, cls_name, display)
        out[key]["name"] = key
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])

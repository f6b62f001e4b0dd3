"""tools/*.py scripts (not a package) imported by path for the tests of their pure parts."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def load_tool(stem: str, alias: str) -> ModuleType:
    """tools/<stem>.py executed as a fresh module named `alias` (a name of its own per test module,
    so one module's state cannot leak into another's)."""
    spec = importlib.util.spec_from_file_location(alias, TOOLS / f"{stem}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def identity_model(path, shape) -> None:
    """A one-Identity int64 model at ``path``: the file a manifest entry is made for, without an export."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.INT64, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, shape)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), path)


def plan_new_set(ec: ModuleType, number: int, new, monkeypatch, key=lambda spec: spec["model_type"]) -> list:
    """Hold-out ``number``'s architectures ``new`` have keys (model types, or what ``key`` reads of a spec)
    no earlier set and no corpus spec has, and its plan (returned) exports cache styles of decoders only;
    ``ec`` = export_corpus loaded by load_tool."""
    hs = ec.HOLDOUT_SETS[number]
    earlier = {key(spec) for n, s in ec.HOLDOUT_SETS.items() if n != number for spec in s.values()}
    earlier |= {key(spec) for spec in ec.SPECS.values()}
    assert not {key(hs[a]) for a in new} & earlier
    monkeypatch.setattr(ec, "SPECS", {**ec.SPECS, **hs})
    todo = list(ec.plan_holdout(list(new), None, number))
    for arch, style, _ in todo:
        if style in ec.KV_STYLES:
            assert ec.SPECS[arch]["kind"] == "decoder", arch
    return todo

"""--kv-cache-dtype fp8 on an export whose query length is symbolic: ``--shape sequence=1`` (or a
full input shape) fixes it in the model's inputs and the result is the decode-only export's; without
a usable binding the CLI exits 2 with one line naming the dim, and writes nothing.

gpt264_kv_dynamo declares input_ids [batch, sequence]; tests/decode_models.static_decode is the
same export with sequence edited to 1 (the workaround before --shape bound it).
"""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx_ir as ir
import pytest

import onnx_fuse
from onnx_fuse.cli.main import main
from onnx_fuse.errors import UserError
from onnx_fuse.passes.kv_cache_fp8 import query_length_candidates
from tests.decode_models import static_decode

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
DYNAMIC = MODELS / "gpt264_kv_dynamo.onnx"
FP8 = dict(level=4, target="trt", kv_cache_dtype="fp8", float32_plugins=True)  # a float32 export


def _io(model: ir.Model) -> list[tuple[str, str, tuple]]:
    return [(v.name, str(v.dtype), tuple(str(d) for d in v.shape))
            for v in (*model.graph.inputs, *model.graph.outputs)]


@pytest.mark.parametrize("shapes", [{"sequence": (1,)}, {"input_ids": (2, 1)}])
def test_shape_binding_gives_the_decode_exports_model(shapes):
    bound = onnx_fuse.optimize(str(DYNAMIC), shapes=shapes, **FP8)
    edited = onnx_fuse.optimize(static_decode("gpt264_kv_dynamo"), **FP8)
    assert _io(bound.model) == _io(edited.model)
    assert bound.report.ops_after == edited.report.ops_after
    inputs = {v.name: v for v in bound.model.graph.inputs}
    assert inputs["input_ids"].shape[1] == 1
    assert str(inputs["input_ids"].shape[0]) == "batch"   # only the query length is fixed
    assert any("--shape sequence=1 fixed the query length" in w for w in bound.report.warnings)


def test_candidates_put_the_batch_last_and_read_full_shapes():
    model = ir.load(str(DYNAMIC))
    ones, rest, bound = query_length_candidates(model, {"input_ids": (1, 1)})
    assert ones == ["sequence", "batch"] and "past_sequence" in rest
    assert bound["batch"] == 1
    assert query_length_candidates(model, {"sequence": (3,)})[0] == []


def _cli(tmp_path, capsys, *flags) -> tuple[int, list[str], Path]:
    out = tmp_path / "o.onnx"
    capsys.readouterr()
    code = main(["optimize", str(DYNAMIC), "-o", str(out), "-O", "4", "--target", "trt",
                 "--kv-cache-dtype", "fp8", "--float32-plugins", "-q", *flags])
    return code, capsys.readouterr().err.strip().splitlines(), out


@pytest.mark.parametrize("flags, says", [
    ((), "--shape sequence=1 (symbolic input dims: sequence"),
    (("--shape", "sequence=4"), "--shape gives sequence=4"),
    (("--shape", "batch=1"), "--shape batch=1"),
])
def test_cli_refusal_names_the_dim_and_writes_nothing(tmp_path, capsys, flags, says):
    code, err, out = _cli(tmp_path, capsys, *flags)
    assert code == 2
    assert len(err) == 1 and "decode-only" in err[0] and says in err[0], err
    assert "Traceback" not in err[0]
    assert not out.exists() and not list(tmp_path.iterdir())


def test_cli_shape_binds_and_verifies(tmp_path, capsys):
    code, err, out = _cli(tmp_path, capsys, "--shape", "sequence=1", "--verify")
    assert code == 0, err
    proto = onnx.load(str(out))
    types = {i.name: i.type.tensor_type for i in proto.graph.input}
    assert types["kv_pool_k.0"].elem_type == onnx.TensorProto.FLOAT8E4M3FN
    assert [d.dim_param or d.dim_value for d in types["input_ids"].shape.dim] == ["batch", 1]


def test_api_refusal_without_shapes_is_a_user_error():
    with pytest.raises(UserError, match=r"decode-only.*--shape sequence=1"):
        onnx_fuse.optimize(str(DYNAMIC), **FP8)

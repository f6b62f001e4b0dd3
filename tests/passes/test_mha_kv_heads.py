"""MhaHeadsFirstKvPass: com.microsoft MultiHeadAttention reads k / v as [B, N, L, H] where the ort
lowering's merge back to [B, L, N*H] stayed (passes/mha_kv_heads.py); numbers checked in ORT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from onnx_fuse.passes.dead_code import DeadCodeEliminationPass
from onnx_fuse.passes.mha_kv_heads import MhaHeadsFirstKvPass
from pass_testing import apply, check_same, parse
from pass_testing import ops as _ops

_HEAD = '<ir_version: 9, opset_import: ["" : 17, "com.microsoft" : 1]>\n'
B, S, N, L, H = 2, 3, 2, 5, 4
CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"


def _mha(k_from: str = "Transpose <perm = [0, 2, 1, 3]> (k4)", v_glue: bool = True, extra: str = "",
         mha_inputs: str = "q, k3, v3", k_shape: str = f"{B}, {N}, {L}, {H}", heads: int = N,
         after: bool = False) -> onnx.ModelProto:
    """q [B, S, N*H]; k4 / v4 heads-first inputs merged back as the lowering writes them; ``after``:
    the op's output read by a Relu (an intermediate)."""
    v_lines = ("vt = Transpose <perm = [0, 2, 1, 3]> (v4)\n            v3 = Reshape (vt, merge)" if v_glue
               else "v3 = Identity (v3in)")
    return parse(_HEAD + f"""
        g (float[{B}, {S}, {N * H}] q, float[{k_shape}] k4, float[{B}, {N}, {L}, {H}] v4,
           float[{B}, {L}, {N * H}] v3in, float[{B}, 1, {S}, {L}] m, int32[{B}, {L}] kpm) => (float[{B}, {S}, {N * H}] y) {{
            merge = Constant <value = int64[3] {{0, 0, -1}}> ()
            kt = {k_from}
            k3 = Reshape (kt, merge)
            {v_lines}
            {extra}
            {"a" if after else "y"} = com.microsoft.MultiHeadAttention <num_heads = {heads}, scale = 0.3> ({mha_inputs})
            {"y = Relu (a)" if after else ""}
        }}""")


def _feeds():
    rng = np.random.default_rng(0)
    f = {"q": rng.standard_normal((B, S, N * H)), "k4": rng.standard_normal((B, N, L, H)),
         "v4": rng.standard_normal((B, N, L, H)), "v3in": rng.standard_normal((B, L, N * H)),
         "m": np.where(rng.random((B, 1, S, L)) < 0.3, -1e30, 0.0)}
    kpm = np.ones((B, L), np.int32)
    kpm[1, -2:] = 0   # the second row's last two keys padded
    return {**{k: v.astype(np.float32) for k, v in f.items()}, "kpm": kpm}


def _run(proto):
    model, modified, p = apply(MhaHeadsFirstKvPass, proto, shape_inference=True)
    DeadCodeEliminationPass()(model)
    return model, modified, p


def ops(model) -> dict[str, int]:
    return {k: v for k, v in _ops(model).items() if k != "Constant"}


@pytest.mark.parametrize("inputs", ["q, k3, v3", "q, k3, v3, , , m", "q, k3, v3, , kpm, m"])
def test_merged_heads_first_kv_read_as_they_are(inputs):
    proto = _mha(mha_inputs=inputs)
    model, modified, p = _run(proto)
    assert modified and p.stats["MultiHeadAttention"] == 1
    assert ops(model) == {"MultiHeadAttention": 1}
    mha = next(n for n in model.graph if n.op_type == "MultiHeadAttention")
    assert [v.name for v in mha.inputs[1:3]] == ["k4", "v4"]
    check_same(proto, model, _feeds())


def test_other_permutation_keeps_one_transpose():
    # k given transposed, [B, N, H, L] (K^T): Transpose [0, 3, 1, 2] composed with the merge's is
    # [0, 1, 3, 2], not the identity, so k is read through that one Transpose (the Reshape goes)
    proto = _mha(k_from="Transpose <perm = [0, 3, 1, 2]> (k4)", k_shape=f"{B}, {N}, {H}, {L}")
    model, modified, _ = _run(proto)
    assert modified and ops(model) == {"Transpose": 1, "MultiHeadAttention": 1}
    assert [list(n.attributes["perm"].value) for n in model.graph if n.op_type == "Transpose"] == [[0, 1, 3, 2]]
    rng = np.random.default_rng(1)
    check_same(proto, model, {**_feeds(), "k4": rng.standard_normal((B, N, H, L)).astype(np.float32)})


@pytest.mark.parametrize("case", ["value-3d", "bias", "past", "heads", "lengths"])
def test_refused(case):
    kw = {"value-3d": dict(v_glue=False),   # ORT refuses a 4-D key beside a 3-D value
          "bias": dict(extra=f"bias = Constant <value = float[{3 * N * H}] {{{', '.join(['0.5'] * 3 * N * H)}}}> ()",
                       mha_inputs="q, k3, v3, bias"),
          "past": dict(mha_inputs="q, k3, v3, , , m, k4, v4"),
          # the merged [B, L, N*H] split into 2N heads of H / 2 by the op: [B, N, L, H] is not its BNSH
          "heads": dict(heads=2 * N),
          # key_padding_mask as key lengths [B]: a form not checked heads-first
          "lengths": dict(extra=f"kl = Constant <value = int32[{B}] {{{L}, {L - 2}}}> ()", mha_inputs="q, k3, v3, , kl")}[case]
    model, modified, _ = _run(_mha(**kw))
    assert not modified


def test_cross_attention_cache_of_a_decoder():
    # whisper's decoder with a cache: the cross-attention keys and values come in as inputs
    # [B, N, L, H]; at ort-O3 each cross MultiHeadAttention reads them directly (76 -> 68 nodes)
    from onnx_fuse import optimize

    path = CORPUS / "whisper_decoder__kv__trained.onnx"
    result = optimize(str(path), level=3, target="ort", verify=True)
    assert result.report.passed
    graph = result.model.graph
    cross = [n for n in graph if n.op_type == "MultiHeadAttention" and len(n.inputs) < 7]
    assert len(cross) == 2 and all(n.inputs[1].is_graph_input() and n.inputs[2].is_graph_input() for n in cross)
    assert not [n for n in graph if n.op_type == "Transpose"]


def test_shape_inference_reads_the_heads_first_value():
    # the stand-in onnx's inference sees (passes/_op_shapes.py) gives [B, S, N*Hv] for a 4-D value
    from onnx_fuse.passes.shape_inference import ShapeInferencePass

    model, modified, _ = _run(_mha(after=True))
    assert modified
    mha = next(n for n in model.graph if n.op_type == "MultiHeadAttention")
    mha.outputs[0].shape = None
    ShapeInferencePass()(model)
    assert list(mha.outputs[0].shape) == [B, S, N * H]


def test_kv_from_chains_that_take_the_glue_are_left_3d():
    """LongT5's blocks: k / v [B*N, N, L, H] are Transpose -> Flatten -> Reshape of [B, N, L, H, D]; the
    glue's Transpose folds into that chain's own (read 3-D they are the 5-D value merged, no
    Transpose), so the glue stays for fold-layout-chains: heads-first would keep both chains'
    Transposes (LongT5 ort-O3: 15 -> 11 Transposes left this way)."""
    proto = parse(_HEAD + f"""
        g (float[{B}, {S}, {N * H}] q, float[1, {B}, {L}, {N}, {H}] k5, float[1, {B}, {L}, {N}, {H}] v5)
          => (float[{B}, {S}, {N * H}] y) {{
            merge = Constant <value = int64[3] {{0, 0, -1}}> ()
            view = Constant <value = int64[4] {{0, {N}, -1, {H}}}> ()
            kt5 = Transpose <perm = [0, 1, 3, 2, 4]> (k5)
            kf = Flatten <axis = 2> (kt5)
            k4 = Reshape (kf, view)
            vt5 = Transpose <perm = [0, 1, 3, 2, 4]> (v5)
            vf = Flatten <axis = 2> (vt5)
            v4 = Reshape (vf, view)
            kt = Transpose <perm = [0, 2, 1, 3]> (k4)
            k3 = Reshape (kt, merge)
            vt = Transpose <perm = [0, 2, 1, 3]> (v4)
            v3 = Reshape (vt, merge)
            y = com.microsoft.MultiHeadAttention <num_heads = {N}, scale = 0.3> (q, k3, v3)
        }}""")
    _, modified, p = _run(proto)
    assert not modified and p.stats["MultiHeadAttention"] == 0



def _one_head(axis: str = "1", v_unsqueezed: bool = True):
    """One head: k [B, L, H] (and v, or v given [B, 1, L, H]) unsqueezed at ``axis`` and merged back by
    the lowering's glue."""
    v_in, v4 = (f"float[{B}, {L}, {H}] v", "v4 = Unsqueeze (v, ax)") if v_unsqueezed else (f"float[{B}, 1, {L}, {H}] v4", "")
    return parse(_HEAD + f"""
        g (float[{B}, {S}, {H}] q, float[{B}, {L}, {H}] k, {v_in}) => (float[{B}, {S}, {H}] y) {{
            merge = Constant <value = int64[3] {{0, 0, -1}}> ()
            ax = Constant <value = int64[1] {{{axis}}}> ()
            k4 = Unsqueeze (k, ax)
            {v4}
            kt = Transpose <perm = [0, 2, 1, 3]> (k4)
            k3 = Reshape (kt, merge)
            vt = Transpose <perm = [0, 2, 1, 3]> (v4)
            v3 = Reshape (vt, merge)
            y = com.microsoft.MultiHeadAttention <num_heads = 1, scale = 0.3> (q, k3, v3)
        }}""")


@pytest.mark.parametrize("axis", ["1", "-3"])
def test_one_head_unsqueezed_kv_read_3d(axis):
    """One head (the one-head rules' [N, L, H] viewed [N, 1, L, H]): k and v are 3-D values unsqueezed at
    the heads axis, so the merge back is the value itself; the op reads them 3-D, no Unsqueeze left
    (heads-first kept one per tensor: janus_vqgan ort-O3, 327 -> 307 nodes with view-chain's Squeeze end)."""
    proto = _one_head(axis)
    model, modified, p = _run(proto)
    assert modified and p.stats["one-head-3d"] == 1, dict(p.stats)
    assert ops(model) == {"MultiHeadAttention": 1}, ops(model)
    mha = next(n for n in model.graph if n.op_type == "MultiHeadAttention")
    assert [v.name for v in mha.inputs[1:3]] == ["k", "v"]
    rng = np.random.default_rng(4)
    check_same(proto, model, {n: rng.standard_normal((B, d, H)).astype(np.float32) for n, d in (("q", S), ("k", L), ("v", L))})


def test_one_head_with_one_unsqueezed_tensor_stays_heads_first():
    # only k is a 3-D value unsqueezed (v comes in [B, 1, L, H]): both go heads-first as before (ORT takes a
    # 4-D k only beside a 4-D v), the Unsqueeze stays
    proto = _one_head(v_unsqueezed=False)
    model, modified, p = _run(proto)
    assert modified and "one-head-3d" not in p.stats and p.stats["MultiHeadAttention"] == 1
    rng = np.random.default_rng(5)
    check_same(proto, model, {"q": rng.standard_normal((B, S, H)).astype(np.float32),
                              "k": rng.standard_normal((B, L, H)).astype(np.float32),
                              "v4": rng.standard_normal((B, 1, L, H)).astype(np.float32)})

"""A mask probe that ran but changed with another integer input (token_type_ids all 0 vs all 1 or in
runs: _mask_probe._varies) is refused by _run_probe itself (trust32), so no proof can take it for a
shape the model cannot run at. Session 31's fixes wrote that refusal at four call sites; a fifth,
cache_padding_cut's probe with an attention mask one column longer than the keys (_reads_first_keys),
still read a varied probe as "the model takes no longer mask" and proved the cache mask with no cut.
That probe also ran at one new token with every key kept only, where a term that keeps more keys
shows nothing (every kept key is causal there): it proved such a mask with a cut."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_fuse.rewrite._expr import EvalFailure
from onnx_fuse.rewrite._key_padding_proof import cache_key_padding, cache_padding_cut
from onnx_fuse.rewrite._mask_probe import _cone, _run_probe, causal_only

LOWEST = float(np.finfo(np.float32).min)


def _cache_graph(typed: str | None, shapes_only: bool = False, new: str | int = "s") -> dict:
    """q [b, 2, s, 64] over past [b, 1, p, 64]: causal AND attention_mask [b, mask_len] cut to its first
    P + S columns, read by a MultiHeadAttention. ``typed``: where token_type_ids (declared as long as
    attention_mask) has a nonzero column past the first P + S, which only an attention mask longer than
    the keys has, every key is kept ("keeps") or masked ("hides"). ``shapes_only``: no attention_mask
    (the causal part alone); ``new``: the new tokens' dim (1: a decode step)."""
    n = helper.make_node
    nodes = [n("Shape", ["past"], ["ps"], start=2, end=3), n("Shape", ["q"], ["ss"], start=2, end=3),
             n("Add", ["ps", "ss"], ["ts"]), n("Squeeze", ["ps"], ["p0"]), n("Squeeze", ["ts"], ["t0"]),
             n("Range", ["p0", "t0", "one"], ["qp"]), n("Range", ["zero", "t0", "one"], ["kv"]),
             n("Unsqueeze", ["qp", "ax1"], ["qc"]), n("LessOrEqual", ["kv", "qc"], ["causal"])]
    if shapes_only:
        nodes.append(n("Unsqueeze", ["causal", "ax01"], ["keep0"]))
    else:
        nodes += [n("Slice", ["attention_mask", "ax0", "ts", "ax1"], ["am_cut"]),
                  n("Cast", ["am_cut"], ["amb"], to=TensorProto.BOOL),
                  n("Unsqueeze", ["amb", "ax12"], ["am4"]), n("And", ["am4", "causal"], ["keep0"])]
    keep = "keep0"
    if typed:
        nodes += [n("Slice", ["token_type_ids", "ts", "big", "ax1"], ["tt_more"]),
                  n("ReduceSum", ["tt_more", "ax1"], ["tt_sum"], keepdims=1),
                  n("Greater", ["tt_sum", "zero"], ["more"]), n("Unsqueeze", ["more", "ax23"], ["more4"]),
                  *([n("Or", ["keep0", "more4"], ["keep1"])] if typed == "keeps" else
                    [n("Not", ["more4"], ["less4"]), n("And", ["keep0", "less4"], ["keep1"])])]
        keep = "keep1"
    nodes += [n("Where", [keep, "zf", "neg"], ["mask"]),
              n("MultiHeadAttention", ["q3", "q3", "q3", "", "", "mask"], ["y"], domain="com.microsoft",
                num_heads=2)]
    consts = {"zero": 0, "one": 1, "big": [1 << 40], "ax0": [0], "ax1": [1], "ax01": [0, 1], "ax12": [1, 2],
              "ax23": [2, 3], "zf": 0.0, "neg": LOWEST}
    inits = [numpy_helper.from_array(np.asarray(v, np.float32 if isinstance(v, float) else np.int64), k)
             for k, v in consts.items()]
    vi = helper.make_tensor_value_info
    ins = [vi("q", TensorProto.FLOAT, ["b", 2, new, 64]), vi("q3", TensorProto.FLOAT, ["b", new, 128]),
           vi("past", TensorProto.FLOAT, ["b", 1, "p", 64]),
           *([] if shapes_only else [vi("attention_mask", TensorProto.INT64, ["b", "mask_len"])]),
           vi("token_type_ids", TensorProto.INT64, ["b", "mask_len"])]
    graph = helper.make_graph(nodes, "m", ins, [vi("y", TensorProto.FLOAT, None)], inits)
    model = ir.from_proto(onnx.shape_inference.infer_shapes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)])))
    vals = {v.name: v for node in model.graph for v in node.outputs}
    return {"mask": vals["mask"], **{v.name: v for v in model.graph.inputs}}


@pytest.mark.parametrize("new", ["s", 1])
def test_the_cut_cache_mask_is_proven_with_its_cut(new):
    g = _cache_graph(None, new=new)
    assert cache_key_padding(None, g["mask"], g["q"], g["past"])
    assert cache_padding_cut(None, g["mask"], g["q"], g["past"]) is True


@pytest.mark.parametrize("new", ["s", 1])
@pytest.mark.parametrize("typed", ["hides", "keeps"])
def test_a_mask_varying_with_token_types_at_a_longer_attention_mask_is_refused(typed, new):
    """Accepted before: "hides" with no cut (cache_padding_cut False: the longer-mask probe ran but varied,
    read as a mask the model does not take), "keeps" with a cut (nothing varied at one new token with
    every key kept). With token_type_ids typed past the keys the model keeps or masks every key; the
    rebuild reading attention_mask alone (whole or cut) does neither. At one new token only, "keeps"
    shows with keys dropped."""
    g = _cache_graph(typed, new=new)
    assert not cache_key_padding(None, g["mask"], g["q"], g["past"])


def test_run_probe_raises_for_a_probe_that_varies():
    """The contract every proof relies on: values, a reason the cone did not run, or EvalFailure."""
    g = _cache_graph("hides")
    cone, as_const = _cone(g["mask"])
    env = {"b": 1, "s": 3, "p": 16}
    arr, why = _run_probe(cone, as_const, g["mask"], 16, 3, env, 18)   # no column past the keys: the same
    assert why is None and arr.shape == (1, 1, 3, 19)
    with pytest.raises(EvalFailure, match="the mask changes with the values of the integer input 'token_type_ids'"):
        _run_probe(cone, as_const, g["mask"], 16, 3, env, 18, extra_keys=1)
    arr, why = _run_probe(cone, as_const, g["mask"], 16, 3, env, 18, extra_keys=-1)
    assert arr is None and why.startswith("the mask probe did not run")


def test_causal_only_never_reaches_a_varied_probe():
    """_causal_probes' longer / shorter attention-mask probes (extra_keys) skip a result that does not
    fit; they cannot meet a varied one: a cone reading an input's values (token_type_ids here) is
    refused before any probe, so the varied integer inputs are none. Pinned: that refusal stays."""
    g = _cache_graph("keeps", shapes_only=True)
    assert causal_only(None, g["mask"], g["q"], g["q"], g["past"]) is False
    g = _cache_graph(None, shapes_only=True)
    assert causal_only(None, g["mask"], g["q"], g["q"], g["past"]) is True

"""verify's longer-mask case: an integer mask input declared with a length of its own (no other input or
output names that symbol) fed 2 columns longer, kept, where the original takes it (verify.longer_mask_case).

transformers 5's decoders read attention_mask's first P + S columns, so their exports take a longer mask; a
rewrite that rebuilt the mask from the whole input failed on it at run time (56d9055 fixed one: the cache
rebuild), which verify's feeds, always as long as the keys, never showed."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper as oh, numpy_helper

from onnx_fuse.verify import LONGER_MASK, longer_mask_case, verify


def _keys_weighted(cut: bool, mask_dim: str = "mask_len") -> onnx.ModelProto:
    """out = x * sum of attention_mask's first S columns (cut) or of all of them, broadcast against x's
    keys: [B, S] * [B, S] after Cast (the uncut form needs attention_mask as long as x)."""
    nodes = [oh.make_node("Shape", ["x"], ["xs"]), oh.make_node("Slice", ["xs", "one", "two"], ["s1"]),
             oh.make_node("Slice", ["attention_mask", "zero", "s1", "one"], ["am_cut"]),
             oh.make_node("Cast", ["am_cut" if cut else "attention_mask"], ["amf"], to=TensorProto.FLOAT),
             oh.make_node("Mul", ["x", "amf"], ["out"])]
    inits = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("zero", 0), ("one", 1), ("two", 2))]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"]),
                                       oh.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", mask_dim])],
                          [oh.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "seq"])], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


def test_the_case_lengthens_only_a_mask_of_its_own_length():
    feeds = {"x": np.ones((2, 3), np.float32), "attention_mask": np.array([[1, 1, 0], [1, 0, 1]], np.int64)}
    label, got = longer_mask_case(_keys_weighted(True), feeds)
    assert label == LONGER_MASK
    np.testing.assert_array_equal(got["attention_mask"], [[1, 1, 0, 1, 1], [1, 0, 1, 1, 1]])
    assert got["x"] is feeds["x"] and feeds["attention_mask"].shape == (2, 3)   # the first case untouched
    assert longer_mask_case(_keys_weighted(True, mask_dim="seq"), feeds) is None   # declared as long as x


def test_a_rewrite_that_reads_the_whole_mask_fails_the_case():
    original = _keys_weighted(True)
    result = verify(original, _keys_weighted(False))
    assert LONGER_MASK in result["cases"] and not result["passed"]
    assert LONGER_MASK in result.get("error", ""), result.get("error")
    ok = verify(original, original)
    assert ok["passed"] and LONGER_MASK in ok["cases"]


def test_no_case_where_the_original_refuses_a_longer_mask():
    # the uncut model needs the mask as long as x: the case is dropped, the rest verified
    result = verify(_keys_weighted(False), _keys_weighted(False))
    assert result["passed"] and LONGER_MASK not in result["cases"]


def test_no_case_for_a_mask_declared_as_a_sum_over_another_inputs_length():
    # Muse Glimmer's DFlash drafter (hold-out 47): attention_mask [B, 'sequence_len + 6'] over 6 context states and
    # the block noise_embeds [B, 'sequence_len', D]; the optimizer reads the keys' count off the mask's declared
    # length (shape_cse: Shape(context)[1] + Shape(noise)[1] -> Shape(mask)[1]), so a mask 2 columns longer breaks
    # the declared contract, not the rewrite: no case. Before this, longer_mask_case lengthened it (a false FAIL).
    feeds = {"x": np.ones((2, 3), np.float32), "attention_mask": np.ones((2, 9), np.int64)}
    assert longer_mask_case(_keys_weighted(True, mask_dim="seq + 6"), feeds) is None
    assert longer_mask_case(_keys_weighted(True, mask_dim="6 + seq"), feeds) is None
    # a sum of symbols no other input names is still a length of its own
    label, got = longer_mask_case(_keys_weighted(True, mask_dim="past + new"), feeds)
    assert label == LONGER_MASK and got["attention_mask"].shape == (2, 11)

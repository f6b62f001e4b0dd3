"""Property: over random graphs built around each built-in pattern, the rewrite either does not
fire or preserves the ORT outputs (optimizations off) and passes the full checker.

The graph generator instantiates a rule's own `match` text: it picks an alternative per statement,
includes or drops optional nodes, fills constants from `where` (sometimes perturbed, to make near
misses), picks commuted input orders, writes promoted attributes (ReduceMean axes...) in the form
of the model's opset, and sometimes lets an intermediate escape (extra graph output) or wraps the
pattern between other ops. Graphs ORT cannot run (the heuristics guessed a bad shape) are skipped;
the rules in NON_VACUOUS must fire in at least one example, so the property is not vacuous.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rw_testing import TOL, run  # noqa: I001

from onnx_fuse.rewrite import RewritePass, RuleSet, load_rule_set
from onnx_fuse.rewrite._loader import load_builtin
from onnx_fuse.rewrite._rule import COMMUTATIVE, PROMOTED_ATTRIBUTES
from onnx_fuse.verify import make_session

D = 8
# Opset at which an attribute became an input.
PROMOTED_SINCE = {**{op: 18 for op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                                        "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")},
                  "ReduceSum": 13, "Squeeze": 13, "Unsqueeze": 13, "Split": 13, "Clip": 11, "Pad": 11,
                  "Slice": 10}
CAPTURE_GUESS = {"axes": [-1], "axis": -1, "to": 1, "epsilon": 1e-5, "keepdims": 1, "alpha": 1.0,
                 "approximate": "none", "stash_type": 1}

# rules that must fire on their own pattern (the property is not vacuous); the GELUs' patterns are
# one Mul (their products are read by value, tests/rules/test_gelu_product.py and
# test_gelu_tanh_product.py), so QuickGelu and Pow(v, -0.5) stand in
NON_VACUOUS = ("quick-gelu-ort", "rsqrt-pow")
BUILTIN = sorted(load_builtin()[0], key=lambda r: r.name)
FIRED: collections.Counter[str] = collections.Counter()


def _const(name: str, arr: np.ndarray) -> onnx.NodeProto:
    return onnx.helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(arr, name + "_v"))


def instantiate(rule, data):
    opset = max(rule.opset_min or 18, 18)
    nodes: list[onnx.NodeProto] = []
    inputs: list[onnx.ValueInfoProto] = []
    made: dict[str, str] = {}
    counter = [0]

    def fresh(stem: str) -> str:
        counter[0] += 1
        return f"{stem}_{counter[0]}"

    def leaf(var: str) -> str:
        c = rule.where.get(var)
        if c is not None and (c.scalar is not None or c.value is not None):
            want = np.asarray(c.scalar if c.scalar is not None else c.value, dtype=np.float32)
            if data.draw(st.integers(0, 4), label=f"perturb {var}") == 0:
                want = want * np.float32(1.37) + np.float32(0.11)
            if c.scalar is not None:
                want = want.reshape(data.draw(st.sampled_from([(), (1,), (1, 1)]), label=f"shape {var}"))
            nodes.append(_const(var, want.astype(np.float32)))
            return var
        rank1 = c is not None and ((isinstance(c.rank, frozenset) and c.rank == frozenset([1])) or
                                   (c.shape is not None and len(c.shape) == 1))
        if c is not None and c.const:
            shape = (D,) if rank1 else ()
            arr = (np.abs(np.random.default_rng(len(made)).standard_normal(shape)) * 1e-3 + 1e-5).astype(np.float32)
            if rank1:
                arr = arr + 1.0
            nodes.append(_const(var, arr))
            return var
        shape = [D] if rank1 else [2, 3, D]
        if var in ("g", "gamma", "beta", "b", "bias", "w", "scale") and not rank1:
            shape = [D]
        inputs.append(onnx.helper.make_tensor_value_info(var, onnx.TensorProto.FLOAT, shape))
        return var

    def realize(var: str | None) -> str:
        if var is None:
            return leaf(fresh("wild"))
        if var in made:
            return made[var]
        if var not in rule.producers:
            made[var] = leaf(var)
            return made[var]
        si, oi = rule.producers[var]
        stmt = rule.match[si]
        k = data.draw(st.integers(0, len(stmt.alternatives) - 1), label=f"alt {si}") if len(stmt.alternatives) > 1 else 0
        alt = stmt.alternatives[k]
        if alt.optional and not data.draw(st.booleans(), label=f"present {si}"):
            made[var] = realize(alt.passthrough)
            return made[var]
        ins = [realize(i) for i in alt.inputs]
        if alt.op_type in COMMUTATIVE and len(ins) == 2 and data.draw(st.booleans(), label=f"swap {si}"):
            ins.reverse()
        attrs = {}
        for a in alt.attrs.values():
            value = a.literal if a.capture is None else CAPTURE_GUESS.get(a.name)
            if value is None:
                continue
            promoted = PROMOTED_ATTRIBUTES.get(alt.op_type, {}) if alt.domain == "" else {}
            if a.name in promoted and opset >= PROMOTED_SINCE.get(alt.op_type, 99):
                idx = promoted[a.name]
                while len(ins) < idx:
                    ins.append("")
                cname = fresh(a.name)
                nodes.append(_const(cname, np.asarray(value, dtype=np.int64)))
                ins.insert(idx, cname) if len(ins) == idx else ins.__setitem__(idx, cname)
            else:
                attrs[a.name] = value
        outs = [o if o is not None else fresh("unused") for o in stmt.outputs]
        for o in stmt.outputs:
            if o is not None:
                made[o] = o
        nodes.append(onnx.helper.make_node(alt.op_type, ins, outs, domain=alt.domain, **attrs))
        return made[var]

    for out in rule.outputs:
        realize(out)
    outs = list(dict.fromkeys(made[o] for o in rule.outputs))
    inter = [o for s in rule.match for o in s.outputs if o and o in made and made[o] == o and o not in outs]
    if inter and data.draw(st.integers(0, 3), label="escape") == 0:
        outs.append(data.draw(st.sampled_from(sorted(inter)), label="escaping"))
    graph = onnx.helper.make_graph(
        nodes, "g", inputs, [onnx.helper.make_value_info(o, onnx.helper.make_tensor_type_proto(
            onnx.TensorProto.FLOAT, None)) for o in outs])
    domains = {n.domain for n in nodes if n.domain}
    model = onnx.helper.make_model(graph, ir_version=10, opset_imports=[onnx.helper.make_opsetid("", opset)] +
                                   [onnx.helper.make_opsetid(d, 1) for d in sorted(domains)])
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in inputs}
    return model, feeds


RULE_SETS = {t: load_rule_set(target=t, max_level=4) for t in ("ort", "onnx", "trt")}


@pytest.mark.parametrize("rule", BUILTIN, ids=lambda r: r.name)
def test_rewrite_preserves_outputs_or_does_not_fire(rule):
    # trt-only rules too: their onnx_fuse plugin ops run in ORT through the NumPy references
    target = next(t for t in ("ort", "onnx", "trt") if t in rule.targets)
    rules = RULE_SETS[target]
    runs = [0]

    @settings(max_examples=25, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(st.data())
    def prop(data):
        model, feeds = instantiate(rule, data)
        try:
            model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
            want = run(model, feeds)
        except Exception:
            return  # the generator guessed shapes this pattern cannot take
        runs[0] += 1
        try:
            onnx.checker.check_model(model, full_check=True)
            checkable = True
        except onnx.checker.ValidationError:
            checkable = False  # e.g. a contrib op's output has no inferable shape
        work = ir.from_proto(model)
        p = RewritePass(RuleSet(rules))
        p(work)
        if not p.stats:
            return
        FIRED.update(p.stats)
        proto = ir.to_proto(work)
        if checkable:
            onnx.checker.check_model(proto, full_check=True)
        if any(n.domain == "onnx_fuse" for n in proto.graph.node):
            sess = make_session(proto)  # our plugin ops through their NumPy references
            got = sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})
        else:
            got = run(proto, feeds)
        for w, g in zip(want, got):
            rtol, atol = TOL[w.dtype]
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"after {dict(p.stats)}")

    prop()
    if rule.name in NON_VACUOUS:
        assert runs[0] > 0 and FIRED[rule.name] > 0, f"{rule.name} never fired on its own pattern"

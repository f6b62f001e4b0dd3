"""Pinned output opsets for the differential fuzzer: ``optimize(..., opset=N)``.

With ``opset=N`` below 23 the fusion may raise the model to N at most: the rules gated above N do
not fire and attention takes the plain-ops lowering (rules/attention/lower_plain.yaml), every
rule's below-23 path. The fuzzer draws a pin per run (level >= 2: O1 runs no fusion), from a side
stream of the graph's seed (the graph itself and the unpinned runs' draws stay what they were),
for PIN_SHARE of the runs whose model opset allows one: N from max(model opset, LOWEST) to 22
(onnx-fuse never converts a model down, so a pin below the model's own opset is a refusal, which
tests cover, not a fuzz run). A pinned run is judged like the others, and its output's
default-domain opset must be at most N (class ``opset`` otherwise).
"""

from __future__ import annotations

import numpy as np
import onnx

#: the share of (level >= 2, target) runs that are pinned, where the model's opset allows
PIN_SHARE = 0.35
#: the lowest pin drawn and the highest (23, the fusion opset, is the unpinned ceiling)
LOWEST, HIGHEST = 14, 22
PIN_SALT = 0x0B5E
_TARGETS = ("ort", "onnx", "trt")


def model_opset(model: onnx.ModelProto) -> int | None:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def draw_pin(seed: int, model: onnx.ModelProto, level: int, target: str, share: float = PIN_SHARE) -> int | None:
    """The pin of one run, or None: deterministic in (seed, level, target), whatever else runs."""
    own = model_opset(model)
    if level < 2 or share <= 0 or own is None or own > HIGHEST:
        return None
    rng = np.random.default_rng([seed, PIN_SALT, level, _TARGETS.index(target)])
    if rng.random() >= share:
        return None
    return int(rng.integers(max(own, LOWEST), HIGHEST + 1))


def above_pin(optimized: onnx.ModelProto, pin: int | None) -> str:
    """A detail line when the optimized model's default-domain opset is above the pin, else ""."""
    got = model_opset(optimized)
    if pin is None or got is None or got <= pin:
        return ""
    return f"output opset {got} above the pin opset={pin}"

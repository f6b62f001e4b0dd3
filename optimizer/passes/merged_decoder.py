"""Optimum's merged decoder: the attention mask's declared length, restated.

``optimum.onnx.merge_decoders`` puts decoder_model (no past) and decoder_with_past_model in the
two branches of an If on a bool ``use_cache_branch`` and declares each input as the no-past
decoder has it: the mask as ``[batch_size, sequence_length]``, the new tokens' own length. In the
cache branch the mask spans past + new tokens, so that declaration is false there, and the passes
that trust equal dim names (shape CSE merged the mask's length with input_ids', constant folding
and the rules read it) made the cache branch wrong: Optimum merged llama / gpt2 / qwen2 / phi3 all
differed on a padded mask (logits max abs 0.03-0.1) already at O1.

The mask's last dim is restated as ``<past> + <new>`` (the past inputs' length and the new
tokens'): true in the cache branch, and in the no-cache branch with the empty past it is fed; a
caller that feeds a dummy past there makes it a name no value of that branch equals (it reads no
past), which proves nothing rather than something false. Only for such a model: a bool input
that is the condition of a main-graph If, past inputs with a symbolic length, and a 2-D mask
input whose last dim is the new tokens' symbol.
"""

from __future__ import annotations

import re

import onnx_ir as ir

_NEW_TOKENS = ("input_ids", "decoder_input_ids", "inputs_embeds")


def _symbol(value: ir.Value, axis: int) -> str | None:
    shape = value.shape
    if shape is None or len(shape) <= axis:
        return None
    d = shape[axis]
    return None if isinstance(d, int) or d.value is None else str(d.value)


def _past_length(value: ir.Value) -> str | None:
    """The symbolic length of a past input [B, H, P, D] (a dim named like a length, else axis 2)."""
    if value.shape is None or len(value.shape) < 3:
        return None
    for axis in range(1, len(value.shape)):
        name = _symbol(value, axis)
        if name and re.search(r"past|seq|len|cache", name, re.I):
            return name
    return _symbol(value, 2) if len(value.shape) == 4 else None


def restate_merged_mask(model: ir.Model) -> int:
    """Restate the mask length of an Optimum merged decoder (module docstring); returns how many
    mask inputs were restated."""
    graph = model.graph
    conds = {n.inputs[0] for n in graph if n.op_type == "If" and n.domain in ("", "ai.onnx") and n.inputs}
    if not any(v in conds and v.dtype == ir.DataType.BOOL for v in graph.inputs):
        return 0
    pasts = {_past_length(v) for v in graph.inputs
             if v.name and v.name.lower().startswith("past") and v.dtype is not None and v.dtype.is_floating_point()}
    pasts.discard(None)
    new = next((v for v in graph.inputs if v.name in _NEW_TOKENS), None)
    new_len = _symbol(new, 1) if new is not None else None
    if len(pasts) != 1 or new_len is None or new_len in pasts:
        return 0
    total = f"{next(iter(pasts))} + {new_len}"
    restated = 0
    for v in graph.inputs:
        if (v.name and "mask" in v.name.lower() and "encoder" not in v.name.lower() and v.shape is not None
                and len(v.shape) == 2 and _symbol(v, 1) == new_len):
            v.shape = ir.Shape([v.shape[0], total])
            restated += 1
    return restated

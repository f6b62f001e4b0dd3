"""Optimization profiles for ``onnx-fuse build``: parsing ``NAME:MIN,OPT,MAX`` specs and checking
them against the model's inputs before TensorRT sees anything (names, ranks, fixed dims,
MIN <= OPT <= MAX, one range per named dim, a range for every dynamic input)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import onnx

from onnx_fuse.errors import UserError


Dims = tuple[int, ...]


@dataclass(frozen=True)
class InputRange:
    """min / opt / max shape of one input in one optimization profile."""

    min: Dims
    opt: Dims
    max: Dims

    def as_json(self) -> dict:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


@dataclass(frozen=True)
class Profile:
    """One optimization profile: input name -> range."""

    inputs: dict[str, InputRange]

    def as_json(self) -> dict:
        return {name: r.as_json() for name, r in self.inputs.items()}


def _dims(text: str, spec: str) -> Dims:
    text = text.strip()
    if text in ("", "scalar"):
        return ()
    try:
        dims = tuple(int(d) for d in re.split(r"[x×]", text))
    except ValueError:
        raise UserError(f"--profile {spec!r}: {text!r} is not a shape like 4x128") from None
    if any(d < 0 for d in dims):
        raise UserError(f"--profile {spec!r}: dimensions must be >= 0")
    return dims


def parse_profiles(specs: Iterable[str]) -> list[Profile]:
    """``NAME:MIN,OPT,MAX`` (or ``NAME:SHAPE`` for a fixed shape) -> profiles.

    Specs for different inputs go into one profile; naming an input a second time starts the next
    profile, so ``a:.. b:.. a:.. b:..`` is two profiles over inputs a and b.
    """
    profiles: list[dict[str, InputRange]] = []
    for spec in specs:
        name, sep, rest = spec.rpartition(":")
        if not sep or not name:
            raise UserError(f"--profile {spec!r}: expected NAME:MIN,OPT,MAX, e.g. "
                            "input_ids:1x1,4x128,8x512")
        parts = rest.split(",")
        if len(parts) == 1:
            parts = parts * 3
        if len(parts) != 3:
            raise UserError(f"--profile {spec!r}: give three shapes MIN,OPT,MAX (or one fixed "
                            "shape)")
        lo, opt, hi = (_dims(p, spec) for p in parts)
        if not profiles or name in profiles[-1]:
            profiles.append({})
        profiles[-1][name] = InputRange(lo, opt, hi)
    return [Profile(p) for p in profiles]


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(text: str | int | None) -> int | None:
    """``"4G"``, ``"512MiB"``, ``"1.5g"``, ``"1048576"`` -> bytes (binary units)."""
    if text is None or isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise UserError(f"--workspace {text!r}: expected a size like 4G, 512M or 1073741824")
    scale = 1024 ** " kmgt".index(m.group(2).lower() or " ")
    return int(float(m.group(1)) * scale)


def model_inputs(proto: onnx.ModelProto) -> dict[str, tuple[int, list[int | str | None] | None]]:
    """Real inputs (not initializers): name -> (elem_type, dims or None when the rank is unknown).

    A dim is an int (fixed), a str (named, e.g. "batch") or None (unnamed dynamic).
    """
    inits = {t.name for t in proto.graph.initializer}
    out = {}
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = None
        if tt.HasField("shape"):
            dims = []
            for d in tt.shape.dim:
                if d.HasField("dim_value") and d.dim_value >= 0:
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_param") and d.dim_param:
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
        out[vi.name] = (tt.elem_type, dims)
    return out


def _is_dynamic(dims) -> bool:
    return dims is None or any(not isinstance(d, int) for d in dims)


def _example_profile(name: str, dims) -> str:
    if dims is None:
        return f"{name}:MIN,OPT,MAX"
    lo = "x".join(str(d) if isinstance(d, int) else "1" for d in dims)
    opt = "x".join(str(d) if isinstance(d, int) else "4" for d in dims)
    hi = "x".join(str(d) if isinstance(d, int) else "16" for d in dims)
    return f"{name}:{lo},{opt},{hi}"


def validate_profiles(proto: onnx.ModelProto, profiles: Sequence[Profile]) -> None:
    """Check profiles against the model's inputs before anything is built."""
    inputs = model_inputs(proto)
    dynamic = {n: d for n, (_, d) in inputs.items() if _is_dynamic(d)}
    if dynamic and not profiles:
        example = " ".join(f"--profile {_example_profile(n, d)}" for n, d in dynamic.items())
        raise UserError(f"model has dynamic inputs ({', '.join(dynamic)}); give an optimization "
                        f"profile for each, e.g. {example}")
    for index, profile in enumerate(profiles):
        where = f"profile {index}" if len(profiles) > 1 else "profile"
        for name, rng in profile.inputs.items():
            if name not in inputs:
                raise UserError(f"{where}: model has no input {name!r} (inputs: "
                                f"{', '.join(inputs) or 'none'})")
            ranks = {len(rng.min), len(rng.opt), len(rng.max)}
            if len(ranks) != 1:
                raise UserError(f"{where}: {name}: MIN, OPT and MAX have different ranks "
                                f"({len(rng.min)}, {len(rng.opt)}, {len(rng.max)})")
            dims = inputs[name][1]
            if dims is not None and len(dims) != len(rng.min):
                raise UserError(f"{where}: {name} has rank {len(dims)} in the model "
                                f"({_fmt_dims(dims)}) but the profile gives rank {len(rng.min)}")
            for axis in range(len(rng.min)):
                lo, opt, hi = rng.min[axis], rng.opt[axis], rng.max[axis]
                if not lo <= opt <= hi:
                    raise UserError(f"{where}: {name} axis {axis}: need MIN <= OPT <= MAX, got "
                                    f"{lo}, {opt}, {hi}")
                fixed = dims[axis] if dims is not None else None
                if isinstance(fixed, int) and not lo == opt == hi == fixed:
                    raise UserError(f"{where}: {name} axis {axis} is fixed at {fixed} in the "
                                    f"model; the profile says {lo},{opt},{hi}")
        missing = [n for n in dynamic if n not in profile.inputs]
        if missing:
            example = " ".join(f"--profile {_example_profile(n, dynamic[n])}" for n in missing)
            raise UserError(f"{where}: no shape range for dynamic input(s) "
                            f"{', '.join(missing)}; add {example}")
        # TensorRT's ONNX parser treats equal dim names as equal dims: ranges must agree.
        named: dict[str, tuple[str, int, tuple[int, int, int]]] = {}
        for name, rng in profile.inputs.items():
            dims = inputs[name][1] or []
            for axis, d in enumerate(dims):
                if isinstance(d, str):
                    r = (rng.min[axis], rng.opt[axis], rng.max[axis])
                    seen = named.setdefault(d, (name, axis, r))
                    if seen[2] != r:
                        raise UserError(
                            f"{where}: dim {d!r} is {','.join(map(str, seen[2]))} on "
                            f"{seen[0]} axis {seen[1]} but {','.join(map(str, r))} on {name} "
                            f"axis {axis}; inputs sharing a named dim need the same range")


def _fmt_dims(dims) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"



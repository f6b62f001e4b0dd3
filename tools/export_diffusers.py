"""Export tiny diffusers models (UNets, diffusion transformers, the VAE) for the eighth sweep's part C.

UNet2DConditionModel (SD 1.x form, and SDXL's: linear projections, text_time conditioning), DiT,
PixArt-alpha, SD3 and SD 3.5's MMDiT-X (joint attention, QK RMSNorm, an extra image self-attention),
Flux (RoPE from text + image ids), AutoencoderKL's decoder and encoder (mid-block attention).

Runs in a venv with diffusers (tools/export_venv.sh /work/venvs/diffusers, then pip install diffusers);
the main venv has none. Every model is built from a small config with seeded weights, then made
trained-like with export_corpus.perturb (every bias and every constant-initialised parameter: norm
scales, GroupNorm's too, adaLN zero-inits), and exported the way these models are deployed:

  static      torch.onnx.export(dynamo=True), static shapes (batch 2, an 8x8 / 16x16 latent)
  dyn_batch   dynamo, the batch dim dynamic
  dyn_hw      dynamo, batch and the latent's height and width dynamic (UNet, VAE decoder)
  torchscript torch.onnx.export(dynamo=False), opset 17, static shapes (torch.nn.RMSNorm swapped for
              diffusers' RMSNorm module, the formula: no aten::rms_norm export at opset <= 20)
  eager       dynamo, static, the attention processors set to diffusers' AttnProcessor (baddbmm
              scores with the heads folded into the batch) instead of SDPA (UNet, VAE)
  half        dynamo, static, the model in float16 (torch_dtype=float16 pipelines; float inputs and
              output float16; UNet, DiT, SD3, Flux, VAE decoder)
  converted_half  the static export converted to float16 afterwards (onnxruntime.transformers.float16,
              keep_io_types: float32 inputs and output, Casts at the edges; same archs)

A dynamo export's Squeeze of a dim that is not 1 (torch: a no-op; PixArt) is written as the no-op
(_noop_squeezes). Each file is checked in ONNX Runtime against torch, and --out/manifest.json gets the entry that
tools/coverage.py reads (expected attention = the Attention modules the forward calls, a joint
attention counting once). Failures land under "failed" with a one-line reason.

    /work/venvs/diffusers/bin/python tools/export_diffusers.py --out /tmp/holdout_diff [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export_corpus import _io, _one_line, _sha256, _strip, convert_half, perturb  # noqa: E402

SEED = 0
BATCH = 2
STYLES = ("static", "dyn_batch", "torchscript", "eager")


def _unet():
    from diffusers import UNet2DConditionModel

    cfg = dict(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
               down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
               up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=24,
               attention_head_dim=8, norm_num_groups=8)
    model = UNet2DConditionModel(**cfg)

    def inputs(b):
        import torch
        return {"sample": torch.randn(b, 4, 16, 16), "timestep": torch.rand(b) * 999,
                "encoder_hidden_states": torch.randn(b, 7, 24)}

    def forward(m, sample, timestep, encoder_hidden_states):
        return m(sample, timestep, encoder_hidden_states, return_dict=False)[0]

    return cfg, model, inputs, forward


def _sdxl_unet():
    """SDXL's UNet form: linear in / out projections, heads per block, 2 transformer layers in the deeper
    block, text_time added conditioning (pooled text embeds + 6 size / crop ids)."""
    from diffusers import UNet2DConditionModel

    cfg = dict(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
               down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
               up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=24,
               attention_head_dim=(2, 4), use_linear_projection=True, transformer_layers_per_block=(1, 2),
               addition_embed_type="text_time", addition_time_embed_dim=8,
               projection_class_embeddings_input_dim=16 + 6 * 8, norm_num_groups=8)
    model = UNet2DConditionModel(**cfg)

    def inputs(b):
        import torch
        return {"sample": torch.randn(b, 4, 16, 16), "timestep": torch.rand(b) * 999,
                "encoder_hidden_states": torch.randn(b, 7, 24), "text_embeds": torch.randn(b, 16),
                "time_ids": torch.rand(b, 6) * 64}

    def forward(m, sample, timestep, encoder_hidden_states, text_embeds, time_ids):
        return m(sample, timestep, encoder_hidden_states, return_dict=False,
                 added_cond_kwargs={"text_embeds": text_embeds, "time_ids": time_ids})[0]

    return cfg, model, inputs, forward


def _dit():
    from diffusers import DiTTransformer2DModel

    cfg = dict(num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=8, num_layers=2,
               sample_size=8, patch_size=2, num_embeds_ada_norm=10, norm_num_groups=8)
    model = DiTTransformer2DModel(**cfg)

    def inputs(b):
        import torch
        return {"hidden_states": torch.randn(b, 4, 8, 8), "timestep": torch.rand(b) * 999,
                "class_labels": torch.randint(0, 4, (b,))}

    def forward(m, hidden_states, timestep, class_labels):
        return m(hidden_states, timestep=timestep, class_labels=class_labels, return_dict=False)[0]

    return cfg, model, inputs, forward


def _pixart():
    from diffusers import PixArtTransformer2DModel

    cfg = dict(num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=8, num_layers=2,
               cross_attention_dim=32, sample_size=8, patch_size=2, caption_channels=24,
               use_additional_conditions=False, norm_num_groups=8)
    model = PixArtTransformer2DModel(**cfg)

    def inputs(b):
        import torch
        return {"hidden_states": torch.randn(b, 4, 8, 8), "encoder_hidden_states": torch.randn(b, 7, 24),
                "timestep": torch.rand(b) * 999}

    def forward(m, hidden_states, encoder_hidden_states, timestep):
        return m(hidden_states, encoder_hidden_states=encoder_hidden_states, timestep=timestep,
                 added_cond_kwargs={"resolution": None, "aspect_ratio": None}, return_dict=False)[0]

    return cfg, model, inputs, forward


def _sd3():
    from diffusers import SD3Transformer2DModel

    cfg = dict(sample_size=8, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=16,
               num_attention_heads=2, joint_attention_dim=24, caption_projection_dim=32,
               pooled_projection_dim=16, out_channels=4, pos_embed_max_size=16, qk_norm="rms_norm")
    model = SD3Transformer2DModel(**cfg)

    def inputs(b):
        import torch
        return {"hidden_states": torch.randn(b, 4, 8, 8), "encoder_hidden_states": torch.randn(b, 7, 24),
                "pooled_projections": torch.randn(b, 16), "timestep": torch.rand(b) * 999}

    def forward(m, hidden_states, encoder_hidden_states, pooled_projections, timestep):
        return m(hidden_states, encoder_hidden_states=encoder_hidden_states,
                 pooled_projections=pooled_projections, timestep=timestep, return_dict=False)[0]

    return cfg, model, inputs, forward


def _sd35():
    """SD 3.5 medium's MMDiT-X: the first block adds a second, image-only self-attention (attn2)."""
    from diffusers import SD3Transformer2DModel

    cfg = dict(sample_size=8, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=16,
               num_attention_heads=2, joint_attention_dim=24, caption_projection_dim=32,
               pooled_projection_dim=16, out_channels=4, pos_embed_max_size=16, qk_norm="rms_norm",
               dual_attention_layers=(0,))
    model = SD3Transformer2DModel(**cfg)
    return (cfg, model) + _sd3()[2:]


def _flux():
    from diffusers import FluxTransformer2DModel

    cfg = dict(patch_size=1, in_channels=16, num_layers=1, num_single_layers=2, attention_head_dim=16,
               num_attention_heads=2, joint_attention_dim=24, pooled_projection_dim=16, guidance_embeds=False,
               axes_dims_rope=(4, 6, 6))
    model = FluxTransformer2DModel(**cfg)

    def inputs(b):
        import torch
        h = w = 4  # a 4x4 grid of packed latent tokens; text ids are zeros, image ids (0, row, col)
        img = torch.zeros(h, w, 3)
        img[..., 1] = torch.arange(h)[:, None]
        img[..., 2] = torch.arange(w)[None, :]
        return {"hidden_states": torch.randn(b, h * w, 16), "encoder_hidden_states": torch.randn(b, 7, 24),
                "pooled_projections": torch.randn(b, 16), "timestep": torch.rand(b),
                "img_ids": img.reshape(h * w, 3), "txt_ids": torch.zeros(7, 3)}

    def forward(m, hidden_states, encoder_hidden_states, pooled_projections, timestep, img_ids, txt_ids):
        return m(hidden_states, encoder_hidden_states=encoder_hidden_states,
                 pooled_projections=pooled_projections, timestep=timestep, img_ids=img_ids, txt_ids=txt_ids,
                 return_dict=False)[0]

    return cfg, model, inputs, forward


def _vae(part):
    def build():
        from diffusers import AutoencoderKL

        cfg = dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                   up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(32, 64), latent_channels=4,
                   norm_num_groups=8, layers_per_block=1, sample_size=32)
        model = AutoencoderKL(**cfg)

        def inputs(b):
            import torch
            return {"latent_sample": torch.randn(b, 4, 8, 8)} if part == "decoder" else \
                {"sample": torch.randn(b, 3, 16, 16)}

        def forward(m, x):
            return m.decode(x, return_dict=False)[0] if part == "decoder" else m.encode(x).latent_dist.mean

        return cfg, model, inputs, forward
    return build


HALF = ("half", "converted_half")
ARCHS = {"unet2d_cond": (_unet, STYLES + ("dyn_hw",) + HALF), "sdxl_unet": (_sdxl_unet, STYLES[:3]),
         "dit": (_dit, STYLES[:3] + HALF), "pixart": (_pixart, STYLES[:3]), "sd3": (_sd3, STYLES[:3] + HALF),
         "sd35": (_sd35, STYLES[:3]), "flux": (_flux, STYLES[:3] + HALF),
         "vae_decoder": (_vae("decoder"), STYLES + ("dyn_hw",) + HALF), "vae_encoder": (_vae("encoder"), ("static", "eager"))}


def _formula_rms_norms(model) -> None:
    """torch.nn.RMSNorm (Flux's QK norms) as diffusers' own RMSNorm module, same weights: the
    TorchScript exporter has no aten::rms_norm symbolic at any opset (up to 20), diffusers' module
    writes the formula (float32 mean of squares, rsqrt, scale)."""
    import torch
    from diffusers.models.normalization import RMSNorm

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.RMSNorm):
                affine = child.weight is not None
                eps = child.eps if child.eps is not None else torch.finfo(torch.float32).eps
                new = RMSNorm(child.normalized_shape[-1], eps=eps, elementwise_affine=affine)
                if affine:
                    new.weight.data.copy_(child.weight.data)
                setattr(parent, name, new)


def _noop_squeezes(path: Path) -> int:
    """torch's x.squeeze(d) on a dim that is not 1 is a no-op, but torch.onnx (dynamo, torch 2.13)
    writes it as Squeeze(x, [d]), which ONNX refuses (PixArt's hidden_states.squeeze(1) of a dim of 16):
    such a Squeeze, its axes constant and every squeezed dim a known size other than 1, becomes an
    Identity. Returns how many."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    proto = onnx.load(str(path))
    inferred = onnx.shape_inference.infer_shapes(proto)
    dims = {v.name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
            for v in (*inferred.graph.value_info, *inferred.graph.input)}
    consts = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    consts.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in proto.graph.node
                   if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    fixed = 0
    for node in proto.graph.node:
        if node.op_type != "Squeeze" or len(node.input) < 2 or node.input[1] not in consts:
            continue
        shape = dims.get(node.input[0])
        axes = np.asarray(consts[node.input[1]]).reshape(-1)
        if shape and all(shape[int(a)] not in (None, 1) for a in axes):
            node.op_type = "Identity"
            del node.input[1:]
            fixed += 1
    if fixed:
        onnx.save(proto, str(path))
    return fixed


def _halved(feeds: dict, style: str) -> dict:
    """style half: the float inputs in float16, as a float16 pipeline passes them (ids stay integer)."""
    if style != "half":
        return feeds
    return {n: v.half() if v.is_floating_point() else v for n, v in feeds.items()}


class _Wrap:
    def __new__(cls, model, forward):
        import torch

        class Wrap(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, *args):
                return forward(self.m, *args)
        return Wrap().eval()


def _attention_calls(model, args) -> tuple[int, int]:
    """(Attention forwards in one call, attention heads): the layers a fused graph should hold."""
    import torch
    from diffusers.models.attention_processor import Attention

    mods = [m for m in model.modules() if isinstance(m, Attention) or type(m).__name__.endswith("Attention")
            and hasattr(m, "processor")]
    calls = []
    hooks = [m.register_forward_hook(lambda mod, a, o: calls.append(mod)) for m in mods]
    with torch.no_grad():
        model(*args)
    for h in hooks:
        h.remove()
    return len(calls), (calls[0].heads if calls else 0)


def export_one(arch: str, style: str, path: Path) -> dict:
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    torch.manual_seed(SEED)
    cfg, model, inputs, forward = ARCHS[arch][0]()
    touched = perturb(model)
    if style == "torchscript":
        _formula_rms_norms(model)
    if style == "half":
        model = model.half()
    if style == "eager":
        from diffusers.models.attention_processor import AttnProcessor
        model.set_attn_processor(AttnProcessor())
    wrap = _Wrap(model, forward)
    torch.manual_seed(SEED + 1)
    feeds = _halved(inputs(BATCH), style)
    names = list(feeds)
    args = tuple(feeds.values())
    expected, heads = _attention_calls(wrap, args)
    tmp = path.with_name(f".{path.name}.tmp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if style == "torchscript":
            torch.onnx.export(wrap, args, str(tmp), input_names=names, output_names=["out"], dynamo=False,
                              opset_version=17)
        else:
            dyn = None
            if style in ("dyn_batch", "dyn_hw"):  # ids tables (Flux) have no batch axis
                batch = torch.export.Dim("batch", min=1, max=64)
                # dyn_hw: the latent's height and width too, even (the UNet downsamples once)
                hw = {2: 2 * torch.export.Dim("h2", min=2, max=64), 3: 2 * torch.export.Dim("w2", min=2, max=64)} \
                    if style == "dyn_hw" else {}
                dyn = {"args": tuple(({0: batch, **hw} if v.dim() == 4 else {0: batch})
                                     if v.shape and v.shape[0] == BATCH and n not in ("img_ids", "txt_ids")
                                     else None for n, v in feeds.items())}  # forward(*args)
            prog = torch.onnx.export(wrap, args, input_names=names, output_names=["out"], dynamic_shapes=dyn,
                                     dynamo=True, verbose=False)
            prog.save(str(tmp), external_data=False)
    _strip(tmp)
    if style != "torchscript":
        _noop_squeezes(tmp)
    sess = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
    declared = {i.name for i in sess.get_inputs()}
    diffs = []
    dynamic = style in ("dyn_batch", "dyn_hw")
    for b in ([BATCH, 1] if dynamic else [BATCH]):
        torch.manual_seed(SEED + 7 + b)
        f = _halved(inputs(b), style)
        if style == "dyn_hw" and b == 1:  # a second latent size: 1.5x the height, 2x the width
            f = {n: torch.randn(*v.shape[:2], v.shape[2] * 3 // 2, v.shape[3] * 2) if v.dim() == 4 else v
                 for n, v in f.items()}
        with torch.no_grad():
            ref = wrap(*f.values()).float().numpy()
        got = sess.run(None, {n: v.numpy() for n, v in f.items() if n in declared})[0]
        diffs.append(float(np.max(np.abs(got.astype(np.float32) - ref))))
    if style == "converted_half":
        convert_half(tmp)
        got = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"]).run(
            None, {n: v.numpy() for n, v in feeds.items() if n in declared})[0]
        with torch.no_grad():
            diffs.append(float(np.max(np.abs(got - wrap(*feeds.values()).numpy()))))
    # float16 rounds every op's output (ORT's CPU runs some in float32 behind Casts, torch others)
    if max(diffs) > (5e-2 if "half" in style else 1e-3):
        raise RuntimeError(f"ONNX Runtime differs from torch: max abs {max(diffs):.3g}")
    os.replace(tmp, path)
    proto = onnx.load(str(path))
    import diffusers

    return {"file": path.name, "arch": arch, "kind": "diffusion", "style": style, "weights": "trained",
            "model_type": arch, "ort_model_type": "unet" if "unet" in arch else ("vae" if "vae" in arch else "bert"),
            "hf_class": type(model).__name__, "config": cfg, "num_layers": expected, "attention_blocks": expected,
            "num_heads": heads, "num_kv_heads": heads, "hidden_size": None, "vocab_size": None,
            "opset_imports": {o.domain or "ai.onnx": o.version for o in proto.opset_import},
            "inputs": _io(proto.graph.input), "outputs": _io(proto.graph.output),
            "nodes": len(proto.graph.node), "bytes": path.stat().st_size, "sha256": _sha256(path), "seed": SEED,
            "perturbed_params": len(touched),
            "exporter": {"name": "torch.onnx.export", "dynamo": style != "torchscript",
                         "dynamic_batch": dynamic, "dynamic_hw": style == "dyn_hw",
                         "attn_processor": "AttnProcessor" if style == "eager" else "default",
                         "versions": {"torch": torch.__version__, "diffusers": diffusers.__version__}},
            "torch_check": {"batches": [BATCH, 1] if dynamic else [BATCH], "max_abs": max(diffs)}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/holdout_diff"))
    ap.add_argument("--only", nargs="*", default=None, help="archs or file-name substrings")
    ns = ap.parse_args(argv)
    ns.out.mkdir(parents=True, exist_ok=True)
    mpath = ns.out / "manifest.json"
    manifest = json.loads(mpath.read_text()) if mpath.exists() else {"files": {}, "failed": {}}
    for arch, (_, styles) in ARCHS.items():
        for style in styles:
            name = f"{arch}__{style}__trained.onnx"
            if ns.only and not any(s in name for s in ns.only):
                continue
            try:
                entry = export_one(arch, style, ns.out / name)
                manifest["files"][name] = entry
                manifest["failed"].pop(name, None)
                check = entry["torch_check"]["max_abs"]
                print(f"ok     {name}  attention {entry['attention_blocks']}  max_abs {check:.2g}")
            except Exception as exc:  # noqa: BLE001 - the manifest records why a file is missing
                manifest["failed"][name] = _one_line(exc)
                manifest["files"].pop(name, None)
                print(f"failed {name}: {_one_line(exc)}")
            tmp = mpath.with_name(".manifest.json.tmp")
            tmp.write_text(json.dumps(manifest, indent=1) + "\n")
            os.replace(tmp, mpath)
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
  torchscript torch.onnx.export(dynamo=False), opset 17, static shapes
  eager       dynamo, static, the attention processors set to diffusers' AttnProcessor (baddbmm
              scores with the heads folded into the batch) instead of SDPA (UNet, VAE)

Each file is checked in ONNX Runtime against torch, and --out/manifest.json gets the entry that
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
from export_corpus import _io, _one_line, _sha256, _strip, perturb  # noqa: E402

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


ARCHS = {"unet2d_cond": (_unet, STYLES + ("dyn_hw",)), "sdxl_unet": (_sdxl_unet, STYLES[:3]), "dit": (_dit, STYLES[:3]),
         "pixart": (_pixart, STYLES[:3]), "sd3": (_sd3, STYLES[:3]), "sd35": (_sd35, STYLES[:3]),
         "flux": (_flux, STYLES[:3]), "vae_decoder": (_vae("decoder"), STYLES + ("dyn_hw",)),
         "vae_encoder": (_vae("encoder"), ("static", "eager"))}


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
    if style == "eager":
        from diffusers.models.attention_processor import AttnProcessor
        model.set_attn_processor(AttnProcessor())
    wrap = _Wrap(model, forward)
    torch.manual_seed(SEED + 1)
    feeds = inputs(BATCH)
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
    sess = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
    declared = {i.name for i in sess.get_inputs()}
    diffs = []
    dynamic = style in ("dyn_batch", "dyn_hw")
    for b in ([BATCH, 1] if dynamic else [BATCH]):
        torch.manual_seed(SEED + 7 + b)
        f = inputs(b)
        if style == "dyn_hw" and b == 1:  # a second latent size: 1.5x the height, 2x the width
            f = {n: torch.randn(*v.shape[:2], v.shape[2] * 3 // 2, v.shape[3] * 2) if v.dim() == 4 else v
                 for n, v in f.items()}
        with torch.no_grad():
            ref = wrap(*f.values()).numpy()
        got = sess.run(None, {n: v.numpy() for n, v in f.items() if n in declared})[0]
        diffs.append(float(np.max(np.abs(got - ref))))
    if max(diffs) > 1e-3:
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

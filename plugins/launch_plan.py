"""Host-side launch planning for the attention kernels: variant, grid, tile and split count.

Plain Python, no GPU needed: the TensorRT plugins, the ctypes wrappers
(``onnx_fuse.plugins.kernel_lib``) and the benchmark all plan through here, and the numbers
(tile sizes, shared memory) mirror plugins/kernels/*.cu; tests/plugins/test_launch_plan.py
checks that the kernel names exist in the sources.

- ``plan_fused_attention``: per head size (64, 80, 96, 128, 256; ``fa_variants(D)`` lists what
  each compiles) and chip: on the H200 wgmma variants (D=64 / 128 / 256: warp-specialized with TMA loads,
  D=80 / 96: the D=128 bodies padded), elsewhere mma.sync; 64-row tiles when 128-row ones
  leave the chip under-filled; grid (query tiles, Hq, B).
- ``plan_paged_decode``: variant per head size (``pa_variants(D)``; bulk copies from D=80 up on
  Hopper); one CTA per (kv head, split, sequence); splits the context so the
  grid covers about ``target_waves`` waves of the chip, each split a multiple of 64 tokens
  and at least ``min_split_tokens``; a reduction kernel combines splits when there are several.
  ``kv_dtype="fp8"`` plans the fp8 (e4m3) pool kernels instead (``pa8_variants(D)``: warps and
  stages, 16-byte cp.async or TMA; D in 64, 96, 128, 256; ``pa8_heads_variants(D)``: head groups).
- ``plan_append_kv``: grid-stride copy, one thread per 16-byte chunk.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

__all__ = [
    "DeviceInfo",
    "FusedAttentionPlan",
    "H200",
    "PagedDecodePlan",
    "AppendKVPlan",
    "SUPPORTED_HEAD_DIMS",
    "fa_variants",
    "fa_experimental_variants",
    "fa_softcap_variants",
    "pa_variants",
    "pa8_variants",
    "pa_tma_variants",
    "plan_append_kv",
    "plan_fused_attention",
    "plan_paged_decode",
]

SUPPORTED_HEAD_DIMS = (64, 80, 96, 128, 256)
SUPPORTED_DTYPES = ("float16", "bfloat16")
_DT = {"float16": "f16", "fp16": "f16", "half": "f16", "bfloat16": "bf16", "bf16": "bf16"}
DTYPE_CODE = {"f16": 0, "bf16": 1}

# Fused-attention variants compiled in fused_attention.cu: (block_m, block_n, warps). In the sm_90a
# build the (64, 64, 4) entry runs wgmma with one warpgroup at D <= 128 (see fa_engine).
# (64, 64, 4), (128, 64, 4), (128, 32, 4) use mma.sync (sm_80+); (128, 128, 8) and (128, 64, 8)
# use Hopper wgmma in the sm_90a build (in other builds their entries run the mma.sync
# 128x64 8-warp body).
FA_VARIANTS = ((64, 64, 4), (128, 64, 8), (128, 64, 4), (128, 32, 4), (128, 128, 8))
FA_WGMMA = (128, 128, 8)       # wgmma, 128-key tiles, 2 K/V stages
FA_WGMMA_PIPE = (128, 64, 8)   # wgmma, 64-key tiles, 3 stages, S of tile j+1 overlaps softmax of j
FA_WGMMA_VARIANTS = (FA_WGMMA, FA_WGMMA_PIPE)
FA_DEFAULT = (128, 64, 4)
# D = 256 compiles mma.sync 64x64 (4 warps) and wgmma (128, 64, 8), which at D = 256 is the 2-stage body with
# 64-key tiles (no pipelined variant: its 3 stages would not fit), and (FA_VARIANTS_D256_ALL, below) the
# warp-specialized FA_WS_TMA_H256WSG, planned on Hopper from run 50a (FA_WS_TMA_H256W in run 49a).
FA_VARIANTS_D256 = ((64, 64, 4), (128, 64, 8))
# D = 64 adds (64, 128, 4): wgmma with one warpgroup per CTA and two CTAs per SM (sm_90a build;
# elsewhere the entry runs the mma.sync 64x64 body).
FA_WGMMA_1WG = (64, 128, 4)
# D = 64 and 128 add (128, 128, 12): warp-specialized wgmma, a producer warpgroup (cp.async into 3
# stages, mbarriers) and two consumer warpgroups taking turns on the tensor cores (sm_90a build).
FA_WS = (128, 128, 12)
# The same body with a TMA producer (one thread issues tensor copies; kernel name suffix "t"): the
# 4th element names the loads. The host launcher builds the tensor maps, so only the library's
# launch function (not the TensorRT AOT path) runs it; compute capability 9.0 only.
FA_WS_TMA = (128, 128, 12, "tma")
# FA_WS_TMA with the register split moved to 24 producer / 240 consumer registers
# (FlashAttention-3's; entries ..._m128n128w12t_r24_...): 1-2 % ahead of the 40 / 232 split at
# D = 128 on 11 of 12 passes in each of two H200 runs, at D = 64 behind; planned at D = 128 with a
# softcap (its _sc twin), else FA_WS_TMA_OVED (causal: FA_WS_TMA_OVEDG).
FA_WS_TMA_R24 = (128, 128, 12, "tma", "r24")
# FA_WS_TMA_R24 with the softmax of tile j+1 pinned between wgmma wait_group 1 and 0 (entries
# ..._m128n128w12t_ov_..., D = 128; launcher loads 6 by name, 7 planned): ptxas hoisted wait_group 0
# above every exp2 of the r24 loop (13 % of the ncu stall samples), so the softmax waited for the
# warpgroup's own P V. Planned at D = 128 for fp16 until run 17 (now FA_WS_TMA_OVED): on the H200 (run 11, B4 S4096 D128) fp16
# 557 / 500 / 556 TFLOP/s full / causal / GQA against r24's 542 / 496 / 553, bf16 581 / 513 / 584
# against 557 / 505 / 565. Its lazy-O-rescale twin and the persistent grid with both measured
# behind it and were dropped.
FA_WS_TMA_OV = (128, 128, 12, "tma", "ov")
# FA_WS_TMA_OV with the output staged in shared memory (each consumer's half of the Q tile) and
# written as 16-byte rows (entries ..._m128n128w12t_ove_..., D = 128; launcher loads 8 by name, 9
# planned). Planned at D = 128 for bf16 until run 17 (now FA_WS_TMA_OVED): on the H200 (run 14, B4 S4096 D128) bf16
# 587 / 519 / 594-610 TFLOP/s full / causal / GQA against ov's 580 / 516-520 / 580 (cuDNN 585 / 515 /
# 578-591); fp16 557-564 / 498-503 / 569-570 against ov's 568 / 497 / 569-574, so fp16 keeps ov.
# Measured behind and dropped in run 14: the O rescale moved under the next S GEMM (fp16 535 against
# 568), the pinned softmax at D = 64 (fp16 B8 S2048 377-385 against 397-400 unpinned; with r24
# 381-383) and on the paged-prefill kernels (block 16: 470-486 against 494-498).
FA_WS_TMA_OVE = (128, 128, 12, "tma", "ove")
# The same bodies with the wgmma descriptors built once per operand and tile and stepped by adds
# (fa_ws_core's kWsLeanDesc: the consumer loop's SASS instructions per tile and warp 493 -> 437 at
# D = 64, 588 -> 481 at D = 128): FA_WS_TMA_LD (entries ..._m128n128w12t_ld_..., launcher loads 12 by
# name, 13 planned), planned at D = 64 on Hopper (no softcap), and FA_WS_TMA_OVED (FA_WS_TMA_OVE with
# them, ..._w12t_oved_..., loads 18 / 19), planned at D = 128 on Hopper for fp16 and bf16 (no
# softcap). On the H200 (run 17, B4 S4096 D128) oved fp16 580-588 / 503-504 / 582-588 TFLOP/s full
# / causal / GQA against ov's 546-563 / 472-498 / 558-563 (cuDNN 549 / 480-497 / 555-567), bf16
# 593-606 / 521-526 / 595-606 against ove's 576-593 / 516-518 / 583-588 (cuDNN 563-579 / 511 / 585);
# D = 64 ld fp16 397-398 (B8 S2048) and 416 (B4 S4096) against w12t's 385-388 / 407, bf16 402 / 420
# against 399-402 / 414-417. Dropped there: 1 in 4 exponentials by an FMA polynomial (6-8 % slower
# at D = 64, with or without the stepped descriptors) and ov with the descriptors alone (at par).
FA_WS_TMA_LD = (128, 128, 12, "tma", "ld")
FA_WS_TMA_OVED = (128, 128, 12, "tma", "oved")
# FA_WS_TMA_LD with the output staged in shared memory (as ove at D = 128; entries
# ..._w12t_lde_..., loads 14 / 15): planned at D = 64 on Hopper (no softcap) from run 17b: fp16
# B8 S2048 412 TFLOP/s against ld's 388-392 (cuDNN 418-425), bf16 422-423 against 392-394; B4
# S4096 fp16 429-430, bf16 437-441. Candidate beside it (experimental, below): FA_WS_TMA_LD with
# 24 / 240 registers (ldr, loads 10 / 11; 396 / 400-406 in run 17b).
FA_WS_TMA_LDR = (128, 128, 12, "tma", "ldr")
FA_WS_TMA_LDE = (128, 128, 12, "tma", "lde")
# FA_WS_TMA_OVEDG (..._w12t_ovedg_..., loads 22 by name / 23 with the fallback, D = 128): oved with the grid
# taken longest first within groups of 8 (head, sequence) pairs (fa_ws_core's kWsLptGroups; causal
# only, the full entry is oved's body), so the last group's heaviest query blocks start about two
# waves before the end while the CTAs running together still share each head's K/V in L2. Planned
# at D = 128 causal on Hopper (no softcap) in runs 18-19 (since then FA_WS_TMA_OVEDF): on the H200
# (run 18 A, B4 S4096) fp16 520 / 517 TFLOP/s against oved's 495 / 515 (cuDNN 496 / 495), bf16
# 534 / 531 against 521 / 532 (cuDNN 506 / 517). Dropped there: the same order over the whole grid
# (ovedl, 412-427: CTAs running together no longer share a head's K/V in L2).
FA_WS_TMA_OVEDG = (128, 128, 12, "tma", "ovedg")
# FA_WS_TMA_OVEDF (..._w12t_ovedf_..., loads 24 by name / 25 planned, D = 128, both masks): oved
# with two query blocks per CTA, nm - 1 - x then x (fa_ws_core's kWsFold through its persistent tile
# loop; grid ceil(nm / 2) x H x B). Causal, every CTA then weighs nm + 1 key tiles, and the per-CTA
# costs (about 2.4 tile-times by the sliding-window runs) are paid once per two query blocks, the
# second block's Q and first K/V loads overlapping the first's end; the causal grid is 1-D and runs
# the last FA_FOLD_SINGLES pairs' blocks one per CTA, longest first (fa_fold_ctas), so short blocks
# fill the last wave. Planned at D = 128 causal fp16 on Hopper (no softcap) in runs 19-23 (since run 24 FA_WS_TMA_OVEDQ): on the H200
# (B4 S4096 H32) 503-507 / 519-521 / 525-530 TFLOP/s (runs 19a / 19b / 19c) against ovedg's 494-498 /
# 509-510 / 525-526 and oved's 484-495 / 503-504 / 524-531 (cuDNN 466-478 / 487 / 500-511). bf16
# causal plans oved: ovedf 517-527 / 530-539 / 542-546 against oved's 515-521 / 536-549 / 554-556
# (ovedg 515-517 / 533-536 / 552-553). Without a mask 1-5 % behind oved, which stays planned there.
# Dropped in run 19b: ovedh (each consumer's Q half on its own barrier, reloaded as soon as that
# consumer's last S is done; fp16 causal 514-517).
FA_WS_TMA_OVEDF = (128, 128, 12, "tma", "ovedf")
# FA_WS_TMA_OVEDM (..._w12t_ovedm_..., loads 28 by name / 29 planned, D = 128, both masks): oved in
# clusters of two CTAs (adjacent query blocks of one head) that share each K/V tile by TMA multicast
# (fa_ws_core's kWsMcast; K and V on barriers of their own), halving K/V's L2 -> SM traffic: the D =
# 128 rows run at the 700 W limit, where fewer bytes moved leave more clock (run 20c: 1605-1620 MHz
# against oved's 1545-1560 at the same 689 W). Causal, the pair's longer CTA loads its last tile alone.
# Only where both CTAs of a pair are full query blocks: no window, no seq_lens, S a multiple of 256
# (the launcher refuses others by name and runs oved for them with 29). Planned at D = 128 fp16
# without a mask on Hopper (no softcap) in run 20 only (since run 21 FA_WS_TMA_OVEDQ): B4 S4096 565 / 576 TFLOP/s against oved's 563 /
# 564, GQA H32/8 576 / 577 against 564 / 564 (cuDNN 549-555); bf16 at par or behind (588-599 against
# 582-615) and causal at par with ovedf (fp16 511-513 / 505-514): those keep their plans.
FA_WS_TMA_OVEDM = (128, 128, 12, "tma", "ovedm")
# FA_WS_TMA_OVEDQ (..._w12t_ovedq_..., loads 30 by name / 31 planned, D = 128, both masks): oved with each
# consumer warp's Q fragments in registers and S = Q K^T as a register-A wgmma (fa_ws_core's kWsQRegs), so
# S reads only K from shared memory (a fifth less shared-memory operand traffic; the gain is per clock, not
# more clock under the 700 W limit: run 21b). Planned at D = 128 on Hopper (no softcap) from run 21, fp16 causal
# too from run 24 (ovedf planned there until then; run 24a / 24b: 534-535 and, over 5 repeats, 522-528 / 497-517
# against ovedf's 521 and 519-526 / 477-517 at 100-120 MHz less clock): run 21a (B4 S4096) fp16 575-581 / GQA 588-593 TFLOP/s against oved's 563-564 / 577-579
# and ovedm's 570-577 / 570-586 (cuDNN 550-555); bf16 604 / GQA 611 / causal 532 against oved's 594-599 /
# 599-602 / 525-531 (cuDNN 574-585 / 507-514); fp16 causal 505-521 against ovedf's 504-514. Dropped there:
# the same registers in ovedm (ovedmq, 577-583) and ovedf (ovedfq, 500-579), at par or behind. From session 20
# with the lazy O rescale (kWsLazyRescale, as FA_WS_TMA_OVEDFC): run 30b +1.2-2.4 % (fp16 601 / bf16 629 TFLOP/s
# without a mask against 591 / 615 in the same run).
FA_WS_TMA_OVEDQ = (128, 128, 12, "tma", "ovedq")
# FA_WS_TMA_OVEDFC (..._w12t_ovedfc_..., loads 38 by name / 39 planned, D = 128, both masks; session 18):
# FA_WS_TMA_OVEDF with Q's fragments in registers and its two blocks chained without draining the pipeline
# (kWsChain: the second block's first S and softmax run beside the first block's last P V, the first block's
# output staged under the second block's first P). Planned causal without a window on Hopper from run 29a:
# the medians of interleaved passes put it 0.8-2.5 % ahead of FA_WS_TMA_OVEDQ causal in three runs (28b's
# second pass, 28c, 29a: fp16 525 against 515, bf16 547 against 534 TFLOP/s in 29a) and 1-2 % behind it
# without a mask; sliding windows keep FA_WS_TMA_OVEDQ (not measured there). From session 20 with the lazy O
# rescale (kWsLazyRescale: O rescaled only where a row's frame maximum moves by more than 8 in log2 units):
# run 30b +1.1 / +2.1 % causal (fp16 547 / bf16 571 TFLOP/s against 541 / 559 in the same run).
FA_WS_TMA_OVEDFC = (128, 128, 12, "tma", "ovedfc")
# Candidates FA_WS_TMA_OVEDQP / FA_WS_TMA_OVEDFCP (..._d80 / _d96_m128n128w12t_ovedqp_ / _ovedfcp_..., loads 42 / 44
# by name, 43 / 45 with the fallback to FA_WGMMA where TMA cannot address the tensors; session 38, by name only):
# D = 80 / 96 through the D = 128 FA_WS_TMA_OVEDQ / OVEDFC bodies with the head dim padded to 128 in shared memory
# only (fa_ws_core's kWsPadD80 / kWsPadD96): the tensor maps keep the real inner dim, so TMA zero-fills columns
# D..127 and reads no extra bytes; O is stored up to the real D. The MMA work grows by 128 / D (1.6x at 80, 1.33x
# at 96). Shared memory is the D = 128 body's. Planned on Hopper at D = 80 / 96 (no softcap) from run 48a (session
# 40, H100: their 95 GPU tests passed; B4 S4096 H32 and B8 S2048 H32/8, 3 passes each): 1.31-1.42x the w8
# FA_WGMMA body planned until then and ahead of cuDNN in every row (fp16 D96 causal 418-428 against w8's 308-310
# and cuDNN's 378-390 TFLOP/s; D80 full 403-417 against 304-306 and 358-366). As at D = 128, causal without a
# window plans the chained OVEDFCP (D96 causal 424-428 against OVEDQP's 406-423), the rest OVEDQP (D80 full
# 403-417 against 388-400); loads 43 / 45 fall back to FA_WGMMA where TMA cannot address the tensors.
FA_WS_TMA_OVEDQP = (128, 128, 12, "tma", "ovedqp")
FA_WS_TMA_OVEDFCP = (128, 128, 12, "tma", "ovedfcp")
FA_PAD_HEAD_DIMS = (80, 96)
# FA_WS_TMA_H256W and the candidate FA_WS_TMA_H256 (..._d256_m128n80w12t_h256w_... / _m128n64w12t_h256_..., loads
# 48 / 46 by name, 49 / 47 with the fallback to (128, 64, 8) where TMA cannot address the tensors; session 41): the
# warp-specialized TMA body at D = 256 (fa_ws_core's kWsH256WBN / kWsH256BN, kWsH256Stages): 128 query rows (two
# consumer warpgroups x 64), K / V tiles of 80 or 64 keys (80: FlashAttention-3's hdim-256 tile) in 2 stages, oved's
# options with the lazy O rescale, Q in shared memory (64 KiB; the O accumulator takes 128 of the consumers' 240
# registers). Shared memory 225 / 193 KiB (fa_smem_bytes). FA_WS_TMA_H256W was planned at D = 256 on Hopper without a
# softcap from run 49a (session 41, H100, B4 S4096 H16 and B8 S2048 H16/4, 3 passes): fp16 full 503-509 TFLOP/s
# against (128, 64, 8)'s 401-432 (cuDNN 525-617, FA2 303-315), causal 428-450 against 353-416 (cuDNN 485-546); bf16
# full 514-527 against 411-456, causal 447-466 against 356-424; the 64-key FA_WS_TMA_H256 2-6 % behind it. Windows
# plan it too (correct by the GPU tests, not timed). Candidates FA_WS_TMA_H256S / H256WS (loads 50 / 52, 51 / 53):
# the same with K and V on barriers of their own (fa_ws_core's kWsSplitKV: K freed after its S, V after its P V).
FA_WS_TMA_H256 = (128, 64, 12, "tma", "h256")
FA_WS_TMA_H256W = (128, 80, 12, "tma", "h256w")
FA_WS_TMA_H256S = (128, 64, 12, "tma", "h256s")
FA_WS_TMA_H256WS = (128, 80, 12, "tma", "h256ws")
# Candidates FA_WS_TMA_H256WSN / H256WM / H256WMN (session 42, by name only; loads 54 / 56 / 58, 55 / 57 / 59 with the
# fallback): 80-key tiles as FA_WS_TMA_H256WS, H256WSN without the consumers' turns (kWsNoTurn: FlashAttention-3
# runs hdim 256 without its scheduler barrier); H256WM in two-CTA clusters multicasting each K / V tile (kWsMcast at
# D = 256: half the L2 -> SM bytes of K / V) and H256WMN the same without turns. The cluster entries need no window,
# no seq_lens and S a multiple of 256: loads 56 / 58 refuse other launches, 57 / 59 run H256WS / H256WSN instead.
# FA_WS_TMA_H256WSG (loads 60 / 61): H256WS with the causal grid longest first within groups of 8 heads (kWsLptGroups),
# planned at D = 256 on Hopper without a softcap from run 50a (session 42, H100, B4 S4096 H16 and B8 S2048 H16/4, 3
# passes; windows too, correct by the GPU tests): medians fp16 full 681 / 642 TFLOP/s against H256W's 502 / 510 (cuDNN
# 617 / 572), causal 595 / 554 against 458 / 436 (cuDNN 536 / 523); bf16 full 703 / 683 against 515 / 520, causal
# 621 / 570 against 469 / 451: 1.26-1.37x H256W, ahead of cuDNN (medians) in all 8 rows. The split K / V barriers
# are the gain (H256S / H256WS within noise of it without a mask, where its body is H256WS's; causal 1-3.5 % ahead of
# H256WS by the grouped order); H256WSN (no turns) and the multicast H256WM / H256WMN measured at par or behind.
FA_WS_TMA_H256WSN = (128, 80, 12, "tma", "h256wsn")
FA_WS_TMA_H256WM = (128, 80, 12, "tma", "h256wm")
FA_WS_TMA_H256WMN = (128, 80, 12, "tma", "h256wmn")
FA_WS_TMA_H256WSG = (128, 80, 12, "tma", "h256wsg")
# Candidates of session 43 (split48, by name only): K and V on barriers of their own (fa_ws_core's kWsSplitKV, the gain
# of H256S / H256WS at D = 256) in the bodies planned at D = 64 / 128, and the causal grid longest first within groups
# of 8 heads (kWsLptGroups; their full entries are the base bodies): FA_WS_TMA_LDES / LDESG (D = 64: FA_WS_TMA_LDE with
# them; loads 62 / 63, 64 / 65), FA_WS_TMA_OVEDQS / OVEDQSG (D = 128: FA_WS_TMA_OVEDQ with them; 66 / 67, 68 / 69),
# FA_WS_TMA_OVEDFCS (D = 128: FA_WS_TMA_OVEDFC, two chained query blocks per CTA, with split barriers; 70 / 71) and at
# D = 256 FA_WS_TMA_H256SG (H256S, 64-key tiles, with the grouped causal order; 72 / 73). The odd codes fall back as
# the planned bodies' do (cp.async FA_WS at D = 64 / 128, (128, 64, 8) at D = 256).
FA_WS_TMA_LDES = (128, 128, 12, "tma", "ldes")
FA_WS_TMA_LDESG = (128, 128, 12, "tma", "ldesg")
FA_WS_TMA_OVEDQS = (128, 128, 12, "tma", "ovedqs")
FA_WS_TMA_OVEDQSG = (128, 128, 12, "tma", "ovedqsg")
FA_WS_TMA_OVEDFCS = (128, 128, 12, "tma", "ovedfcs")
FA_WS_TMA_H256SG = (128, 64, 12, "tma", "h256sg")
FA_SPLIT_VARIANTS = (FA_WS_TMA_LDES, FA_WS_TMA_LDESG, FA_WS_TMA_OVEDQS, FA_WS_TMA_OVEDQSG, FA_WS_TMA_OVEDFCS,
                     FA_WS_TMA_H256SG)
FA_OPTS = ("ov", "ove", "ld", "oved", "ldr", "lde", "ovedg", "ovedf", "ovedm", "ovedq", "ovedfc", "ovedc",
           "ovedqp", "ovedfcp", "h256", "h256w", "h256s", "h256ws", "h256wsn", "h256wm",
           "h256wmn", "h256wsg", "ldes", "ldesg", "ovedqs", "ovedqsg", "ovedfcs",
           "h256sg")  # a last variant element naming fa_ws_core options
_FA_OPT_LOADS = {"ov": (6, 7), "ove": (8, 9), "ldr": (10, 11), "ld": (12, 13), "lde": (14, 15),
                 "oved": (18, 19), "ovedg": (22, 23), "ovedf": (24, 25),
                 "ovedm": (28, 29), "ovedq": (30, 31), "ovedfc": (38, 39),
                 "ovedqp": (42, 43), "ovedfcp": (44, 45),
                 "h256": (46, 47), "h256w": (48, 49), "h256s": (50, 51),
                 "h256ws": (52, 53), "h256wsn": (54, 55), "h256wm": (56, 57),
                 "h256wmn": (58, 59), "h256wsg": (60, 61), "ldes": (62, 63), "ldesg": (64, 65),
                 "ovedqs": (66, 67), "ovedqsg": (68, 69), "ovedfcs": (70, 71),
                 "h256sg": (72, 73)}  # launcher loads (by name, planned)
_FA_FOLD_OPTS = ("ovedf", "ovedfc", "ovedfcp", "ovedfcs")  # two query blocks per CTA (kWsFold)
_FA_PAD_OPTS = ("ovedqp", "ovedfcp")  # the D = 128 body at D = 80 / 96 (head dim padded in shared memory)
FA_VARIANTS_PAD = FA_VARIANTS + (FA_WS_TMA_OVEDQP, FA_WS_TMA_OVEDFCP)  # D = 80 / 96
FA_VARIANTS_D256_ALL = FA_VARIANTS_D256 + (FA_WS_TMA_H256WSG,)  # D = 256 (fa_variants)
FA_VARIANTS_D64 = FA_VARIANTS + (FA_WGMMA_1WG, FA_WS, FA_WS_TMA, FA_WS_TMA_R24, FA_WS_TMA_LD, FA_WS_TMA_LDE)
FA_VARIANTS_D128 = FA_VARIANTS + (FA_WS, FA_WS_TMA, FA_WS_TMA_R24, FA_WS_TMA_OV, FA_WS_TMA_OVE,
                                  FA_WS_TMA_OVED, FA_WS_TMA_OVEDG, FA_WS_TMA_OVEDF, FA_WS_TMA_OVEDM, FA_WS_TMA_OVEDQ,
                                  FA_WS_TMA_OVEDFC)
# Experimental TMA variant, timed beside FA_WS_TMA by tools/bench_kernels.py and reachable by
# name (``variant=``), never planned and not part of the plugin contracts (fa_variants):
# FA_WS_TMA_PERSIST, the FA_WS_TMA body on a persistent grid of min(tiles, SMs) CTAs (kernel
# m128n128w12tp, launcher loads = 4), D = 128, both masks; TMA rules as FA_WS_TMA by name (no
# fallback). Measured on the H200 at par with FA_WS_TMA (within +-2 %; at D = 64 3-6 % below, so
# not compiled there); 176-key tiles (2 stages) measured 7-8 % below and were dropped (on the oved
# body in run 23a: 463-486 TFLOP/s against ovedq's 591-622, dropped again). Since run 17
# its entries run the FA_WS_TMA_OV body with the stepped descriptors (24 / 240 registers, pinned
# softmax): run 17 fp16 531 / 472-499 TFLOP/s full / causal, bf16 553-554 / 504-513, behind oved.
FA_WS_TMA_PERSIST = (128, 128, 12, "tma", "persistent")
# FA_WS_TMA_PERSISTC (experimental, kernel m128n128w12tp_ovedc, launcher loads 40, by name only, session
# 18): the FA_WS_TMA_OVEDQ body on FA_WS_TMA_PERSIST's grid with every block chained into the next (kWsChain).
FA_WS_TMA_PERSISTC = (128, 128, 12, "tma", "persistent", "ovedc")


# Variants with a logit-softcap twin (kernel suffix "_sc", fused_attention.cu OF_FA_SC_*): every
# variant plan_fused_attention picks on its own, so a softcapped plan keeps the tile it would
# have without the softcap (FA_WS_TMA_R24 at D = 128 and FA_WS_TMA at D = 64 on Hopper, with their
# cp.async fallback FA_WS; FA_WGMMA at D = 80 / 96, in place of the padded FA_WS_TMA_OVEDQP / OVEDFCP;
# (128, 64, 8) at D = 256; mma.sync 64x64 and 128x64 elsewhere) except the mma.sync (128, 32, 4),
# which becomes (128, 64, 4), and the planned FA_WS_TMA_OVEDQ (OVEDF) at D = 128, whose softcapped
# plan is FA_WS_TMA_R24 (the same tile, softmax unpinned, 4-byte stores, descriptors per k-step), and
# FA_WS_TMA_LDE at D = 64, whose softcapped plan is FA_WS_TMA.
FA_SOFTCAP_VARIANTS = ((64, 64, 4), (128, 64, 4))
FA_SOFTCAP_VARIANTS_BY_D = {
    64: FA_SOFTCAP_VARIANTS + (FA_WS, FA_WS_TMA),
    80: FA_SOFTCAP_VARIANTS + (FA_WGMMA,),
    96: FA_SOFTCAP_VARIANTS + (FA_WGMMA,),
    128: FA_SOFTCAP_VARIANTS + (FA_WS, FA_WS_TMA_R24),
    256: ((64, 64, 4), (128, 64, 8)),
}


def fa_softcap_variants(head_dim: int) -> tuple[tuple, ...]:
    """Variants compiled with a logit softcap (``_sc`` entries) for ``head_dim``."""
    _check_head_dim(head_dim)
    return FA_SOFTCAP_VARIANTS_BY_D[head_dim]


FA_FOLD_SINGLES = 8  # fused_attention.cu kWsFoldSingles


def fa_fold_ctas(pairs: int, num_blocks: int) -> int:
    """CTAs of the causal FA_WS_TMA_OVEDF grid (fused_attention.cu fa_fold_ctas): every (head,
    sequence) pair but the last FA_FOLD_SINGLES runs its query blocks two per CTA (nm - 1 - x and
    x), those last pairs one block per CTA, longest first, to fill the last wave."""
    g = min(pairs, FA_FOLD_SINGLES)
    return (pairs - g) * ((num_blocks + 1) // 2) + g * num_blocks


def fa_variant_smem_bytes(head_dim: int, variant: tuple) -> int:
    """Shared memory of ``variant``'s kernel at ``head_dim``: the padded FA_WS_TMA_OVEDQP / OVEDFCP run the D = 128
    body, so they take its tiles."""
    return fa_smem_bytes(128 if variant[-1] in _FA_PAD_OPTS else head_dim, *variant[:4])


def fa_experimental_variants(head_dim: int, causal: bool = False) -> tuple[tuple, ...]:
    """Experimental variants compiled for ``head_dim`` and the mask (FA_WS_TMA_PERSIST and the chained candidate
    FA_WS_TMA_PERSISTC: D = 128; FA_WS_TMA_LDR: D = 64; FA_WS_TMA_H256 / H256S / H256WS / H256WSN / H256WM /
    H256WMN and, planned until run 50a, H256W: D = 256; session 43's split K / V candidates (FA_SPLIT_VARIANTS):
    FA_WS_TMA_LDES / LDESG at D = 64, FA_WS_TMA_OVEDQS / OVEDQSG / OVEDFCS at D = 128, FA_WS_TMA_H256SG at D = 256;
    none depends on the mask since run 18). The padded
    FA_WS_TMA_OVEDQP / FA_WS_TMA_OVEDFCP (D = 80 / 96) are planned since run 48a (fa_variants)."""
    _check_head_dim(head_dim)
    if head_dim == 128:
        return (FA_WS_TMA_PERSIST, FA_WS_TMA_PERSISTC, FA_WS_TMA_OVEDQS, FA_WS_TMA_OVEDQSG, FA_WS_TMA_OVEDFCS)
    return {64: (FA_WS_TMA_LDR, FA_WS_TMA_LDES, FA_WS_TMA_LDESG),
            256: (FA_WS_TMA_H256, FA_WS_TMA_H256W, FA_WS_TMA_H256S, FA_WS_TMA_H256WS, FA_WS_TMA_H256WSN,
                  FA_WS_TMA_H256WM, FA_WS_TMA_H256WMN, FA_WS_TMA_H256SG)}.get(head_dim, ())

# Paged decode variants compiled in paged_attention.cu: (warps, stages, bulk); a tile is
# 16*warps tokens; bulk = 1 gathers token rows with the Hopper bulk-copy engine (sm_90+).
PA_VARIANTS = ((4, 3, 0), (8, 3, 0), (4, 3, 1), (4, 2, 1), (8, 3, 1))
PA_DEFAULT = (4, 3, 0)  # portable default (sm_80+); plan_paged_decode picks bulk on sm_90 for D >= 80
PA_VARIANTS_D256 = ((4, 3, 0), (4, 3, 1), (4, 2, 1))  # 8 warps x 512-byte rows do not fit
PA_SPLIT_ALIGN = 64  # kPaSplitAlign: split lengths are multiples of this
# TMA variants (warps, stages, 2) of the 16-bit decode (OF_PA_TMA_VARIANTS, kernel suffix "t",
# onnx_fuse_paged_attention_decode_tma): kept out of pa_variants (the contract's variant lists);
# plan_paged_decode takes them as ``variant``. D = 64, 128, 256; block sizes a power of two >= 8 and
# compute capability 9.0, else the plan (like the C launcher) falls back to the 4-warp bulk variant
# of the same stages where one is compiled, else (4, 3, 0). (8, 2, 2): tiles of 128 tokens, planned
# for MQA at D = 64 until run 14. (D = 80 / 96 TMA and (8, 3, 2) measured behind and were dropped in
# run 6; 8 warps x 3 and 4 stages are back at D = 64 only, for MQA.)
PA_TMA_HEAD_DIMS = (64, 128, 256)
PA_TMA_VARIANTS = ((4, 2, 2), (4, 3, 2), (4, 4, 2), (8, 2, 2))
# D = 64 adds 8 warps x 3 / 4 stages (OF_PA_TMA_VARIANTS_D64): more K/V in flight per CTA for the MQA
# grid of one CTA per SM (w8s3t planned for bf16 MQA in runs 14-30), and 16 warps x 2 stages (tiles of
# 256 tokens; planned for fp16 MQA from run 17, bf16 from run 31b: _default_decode_variant)
# (16 warps x 3 stages, 199 KiB: measured behind w16s2t on the H200 in run 17 and on the H100 in session 35, dropped)
PA_TMA_VARIANTS_D64 = PA_TMA_VARIANTS + ((8, 3, 2), (8, 4, 2), (16, 2, 2))
PA_TMA_VARIANTS_D256 = ((4, 2, 2), (4, 3, 2))
# Head-group variants (warps, stages, 3) (OF_PA_HEADS_VARIANTS, kernel suffix "h",
# onnx_fuse_paged_attention_decode_tma_heads): one CTA per group of `warps` kv heads, tiles of 16
# tokens of all of them read by one tensor copy per 64-column slab. D = 64, 128; Hkv a multiple of
# warps, block sizes a power of two >= 16, compute capability 9.0 (else the plan refuses; the C
# launcher runs (4, 3, 2) where the pool leaves no tensor map). (8, 2, 3) is planned at D = 128.
PA_HEADS_HEAD_DIMS = (64, 128)
PA_HEADS_VARIANTS = ((4, 2, 3), (4, 3, 3), (8, 2, 3), (8, 3, 3))
# Cluster-reduce head groups (OF_PA_CLUSTER_VARIANTS, onnx_fuse_paged_attention_decode_cluster; bulk 4,
# suffix "hc"): w8s2h with the splits of each row reduced inside a thread-block cluster (distributed
# shared memory) instead of the workspace and the reduce kernel, and its tensor maps' L2 promotion at
# 128 B (PA_CLUSTER_L2_PROMOTION). D = 64, 128; at most PA_CLUSTER_MAX_SPLITS splits; no fallback (the
# plan refuses where the kernel does not apply). Planned where the w8s2h grid is two splits in one wave
# (plan_paged_decode). (The per-kv-head TMA form and w4s3hc measured behind and were dropped; so was
# w8s3hc, one more stage in flight at one CTA per SM: run 18, 4253-4255 GB/s against 4279-4289.)
PA_CLUSTER_HEAD_DIMS = (64, 128)
PA_CLUSTER_VARIANTS = ((8, 2, 4),)
PA_CLUSTER_MAX_SPLITS = 8  # the portable cluster size
# H200 run 11, B64 H32/8 D128 block 16, w8s2hc split 2: promotion 128 B 4186-4197 GB/s, none 4185-4194,
# 256 B (the other launchers' setting) 4041-4051; SDPA on a contiguous cache 4204-4208
PA_CLUSTER_L2_PROMOTION = 128
PA_SUFFIX = ("", "b", "t", "h", "hc")  # kernel name suffix per bulk code
MAX_GROUP = 16  # query heads per kv head in one mma tile
# fp8 (e4m3) pool decode variants (warps, stages) compiled in paged_attention.cu (OF_PA8_VARIANTS);
# head sizes with a multiple of 32 bytes per row only (V bytes are paired in 32-byte groups).
PA8_VARIANTS = ((4, 3), (4, 4), (4, 6), (8, 3))
PA8_VARIANTS_D256 = ((4, 3), (4, 4))
PA8_HEAD_DIMS = (64, 96, 128, 256)
# The same (warps, stages) with TMA loads (kernel suffix "t", onnx_fuse_paged_attention_decode_fp8_tma):
# one tensor copy per (block, kv head, 64/128-byte slab) of a tile, swizzled tiles; rows of a multiple of
# 64 bytes, block sizes a power of two >= 8, compute capability 9.0 (elsewhere the cp.async variant runs).
PA8_TMA_HEAD_DIMS = (64, 128, 256)
PA8_TMA_VARIANTS = tuple((w, s, "tma") for w, s in PA8_VARIANTS)
PA8_TMA_VARIANTS_D256 = tuple((w, s, "tma") for w, s in PA8_VARIANTS_D256)
# Head-group fp8 variants (warps, stages, "heads") (OF_PA8_HEADS_VARIANTS, kernel suffix "h",
# onnx_fuse_paged_attention_decode_fp8_tma_heads): the 16-bit head-group design on e4m3 bytes, one CTA
# per group of `warps` kv heads, tiles of 16 tokens of all of them read by one tensor copy per 64/128-byte
# slab, dequantized in registers with each warp's kv-head scales. D = 64, 128; Hkv a multiple of warps,
# block sizes a power of two >= 16, compute capability 9.0 (else the plan refuses; the C launcher runs
# (4, 3, "tma") where the pool leaves no tensor map). Not planned yet: bench candidates, run by name.
PA8_HEADS_HEAD_DIMS = (64, 128)
PA8_HEADS_VARIANTS = ((4, 3, "heads"), (4, 4, "heads"), (8, 2, "heads"), (8, 3, "heads"))
# Cluster-reduce fp8 head groups (warps, stages, "cluster") (OF_PA8_CLUSTER_VARIANTS, kernel suffix "hc",
# onnx_fuse_paged_attention_decode_fp8_cluster): the head-group kernel with the splits of each row
# combined inside a thread-block cluster (distributed shared memory), as the 16-bit w8s2hc: no
# workspace, no reduce kernel. Same shapes as the head groups, at most PA_CLUSTER_MAX_SPLITS splits, no
# fallback (the plan refuses where the kernel does not apply). Planned: PA8_PLANNED_CLUSTER (_plan_fp8).
# (w4s3hc / w8s3hc measured behind w4s4hc and spilled at D = 128: dropped in run 18.)
PA8_CLUSTER_VARIANTS = ((4, 4, "cluster"), (8, 2, "cluster"))
#: w4s2h is planned on devices whose memory reads slower than this (bytes / s): it led on four H100 SXM
#: machines (3.35e12) and trailed the 8-head groups on the H200 (4.8e12; docs/PERF.md runs 36c-h, 37a)
W4S2H_MAX_BANDWIDTH = 4.0e12
#: on the faster memory (the H200), an 8-head plan of at least this many splits (small batches, long contexts)
#: runs as 4-head groups with three stages at half the splits (docs/PERF.md run 41, "Thirtieth round")
W4S3H_MIN_SPLITS = 15
#: D = 64 with a 16-bit pool on the slower memory (below W4S2H_MAX_BANDWIDTH, sm_90: the H100), where the planner
#: picks w16s2t: its base (batch x kv heads, the CTAs at one split) up to MQA_W4S2T_MAX_BASE x SMs runs w4s2t at
#: the power of two nearest MQA_W4S2T_CTAS_PER_SM x SMs / base splits (in log2), at most MQA_W4S2T_MAX_SPLITS
#: (8 at base 16 / 32, 4 at base 48-80 on 132 SMs: 93.7-100.5 % of SDPA against 71.7-94.3 % for w16s2t at
#: 2-8 splits); above it, up to one CTA per SM, w16s2t at one split (B96 / B112 H16/1: 90.7-93.5 % against
#: 62.3-76.4 % at 4-7 splits). H100 runs 44a-b, H16/1 and H32/4 D64 block 16: docs/PERF.md "Thirty-third round"
MQA_W4S2T_MAX_BASE = 0.62
MQA_W4S2T_CTAS_PER_SM = 2
MQA_W4S2T_MAX_SPLITS = 8
PA8_PLANNED_CLUSTER = (4, 4, "cluster")  # planned where the head-group plan is two splits in one wave
PA8_PLANNED_BF16 = (8, 2, "heads")  # there for bf16, at four splits (_plan_fp8)
_FP8_NAMES = ("fp8", "e4m3", "float8_e4m3fn", "uint8")


@dataclass(frozen=True)
class DeviceInfo:
    """What planning needs to know about the GPU (defaults: H200 SXM)."""

    name: str = "NVIDIA H200"
    num_sms: int = 132
    max_smem_per_block: int = 227 * 1024
    smem_per_sm: int = 228 * 1024
    regs_per_sm: int = 65536
    max_threads_per_sm: int = 2048
    compute_capability: tuple[int, int] = (9, 0)
    #: bytes per second of device memory (HBM3e on the H200 SXM; HBM3 on the H100 SXM: 3.35e12)
    mem_bandwidth: float = 4.8e12

    @classmethod
    def from_torch(cls, index: int = 0) -> "DeviceInfo":
        import torch  # lazy: planning itself needs no GPU

        p = torch.cuda.get_device_properties(index)
        smem_block = getattr(p, "shared_memory_per_block_optin", cls.max_smem_per_block)
        smem_sm = getattr(p, "shared_memory_per_multiprocessor", cls.smem_per_sm)
        return cls(name=p.name, num_sms=p.multi_processor_count, max_smem_per_block=smem_block,
                   smem_per_sm=smem_sm, regs_per_sm=getattr(p, "regs_per_multiprocessor", 65536),
                   compute_capability=(p.major, p.minor),
                   mem_bandwidth=memory_bandwidth(p.name, getattr(p, "memory_clock_rate", None),
                                                  getattr(p, "memory_bus_width", None)))


def memory_bandwidth(name: str, clock_khz: int | None = None, bus_bits: int | None = None) -> float:
    """Bytes per second of device memory: double data rate at the memory clock over the bus where the
    driver says them (cudaDevAttrMemoryClockRate, kHz, and GlobalMemoryBusWidth, bits: H100 SXM 2619 MHz x
    5120 bits = 3.35e12, H200 3201 MHz x 6144 bits = 4.9e12), else by the name's part (HBM3 for the
    H100 / H800 SXM, HBM2e for their PCIe cards), else the H200's."""
    if clock_khz and bus_bits:
        return 2.0 * clock_khz * 1e3 * bus_bits / 8
    if any(k in name for k in ("H100", "H800")):
        return 2.0e12 if "PCIe" in name else 3.35e12
    return DeviceInfo.mem_bandwidth


H200 = DeviceInfo()
#: an H100 SXM as the planner sees it (DeviceInfo.from_torch on one: its memory reads 3.35e12 B / s)
H100 = DeviceInfo(name="NVIDIA H100 80GB HBM3", mem_bandwidth=memory_bandwidth("NVIDIA H100 80GB HBM3"))


@functools.cache
def current_device(index: int = 0) -> DeviceInfo:
    """``DeviceInfo.from_torch(index)``, read once per GPU: what KernelLib and the benchmarks plan for
    (the decode plan depends on the device's memory: W4S2H_MAX_BANDWIDTH)."""
    return DeviceInfo.from_torch(index)


def _dt(dtype: str) -> str:
    key = str(dtype).replace("torch.", "").replace("numpy.", "")
    if key not in _DT:
        raise ValueError(f"unsupported dtype {dtype!r}: use float16 or bfloat16")
    return _DT[key]


def _check_heads(num_heads: int, num_kv_heads: int) -> int:
    if num_heads <= 0 or num_kv_heads <= 0 or num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} must be a positive multiple of num_kv_heads={num_kv_heads}")
    return num_heads // num_kv_heads


def _check_head_dim(head_dim: int) -> None:
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim={head_dim} not supported by the kernels (supported: {SUPPORTED_HEAD_DIMS})")


def fa_variants(head_dim: int) -> tuple[tuple, ...]:
    """(block_m, block_n, warps) variants compiled for ``head_dim`` (FA_WS_TMA adds "tma")."""
    _check_head_dim(head_dim)
    return {256: FA_VARIANTS_D256_ALL, 64: FA_VARIANTS_D64, 128: FA_VARIANTS_D128, 80: FA_VARIANTS_PAD,
            96: FA_VARIANTS_PAD}.get(head_dim, FA_VARIANTS)


def pa_variants(head_dim: int) -> tuple[tuple[int, int, int], ...]:
    """(warps, stages, bulk) decode variants compiled for ``head_dim``."""
    _check_head_dim(head_dim)
    return PA_VARIANTS_D256 if head_dim == 256 else PA_VARIANTS


def pa_tma_variants(head_dim: int) -> tuple[tuple[int, int, int], ...]:
    """(warps, stages, 2) TMA-loading 16-bit decode variants compiled for ``head_dim`` (maybe none)."""
    _check_head_dim(head_dim)
    if head_dim not in PA_TMA_HEAD_DIMS:
        return ()
    return {256: PA_TMA_VARIANTS_D256, 64: PA_TMA_VARIANTS_D64}.get(head_dim, PA_TMA_VARIANTS)


def pa_heads_variants(head_dim: int, num_kv_heads: int | None = None) -> tuple[tuple[int, int, int], ...]:
    """(warps, stages, 3) head-group decode variants compiled for ``head_dim``; with
    ``num_kv_heads``, only those whose head group divides it."""
    _check_head_dim(head_dim)
    if head_dim not in PA_HEADS_HEAD_DIMS:
        return ()
    return tuple(v for v in PA_HEADS_VARIANTS if num_kv_heads is None or num_kv_heads % v[0] == 0)


def pa_cluster_variants(head_dim: int, num_kv_heads: int | None = None) -> tuple[tuple[int, int, int], ...]:
    """(warps, stages, 4) cluster-reduce head-group decode variants compiled for ``head_dim``; with
    ``num_kv_heads``, only those whose group divides it."""
    _check_head_dim(head_dim)
    if head_dim not in PA_CLUSTER_HEAD_DIMS:
        return ()
    return tuple(v for v in PA_CLUSTER_VARIANTS if num_kv_heads is None or num_kv_heads % v[0] == 0)


def pa8_variants(head_dim: int) -> tuple[tuple, ...]:
    """fp8-pool decode variants compiled for ``head_dim``: (warps, stages) with cp.async loads,
    then (warps, stages, "tma") with tensor-copy loads where the head size has them."""
    if head_dim not in PA8_HEAD_DIMS:
        raise ValueError(f"head_dim={head_dim} has no fp8-pool decode kernel (supported: {PA8_HEAD_DIMS})")
    base = PA8_VARIANTS_D256 if head_dim == 256 else PA8_VARIANTS
    if head_dim not in PA8_TMA_HEAD_DIMS:
        return base
    return base + (PA8_TMA_VARIANTS_D256 if head_dim == 256 else PA8_TMA_VARIANTS)


def pa8_heads_variants(head_dim: int, num_kv_heads: int | None = None) -> tuple[tuple, ...]:
    """(warps, stages, "heads") head-group fp8-pool decode variants compiled for ``head_dim`` (maybe
    none); with ``num_kv_heads``, only those whose head group divides it."""
    if head_dim not in PA8_HEAD_DIMS:
        raise ValueError(f"head_dim={head_dim} has no fp8-pool decode kernel (supported: {PA8_HEAD_DIMS})")
    if head_dim not in PA8_HEADS_HEAD_DIMS:
        return ()
    return tuple(v for v in PA8_HEADS_VARIANTS if num_kv_heads is None or num_kv_heads % v[0] == 0)


def pa8_cluster_variants(head_dim: int, num_kv_heads: int | None = None) -> tuple[tuple, ...]:
    """(warps, stages, "cluster") cluster-reduce head-group fp8-pool decode variants compiled for
    ``head_dim`` (maybe none); with ``num_kv_heads``, only those whose head group divides it."""
    if head_dim not in PA8_HEAD_DIMS:
        raise ValueError(f"head_dim={head_dim} has no fp8-pool decode kernel (supported: {PA8_HEAD_DIMS})")
    if head_dim not in PA8_HEADS_HEAD_DIMS:
        return ()
    return tuple(v for v in PA8_CLUSTER_VARIANTS if num_kv_heads is None or num_kv_heads % v[0] == 0)


def pa_tma_applies(head_dim: int, block_size: int, device: "DeviceInfo | None" = None) -> bool:
    """Whether the 16-bit TMA decode kernels address this shape (the C launcher's static check,
    onnx_fuse_paged_attention_tma_supported, less the driver query and the variant)."""
    cc = (device or H200).compute_capability
    return (head_dim in PA_TMA_HEAD_DIMS and block_size >= 8 and block_size & (block_size - 1) == 0
            and cc >= (9, 0))


def pa8_tma_applies(head_dim: int, block_size: int, device: "DeviceInfo | None" = None) -> bool:
    """Whether the TMA fp8-pool kernels address this shape (the C launcher's static check,
    onnx_fuse_paged_attention_fp8_tma_supported, less the driver query)."""
    cc = (device or H200).compute_capability
    return (head_dim in PA8_TMA_HEAD_DIMS and block_size >= 8 and block_size & (block_size - 1) == 0
            and cc >= (9, 0))


def pa8_smem_bytes(head_dim: int, warps: int, stages: int, tma: bool = False, cluster: bool = False) -> int:
    """Dynamic shared memory of the fp8-pool decode kernel (mirrors pa8_smem_bytes / pa8t_smem_bytes /
    pa8hc_smem_bytes in the .cu): stages of K and V byte tiles of 16 * warps rows padded to D + 16 bytes
    (Q stays in registers); TMA: dense rows, 1 KiB alignment slack and the stages' mbarriers; cluster
    reduce: also the split's log-sum-exps (16 rows per warp)."""
    if tma or cluster:
        return stages * 2 * 16 * warps * head_dim + 1024 + 128 + (warps * 16 * 4 if cluster else 0)
    return stages * 2 * 16 * warps * (head_dim + 16)


def is_fp8_kv(kv_dtype) -> bool:
    """True for the fp8 (e4m3) pool names (fp8, e4m3, float8_e4m3fn, uint8), False for None or
    the query dtype's own names; anything else is an error."""
    if kv_dtype is None:
        return False
    key = str(kv_dtype).replace("torch.", "")
    if key in _FP8_NAMES:
        return True
    _dt(key)
    return False


def _tile_row(head_dim: int) -> int:
    """Shared-memory row pitch (elements): swizzled rows when D % 64 == 0, else padded by 8."""
    return head_dim if head_dim % 64 == 0 else head_dim + 8


def fa_smem_bytes(head_dim: int, block_m: int, block_n: int, warps: int = 4, loads: str = "cp.async") -> int:
    """Dynamic shared memory of the fused-attention kernel (mirrors
    onnx_fuse_fused_attention_smem_bytes): mma.sync: Q tile + 2 stages of K and V, rows of
    ``_tile_row``; wgmma (8 warps): tiles padded to a multiple of 64 columns, 3 stages for the
    pipelined 64-key variant at D <= 128, + 1 KiB to align the swizzled tiles to 1024 bytes.
    ``loads`` ("tma" for FA_WS_TMA) does not change it (the mbarriers are static)."""
    if (block_m, block_n, warps) == FA_WS:
        return 1024 + (block_m * head_dim + 3 * 2 * block_n * head_dim) * 2
    if warps == 12 and head_dim == 256:  # FA_WS_TMA_H256 / H256W: 2 stages (kWsH256Stages)
        return 1024 + (block_m * head_dim + 2 * 2 * block_n * head_dim) * 2
    if (block_m, block_n, warps) == FA_WGMMA_1WG:
        return 1024 + (block_m * head_dim + 2 * 2 * block_n * head_dim) * 2
    dp = -(-head_dim // 64) * 64
    if warps == 8 and block_m == 128:
        stages = 3 if (block_n == 64 and head_dim <= 128) else 2
        return 1024 + (block_m * dp + stages * 2 * block_n * dp) * 2
    mma = fa_mma_smem_bytes(head_dim, block_m, block_n)
    if (block_m, block_n, warps) == (64, 64, 4) and head_dim <= 128:  # wgmma body in sm_90a builds
        return max(mma, 1024 + (block_m * dp + 2 * 2 * block_n * dp) * 2)
    return mma


def fa_mma_smem_bytes(head_dim: int, block_m: int, block_n: int) -> int:
    """Shared memory of the mma.sync body alone (what the TensorRT AOT kernels need)."""
    return (block_m + 2 * 2 * block_n) * _tile_row(head_dim) * 2


def fa_engine(variant: tuple[int, int, int], head_dim: int, compute_capability=(9, 0)) -> str:
    """Which body a variant's entry runs in the library built for ``compute_capability``
    (the sm_90a build on Hopper): "wgmma" or "mma.sync"."""
    if compute_capability != (9, 0):
        return "mma.sync"
    if tuple(variant) in FA_WGMMA_VARIANTS + (FA_WGMMA_1WG, FA_WS, FA_WS_TMA, FA_WS_TMA_R24,
                          FA_WS_TMA_PERSIST, FA_WS_TMA_OV, FA_WS_TMA_OVE, FA_WS_TMA_LD,
                          FA_WS_TMA_OVED, FA_WS_TMA_LDR, FA_WS_TMA_LDE, FA_WS_TMA_OVEDG,
                          FA_WS_TMA_OVEDF, FA_WS_TMA_OVEDM, FA_WS_TMA_OVEDQ, FA_WS_TMA_OVEDFC,
                          FA_WS_TMA_PERSISTC, FA_WS_TMA_OVEDQP, FA_WS_TMA_OVEDFCP, FA_WS_TMA_H256,
                          FA_WS_TMA_H256W, FA_WS_TMA_H256S, FA_WS_TMA_H256WS, FA_WS_TMA_H256WSN,
                          FA_WS_TMA_H256WM, FA_WS_TMA_H256WMN, FA_WS_TMA_H256WSG) + FA_SPLIT_VARIANTS:
        return "wgmma"
    return "wgmma" if tuple(variant) == (64, 64, 4) and head_dim <= 128 else "mma.sync"


def pa_smem_bytes(head_dim: int, warps: int, stages: int, bulk: int = 0) -> int:
    """Dynamic shared memory of the paged decode kernel (mirrors pa_smem_bytes in the .cu):
    [bulk: mbarriers (128 B)] + Q tile + stages of K and V tiles (rows padded by 8 elements
    when bulk or when D is not a multiple of 64)."""
    row = head_dim + 8 if (bulk == 1 or head_dim % 64) else head_dim
    return ((128 if bulk else 0) + (1024 if bulk >= 2 else 0)
            + (16 * _tile_row(head_dim) + stages * 2 * 16 * warps * row) * 2)


@dataclass(frozen=True)
class FusedAttentionPlan:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int
    warps: int
    block_m: int
    block_n: int
    dtype_code: int
    tma: bool = False  # FA_WS_TMA: the launcher builds tensor maps for Q, K, V
    persistent: bool = False  # FA_WS_TMA_PERSIST (experimental): launcher loads = 4
    r24: bool = False  # FA_WS_TMA_R24: 24 producer / 240 consumer registers (launcher loads 3 / 5)
    opt: str = ""  # FA_OPTS: "ov" FA_WS_TMA_OV (loads 6 / 7), "ove" FA_WS_TMA_OVE (8 / 9); "ld" (12 / 13), "oved" (18 / 19), "ovedg" (22 / 23); "ovedf" (24 / 25); candidates "ldr", "lde"
    softcap: bool = False  # the variant's _sc twin (onnx_fuse_fused_attention_fwd_ex, softcap > 0)

    @property
    def ctas(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def variant(self) -> tuple:
        """The entry of ``fa_variants`` this plan runs."""
        return ((self.block_m, self.block_n, self.warps) + (("tma",) if self.tma else ())
                + (("persistent",) if self.persistent else ()) + (("r24",) if self.r24 else ())
                + ((self.opt,) if self.opt else ()))


def plan_fused_attention(
    batch: int,
    seq_len: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: str = "float16",
    *,
    causal: bool = False,
    variant: tuple[int, int, int] | None = None,
    device: DeviceInfo = H200,
    softcap: float = 0.0,
    window: int = 0,
) -> FusedAttentionPlan:
    """Pick the fused-attention variant (block_m, block_n, warps) and grid. ``softcap`` > 0 (Gemma
    2's logit softcap) plans the variant's ``_sc`` twin (``fa_softcap_variants``); a variant asked
    for by name without one is refused. ``window`` > 0 (a causal sliding window) plans what was
    measured with windows (at D = 128 on Hopper FA_WS_TMA_OVEDQ, not the causal FA_WS_TMA_OVEDFC)."""
    _check_heads(num_heads, num_kv_heads)
    _check_head_dim(head_dim)
    dt = _dt(dtype)
    if batch <= 0 or seq_len <= 0:
        raise ValueError(f"batch={batch} and seq_len={seq_len} must be positive")
    if batch > 65535 or num_heads > 65535:
        raise ValueError("batch and num_heads must be <= 65535 (grid y/z limits)")
    if not (softcap >= 0.0 and math.isfinite(softcap)):
        raise ValueError(f"softcap={softcap} must be >= 0 and finite (0 = none)")
    if variant is None:
        # 32 rows per warp (128-row CTA of 4 warps) reuses each K/V fragment twice; measured on
        # the H200 (docs/PERF.md) 32-key tiles win for D=128 without a mask, 64-key tiles
        # otherwise. Fall back to 64-row tiles when 128-row ones give under two CTAs per SM.
        ctas_128 = math.ceil(seq_len / 128) * num_heads * batch
        hopper = device.compute_capability == (9, 0)
        if ctas_128 < 2 * device.num_sms:
            variant = (64, 64, 4)
        elif head_dim == 256:  # Hopper: the warp-specialized 80-key body with split K / V barriers (run 50a)
            variant = (FA_WGMMA_PIPE if softcap else FA_WS_TMA_H256WSG) if hopper else (64, 64, 4)
        elif head_dim in (64, 128) and hopper:
            # warp-specialized with TMA loads: at D = 128 536-553 TFLOP/s on the H200 against
            # 448-469 for the cp.async FA_WS and 403-410 for FA_WGMMA; at D = 64 388-407 against
            # 366-384 (docs/PERF.md, 3rd round). The launcher falls back to FA_WS's cp.async
            # loads where TMA cannot address the tensors (S < 128, broadcast or odd strides). With
            # the wgmma descriptors stepped by adds (run 17): at D = 128 FA_WS_TMA_OVEDQ (pinned
            # softmax, staged epilogue, Q in registers; causal fp16 too since run 24: FA_WS_TMA_OVEDF
            # was planned there from run 19), at D = 64 FA_WS_TMA_LDE (staged epilogue); where a
            # softcap needs the _sc twin their base bodies FA_WS_TMA_R24 / FA_WS_TMA.
            if head_dim == 128 and softcap:
                variant = FA_WS_TMA_R24
            elif head_dim == 128:  # Q's fragments in registers (run 21); causal, two blocks chained (run 29a)
                variant = FA_WS_TMA_OVEDFC if causal and not window else FA_WS_TMA_OVEDQ
            else:
                variant = FA_WS_TMA if softcap else FA_WS_TMA_LDE
        elif head_dim in FA_PAD_HEAD_DIMS and hopper:
            if softcap:  # FA_WGMMA's _sc twin: 300-340 TFLOP/s on the H200 against ~290 for mma.sync
                variant = FA_WGMMA
            else:  # the D = 128 TMA bodies, head dim padded in shared memory (run 48a: 1.31-1.42x FA_WGMMA)
                variant = FA_WS_TMA_OVEDFCP if causal and not window else FA_WS_TMA_OVEDQP
        elif head_dim == 128 and not causal:
            variant = (128, 32, 4)
        else:
            variant = FA_DEFAULT
        if softcap and variant not in fa_softcap_variants(head_dim):
            variant = FA_DEFAULT  # (128, 32, 4): no softcap twin, its 64-key sibling has one
    variant = tuple(variant)
    compiled = (fa_softcap_variants(head_dim) if softcap
                else fa_variants(head_dim) + fa_experimental_variants(head_dim, causal))
    if variant not in compiled:
        raise ValueError(f"variant {variant} not compiled for D={head_dim}"
                         f"{' (causal)' if causal else ''}{' with a softcap' if softcap else ''}; "
                         f"choose one of {compiled}")
    bm, bn, warps = variant[:3]
    tma = variant[3:4] == ("tma",)
    persistent = variant[4:5] == ("persistent",)
    r24 = variant[4:] == ("r24",)
    opt = variant[-1] if len(variant) > 4 and variant[-1] in FA_OPTS else ""
    if tma and device.compute_capability != (9, 0):
        raise ValueError(f"variant {variant} (TMA loads, wgmma) needs compute capability 9.0")
    smem = fa_variant_smem_bytes(head_dim, variant)
    if smem > device.max_smem_per_block:
        raise ValueError(f"needs {smem} B shared memory, device allows {device.max_smem_per_block}")
    suffix = (("t" if tma else "") + ("p" if persistent else "") + ("_r24" if r24 else "")
              + (f"_{opt}" if opt else "") + ("_sc" if softcap else ""))
    name = f"onnx_fuse_fa_fwd_{dt}_d{head_dim}_m{bm}n{bn}w{warps}{suffix}_{'causal' if causal else 'full'}"
    grid = (math.ceil(seq_len / bm), num_heads, batch)
    if persistent:  # one CTA per SM (at most one per tile), each looping over its tiles
        grid = (min(grid[0] * num_heads * batch, device.num_sms), 1, 1)
    elif opt in _FA_FOLD_OPTS and causal:  # 1-D: folded pairs of query blocks, then single ones
        grid = (fa_fold_ctas(num_heads * batch, grid[0]), 1, 1)
    elif opt in _FA_FOLD_OPTS:  # query blocks nm - 1 - x and x per CTA
        grid = ((grid[0] + 1) // 2, num_heads, batch)
    return FusedAttentionPlan(
        kernel=name, grid=grid, block=(32 * warps, 1, 1), smem_bytes=smem, warps=warps, block_m=bm,
        block_n=bn, dtype_code=DTYPE_CODE[dt], tma=tma, persistent=persistent, r24=r24, opt=opt,
        softcap=bool(softcap),
    )


def fa_launch_loads(plan: FusedAttentionPlan, *, by_name: bool) -> int:
    """The ``loads`` code onnx_fuse_fused_attention_fwd takes for ``plan``: 0 cp.async; TMA asked
    for by name 1 (3 with the r24 split), where the launcher refuses tensors TMA cannot address;
    TMA planned 2 (5 with r24), where it falls back to cp.async for them; 4 the persistent entry;
    FA_WS_TMA_OV 6 by name, 7 planned; FA_WS_TMA_OVE 8 by name, 9 planned; the candidates
    FA_WS_TMA_LD 12 / 13; FA_WS_TMA_OVED 18 / 19; FA_WS_TMA_OVEDG 22 / 23; the candidates
    FA_WS_TMA_LDR 10 / 11, _LDE 14 / 15; FA_WS_TMA_OVEDF 24 / 25; FA_WS_TMA_OVEDM 28 / 29; the
    FA_WS_TMA_OVEDQ 30 / 31; FA_WS_TMA_OVEDFC 38 / 39; the candidate FA_WS_TMA_PERSISTC 40; the padded candidates
    FA_WS_TMA_OVEDQP 42 / 43 and FA_WS_TMA_OVEDFCP 44 / 45 (D = 80 / 96; 43 / 45 fall back to FA_WGMMA); at D = 256
    FA_WS_TMA_H256WSG 60 / 61 (planned since run 50a) and the candidates FA_WS_TMA_H256 46 / 47, H256W 48 / 49,
    H256S 50 / 51, H256WS 52 / 53, H256WSN 54 / 55, H256WM 56 / 57, H256WMN 58 / 59 (the odd codes fall back to (128, 64, 8); 57 / 59 also run H256WS / H256WSN
    where the cluster entries' rules fail); session 43's split K / V candidates FA_WS_TMA_LDES 62 / 63, LDESG 64 / 65,
    OVEDQS 66 / 67, OVEDQSG 68 / 69, OVEDFCS 70 / 71 and H256SG 72 / 73."""
    if plan.persistent:
        return 40 if plan.opt == "ovedc" else 4
    if not plan.tma:
        return 0
    if plan.opt:
        return _FA_OPT_LOADS[plan.opt][0 if by_name else 1]
    return (3 if plan.r24 else 1) if by_name else (5 if plan.r24 else 2)


# Prefill over a paged prefix: head sizes of its kernel, and the block sizes its TMA producer
# takes (whole blocks per 128-key tile at 2 KiB-aligned offsets; others load with cp.async).
PP_HEAD_DIMS = (64, 128)
PP_TMA_BLOCK_SIZES = (16, 32, 64, 128)
# Block sizes planned on TMA: measured on the H200 (B8 H32/8, 4096 cached + 512 new) TMA 530-545
# TFLOP/s against cp.async 417-425 at blocks 64 and 128, but behind it at block 16 (D128 413-420
# vs 425, bf16 418 vs 440, D64 300 vs 370) with lane 0 issuing every copy. The producer now issues
# one block per lane, and the next run measured it ahead at block 16 too (fp16 D128 487-491 vs
# cp.async 425-426, bf16 496-506 vs 430-432, D64 388-395 vs 365-366; blocks 64 / 128 513-548).
# Block 32 (not timed) lies between two measured wins.
PP_TMA_PLANNED_BLOCK_SIZES = (16, 32, 64, 128)
PP_LOADS = ("tma", "cp.async")


def plan_paged_prefill_loads(head_dim: int, block_size: int, *, loads: str | None = None,
                             device: DeviceInfo = H200) -> str:
    """How the paged-prefill producer loads K/V: "tma" (one warp gathers each 128-key tile block
    by block with tensor copies) or "cp.async" (the producer warpgroup, 16 bytes per thread).
    Planned: "tma" on compute capability 9.0 for blocks of 64 and 128 keys (measured: the
    cp.async producer reaches ~78 % of the dense TMA prefill there, docs/PERF.md), else
    "cp.async" (at block 16 TMA measured behind it). ``loads`` forces one; "tma" takes blocks
    16..128 and is refused for other block sizes."""
    if head_dim not in PP_HEAD_DIMS:
        raise ValueError(f"paged prefill head_dim={head_dim}: kernels exist for {PP_HEAD_DIMS}")
    if block_size <= 0 or block_size & (block_size - 1):
        raise ValueError(f"block_size={block_size} must be a power of two")
    if device.compute_capability != (9, 0):
        raise ValueError("paged prefill runs the sm_90a warp-specialized kernel (compute capability 9.0)")
    tma_ok = block_size in PP_TMA_BLOCK_SIZES
    if loads is None:
        return "tma" if block_size in PP_TMA_PLANNED_BLOCK_SIZES else "cp.async"
    if loads not in PP_LOADS:
        raise ValueError(f"loads={loads!r}: one of {PP_LOADS}")
    if loads == "tma" and not tma_ok:
        raise ValueError(f"TMA paged prefill takes block sizes {PP_TMA_BLOCK_SIZES}, not {block_size}")
    return loads


def fused_attention_flops(batch: int, seq_len: int, num_heads: int, head_dim: int, causal: bool) -> float:
    """Matrix FLOPs of the forward pass (4*B*H*S^2*D, halved when causal), the usual count."""
    f = 4.0 * batch * num_heads * seq_len * seq_len * head_dim
    return f / 2 if causal else f


@dataclass(frozen=True)
class PagedDecodePlan:
    kernel: str
    reduce_kernel: str | None
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int
    part_tokens: int
    num_splits: int
    workspace_bytes: int
    reduce_grid: tuple[int, int, int] | None
    reduce_block: tuple[int, int, int] | None
    dtype_code: int
    warps: int
    stages: int
    bulk: int
    kv_fp8: bool = False  # fp8 (e4m3) pool: onnx_fuse_paged_attention_decode_fp8
    tma: bool = False  # fp8 pool, TMA loads: onnx_fuse_paged_attention_decode_fp8_tma (bulk = 3: _tma_heads)
    # cluster-reduce plans only: the tensor maps' L2 promotion in bytes, 256 (as every other
    # launcher), 128 (PA_CLUSTER_L2_PROMOTION, what the plan picks) or 0 (none)
    l2_promotion: int = 256
    # the sliding window the splits were sized for (0: the whole cache; such a plan runs any window,
    # a windowed one only its own: its splits cover window + PA_SPLIT_ALIGN - 1 tokens)
    window: int = 0

    @property
    def cluster(self) -> bool:
        """The splits are reduced inside a thread-block cluster (bulk 4): no workspace, no reduce
        kernel; onnx_fuse_paged_attention_decode_cluster (16-bit pool) or
        onnx_fuse_paged_attention_decode_fp8_cluster (fp8 pool)."""
        return self.bulk >= 4


def plan_paged_decode(
    batch: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    max_blocks: int,
    dtype: str = "float16",
    *,
    max_seq_len: int | None = None,
    num_splits: int | None = None,
    variant: tuple[int, int, int] | None = None,
    target_waves: float = 1.5,
    ctas_per_sm: int | None = None,
    min_split_tokens: int = 256,
    device: DeviceInfo = H200,
    kv_dtype: str | None = None,
    window: int = 0,
) -> PagedDecodePlan:
    """Pick variant, split count and grid for decode over the paged pool.

    Splits: enough CTAs for ``target_waves`` waves of ``ctas_per_sm`` per SM, no split under
    ``min_split_tokens``; measured on the H200, fewer and longer splits read faster, so the
    default aims at about one and a half waves.

    ``max_seq_len`` defaults to the block table's capacity (``max_blocks * block_size``),
    which is all a TensorRT plugin knows at enqueue time; CTAs past a sequence's end exit.
    ``window`` > 0 (sliding window): the kernels read only the keys from L - window (their splits
    start at that key rounded down to at most PA_SPLIT_ALIGN tokens), so the splits are sized for
    min(context, window + PA_SPLIT_ALIGN - 1) tokens.

    ``kv_dtype``: None (pool in the query dtype) or "fp8" (uint8 e4m3 pool with per-kv-head
    scales; ``variant`` is then (warps, stages), (warps, stages, "heads") (head groups, refused where
    they do not apply) or (warps, stages, "tma"): a TMA variant falls back
    to the cp.async one of the same (warps, stages) where ``pa8_tma_applies`` says no). ``ctas_per_sm`` defaults to 2 for the fp16/bf16
    pool (measured) and to the shared-memory occupancy (at most 4) for the fp8 pool, whose split
    count is the fewest that fill the last wave to 90 % (``_wave_splits``; not yet measured)
    rather than ``target_waves``.
    """
    group = _check_heads(num_heads, num_kv_heads)
    _check_head_dim(head_dim)
    dt = _dt(dtype)
    fp8 = is_fp8_kv(kv_dtype)
    if group > MAX_GROUP:
        raise ValueError(f"GQA group {group} > {MAX_GROUP} is not supported by the decode kernel")
    if batch <= 0 or batch > 65535 or block_size <= 0 or max_blocks <= 0:
        raise ValueError("batch in 1..65535, block_size and max_blocks positive")
    if window < 0:
        raise ValueError(f"window {window} < 0 (0 = no window)")
    cap = max_blocks * block_size
    ctx = min(max_seq_len, cap) if max_seq_len is not None else cap
    if window > 0:  # the keys a windowed split range can hold (pa_window_lo in paged_attention.cu)
        ctx = min(ctx, window + PA_SPLIT_ALIGN - 1)
    ctx = max(ctx, 1)
    if fp8:
        plan = _plan_fp8(batch, num_heads, num_kv_heads, head_dim, dt, ctx, num_splits, variant,
                         target_waves, ctas_per_sm, min_split_tokens, device, block_size)
        return dataclasses.replace(plan, window=window) if window else plan
    ctas_per_sm_default = ctas_per_sm is None
    if ctas_per_sm is None:
        ctas_per_sm = 2
    planned = variant is None
    auto_splits = num_splits is None
    if planned:
        max_splits = max(1, math.ceil(ctx / max(min_split_tokens, PA_SPLIT_ALIGN)))
        variant = _default_decode_variant(batch, num_kv_heads, head_dim, block_size, ctx, max_splits, device)
    variant = tuple(variant)
    compiled = (pa_variants(head_dim) + pa_tma_variants(head_dim) + pa_heads_variants(head_dim)
                + pa_cluster_variants(head_dim))
    if variant not in compiled:
        raise ValueError(f"variant {variant} not compiled for D={head_dim}; choose one of {compiled}")
    warps, stages, bulk = variant
    if bulk in (3, 4) and (num_kv_heads % warps or block_size < 16 or block_size & (block_size - 1)
                           or device.compute_capability < (9, 0)):
        raise ValueError(f"head-group variant {variant} needs Hkv % {warps} == 0 (Hkv={num_kv_heads}), a "
                         f"power-of-two block size >= 16 (got {block_size}) and compute capability 9.0+")
    if bulk >= 4 and num_splits is not None and num_splits > PA_CLUSTER_MAX_SPLITS:
        raise ValueError(f"cluster-reduce variant {variant}: at most {PA_CLUSTER_MAX_SPLITS} splits")
    if bulk == 2 and not pa_tma_applies(head_dim, block_size, device):  # the C launcher's fallback
        bulk_ok = device.compute_capability >= (9, 0) and warps == 4 and (4, stages, 1) in pa_variants(head_dim)
        warps, stages, bulk = (4, stages, 1) if bulk_ok else (4, 3, 0)
    if bulk and device.compute_capability < (9, 0):
        raise ValueError(f"bulk-copy variant {variant} needs compute capability 9.0+")
    smem = pa_smem_bytes(head_dim, warps, stages, bulk)
    if smem > device.max_smem_per_block:
        raise ValueError(f"needs {smem} B shared memory, device allows {device.max_smem_per_block}")
    if bulk in (3, 4) and ctas_per_sm_default:  # shared memory bounds the occupancy of the large tiles
        ctas_per_sm = max(1, min(2, device.smem_per_sm // (smem + 1024)))
    if bulk >= 2 and warps >= 8 and num_splits is None:
        # 8-warp TMA kernels: the splits that fill one CTA per SM (measured on the H200: B64 H32/8
        # D128 w8s2h 3.99 TB/s at 2 splits = 128 CTAs, 3.83 at 1, 3.78 at 3; MQA B128 D64 w8s2t
        # 2.65-2.69 at 1 split = 128 CTAs, 2.51 at 2, 2.42 at 4)
        groups = num_kv_heads // warps if bulk in (3, 4) else num_kv_heads
        max_splits = max(1, math.ceil(ctx / max(min_split_tokens, PA_SPLIT_ALIGN)))
        num_splits = _wave_splits(batch * groups, device.num_sms,
                                  min(max_splits, PA_CLUSTER_MAX_SPLITS) if bulk >= 4 else max_splits, ctx=ctx)
    plan = _decode_launch(f"onnx_fuse_pa_decode_{dt}_d{head_dim}_w{warps}s{stages}{PA_SUFFIX[bulk]}",
                          batch, num_heads, num_kv_heads, head_dim, dt, ctx, num_splits, target_waves,
                          ctas_per_sm, min_split_tokens, device, smem, warps, stages, bulk=bulk)
    if plan.cluster and plan.num_splits > PA_CLUSTER_MAX_SPLITS:  # auto splits past the cluster size
        plan = _decode_launch(plan.kernel, batch, num_heads, num_kv_heads, head_dim, dt, ctx, PA_CLUSTER_MAX_SPLITS,
                              target_waves, ctas_per_sm, min_split_tokens, device, smem, warps, stages, bulk=bulk)
    if (planned and auto_splits and (plan.bulk, plan.warps, plan.stages) == (2, 16, 2) and head_dim == 64
            and device.compute_capability == (9, 0) and device.mem_bandwidth < W4S2H_MAX_BANDWIDTH):
        # small MQA / GQA grids on the H100: the launch runs 44a-b timed (MQA_W4S2T_MAX_BASE)
        variant, splits = _h100_d64_small_grid(batch * num_kv_heads, ctx, min_split_tokens, device)
        return plan_paged_decode(batch, num_heads, num_kv_heads, head_dim, block_size, max_blocks, dtype,
                                 max_seq_len=max_seq_len, num_splits=splits, variant=variant,
                                 target_waves=target_waves, min_split_tokens=min_split_tokens, device=device,
                                 window=window)
    half = -(-plan.num_splits // 2)
    if (planned and auto_splits and (plan.bulk, plan.warps) == (3, 8) and plan.num_splits >= 2
            and batch * (num_kv_heads // 4) * half <= device.num_sms and device.mem_bandwidth < W4S2H_MAX_BANDWIDTH):
        # about the same CTAs with half the splits: 4 kv heads per CTA over twice the keys, two 32 KiB stages
        # (H100 runs 36c / 36e, D128 H32/8 block 16, GB/s: B64 3018-3021 at one split against 2986-2989 for
        # w8s2hc at two, B32 2894-2895 / 2873-2874, B16 ctx 16384 2982-2997 / 2964-2973, B8 ctx 32768
        # 2998 / 2903; w4s3h between). Not on the H200 (run 37a: w4s2h 4370 GB/s at B64 against 4463 for
        # w8s2hc, 97.7 % / 99.7 % of SDPA; behind at B32 and B8 ctx 32768 too): docs/PERF.md "Twenty-seventh round"
        plan = _decode_launch(f"onnx_fuse_pa_decode_{dt}_d{head_dim}_w4s2h", batch, num_heads, num_kv_heads,
                              head_dim, dt, ctx, half, target_waves, ctas_per_sm, min_split_tokens,
                              device, pa_smem_bytes(head_dim, 4, 2, 3), 4, 2, bulk=3)
    if (planned and auto_splits and (plan.bulk, plan.warps, plan.stages) == (3, 8, 2)
            and plan.num_splits >= W4S3H_MIN_SPLITS and device.mem_bandwidth >= W4S2H_MAX_BANDWIDTH):
        # many short splits of 8-head groups: 4 kv heads per CTA, three 16 KiB-per-head stages, twice the
        # keys per split (H200 runs 41a-b, H32/8 D128 block 16, % of SDPA, w8s2h s n -> w4s3h s ceil(n / 2):
        # fp16 B2 ctx 32768 n 64 95.7 -> 100.8, B4 ctx 8192 / 16384 / 32768 n 31-32 94.3 / 99.2 / 95.2-95.9 ->
        # 100.9 / 100.5 / 97.4-98.4, B6 ctx 16384 n 20 101.4 -> 102.8, B8 n 15 97.2-99.6 -> 98.0-99.5 (ahead by
        # -0.1 to 1.7 %); bf16 ahead by 0.9-2.6 %; at n 10 (B12) 0.6 % behind to 0.1 % ahead, n 4-5 0.7-11 % behind)
        plan = plan_paged_decode(batch, num_heads, num_kv_heads, head_dim, block_size, max_blocks, dtype,
                                 max_seq_len=max_seq_len, num_splits=half, variant=(4, 3, 3),
                                 target_waves=target_waves, min_split_tokens=min_split_tokens, device=device,
                                 window=window)
    if (planned and (plan.bulk, plan.warps, plan.stages, plan.num_splits) == (3, 8, 2, 2)
            and math.prod(plan.grid) <= device.num_sms):
        # the planned w8s2h grid is two splits in one wave: the cluster-reduce form (run 11, H200, B64
        # H32/8 D128: 4186-4197 GB/s with its L2 promotion against 3988-3998 for w8s2h; SDPA 4204-4208;
        # its clusters of 2 measured behind at 1, 3, 4 and 8 splits, and past one wave)
        plan = _decode_launch(f"onnx_fuse_pa_decode_{dt}_d{head_dim}_w8s2hc", batch, num_heads, num_kv_heads,
                              head_dim, dt, ctx, 2, target_waves, ctas_per_sm, min_split_tokens, device, smem,
                              8, 2, bulk=4)
    if plan.cluster:
        plan = dataclasses.replace(plan, l2_promotion=PA_CLUSTER_L2_PROMOTION)
    return dataclasses.replace(plan, window=window) if window else plan


def _h100_d64_small_grid(base: int, ctx: int, min_split_tokens: int, device) -> tuple[tuple[int, int, int], int]:
    """(variant, splits) for a planned w16s2t grid of ``base`` CTAs per split on the H100: w4s2t at the power of
    two nearest MQA_W4S2T_CTAS_PER_SM x SMs / base (at most MQA_W4S2T_MAX_SPLITS and what the context holds)
    up to MQA_W4S2T_MAX_BASE x SMs, else w16s2t at one split (the caller plans w16s2t only up to one CTA per SM)."""
    if base > MQA_W4S2T_MAX_BASE * device.num_sms:
        return (16, 2, 2), 1
    max_splits = max(1, math.ceil(ctx / max(min_split_tokens, PA_SPLIT_ALIGN)))
    nearest = 2 ** round(math.log2(MQA_W4S2T_CTAS_PER_SM * device.num_sms / base))
    return (4, 2, 2), max(1, min(nearest, MQA_W4S2T_MAX_SPLITS, max_splits))


def _default_decode_variant(batch, num_kv_heads, head_dim, block_size, ctx, max_splits,
                            device) -> tuple[int, int, int]:
    """The decode variant measured fastest on the H200 (docs/PERF.md, run 6, block 16-64; D = 64 run 31b):

    - D = 128: one CTA per 8 kv heads, w8s2h (3.99 TB/s at B64 H32/8 against 3.95 for w4s3t and
      4.22 for SDPA on a contiguous cache), where Hkv % 8 == 0 and the block size is a power of
      two >= 16; else w4s3t (tensor copies per block and kv head, 1-4 % ahead of bulk).
      plan_paged_decode turns a w8s2h grid of n >= 2 splits in one wave into w4s2h at ceil(n / 2) on
      devices with memory slower than W4S2H_MAX_BANDWIDTH (the H100), one of W4S3H_MIN_SPLITS or more
      splits into w4s3h at ceil(n / 2) on the faster ones (the H200), and a two-split one into w8s2hc.
    - D = 64: MQA-like grids (batch * Hkv <= SMs) w16s2t, tiles of 256 tokens at one CTA per SM (run
      31b, read-flushed L2, B128 H16/1 split 1: fp16 3170-3192 GB/s, bf16 3168-3175 against 2984-2994
      for w8s3t, SDPA 3287-3321; under the dirty-L2 flush of runs 14 / 17 bf16 had read w8s3t 1 %
      ahead); on the H100 plan_paged_decode turns a 16-bit w16s2t plan into w4s2t at 4-8 splits up to
      MQA_W4S2T_MAX_BASE x SMs CTAs per split and into w16s2t at one split above it (runs 44a-b);
      GQA w4s2t where TMA applies (run 31b, B64 H32/8: 4186 against 4088 for the cp.async w4s3
      and 4122 for w4s3t, SDPA 4265), else the cp.async w4s3 (the bulk forms read 18-46 % behind it).
    - D = 256: w4s2t (4.10, bulk 3.77, two runs). D = 80 / 96: bulk w4s2b (two stages, four CTAs
      per SM; TMA boxes into padded rows measured 8-10 % behind).
    The 8-warp ones need a grid that fills one CTA per SM to 90 % within ``max_splits`` splits
    (small batches keep the 4-warp kernels, whose splits spread further). TMA variants fall back
    to bulk / cp.async where TMA does not apply (see plan_paged_decode)."""
    if device.compute_capability < (9, 0):
        return PA_DEFAULT

    def fills(base: int) -> bool:
        return any(base * m / device.num_sms / math.ceil(base * m / device.num_sms) >= 0.9
                   for m in {_aligned_splits(ctx, n) for n in range(1, max_splits + 1)})
    if head_dim == 128:
        heads = (num_kv_heads % 8 == 0 and block_size >= 16 and block_size & (block_size - 1) == 0
                 and fills(batch * num_kv_heads // 8))
        return (8, 2, 3) if heads else (4, 3, 2)
    if head_dim == 64:
        if batch * num_kv_heads <= device.num_sms and fills(batch * num_kv_heads):
            return (16, 2, 2)
        return (4, 2, 2) if pa_tma_applies(head_dim, block_size, device) else PA_DEFAULT
    if head_dim == 256:
        return (4, 2, 2)
    return (4, 2, 1)


def _decode_launch(kernel, batch, num_heads, num_kv_heads, head_dim, dt, ctx, num_splits, target_waves,
                   ctas_per_sm, min_split_tokens, device, smem, warps, stages, **kind) -> PagedDecodePlan:
    """The split, grid and reduce launch of a decode kernel (16-bit or fp8 pool: both share the
    reduce kernel and the workspace layout); ``kind``: bulk / kv_fp8 / tma. Head-group kernels
    (bulk = 3, 4) run one CTA per ``warps`` kv heads; cluster-reduce kernels (bulk = 4, 5) need
    neither workspace nor reduce kernel."""
    groups = num_kv_heads // warps if kind.get("bulk") in (3, 4) else num_kv_heads
    num_splits, part, ws = _splits(batch, num_heads, groups, head_dim, ctx, num_splits,
                                   target_waves, ctas_per_sm, min_split_tokens, device)
    split = num_splits > 1 and kind.get("bulk", 0) < 4
    ws = ws if split else 0
    return PagedDecodePlan(
        kernel=kernel,
        reduce_kernel=f"onnx_fuse_pa_reduce_{dt}_d{head_dim}" if split else None,
        grid=(groups, num_splits, batch), block=(32 * warps, 1, 1),
        smem_bytes=smem, part_tokens=part, num_splits=num_splits, workspace_bytes=ws,
        reduce_grid=(num_heads, batch, 1) if split else None,
        reduce_block=(head_dim, 1, 1) if split else None,
        dtype_code=DTYPE_CODE[dt], warps=warps, stages=stages, **kind,
    )


def _splits(batch, num_heads, num_kv_heads, head_dim, ctx, num_splits, target_waves, ctas_per_sm,
            min_split_tokens, device):
    """(num_splits, part_tokens, workspace bytes) for one CTA per (kv head, split, sequence)."""
    base = batch * num_kv_heads
    max_splits = max(1, math.ceil(ctx / max(min_split_tokens, PA_SPLIT_ALIGN)))
    if num_splits is None:
        want = math.ceil(target_waves * device.num_sms * ctas_per_sm / base)
        num_splits = max(1, min(want, max_splits))
    num_splits = max(1, min(num_splits, math.ceil(ctx / PA_SPLIT_ALIGN)))
    part = math.ceil(math.ceil(ctx / num_splits) / PA_SPLIT_ALIGN) * PA_SPLIT_ALIGN
    num_splits = math.ceil(ctx / part)
    ws = batch * num_heads * num_splits * (head_dim + 1) * 4 if num_splits > 1 else 0
    return num_splits, part, ws


def _aligned_splits(ctx: int, n: int) -> int:
    """The split count _splits makes of ``n`` (split lengths rounded up to PA_SPLIT_ALIGN)."""
    part = math.ceil(math.ceil(ctx / n) / PA_SPLIT_ALIGN) * PA_SPLIT_ALIGN
    return math.ceil(ctx / part)


def _wave_splits(base: int, slots: int, max_splits: int, min_eff: float = 0.9, ctx: int | None = None) -> int:
    """Fewest splits whose grid (base * n CTAs of equal length) fills its last wave of ``slots``
    CTAs to at least ``min_eff`` of the waves it takes; else the best filling one. (Not yet
    measured for the fp8 pool: at B64 Hkv8 with 3 CTAs per SM one split would leave a 29 % last
    wave and three splits fill 3.88 of 4 waves; with 4 CTAs per SM one split fills 97 % of one.)
    With ``ctx``, a count is judged by the splits it becomes once their lengths are aligned."""
    def eff(n: int) -> float:
        w = base * (_aligned_splits(ctx, n) if ctx else n) / slots
        return w / math.ceil(w)
    good = [n for n in range(1, max_splits + 1) if eff(n) >= min_eff]
    return good[0] if good else max(range(1, max_splits + 1), key=lambda n: (eff(n), -n))


def _plan_fp8(batch, num_heads, num_kv_heads, head_dim, dt, ctx, num_splits, variant, target_waves,
              ctas_per_sm, min_split_tokens, device, block_size) -> PagedDecodePlan:
    planned = variant is None
    if variant is None:
        # Measured on the H200 (docs/PERF.md): 4 warps x 3 stages with TMA tensor copies read
        # 3.5 TB/s of fp8 at B64 H32/8 D128 (1.8x the tokens/s of the 16-bit pool; the cp.async
        # form 2.4); 4 CTAs per SM up to D = 128, 2 at D = 256. Falls back to cp.async (D = 96,
        # block sizes TMA cannot box, before sm_90).
        variant = (4, 3, "tma") if (4, 3, "tma") in pa8_variants(head_dim) else (4, 3)
        # Head groups of 4 kv heads per CTA, splits sized for two CTAs per SM: at B64 H32/8 D128
        # w4s3h split 2 read 3.66-3.67 TB/s of fp8 (1.83-1.84x the tokens/s of the planned 16-bit
        # w8s2h) against 3.52 for w4s3t and 3.55 for w4s3h at its one-wave split 4 (H200, run of
        # record, docs/PERF.md).
        planned_heads = (head_dim == 128 and (4, 3, "heads") in pa8_heads_variants(head_dim, num_kv_heads)
                         and block_size >= 16
                         and block_size & (block_size - 1) == 0 and device.compute_capability >= (9, 0))
        if planned_heads:
            variant = (4, 3, "heads")
            if ctas_per_sm is None:
                ctas_per_sm = 2
    variant = tuple(variant)
    compiled = pa8_variants(head_dim) + pa8_heads_variants(head_dim) + pa8_cluster_variants(head_dim)
    if variant not in compiled:
        raise ValueError(f"fp8 variant {variant} not compiled for D={head_dim}; choose one of {compiled}")
    warps, stages = variant[:2]
    cluster = variant[2:] == ("cluster",)
    heads = cluster or variant[2:] == ("heads",)
    if heads and (num_kv_heads % warps or block_size < 16 or block_size & (block_size - 1)
                  or device.compute_capability < (9, 0)):
        raise ValueError(f"head-group variant {variant} needs Hkv % {warps} == 0 (Hkv={num_kv_heads}), a "
                         f"power-of-two block size >= 16 (got {block_size}) and compute capability 9.0+")
    if cluster and num_splits is not None and num_splits > PA_CLUSTER_MAX_SPLITS:
        raise ValueError(f"cluster-reduce variant {variant}: at most {PA_CLUSTER_MAX_SPLITS} splits")
    tma = heads or (len(variant) == 3 and pa8_tma_applies(head_dim, block_size, device))
    smem = pa8_smem_bytes(head_dim, warps, stages, tma, cluster)
    if smem > device.max_smem_per_block:
        raise ValueError(f"needs {smem} B shared memory, device allows {device.max_smem_per_block}")
    if ctas_per_sm is None:
        # shared memory bounds every variant's occupancy (registers: 128 for w8 and w4s3 up to
        # D = 128 by __launch_bounds__, at most 5 x 128 threads' worth for the others; 8-warp
        # head groups: two CTAs of 128 registers)
        ctas_per_sm = max(1, min(2 if heads and warps == 8 else 4, device.smem_per_sm // (smem + 1024)))
    if num_splits is None:
        groups = num_kv_heads // warps if heads else num_kv_heads
        max_splits = max(1, math.ceil(ctx / max(min_split_tokens, PA_SPLIT_ALIGN)))
        num_splits = _wave_splits(batch * groups, device.num_sms * ctas_per_sm,
                                  min(max_splits, PA_CLUSTER_MAX_SPLITS) if cluster else max_splits,
                                  ctx=ctx if heads else None)
    suffix = "hc" if cluster else ("h" if heads else ("t" if tma else ""))
    plan = _decode_launch(f"onnx_fuse_pa8_decode_{dt}_d{head_dim}_w{warps}s{stages}{suffix}",
                          batch, num_heads, num_kv_heads, head_dim, dt, ctx, num_splits, target_waves,
                          ctas_per_sm, min_split_tokens, device, smem, warps, stages,
                          bulk=4 if cluster else (3 if heads else 0), kv_fp8=True, tma=tma)
    if cluster and plan.num_splits > PA_CLUSTER_MAX_SPLITS:  # split lengths aligned past the cluster size
        raise ValueError(f"cluster-reduce variant {variant}: {plan.num_splits} splits of {plan.part_tokens} tokens "
                         f"exceed {PA_CLUSTER_MAX_SPLITS}")
    if planned and heads and plan.num_splits == 2 and math.prod(plan.grid) <= 2 * device.num_sms:
        # the planned head groups run two splits in one wave of two CTAs per SM: the cluster-reduce
        # form at the same splits (run 14, H200, B64 H32/8 D128: w4s4hc split 2 3828-3847 GB/s fp16,
        # 3799-3802 bf16 = 1.78-1.79x the 16-bit planned tokens/s, against 3492-3500 for w4s3h split 2,
        # 3803-3807 for w8s2h split 4 and 3697-3719 for w4s3hc / w8s3hc split 2; the cluster forms lose
        # at 3 to 8 splits; only this one-wave shape was timed)
        # bf16: the 8-warp head groups at four splits instead (the same CTAs, one wave, split-K through
        # the workspace): w8s2h split 4 3805-3809 GB/s against w4s4hc split 2 3797-3799 in run 18 A, ahead
        # by 0.3-0.5 % in run 17b too; fp16 keeps w4s4hc (3834-3849 against 3802-3805 in run 18 A)
        if dt == "bf16" and PA8_PLANNED_BF16 in pa8_heads_variants(head_dim, num_kv_heads):
            return _plan_fp8(batch, num_heads, num_kv_heads, head_dim, dt, ctx, 4, PA8_PLANNED_BF16, target_waves,
                             ctas_per_sm, min_split_tokens, device, block_size)
        return _plan_fp8(batch, num_heads, num_kv_heads, head_dim, dt, ctx, 2, PA8_PLANNED_CLUSTER, target_waves,
                         ctas_per_sm, min_split_tokens, device, block_size)
    return plan


def paged_decode_kv_bytes(seq_lens, num_kv_heads: int, head_dim: int, itemsize: int = 2) -> int:
    """Bytes of K and V the decode must read: sum(seq_lens) * Hkv * D * 2 (K and V)."""
    return int(sum(int(x) for x in seq_lens)) * num_kv_heads * head_dim * itemsize * 2


@dataclass(frozen=True)
class AppendKVPlan:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]


def plan_append_kv(batch: int, new_tokens: int, num_kv_heads: int, head_dim: int, dtype: str = "float16",
                   *, kv_dtype: str | None = None) -> AppendKVPlan:
    """Grid-stride append, one thread per 8 elements (16 bytes in; 8 bytes out for an fp8 pool)."""
    _check_head_dim(head_dim)
    dt = _dt(dtype)
    fp8 = is_fp8_kv(kv_dtype)
    if fp8:
        pa8_variants(head_dim)  # raises for head sizes without fp8 kernels
    chunks = batch * new_tokens * num_kv_heads * (head_dim // 8)
    blocks = max(1, min(65535, math.ceil(chunks / 256)))
    name = f"onnx_fuse_append_kv_fp8_{dt}_d{head_dim}" if fp8 else f"onnx_fuse_append_kv_{dt}_d{head_dim}"
    return AppendKVPlan(kernel=name, grid=(blocks, 1, 1), block=(256, 1, 1))

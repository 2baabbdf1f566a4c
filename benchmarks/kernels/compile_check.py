"""Compile every kernels/ Triton kernel for a CUDA target without a GPU (ptxas ships with the triton wheel).

    python benchmarks/kernels/compile_check.py [--arch 90] [--quick]

The interpreter (what the CPU test suite runs) skips the compiler entirely, so errors that only the real compiler
sees (non-constexpr globals, unsupported ops or dtypes, bad layouts) would otherwise first show up on a GPU machine.
This runs the full TTIR -> TTGIR -> LLIR -> PTX -> cubin pipeline for representative constexpr configurations.
--quick skips the slowest configuration (top-k with k = 1024). Exit status 1 if any kernel fails to compile.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


def _sig(spec: str) -> dict:
    """'a:*fp32 b:i32 ...' -> ordered dict of argument types."""
    return dict(item.split(":") for item in spec.split())


def configs(quick: bool):
    from kernels.decode_attention.triton import _decode_kernel
    from kernels.kv_cache.triton import (
        _attn_stats_kernel,
        _gather_kernel,
        _qk_colstats_kernel,
        _qk_rowstats_kernel,
    )
    from kernels.pairwise_kernel.triton import _bwd_ls_kernel, _fwd_kernel
    from kernels.preferdiff_loss.triton import _bwd_kernel as pd_bwd
    from kernels.preferdiff_loss.triton import _fwd_kernel as pd_fwd
    from kernels.topk_scores.reference import LOWEST
    from kernels.topk_scores.triton import PAD_KEY, _topk_kernel

    ints = " ".join(f"{n}:i32" for n in ["B", "N", "D", "E", "n_per_split", "K", "s_qb", "s_qd", "s_tn", "s_td", "s_eb", "s_ee", "s_ob", "s_os"])
    topk = [(100, 128, True, "bf16"), (10, 64, False, "fp32"), (64, 64, True, "fp16")]
    if not quick:
        topk.append((1024, 1024, True, "bf16"))
    for k, bn, ex, dt in topk:
        sig = _sig(f"q_ptr:*{dt} t_ptr:*{dt} ex_ptr:*i64 out_ptr:*i64 {ints}")
        cx = {"BM": 16, "BN": bn, "BK": 32 if bn >= 512 else 64, "BE": 16 if bn <= 256 else 4,
              "HAS_EX": ex, "IEEE": dt == "fp32", "PAD": PAD_KEY, "LOW": LOWEST, "USE_TL_SORT": True}
        yield f"topk_scores k={k} exclude={ex} {dt}", _topk_kernel, sig, cx, 8 if bn >= 256 else 4
    for dt in ("bf16", "fp32"):
        sig = _sig(f"q_ptr:*{dt} k_ptr:*{dt} v_ptr:*{dt} len_ptr:*i32 o_ptr:*fp32 m_ptr:*fp32 l_ptr:*fp32 Hkv:i32 "
                   "D:i32 Dv:i32 n_per_split:i32 scale:fp32 s_qb:i32 s_qh:i32 s_kb:i32 s_kh:i32 s_km:i32 s_vb:i32 "
                   "s_vh:i32 s_vm:i32 s_lb:i32")
        yield f"decode_attention {dt}", _decode_kernel, sig, {"G": 4, "BG": 4, "BN": 16, "BD": 128, "BDV": 128}, 4
    for kind in (0, 1):
        cx = {"KIND": kind, "BI": 64, "BJ": 64, "BD": 32, "IEEE": True}
        sig = _sig("x_ptr:*fp32 y_ptr:*fp32 c_ptr:*fp32 ls_ptr:*fp32 k_ptr:*fp32 n:i32 m:i32 D:i32 s_x:i32 s_y:i32 "
                   "s_k:i32")
        yield f"pairwise_kernel fwd kind={kind}", _fwd_kernel, sig, cx, 4
        sig = _sig("x_ptr:*bf16 y_ptr:*bf16 c_ptr:*fp32 ls_ptr:*fp32 g_ptr:*fp32 part_ptr:*fp32 n:i32 m:i32 D:i32 "
                   "s_x:i32 s_y:i32 s_g:i32")
        yield f"pairwise_kernel bwd kind={kind}", _bwd_ls_kernel, sig, cx, 4
    strides = "B:i32 D:i32 s_pp:i32 s_tp:i32 s_pn:i32 s_tn:i32 EPS:fp32"
    for dt in ("bf16", "fp32"):
        sig = _sig(f"pp:*{dt} tp:*{dt} pn:*{dt} tn:*{dt} part_ptr:*fp32 {strides}")
        yield f"preferdiff_loss fwd {dt}", pd_fwd, sig, {"BB": 16, "BD": 256}, 4
        sig = _sig(f"pp:*{dt} tp:*{dt} pn:*{dt} tn:*{dt} gpp:*{dt} gtp:*{dt} gpn:*{dt} gtn:*{dt} coef_ptr:*fp32 "
                   f"{strides}")
        yield f"preferdiff_loss bwd {dt}", pd_bwd, sig, {"BB": 16, "BD": 256}, 4
    sig = _sig("a_ptr:*bf16 rmax_ptr:*fp32 sc_ptr:*fp32 cnt_ptr:*i32 H:i32 tau:i32 m:i32 p:fp32 s_al:i32 s_ah:i32 "
               "s_at:i32 s_am:i32")
    yield "kv attn_stats", _attn_stats_kernel, sig, {"BT": 32, "BN": 128}, 4
    tail = "s_ql:i32 s_qh:i32 s_qt:i32 s_kl:i32 s_kh:i32 s_km:i32"
    for dt, ieee in (("bf16", False), ("fp32", True)):
        cx = {"BT": 32, "BN": 64, "BD": 128, "IEEE": ieee}
        sig = _sig(f"q_ptr:*{dt} k_ptr:*{dt} mx_ptr:*fp32 lse_ptr:*fp32 H:i32 G:i32 tau:i32 m:i32 D:i32 scale:fp32 "
                   f"{tail}")
        yield f"kv qk_rowstats {dt}", _qk_rowstats_kernel, sig, cx, 4
        sig = _sig(f"q_ptr:*{dt} k_ptr:*{dt} mx_ptr:*fp32 lse_ptr:*fp32 sc_ptr:*fp32 cnt_ptr:*i32 H:i32 G:i32 "
                   f"tau:i32 m:i32 D:i32 scale:fp32 p:fp32 {tail}")
        yield f"kv qk_colstats {dt}", _qk_colstats_kernel, sig, cx, 4
    sig = _sig("src_ptr:*bf16 pos_ptr:*i64 dst_ptr:*bf16 H:i32 M:i32 D:i32 s_sl:i32 s_sh:i32 s_sm:i32 s_dl:i32 "
               "s_dh:i32 s_dm:i32")
    yield "kv gather", _gather_kernel, sig, {"BM": 32, "BD": 128}, 4


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    target = GPUTarget("cuda", args.arch, 32)
    failed = 0
    for name, fn, sig, cx, warps in configs(args.quick):
        sig = {**sig, **{k: "constexpr" for k in cx}}
        try:
            triton.compile(ASTSource(fn=fn, signature=sig, constexprs=cx), target=target,
                           options={"num_warps": warps})
            print(f"ok    {name}")
        except Exception as exc:  # noqa: BLE001 report every kernel, then fail
            failed += 1
            print(f"FAIL  {name}: {type(exc).__name__}: {exc}")
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

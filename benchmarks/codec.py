"""Codec benchmark on real activations of zoo models (FedHybrid §4.4.1 vs SZ3, ZFP, int8/int4).

Captures ReLU/ReLU6/GELU outputs of MobileNetV2, CCT-2 and the small BERT (random
init, seeded, one forward of an example batch), and for each tensor reports at an
absolute error bound of ``--rel`` x the tensor's value range (1% by default):
compression ratio (original bytes / encoded bytes, real encoded bytes), max abs
error, encode+decode MB/s; SZ3 (``pysz``) and ZFP (``zfpy``, fixed-accuracy mode)
at the same absolute bound, when importable; plain per-channel int8/int4
(error reported, not bounded).  "recompute MB/s" is the activation's bytes
divided by the forward time of the block that produced it (its parent module,
median of 3, on the captured input): encode+decode must beat it for compression
to pay off against recomputation.  All times are process CPU time with one
intra-op thread (``OMP_NUM_THREADS=1``): on a CPU shared with other jobs wall time
mostly measures the neighbours; every codec and the recompute are timed alike.

    python benchmarks/codec.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch
from torch import nn

from edgetrain import models
from edgetrain.compress import ChannelMixCodec, UniformCodec

ACTS = (nn.ReLU, nn.ReLU6, nn.GELU)


def capture(name: str, batch: int, limit: int, seed: int = 0):
    """(label, activation, recompute seconds) for up to ``limit`` activation outputs."""
    m = models.build(name, seed=seed)
    x = models.example_input(m, batch=batch, generator=torch.Generator().manual_seed(seed))
    mods = dict(m.named_modules())
    got: list[tuple[str, torch.Tensor, str, tuple]] = []
    parent_in: dict[str, tuple] = {}

    def pre(pname):
        def f(mod, args):
            parent_in.setdefault(pname, args)

        return f

    def post(aname):
        def f(mod, args, out):
            if len(got) < limit:
                got.append((aname, out.detach().clone(), aname.rsplit(".", 1)[0], None))

        return f

    hs = []
    for n, mod in mods.items():
        if isinstance(mod, ACTS):
            hs.append(mod.register_forward_hook(post(n)))
            parent = n.rsplit(".", 1)[0] if "." in n else ""
            hs.append(mods[parent].register_forward_pre_hook(pre(parent)))
    with torch.no_grad():
        m(x)
    for h in hs:
        h.remove()
    out = []
    for aname, act, parent, _ in got:
        args = parent_in.get(parent)
        rec_s = float("nan")
        if args is not None:
            pm = mods[parent]
            with torch.no_grad():
                ts = []
                for _ in range(3):
                    t0 = time.process_time()
                    pm(*args)
                    ts.append(time.process_time() - t0)
            rec_s = statistics.median(ts)
        out.append((f"{name}:{aname}", act, rec_s))
    return out


def _time(fn, repeats: int):
    ts = []
    res = None
    for _ in range(repeats):
        t0 = time.process_time()
        res = fn()
        ts.append(time.process_time() - t0)
    return statistics.median(ts), res


def run_codecs(act: torch.Tensor, rel: float, repeats: int, sz=None, zfp=None) -> dict:
    a = act.float()
    nbytes = a.numel() * 4
    eb = rel * float(a.max() - a.min())
    row: dict = {"shape": list(a.shape), "mb": nbytes / 1e6, "eb": eb}
    if eb == 0:
        return row
    mix = ChannelMixCodec(error_bound_abs=eb)

    def mix_rt():
        data = mix.encode(a)
        return data, mix.decode(data)

    t, (data, y) = _time(mix_rt, repeats)
    row.update(
        mix_ratio=nbytes / len(data), mix_err=float((y - a).abs().max()), mix_mbs=nbytes / 1e6 / t
    )
    for bits in (8, 4):
        c = UniformCodec(bits)
        data = c.encode(a)
        y = c.decode(data)
        row[f"int{bits}_ratio"] = nbytes / len(data)
        row[f"int{bits}_err"] = float((y - a).abs().max())
    arr = np.ascontiguousarray(a.numpy())
    if sz is not None:
        cfg = sz.szConfig()
        cfg.errorBoundMode = sz.szErrorBoundMode.ABS
        cfg.absErrorBound = eb

        def sz_rt():
            comp, _ = sz.sz.compress(arr, cfg)
            dec, _ = sz.sz.decompress(comp, np.float32, arr.shape)
            return comp, dec

        t, (comp, dec) = _time(sz_rt, repeats)
        row.update(
            sz3_ratio=nbytes / comp.nbytes,
            sz3_err=float(np.abs(dec - arr).max()),
            sz3_mbs=nbytes / 1e6 / t,
        )
    if zfp is not None:

        def zfp_rt():
            comp = zfp.compress_numpy(arr, tolerance=eb)
            return comp, zfp.decompress_numpy(comp)

        t, (comp, dec) = _time(zfp_rt, repeats)
        row.update(
            zfp_ratio=nbytes / len(comp),
            zfp_err=float(np.abs(dec - arr).max()),
            zfp_mbs=nbytes / 1e6 / t,
        )
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny batches, few tensors (for tests)")
    ap.add_argument("--rel", type=float, default=0.01, help="error bound as a fraction of range")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # CPU-time measurements: one intra-op thread (module doc)
    try:
        import pysz as sz
    except ImportError:
        sz = None
    try:
        import zfpy as zfp
    except ImportError:
        zfp = None
    notes = []
    if sz is None:
        notes.append("pysz (SZ3) not importable: SZ3 columns omitted (pip install pysz)")
    if zfp is None:
        notes.append("zfpy not importable: ZFP columns omitted (pip install zfpy)")
    if args.quick:
        cfg = [("mobilenetv2", 2, 3), ("cct2", 2, 2), ("bert-small", 1, 2)]
        repeats = 1
    else:
        cfg = [("mobilenetv2", 32, 12), ("cct2", 32, 6), ("bert-small", 8, 8)]
        repeats = 3
    rows = []
    for name, batch, limit in cfg:
        for label, act, rec_s in capture(name, batch, limit):
            row = run_codecs(act, args.rel, repeats, sz, zfp)
            row["tensor"] = label
            row["recompute_mbs"] = row["mb"] / rec_s if rec_s == rec_s and rec_s > 0 else None
            rows.append(row)
    summary = {}
    for name, _, _ in cfg:
        rs = [r for r in rows if r["tensor"].startswith(name + ":") and "mix_ratio" in r]
        if not rs:
            continue
        s = {
            "tensors": len(rs),
            "mix_ratio_geomean": float(np.exp(np.mean([np.log(r["mix_ratio"]) for r in rs]))),
            "mix_err_over_eb_max": max(r["mix_err"] / r["eb"] for r in rs),
            "mix_mbs_median": statistics.median(r["mix_mbs"] for r in rs),
            "recompute_mbs_median": statistics.median(
                r["recompute_mbs"] for r in rs if r["recompute_mbs"] is not None
            ),
            "int8_ratio": statistics.median(r["int8_ratio"] for r in rs),
            "int4_ratio": statistics.median(r["int4_ratio"] for r in rs),
        }
        if sz is not None:
            s["sz3_ratio_geomean"] = float(np.exp(np.mean([np.log(r["sz3_ratio"]) for r in rs])))
            s["sz3_mbs_median"] = statistics.median(r["sz3_mbs"] for r in rs)
        if zfp is not None:
            s["zfp_ratio_geomean"] = float(np.exp(np.mean([np.log(r["zfp_ratio"]) for r in rs])))
        summary[name] = s
    result = {"rel_error_bound": args.rel, "summary": summary, "rows": rows, "notes": notes}
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for n in notes:
        print("note:", n)
    cols = ["tensor", "mb", "mix_ratio", "mix_err", "eb", "mix_mbs", "recompute_mbs", "sz3_ratio",
            "sz3_mbs", "zfp_ratio", "int8_ratio", "int8_err", "int4_ratio", "int4_err"]  # fmt: skip
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(_fmt(r.get(c)) for c in cols))
    print("\nsummary (per model):")
    for name, s in summary.items():
        print(name, " ".join(f"{k}={_fmt(v)}" for k, v in s.items()))
    return 0


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


if __name__ == "__main__":
    sys.exit(main())

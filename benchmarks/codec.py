"""Codec benchmark on real activations of zoo models (FedHybrid §4.4.1 vs SZ3, ZFP, int8/int4).

Captures ReLU/ReLU6/GELU outputs of MobileNetV2, CCT-2 and the small BERT (random
init, seeded, one forward of an example batch), and for each tensor reports at an
absolute error bound of ``--rel`` x the tensor's value range (1% by default):
compression ratio (original bytes / encoded bytes, real encoded bytes), max abs
error, encode+decode MB/s; SZ3 (``pysz``) and ZFP (``zfpy``, fixed-accuracy mode)
at the same absolute bound, when importable; plain per-channel int8/int4
(error reported, not bounded).  "recompute MB/s" is the activation's bytes
divided by the forward time of the block that produced it (its parent module, on
the captured input), timed *interleaved* with the mix codec's encode+decode
(recompute, codec, recompute, codec, ...; medians): encode+decode must beat it for
compression to pay off against recomputation, and interleaving keeps the ratio
fair when neighbours load the machine.  All times are CPU time of this one thread
(``time.thread_time``, ``OMP_NUM_THREADS=1`` and one intra-op thread): on a CPU
shared with other jobs wall time mostly measures the neighbours; every codec and
the recompute are timed alike.

``--ablate`` adds the mix ratio per model with one part of the codec changed
(3-sigma outliers of rich channels stored exactly; no batch template; no block
path; the code stream through zstd's fast strategy with matches instead of
Huffman-only literals).  ``--stages`` adds the mix codec's stage profile (median thread CPU time per stage,
ms) for every tensor: statistics, outlier share, quantization, batch template,
frame packing (zstd), and on decode frame unpacking (zstd) and dequantization.

    python benchmarks/codec.py [--quick] [--json] [--stages] [--ablate] [--rel 0.01]
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
    """(label, activation, recompute callable or None) for up to ``limit`` activation outputs."""
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
        recompute = None
        if args is not None:
            pm = mods[parent]

            def recompute(pm=pm, args=args):
                with torch.no_grad():
                    return pm(*args)

        out.append((f"{name}:{aname}", act, recompute))
    return out


def _time(fn, repeats: int):
    ts = []
    res = None
    for _ in range(repeats):
        t0 = time.thread_time()
        res = fn()
        ts.append(time.thread_time() - t0)
    return statistics.median(ts), res


def _time_interleaved(fns: dict, repeats: int) -> tuple[dict, dict]:
    """Median thread CPU time of each callable, called in turn ``repeats`` times."""
    ts: dict = {k: [] for k in fns}
    res: dict = {}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.thread_time()
            res[k] = fn()
            ts[k].append(time.thread_time() - t0)
    return {k: statistics.median(v) for k, v in ts.items()}, res


def run_codecs(
    act: torch.Tensor, rel: float, repeats: int, sz=None, zfp=None, recompute=None
) -> dict:
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

    fns = {"mix": mix_rt}
    if recompute is not None:
        fns["recompute"] = recompute
    t, res = _time_interleaved(fns, repeats)
    data, y = res["mix"]
    row.update(
        mix_ratio=nbytes / len(data),
        mix_err=float((y - a).abs().max()),
        mix_mbs=nbytes / 1e6 / t["mix"],
        recompute_mbs=nbytes / 1e6 / t["recompute"] if t.get("recompute", 0) > 0 else None,
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
    ap.add_argument("--stages", action="store_true", help="mix codec stage profile per tensor")
    ap.add_argument(
        "--ablate", action="store_true", help="mix ratio per model with parts of the codec off"
    )
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
    from edgetrain.compress import entropy, grid

    notes.append(f"mix code stream entropy stage: {entropy.describe()}")
    notes.append(
        "mix int8 (de)quantization: "
        + ("torch qint8 kernels" if grid.qint8_kernels() else "chunked magic-number passes")
    )
    if args.quick:
        cfg = [("mobilenetv2", 2, 3), ("cct2", 2, 2), ("bert-small", 1, 2)]
        repeats = 1
    else:
        cfg = [("mobilenetv2", 32, 12), ("cct2", 32, 6), ("bert-small", 8, 8)]
        repeats = 7
    rows = []
    stages = []
    for name, batch, limit in cfg:
        for label, act, recompute in capture(name, batch, limit):
            row = run_codecs(act, args.rel, repeats, sz, zfp, recompute)
            row["tensor"] = label
            rows.append(row)
            if args.stages and row["eb"] > 0:
                prof = stage_profile(act, row["eb"], repeats, recompute)
                stages.append({"tensor": label, **prof})
            if args.ablate and row["eb"] > 0:
                for variant, kw in ABLATIONS.items():
                    c = ChannelMixCodec(error_bound_abs=row["eb"], **kw)
                    row[f"ablate_{variant}_ratio"] = row["mb"] * 1e6 / len(c.encode(act.float()))
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
        for variant in ABLATIONS if args.ablate else ():
            s[f"ablate_{variant}_ratio_geomean"] = float(
                np.exp(np.mean([np.log(r[f"ablate_{variant}_ratio"]) for r in rs]))
            )
        if sz is not None:
            s["sz3_ratio_geomean"] = float(np.exp(np.mean([np.log(r["sz3_ratio"]) for r in rs])))
            s["sz3_mbs_median"] = statistics.median(r["sz3_mbs"] for r in rs)
        if zfp is not None:
            s["zfp_ratio_geomean"] = float(np.exp(np.mean([np.log(r["zfp_ratio"]) for r in rs])))
        summary[name] = s
    result = {"rel_error_bound": args.rel, "summary": summary, "rows": rows, "notes": notes}
    if stages:
        result["stages_ms"] = stages
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
    if stages:
        print("\nmix codec stages (median thread CPU ms):")
        keys = list(stages[0])
        print(" | ".join(keys))
        for st in stages:
            print(" | ".join(_fmt(st.get(k)) for k in keys))
    return 0


#: codec variants of ``--ablate`` (ChannelMixCodec keyword arguments)
ABLATIONS = {
    "exact_outliers": {"exact_outliers": True},
    "no_template": {"template": False},
    "no_rich_path": {"outlier_fraction": 1.0},
    "lz_codes": {"huffman_only": False},
}

#: (module attribute, stage label) pairs timed by :func:`stage_profile`
_STAGES = (
    ("torch.aminmax", "range"),
    ("grid.sample_rows", "sample"),
    ("grid.moments", "moments"),
    ("grid.outlier_share", "outlier_share"),
    ("grid.quantize_codes", "quantize"),
    ("grid.batch_template", "template"),
    ("grid.encode_rich", "rich_blocks"),
    ("mix.pack_frame", "pack_zstd"),
    ("mix.unpack_frame", "unpack_zstd"),
    ("mix.read_section", "unpack_zstd"),  # the code stream, decoded lazily
    ("grid.dequantize", "dequantize"),
    ("grid.q8_buffer", "dequantize"),
    ("grid.dequantize_q8", "dequantize"),
    ("grid.decode_rich", "rich_decode"),
)


def stage_profile(act: torch.Tensor, eb: float, repeats: int, recompute=None) -> dict:
    """Median thread CPU ms per stage of the mix codec on ``act`` (wrapped functions).

    With ``recompute``, each encode+decode is preceded by one recompute of the block
    (timed too, as ``recompute``), as in the interleaved speed measurement: the codec
    then meets the caches and heap the way it does there, not warmed by itself."""
    from edgetrain.compress import grid, mix

    mods = {"torch": torch, "grid": grid, "mix": mix}
    acc: dict = {label: [] for _, label in _STAGES}  # a label may sum several functions
    saved = []

    def wrap(mod, attr, label):
        f = getattr(mod, attr)

        def g(*a, **k):
            t0 = time.thread_time()
            try:
                return f(*a, **k)
            finally:
                acc[label][-1] += time.thread_time() - t0

        saved.append((mod, attr, f))
        setattr(mod, attr, g)

    codec = ChannelMixCodec(error_bound_abs=eb)
    a = act.float()
    enc, dec, rec = [], [], []
    try:
        for path, label in _STAGES:
            m, attr = path.split(".")
            wrap(mods[m], attr, label)
        for _ in range(repeats):
            for v in acc.values():
                v.append(0.0)
            if recompute is not None:
                t0 = time.thread_time()
                recompute()
                rec.append(time.thread_time() - t0)
            t0 = time.thread_time()
            data = codec.encode(a)
            t1 = time.thread_time()
            codec.decode(data)
            dec.append(time.thread_time() - t1)
            enc.append(t1 - t0)
    finally:
        for mod, attr, f in reversed(saved):
            setattr(mod, attr, f)
    out = {k: 1e3 * statistics.median(v) for k, v in acc.items()}
    out["encode_total"] = 1e3 * statistics.median(enc)
    out["decode_total"] = 1e3 * statistics.median(dec)
    if rec:
        out["recompute"] = 1e3 * statistics.median(rec)
    return out


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


if __name__ == "__main__":
    sys.exit(main())

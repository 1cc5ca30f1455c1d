"""GEMM extraction and L1 tiling of training-graph nodes.

Every forward GEMM induces two backward GEMMs (TrainDeeploy §II-A: dL/dX = W^T Δ,
dL/dW = Δ X^T); after capture they appear as ordinary ``aten.mm``/``aten.bmm`` or
as ``aten.convolution_backward`` nodes. Convolutions are lowered to GEMMs by
im2col, as TrainDeeploy does to map them on RedMulE (§IV "Accelerator Support").

A GEMM C[M,N] = A[M,K] B[K,N] is tiled output-stationary: for each (tm x tn) tile of
C, the k loop streams (tm x tk) tiles of A and (tk x tn) tiles of B from L2 into L1;
C stays in L1 until done. Tiles are sized for double buffering (Deeploy can generate
double-buffered tiling code; reserving room for it keeps a tile valid either way), so
the L1 working set is ``2 * elem * (tm*tk + tk*tn + tm*tn)`` and the
L2->L1 traffic is ``elem * (M*K*ceil(N/tn) + K*N*ceil(M/tm) + M*N)``. We pick the
tile minimising traffic among power-of-two sizes (and the full dimension) that fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "convolution", "convolution_backward"})


@dataclass(frozen=True)
class Gemm:
    """One (batched) matrix product: ``batch`` independent C[M,N] = A[M,K] B[K,N]."""

    batch: int
    m: int
    n: int
    k: int

    @property
    def macs(self) -> int:
        return self.batch * self.m * self.n * self.k


@dataclass(frozen=True)
class Tile:
    """Chosen L1 tile of one GEMM and what it costs."""

    gemm: Gemm
    tm: int
    tn: int
    tk: int
    working_set_bytes: int
    l2_l1_bytes: int


def op_base(op: str) -> str:
    """``"aten.mm.default"`` -> ``"mm"``."""
    parts = op.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" else parts[0]


def _prod(shape: tuple[int, ...]) -> int:
    return math.prod(shape) if shape else 1


def node_gemms(node: Any, tensors: dict) -> list[Gemm]:
    """GEMMs a node performs, from its tensor shapes (empty for non-GEMM nodes)."""
    base = op_base(node.op)
    if base not in GEMM_OPS:
        return []
    shapes = [tuple(tensors[t].shape) for t in node.inputs if t in tensors]
    outs = [tuple(tensors[t].shape) for t in node.outputs if t in tensors]
    if base in ("mm", "addmm"):
        mats = [s for s in shapes if len(s) == 2][-2:]
        if len(mats) != 2:
            return []
        (m, k), (_, n) = mats
        return [Gemm(1, m, n, k)]
    if base in ("bmm", "baddbmm"):
        mats = [s for s in shapes if len(s) == 3][-2:]
        if len(mats) != 2:
            return []
        (b, m, k), (_, _, n) = mats
        return [Gemm(b, m, n, k)]
    if base == "convolution":
        if len(shapes) < 2 or not outs:
            return []
        x, w, y = shapes[0], shapes[1], outs[0]
        groups = max(1, x[1] // max(1, w[1]))
        return [Gemm(groups, w[0] // groups, y[0] * _prod(y[2:]), w[1] * _prod(w[2:]))]
    # convolution_backward(grad_out, input, weight): grad_input and/or grad_weight
    if len(shapes) < 3:
        return []
    dy, x, w = shapes[0], shapes[1], shapes[2]
    groups = max(1, x[1] // max(1, w[1]))
    cout_g, cin_g, kvol = w[0] // groups, w[1], _prod(w[2:])
    spatial_out = dy[0] * _prod(dy[2:])
    gemms = []
    out_shapes = list(outs)
    if x in out_shapes:  # dL/dX: col2im of W^T Δ
        gemms.append(Gemm(groups, cin_g * kvol, spatial_out, cout_g))
        out_shapes.remove(x)
    if w in out_shapes:  # dL/dW = Δ X^T
        gemms.append(Gemm(groups, cout_g, cin_g * kvol, spatial_out))
    return gemms


def _candidates(dim: int) -> list[int]:
    out = {dim}
    p = 1
    while p < dim:
        out.add(p)
        p *= 2
    return sorted(out)


def tile_gemm(gemm: Gemm, l1_bytes: int, elem_bytes: int = 4) -> Tile:
    """Traffic-minimising double-buffered tile of ``gemm`` that fits ``l1_bytes``.

    Falls back to the smallest (1x1x1) tile, which always fits any useful L1.
    """
    m, n, k = gemm.m, gemm.n, gemm.k
    best: Tile | None = None
    best_key = None
    for tm in _candidates(m):
        for tn in _candidates(n):
            if 2 * elem_bytes * tm * tn > l1_bytes:
                break
            for tk in _candidates(k):
                ws = 2 * elem_bytes * (tm * tk + tk * tn + tm * tn)
                if ws > l1_bytes:
                    break
                traffic = (
                    elem_bytes
                    * gemm.batch
                    * (m * k * math.ceil(n / tn) + k * n * math.ceil(m / tm) + m * n)
                )
                tiles = math.ceil(m / tm) * math.ceil(n / tn) * math.ceil(k / tk)
                key = (traffic, tiles)
                if best_key is None or key < best_key:
                    best_key = key
                    best = Tile(gemm, tm, tn, tk, ws, traffic)
    if best is None:
        ws = 2 * elem_bytes * 3
        traffic = elem_bytes * gemm.batch * (m * k * n + k * n * m + m * n)
        best = Tile(gemm, 1, 1, 1, ws, traffic)
    return best

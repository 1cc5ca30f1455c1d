"""LoRA fusion: one accumulation chain per LoRA linear, as RedMulE can run it.

RedMulE computes GEMM-Ops ``Z = (X (.) W) (+) Y`` natively (Tortorella et al.,
"RedMulE: A Mixed-Precision Matrix-Matrix Operation Engine for Flexible and
Energy-Efficient On-Chip Linear Algebra and TinyML Training Acceleration", FGCS
2023, §3: the engine accumulates the product into a Y operand). A LoRA linear
``y = x W0^T + b + s (x A^T) B^T`` therefore needs no full-size intermediate:

* forward: ``h = x A^T`` is r wide (r = 4 in TrainDeeploy) and is the only
  product besides ``y``; the scale ``s`` folds into ``B`` (an r x d_out scaling
  on the cores); ``y`` accumulates ``b + x W0^T + h (sB)^T`` in one output tile
  that stays in L1 until it is written once;
* backward (upstream gradient ``g``): ``dh = g (sB)``, ``grad_B = s g^T h``,
  ``grad_A = dh^T x`` and ``dx = g W0 + dh A`` as one chain; autograd's gradient
  sums (``residual + dx_lora``, then ``+ dx_base``) are re-associated to
  ``residual + (dx_base + dx_lora)``: the chain writes one tensor and the single
  residual add stays an ordinary node, exactly as full fine-tuning has it.

:func:`fuse_lora` rewrites a :class:`~edgetrain.graph.ir.TrainGraph` accordingly:
the ops of each LoRA linear (module ``M`` with children ``M.lora_A``/``M.lora_B``)
in one phase become one node whose tensors are only those read or written
outside the chain; the chain's GEMMs (with which outputs are written to L2) are
recorded in ``graph.meta["fused"]`` for tiling and the cost model. Note that the
TrainDeeploy paper itself treats "LoRA low-rank matrices ... as standard GEMMs"
(§IV) -- the unfused graph is that deployment; the fused one is what the same
hardware allows. FLOPs are unchanged (the chain does the same products).
"""

from __future__ import annotations

import math
from typing import Any

from edgetrain.graph.ir import Node, TrainGraph
from edgetrain.memory.liveness import storage_root, tensor_names
from edgetrain.memory.tiling import node_gemms, op_base

FUSED_OP = "edgetrain.lora_linear_fused.default"
_PHASES = ("forward", "backward")


def lora_modules(graph: Any) -> list[str]:
    """Qualified names of the LoRA linears in ``graph`` (modules with lora_A and lora_B ops)."""
    mods = {n.module for n in graph.nodes if n.module}
    return sorted(
        m.removesuffix(".lora_A")
        for m in mods
        if m.endswith(".lora_A") and m.removesuffix(".lora_A") + ".lora_B" in mods
    )


def _alias_map(nodes: list[Node]) -> dict[str, str]:
    out: dict[str, str] = {}
    for n in nodes:
        if n.aliases is not None:
            for o in n.outputs:
                if o != n.aliases:
                    out[o] = n.aliases
    return out


def _fuse_group(
    graph: TrainGraph, module: str, phase: str, aliases: dict[str, str]
) -> tuple[list[int], list[Node], dict, set[str], dict] | None:
    """Plan the rewrite of one (module, phase) group, or None when it cannot be fused.

    Returns (indices to remove, nodes to insert at the last index, fused spec,
    tensor names to delete, tensors to add).
    """
    nodes = graph.nodes
    family = {module, f"{module}.base_layer", f"{module}.lora_A", f"{module}.lora_B"}
    members = {i for i, n in enumerate(nodes) if n.phase == phase and n.module in family}
    if not any(op_base(nodes[i].op) in ("mm", "addmm", "bmm") for i in members):
        return None
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for t in set(n.inputs):
            readers.setdefault(storage_root(aliases, t), []).append(i)

    def produced(group: set[int]) -> set[str]:
        return {
            storage_root(aliases, o)
            for i in group
            if nodes[i].aliases is None
            for o in nodes[i].outputs
        }

    # absorb autograd's gradient sums that read a chain output nobody else reads
    absorbed: set[int] = set()
    if phase == "backward":
        changed = True
        while changed:
            changed = False
            group = members | absorbed
            inside = produced(group)
            for i, n in enumerate(nodes):
                if i in group or n.phase != phase or op_base(n.op) != "add" or n.aliases:
                    continue
                roots = {storage_root(aliases, t) for t in n.inputs}
                if any(r in inside and set(readers.get(r, [])) <= group | {i} for r in roots):
                    absorbed.add(i)
                    changed = True
    group = members | absorbed
    inside = produced(group)
    last = max(group)
    outputs_meta = tensor_names(graph.meta.get("outputs", {}))
    out_roots = {storage_root(aliases, t) for t in outputs_meta}

    def needed(r: str) -> bool:
        return r in out_roots or any(j not in group for j in readers.get(r, []))

    needed_roots = [r for r in sorted(inside) if needed(r)]
    internal = inside - set(needed_roots)
    # every outside reader of a chain output must run after the fused node
    for r in needed_roots:
        if any(j not in group and j < last for j in readers.get(r, [])):
            return None
    for i in group:  # views re-emitted after the chain must not be read before it
        if nodes[i].aliases is not None:
            outs_i = set(nodes[i].outputs)
            if any(
                j not in group and j < last and outs_i & set(nodes[j].inputs)
                for j in range(len(nodes))
            ):
                return None
    # external inputs of the chain's compute nodes (views resolved to their storage)
    ext_inputs: list[str] = []
    residual: list[str] = []
    for i in sorted(group):
        n = nodes[i]
        if n.aliases is not None:
            continue
        for t in n.inputs:
            r = storage_root(aliases, t)
            if r in inside:
                continue
            target = residual if i in absorbed else ext_inputs
            if r not in target:
                target.append(r)
    absorbed_out = [
        storage_root(aliases, nodes[i].outputs[0]) for i in sorted(absorbed) if nodes[i].outputs
    ]
    final_sum = [r for r in absorbed_out if r in needed_roots]
    if residual and len(final_sum) != 1:
        return None  # not a single gradient sum: leave the group unfused

    gemms = []
    fold_elems = 0
    for i in sorted(members):
        n = nodes[i]
        if n.aliases is not None:
            continue
        base = op_base(n.op)
        for g in node_gemms(n, graph.tensors):
            out_root = storage_root(aliases, n.outputs[0])
            bias = 0
            if base == "addmm":
                bias = sum(graph.tensors[t].nbytes for t in n.inputs[:1] if t in graph.tensors)
            gemms.append(
                {
                    "node": n.name,
                    "batch": g.batch,
                    "m": g.m,
                    "n": g.n,
                    "k": g.k,
                    "written": out_root in needed_roots,
                    "bias_bytes": bias,
                }
            )
        if base == "mul":  # the LoRA scale: folded into B (r x d_out), once per chain
            b_w = graph.tensors.get(f"{module}.lora_B.weight")
            fold_elems += math.prod(b_w.shape) if b_w is not None else 0

    fused_name = f"fused_lora.{phase}.{module}"
    new_tensors: dict = {}
    outs = list(needed_roots)
    inserted: list[Node] = []
    if residual:
        total = final_sum[0]
        part = f"{total}.lora_sum"
        info = graph.tensors[total]
        new_tensors[part] = type(info)(part, info.kind, info.shape, info.dtype, info.nbytes)
        outs = [part if o == total else o for o in outs]
    inserted.append(
        Node(
            name=fused_name,
            op=FUSED_OP,
            inputs=tuple(ext_inputs),
            outputs=tuple(outs),
            flops=sum(nodes[i].flops for i in group),
            is_layout=False,
            phase=phase,
            module=module,
            args_repr=f"lora chain of {len(members)} ops",
        )
    )
    if residual:
        inserted.append(
            Node(
                name=f"{fused_name}.residual_add",
                op="aten.add.Tensor",
                inputs=(*residual, f"{final_sum[0]}.lora_sum"),
                outputs=(final_sum[0],),
                flops=0,
                is_layout=False,
                phase=phase,
                module=nodes[max(absorbed)].module,
                args_repr="gradient sum, re-associated",
            )
        )
    # views of surviving storage (weights, saved products) are kept, after the chain
    dropped: set[str] = set(internal)
    for i in sorted(group):
        n = nodes[i]
        if n.aliases is None:
            continue
        if storage_root(aliases, n.aliases) in internal:
            dropped.update(n.outputs)
            continue
        inserted.append(n)
    spec = {
        "kind": "lora",
        "module": module,
        "phase": phase,
        "members": [nodes[i].name for i in sorted(group)],
        "gemms": gemms,
        "fold_elems": int(fold_elems),
        "elided_bytes": int(sum(graph.tensors[t].nbytes for t in internal)),
    }
    return sorted(group), inserted, spec, dropped, new_tensors


def fuse_lora(graph: TrainGraph) -> TrainGraph:
    """A copy of ``graph`` with every LoRA linear's forward and backward fused (see module doc).

    Graphs without LoRA come back unchanged (a shallow copy). Groups that cannot
    be expressed as one chain (an outside op reading a chain output before the
    chain ends) stay unfused and are listed in ``meta["fusion_skipped"]``.
    """
    nodes = list(graph.nodes)
    tensors = dict(graph.tensors)
    meta = dict(graph.meta)
    fused: dict[str, Any] = dict(meta.get("fused", {}))
    skipped: list[str] = []
    for module in lora_modules(graph):
        for phase in _PHASES:
            current = TrainGraph(nodes=nodes, tensors=tensors, meta=meta)
            plan = _fuse_group(current, module, phase, _alias_map(nodes))
            if plan is None:
                if any(n.phase == phase and n.module == f"{module}.lora_A" for n in nodes):
                    skipped.append(f"{phase}:{module}")
                continue
            remove, inserted, spec, dropped, new_tensors = plan
            at = max(remove)
            gone = set(remove)
            nodes = (
                [n for i, n in enumerate(nodes[:at]) if i not in gone] + inserted + nodes[at + 1 :]
            )
            for t in dropped:
                tensors.pop(t, None)
            tensors.update(new_tensors)
            fused[inserted[0].name] = spec
    meta["fused"] = fused
    if skipped:
        meta["fusion_skipped"] = skipped
    return TrainGraph(nodes=nodes, tensors=tensors, meta=meta, step=graph.step)

"""Ray executor: one actor per device, pair transfers through Ray's object store.

The mobile agent (MA) is the driver: it tells each device actor to train from
the global model, then walks the schedule, asking each pair's sender actor for
its (Δw, θ) message and handing the resulting object reference to the
receiver actor, which aggregates (eq. 3) — the message moves actor to actor
through the object store, never through the driver. Messages are safetensors
bytes (θ in the metadata), so what travels is the same format as the file
cache. An actor that dies (killed, crashed) is a lost device: the MA skips it
for the iteration and restarts it before the next, when it rejoins.

The same seed gives the same metrics as in-process execution: each actor
trains with one torch thread on the batches the MA assigns, from the global
model the MA sends, and aggregates with the same functions.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from edgetrain.decentralized.aggregation import (
    CentralSGD,
    Message,
    ReduceResult,
    carries_sum,
    mean_of_sum,
    pair_aggregate,
    pair_sum,
    to_wire,
    wire_dtype,
)
from edgetrain.decentralized.schedule import Schedule
from edgetrain.errors import ConfigError


def to_bytes(delta: Mapping[str, torch.Tensor], theta: float) -> bytes:
    """A (Δw, θ) message as safetensors bytes."""
    tensors = {k: v.detach().contiguous() for k, v in delta.items()}
    return st_save(tensors, metadata={"theta": repr(float(theta))})


def from_bytes(blob: bytes) -> Message:
    """Inverse of :func:`to_bytes` (θ read from the safetensors header's metadata)."""
    n = struct.unpack("<Q", blob[:8])[0]  # safetensors: u64 header length, JSON header
    header = json.loads(blob[8 : 8 + n])
    theta = float(header.get("__metadata__", {}).get("theta", "1.0"))
    return Message(dict(st_load(blob)), theta)


class _Device:
    """The body of one device actor (kept a plain class so tests can read it)."""

    def __init__(self, device: int, x, y, model_name: str, model_kw: dict, lr: float, mom: float):
        from edgetrain import models

        torch.set_num_threads(1)
        self.device, self.x, self.y = device, x, y
        self.model = models.build(model_name, **model_kw)
        self.lr, self.mom = lr, mom
        self.msg: Message | None = None
        self.copies = 1
        self.peak = 1

    def ping(self) -> int:
        return self.device

    def train(self, global_blob: bytes, batches: list) -> int:
        from edgetrain.decentralized.trainer import local_train

        g = dict(st_load(global_blob))
        self.model.load_state_dict(g)
        seen = local_train(self.model, self.x, self.y, batches, self.lr, self.mom)
        local = self.model.state_dict()
        self.msg = Message({k: local[k] - g[k] for k in g}, 1.0)
        self.peak = 1
        return seen

    def message(self, wire: str = "float32") -> bytes:
        """Send (Δw, θ) to the next device at the ``wire`` precision; this device
        leaves the reduce."""
        assert self.msg is not None
        return to_bytes(to_wire(self.msg.delta, wire_dtype(wire)), self.msg.theta)

    def receive(self, blob: bytes, weighted: bool, wire: str = "float32") -> float:
        """Pair aggregation with an incoming message: eq. 3 (weighted) or NeighborSGD,
        held at the ``wire`` precision."""
        assert self.msg is not None
        other = from_bytes(blob)
        self.msg = Message(to_wire(self.msg.delta, wire_dtype(wire)), self.msg.theta)
        self.peak = max(self.peak, 2)
        if weighted and carries_sum(wire):  # θ-weighted sums, divided at the root
            self.msg = pair_sum(self.msg, other)
        elif weighted:
            self.msg = pair_aggregate(self.msg, other)
        else:
            merged = pair_aggregate(Message(self.msg.delta, 1.0), Message(other.delta, 1.0))
            self.msg = Message(merged.delta, self.msg.theta + other.theta)
        return self.msg.theta

    def receive_all(self, blobs: list, order: list, devices: list) -> float:
        """CentralSGD master: hold every copy at once and average (eq. 1)."""
        import ray

        assert self.msg is not None
        deltas = {self.device: self.msg.delta}
        # refs inside a list are not resolved by Ray: the master fetches all N-1 copies
        for d, b in zip(order, ray.get(blobs), strict=True):
            deltas[d] = from_bytes(b).delta
        self.peak = len(deltas)
        sched = Schedule.of(devices, [(d, self.device) for d in order])
        red = CentralSGD().reduce(deltas, sched)
        self.msg = Message(red.aggregate, red.theta)
        return red.theta

    def peak_copies(self) -> int:
        return self.peak


class RayExecutor:
    """Device actors on a local Ray cluster; see the module docstring."""

    def __init__(self, parts, model_name: str, model_kw: dict, lr: float, momentum: float):
        import ray

        self.ray = ray
        self._remote = ray.remote(num_cpus=0)(_Device)
        self.parts, self.model_name, self.model_kw = parts, model_name, model_kw
        self.lr, self.momentum = lr, momentum
        self.actors: dict[int, object] = {}
        for d in range(len(parts)):
            self.revive(d)

    @classmethod
    def start(cls, parts, model_name, model_kw, lr, momentum, num_cpus: int = 2) -> RayExecutor:
        try:
            import ray
        except ImportError:
            raise ConfigError(
                '--executor ray needs Ray: .venv/bin/pip install "ray>=2.40,<3"'
            ) from None
        if not ray.is_initialized():
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
        return cls(parts, model_name, model_kw, lr, momentum)

    def revive(self, device: int) -> None:
        """(Re)start device ``device``'s actor: stage 1 of Fig. 2 for one device."""
        x, y = self.parts[device]
        self.actors[device] = self._remote.remote(
            device, x, y, self.model_name, self.model_kw, self.lr, self.momentum
        )

    def kill(self, device: int) -> None:
        """Fault injection: the device's actor dies."""
        self.ray.kill(self.actors[device])

    def train(
        self, live: Sequence[int], global_state: Mapping[str, torch.Tensor], batches: Mapping
    ) -> dict[int, int]:
        """Train every live device; returns samples seen for those whose actor survived."""
        blob = self.ray.put(to_bytes(global_state, 1.0))
        refs = {d: self.actors[d].train.remote(blob, batches[d]) for d in live}
        out = {}
        for d, ref in refs.items():
            try:
                out[d] = self.ray.get(ref)
            except self.ray.exceptions.RayActorError:
                continue  # lost device: skipped this iteration
        return out

    def reduce(self, schedule: Schedule, aggregation: str, wire: str = "float32") -> ReduceResult:
        """Walk the schedule on the actors; the root's aggregate comes back to the MA
        (chain/neighbor messages at the ``wire`` precision, cast back at the end)."""
        acts = self.actors
        if aggregation == "central":
            master = schedule.root
            order = [d for d in schedule.devices if d != master]
            blobs = [acts[d].message.remote() for d in order]
            theta_ref = acts[master].receive_all.remote(blobs, order, list(schedule.devices))
        else:
            weighted = aggregation == "chain"
            theta_ref = None
            for p in schedule.pairs:  # actor calls run in submission order per actor
                theta_ref = acts[p.receiver].receive.remote(
                    acts[p.sender].message.remote(wire), weighted, wire
                )
        if theta_ref is not None:
            self.ray.get(theta_ref)
        root = schedule.root
        msg = from_bytes(self.ray.get(acts[root].message.remote(wire)))
        if aggregation == "chain" and carries_sum(wire):  # the root divides once: S/θ
            msg = Message(mean_of_sum(msg), msg.theta)
        peak = dict(
            zip(
                schedule.devices,
                self.ray.get([acts[d].peak_copies.remote() for d in schedule.devices]),
                strict=True,
            )
        )
        # at the wire precision; the MA adds it to the global model in the model's dtype
        return ReduceResult(msg.delta, msg.theta, root, peak)

    def shutdown(self) -> None:
        for a in self.actors.values():
            self.ray.kill(a)
        self.actors.clear()

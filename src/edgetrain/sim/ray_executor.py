"""The Ray executor: a pool of actors training the selected clients in parallel.

Each actor holds the training tensors (shipped once through Ray's object store) and
builds the model itself from its name and options; per task it receives the global
weights and returns the client's weights as **safetensors bytes** (exchanged artifacts
are safetensors or JSON, never pickled Python objects) plus JSON-able numbers. Training
uses the task's seed and one intra-op thread, so the same seed gives the same metrics
as :class:`~edgetrain.sim.executor.InProcessExecutor`. An actor that dies is replaced
and its task resubmitted (``max_retries`` times), so the round survives.

Requires ``ray`` (tested with 2.60; ``pip install "ray>=2.40,<3"``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from edgetrain.errors import ConfigError
from edgetrain.sim.executor import ClientTask


def _to_bytes(state: Mapping[str, torch.Tensor]) -> bytes:
    return st_save({k: v.detach().contiguous().clone() for k, v in state.items()})


class _Worker:
    """Actor body (wrapped with ``ray.remote`` at pool creation)."""

    def __init__(self, model_name: str, options: dict, seed: int, base_width: float, x, y, parts):
        torch.set_num_threads(1)
        self.model_name, self.options, self.seed = model_name, dict(options), seed
        self.base_width = base_width
        self.x, self.y = x, y
        self.parts = [torch.as_tensor(p, dtype=torch.long) for p in parts]
        self.models: dict[float, torch.nn.Module] = {}

    def _model(self, width: float) -> torch.nn.Module:
        from edgetrain import models

        if width not in self.models:
            opts = dict(self.options)
            if width < 1.0:
                opts["width_mult"] = self.base_width * width
            self.models[width] = models.build(self.model_name, seed=self.seed, **opts)
        return self.models[width]

    def ping(self) -> bool:
        return True

    def train(self, state_bytes: bytes, task: dict[str, Any]) -> tuple[bytes, dict[str, float]]:
        from edgetrain.federated.local import local_train
        from edgetrain.sim.executor import slice_state

        task = dict(task)
        task["codec_share"] = tuple((str(c), float(v)) for c, v in task.get("codec_share", ()))
        t = ClientTask(**task)
        model = self._model(t.width)
        model.load_state_dict(slice_state(st_load(state_bytes), model.state_dict()))
        idx = self.parts[t.cid]
        res = local_train(
            model, self.x[idx], self.y[idx], steps=t.steps, batch_size=t.batch_size, lr=t.lr,
            generator=torch.Generator().manual_seed(t.seed), proximal_mu=t.proximal_mu,
            codec_share=dict(t.codec_share), clip_grad_norm=t.clip_grad_norm,
        )  # fmt: skip
        nums = {"n_samples": res.n_samples, "trained_samples": res.trained_samples,
                "loss_sq_mean": res.loss_sq_mean, "mean_loss": res.mean_loss}  # fmt: skip
        return _to_bytes(res.state), nums


class RayExecutor:
    """Train tasks on ``num_actors`` Ray actors; dead actors are replaced and retried."""

    name = "ray"

    def __init__(
        self,
        model_name: str,
        options: Mapping[str, Any],
        seed: int,
        x: torch.Tensor,
        y: torch.Tensor,
        parts: Sequence[Any],
        *,
        base_width: float = 1.0,
        num_actors: int = 2,
        max_retries: int = 2,
    ) -> None:
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ConfigError(
                'executor "ray" needs the ray package: pip install "ray>=2.40,<3"'
            ) from exc
        if num_actors < 1:
            raise ConfigError(f"num_actors={num_actors}; expected >= 1")
        self.ray = ray
        if not ray.is_initialized():
            ray.init(
                num_cpus=num_actors, include_dashboard=False, log_to_driver=False,
                configure_logging=False,
            )  # fmt: skip
        self._cls = ray.remote(num_cpus=1, max_restarts=0)(_Worker)
        self._args = (model_name, dict(options), seed, base_width, ray.put(x), ray.put(y),
                      ray.put([list(map(int, p)) for p in parts]))  # fmt: skip
        self.actors = [self._spawn() for _ in range(num_actors)]
        self.max_retries = max_retries
        self.restarts = 0

    def _spawn(self):
        a = self._cls.remote(*self._args)
        self.ray.get(a.ping.remote())
        return a

    def run(self, global_state: Mapping[str, torch.Tensor], tasks: Sequence[ClientTask]):
        from edgetrain.federated.local import LocalResult

        ray = self.ray
        state_ref = ray.put(_to_bytes(global_state))
        task_dicts = [dataclasses.asdict(t) for t in tasks]
        slot = [i % len(self.actors) for i in range(len(tasks))]
        sent = [self.actors[slot[i]] for i in range(len(tasks))]
        futures = [a.train.remote(state_ref, d) for a, d in zip(sent, task_dicts, strict=True)]
        out: list[LocalResult] = []
        for i, fut in enumerate(futures):
            tries = 0
            while True:
                try:
                    blob, nums = ray.get(fut)
                    break
                except ray.exceptions.RayActorError:
                    tries += 1
                    if tries > self.max_retries:
                        raise
                    if self.actors[slot[i]] is sent[i]:  # not replaced yet: replace it
                        self.actors[slot[i]] = self._spawn()
                        self.restarts += 1
                    sent[i] = self.actors[slot[i]]
                    fut = sent[i].train.remote(state_ref, task_dicts[i])
            out.append(
                LocalResult(
                    st_load(blob),
                    int(nums["n_samples"]),
                    int(nums["trained_samples"]),
                    float(nums["loss_sq_mean"]),
                    float(nums["mean_loss"]),
                )  # fmt: skip
            )
        return out

    def shutdown(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []

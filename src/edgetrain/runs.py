"""Seeds and run directories.

A run directory ``runs/<name>/`` holds everything a run produced, as files a user can
open: ``config.json`` (the validated config), ``metrics.jsonl`` (one JSON object per
line, appended as the run goes), ``model.safetensors`` and anything later stages add
(checkpoints, ``report.html``). Nothing in it is pickled.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from edgetrain.errors import ConfigError, ModelError, RunDirError

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a torch generator seeded the same way.

    Same seed and config give the same metrics: every random draw in edgetrain flows
    from this seed (explicit generators where we can, the global RNGs otherwise).
    """
    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def _jsonable(value: Any) -> Any:
    """Convert numbers and containers to plain JSON; NaN/inf become null (valid JSON)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, torch.Tensor):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return _jsonable(value.item())
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


# the newest checkpoint this process wrote (a run directory and what it holds, e.g.
# "round 3"): the command line names it when a run is interrupted with Ctrl-C
_last_checkpoint: tuple[Path, str] | None = None


def note_checkpoint(run_path: str | os.PathLike, what: str) -> None:
    """Record that a complete checkpoint (``what``, e.g. "round 3") is now in ``run_path``."""
    global _last_checkpoint
    _last_checkpoint = (Path(run_path), what)


def last_checkpoint() -> tuple[Path, str] | None:
    """The checkpoint :func:`note_checkpoint` recorded last, or None."""
    return _last_checkpoint


def forget_checkpoint() -> None:
    global _last_checkpoint
    _last_checkpoint = None


def _taken(path: Path) -> bool:
    """A run name is taken by a non-empty directory or by anything that is not a directory."""
    return path.exists() and (not path.is_dir() or any(path.iterdir()))


@dataclass
class RunDir:
    """A run's directory and the files in it.

    ``pending``: checked but not made yet (``create(..., defer=True)``); the first write, or
    :meth:`ensure`, makes it -- so a run whose inputs fail to load leaves no directory."""

    path: Path
    pending: bool = field(default=False, repr=False, compare=False)
    _exist_ok: bool = field(default=False, repr=False, compare=False)

    CONFIG = "config.json"
    METRICS = "metrics.jsonl"
    MODEL = "model.safetensors"

    @classmethod
    def create(
        cls,
        name: str,
        root: str | os.PathLike = "runs",
        exist_ok: bool = False,
        *,
        defer: bool = False,
    ) -> RunDir:
        """Create ``root/name``; refuse to overwrite an existing run unless ``exist_ok``.

        ``defer``: check the name and the place now, make the directory at the first write."""
        if not _NAME_RE.match(name):
            raise ConfigError(
                f"run name {name!r} is not accepted: use 1-128 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit"
            )
        path = Path(root) / name
        if path.exists() and not path.is_dir():
            raise ConfigError(
                f"run directory {path} exists and is not a directory; choose another --name "
                "or output root, or move it"
            )
        if path.exists() and not exist_ok and any(path.iterdir()):
            raise ConfigError(
                f"run directory {path} already exists and is not empty; choose another --name "
                "or remove it (runs are never overwritten silently)"
            )
        if defer:
            above = path.parent
            while not above.exists() and above != above.parent:
                above = above.parent
            if not above.is_dir() or not os.access(above, os.W_OK | os.X_OK):
                why = "Not a directory" if not above.is_dir() else "Permission denied"
                raise ConfigError(
                    f"cannot create run directory {path} ({why}: {above}); "
                    "give an output root that is a writable directory"
                )
            return cls(path, pending=True, _exist_ok=exist_ok)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot create run directory {path} ({exc.strerror or exc}); "
                "give an output root that is a writable directory"
            ) from None
        return cls(path)

    @classmethod
    def unique(
        cls, prefix: str, root: str | os.PathLike = "runs", *, defer: bool = False
    ) -> RunDir:
        """Create ``root/prefix``, or ``prefix-2``, ``prefix-3``... if taken."""
        root = Path(root)
        candidate, i = prefix, 1
        while _taken(root / candidate):
            i += 1
            candidate = f"{prefix}-{i}"
        return cls.create(candidate, root, exist_ok=True, defer=defer)

    def ensure(self) -> RunDir:
        """Make a pending directory (checked again: another run may have taken the name)."""
        if self.pending:
            RunDir.create(self.path.name, self.path.parent, exist_ok=self._exist_ok)
            self.pending = False
        return self

    def write_config(self, config: Mapping[str, Any]) -> Path:
        return self.write_json(self.CONFIG, config)

    def write_json(self, filename: str, obj: Any) -> Path:
        """Write ``obj`` as JSON atomically (temp file + rename), so a crash loses nothing."""
        target = self.ensure().path / filename
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_text(json.dumps(_jsonable(obj), indent=2, sort_keys=True) + "\n")
        os.replace(tmp, target)
        return target

    def log_metrics(self, record: Mapping[str, Any]) -> None:
        """Append one JSON line to metrics.jsonl (flushed immediately)."""
        with open(self.ensure().path / self.METRICS, "a") as f:
            f.write(json.dumps(_jsonable(record), sort_keys=True) + "\n")
            f.flush()

    def metrics(self) -> Iterator[dict[str, Any]]:
        return iter(self.read_metrics())

    def read_metrics(self, *, torn_tail: bool = False) -> list[dict[str, Any]]:
        """Every record of metrics.jsonl; a line that is not a JSON object is a RunDirError
        naming the file and the line.

        ``torn_tail``: a last line without its newline that does not parse is the record a
        crash interrupted mid-write (lines are appended whole, then flushed), and is left
        out instead of raising.
        """
        path = self.path / self.METRICS
        if not path.exists():
            return []
        text = path.read_text(errors="replace")
        lines = text.split("\n")
        rows = []
        for i, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                if torn_tail and i == len(lines):  # no newline after it: a torn write
                    break
                raise RunDirError(
                    f"{path} line {i} is not valid JSON ({exc.msg}); each line must be one "
                    "JSON object as edgetrain writes them -- the file is damaged"
                ) from None
            if not isinstance(row, dict):
                raise RunDirError(
                    f"{path} line {i} is a JSON {type(row).__name__}, not an object; each "
                    "line must be one JSON object as edgetrain writes them"
                )
            rows.append(row)
        return rows

    def save_model(
        self,
        state_dict: Mapping[str, torch.Tensor],
        filename: str = MODEL,
        metadata: Mapping[str, str] | None = None,
    ) -> Path:
        return save_state(self.ensure().path / filename, state_dict, metadata)


def read_run_config_json(
    run_dir: str | os.PathLike, command: str, *, unmarked_ok: bool = False
) -> dict[str, Any]:
    """The ``config.json`` of a run directory made by ``edgetrain COMMAND``, for
    ``--resume``: a missing directory or file, unreadable JSON or another command's
    directory is one ConfigError naming it.  ``unmarked_ok``: accept a config without a
    ``command`` field (local runs written before round 17)."""
    where = Path(run_dir)
    accepted = f"--resume takes a run directory made by `edgetrain {command}`"
    if not where.is_dir():
        raise ConfigError(f"run directory {where} does not exist or is not a directory; {accepted}")
    path = where / RunDir.CONFIG
    if not path.is_file():
        raise ConfigError(f"{where} is not a run directory (no {RunDir.CONFIG}); {accepted}")
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path} is not readable JSON ({exc}); {accepted}") from None
    kind = data.get("command", command if unmarked_ok else None) if isinstance(data, dict) else None
    if kind != command:
        made = f" (made by `edgetrain {kind}`)" if isinstance(kind, str) else ""
        raise ConfigError(f"{path} is not the config of a `{command}` run{made}; {accepted}")
    return data


def save_state(
    path: str | os.PathLike,
    state_dict: Mapping[str, torch.Tensor],
    metadata: Mapping[str, str] | None = None,
) -> Path:
    """Save tensors as safetensors, atomically; shared/non-contiguous tensors are copied."""
    path = Path(path)
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in state_dict.items()}
    tmp = path.with_suffix(path.suffix + ".tmp")
    save_file(tensors, str(tmp), metadata=dict(metadata) if metadata else None)
    os.replace(tmp, path)
    return path


def load_state(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Load a safetensors file; a missing or corrupt file is a ModelError naming it."""
    path = Path(path)
    if path.is_dir():
        raise ModelError(
            f"model file {path} is a directory; expected a .safetensors file"
            + (f" such as {path / RunDir.MODEL}" if (path / RunDir.MODEL).is_file() else "")
        )
    if not path.is_file():
        raise ModelError(f"model file {path} does not exist (expected a .safetensors file)")
    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises several types for corrupt headers/data
        raise ModelError(
            f"model file {path} is not a readable safetensors file ({exc}); "
            "expected a file written by edgetrain or safetensors.torch.save_file"
        ) from exc


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The string metadata of a safetensors file ({} if none); ModelError if unreadable."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except Exception as exc:  # same failure types as load_state
        raise ModelError(
            f"model file {path} is not a readable safetensors file ({exc}); "
            "expected a file written by edgetrain or safetensors.torch.save_file"
        ) from exc


def load_into(model: torch.nn.Module, state: Mapping[str, torch.Tensor], *, strict: bool = True):
    """Load ``state`` into ``model`` and list every mismatch instead of loading partially."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state)) if strict else []
    unexpected = sorted(set(state) - set(own))
    shape = sorted(
        f"{k}: file {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
        for k in set(own) & set(state)
        if tuple(own[k].shape) != tuple(state[k].shape)
    )
    problems = []
    if missing:
        problems.append("missing in file: " + ", ".join(missing))
    if unexpected:
        problems.append("not in model: " + ", ".join(unexpected))
    if shape:
        problems.append("shape mismatch: " + "; ".join(shape))
    if problems:
        raise ModelError("checkpoint does not match the model -> " + " | ".join(problems))
    model.load_state_dict(dict(state), strict=strict)
    return model

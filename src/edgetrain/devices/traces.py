"""Resource traces at a fixed time step: busy/free states and app-usage memory.

``busy_trace`` gives each device a two-state (free/busy) Markov chain and never lets more
than ``max_busy_share`` of them be busy at once (MDLdroid §4.2: "assuring a maximum of 50%
of the devices being in busy state").

``memory_trace`` replays FedHybrid's app-usage model (§4.4.2, Figs. 11-12): the phone
alternates between idle gaps and interaction sessions of ~150 s; a session has one
foreground app and 3-5 background (cached) apps; launching an app spikes memory briefly and
switching between cached apps gives sharp, short spikes. When available memory falls below
Android's cached-app kill level the low-memory killer evicts the least recently used
background app (counted in ``kills``). Each step also carries FedHybrid's importance weight
``w_i = sum_j Max_Score / oom_adj_score_j`` that its memory-budget predictor (Eq. 10) uses.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from edgetrain.devices.profile import GIB, KIB, MIB, SWAP_ALPHA, DeviceProfile
from edgetrain.errors import ConfigError, DataError


def busy_trace(
    n_devices: int,
    steps: int,
    max_busy_share: float = 0.5,
    seed: int | np.random.Generator = 0,
    mean_busy_steps: float = 20.0,
    mean_free_steps: float = 40.0,
) -> np.ndarray:
    """Boolean ``(steps, n_devices)`` array, True = busy; busy count <= floor(share x n).

    Each device flips free->busy with probability 1/mean_free_steps and busy->free with
    1/mean_busy_steps per step (geometric sojourns; the means are our defaults, the paper
    gives none). When more than the cap turn busy at one step, the excess among the devices
    that *just* turned busy stay free, so no device is interrupted mid-busy by the cap.
    """
    if n_devices < 0 or steps < 0:
        raise ConfigError(f"n_devices and steps must be >= 0, got {n_devices}, {steps}")
    if not 0.0 <= max_busy_share <= 1.0:
        raise ConfigError(f"max_busy_share must be in [0, 1], got {max_busy_share}")
    if mean_busy_steps < 1 or mean_free_steps < 1:
        raise ConfigError("mean_busy_steps and mean_free_steps must be >= 1")
    rng = np.random.default_rng(seed)
    cap = int(np.floor(max_busy_share * n_devices + 1e-9))
    out = np.zeros((steps, n_devices), dtype=bool)
    p_busy = mean_busy_steps / (mean_busy_steps + mean_free_steps)
    state = rng.random(n_devices) < p_busy
    prev = np.zeros(n_devices, dtype=bool)
    for t in range(steps):
        if t > 0:
            u = rng.random(n_devices)
            state = np.where(state, u >= 1.0 / mean_busy_steps, u < 1.0 / mean_free_steps)
        excess = int(state.sum()) - cap
        if excess > 0:
            new = np.flatnonzero(state & ~prev)
            old = np.flatnonzero(state & prev)
            # previous step obeyed the cap, so reverting newcomers always suffices; at t = 0
            # every busy device is a newcomer
            pool = new if len(new) >= excess else np.concatenate([new, old])
            state[rng.choice(pool, size=excess, replace=False)] = False
        out[t] = state
        prev = state.copy()
    return out


# --- app-usage memory model -------------------------------------------------------------


@dataclass(frozen=True)
class AppUsageModel:
    """Constants of the app-usage memory model, each with its source."""

    # FedHybrid Fig. 11(a): most users' mean session is 153 s, 73% within 126-412 s;
    # a log-normal with median 153 s and sigma 0.3 puts ~74% of sessions in 126-412 s.
    session_median_s: float = 153.0
    session_sigma: float = 0.3
    # FedHybrid Fig. 11(b): one foreground app and 3-5 background apps per session.
    min_background: int = 3
    max_background: int = 5
    # Idle (screen-off) gap between sessions, exponential mean (our default; Carat-style
    # traces interleave short sessions with longer idle periods).
    gap_mean_s: float = 300.0
    # Memory held by the OS itself (kernel, system_server, SurfaceFlinger, persistent
    # services): ~1.2 GiB plus 10% of RAM for caches (derived from Android devices' typical
    # MemAvailable of ~40-60% of RAM with no user apps).
    system_base_bytes: int = int(1.2 * GIB)
    system_frac: float = 0.10
    # App resident sizes, log-normal: foreground median 350 MiB, cached background 150 MiB
    # (derived: typical Android app PSS, `dumpsys meminfo`).
    fg_median_bytes: int = 350 * MIB
    bg_median_bytes: int = 150 * MIB
    app_sigma: float = 0.5
    # FedHybrid Fig. 12(a): launches cause brief spikes then stabilise; switching between
    # cached apps gives sharp spikes with quick recovery. Spike = frac x app size, decaying
    # exponentially with tau; switches arrive as a Poisson process within a session.
    launch_spike_frac: float = 0.6
    launch_tau_s: float = 2.0
    switch_rate_per_s: float = 1.0 / 45.0
    switch_spike_frac: float = 0.3
    switch_tau_s: float = 1.0
    # AOSP ProcessList.java mOomMinFreeHigh: the cached-app kill level is 184320 KiB free.
    lmk_minfree_bytes: int = 184_320 * KIB

    def __post_init__(self) -> None:
        if not 0 <= self.min_background <= self.max_background:
            raise ConfigError("need 0 <= min_background <= max_background")
        for key in ("session_median_s", "gap_mean_s", "launch_tau_s", "switch_tau_s"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"AppUsageModel.{key} must be > 0")


# Android oom_score_adj levels (AOSP ProcessList.java): FOREGROUND_APP_ADJ 0, HOME_APP_ADJ
# 600, CACHED_APP_MIN_ADJ 900; Max_Score = OOM_SCORE_ADJ_MAX = 1000. FedHybrid's weight
# divides by the score, so the foreground's 0 is clamped to 1 (highest importance).
OOM_MAX_SCORE = 1000.0
OOM_FOREGROUND = 1.0
OOM_HOME = 600.0
OOM_CACHED = 900.0


@dataclass
class MemoryTrace:
    """Available memory of one device over time, with the app-usage state behind it."""

    t: np.ndarray  # seconds, (steps,)
    available_bytes: np.ndarray  # int64, in [0, total_bytes]
    foreground: np.ndarray  # int8, 0 or 1 foreground app
    background: np.ndarray  # int16, cached background apps
    in_session: np.ndarray  # bool
    launching: np.ndarray  # bool: an app launch spike is decaying
    kills: np.ndarray  # int16, low-memory-killer kills at this step
    oom_weight: np.ndarray  # float, FedHybrid's importance weight w_i
    total_bytes: int
    step_s: float
    device: str = ""
    seed: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    _ARRAYS = (
        ("t", np.float64),
        ("available_bytes", np.int64),
        ("foreground", np.int8),
        ("background", np.int16),
        ("in_session", np.bool_),
        ("launching", np.bool_),
        ("kills", np.int16),
        ("oom_weight", np.float64),
    )

    def __len__(self) -> int:
        return int(self.t.shape[0])

    @property
    def used_bytes(self) -> np.ndarray:
        return self.total_bytes - self.available_bytes

    def sessions(self) -> list[tuple[float, float]]:
        """(start, end) seconds of each interaction session in the trace."""
        flags = self.in_session.astype(np.int8)
        edges = np.diff(np.concatenate([[0], flags, [0]]))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        return [
            (float(s * self.step_s), float(e * self.step_s))
            for s, e in zip(starts, ends, strict=True)
        ]

    def available_at(self, time_s: float) -> int:
        """Available bytes at ``time_s`` (the step containing it; clamped to the trace)."""
        if len(self) == 0:
            raise DataError("empty memory trace")
        i = int(np.clip(np.floor(time_s / self.step_s), 0, len(self) - 1))
        return int(self.available_bytes[i])

    def to_json(self) -> str:
        """The trace as one JSON object (arrays as lists) for storing and replaying."""
        obj: dict[str, Any] = {
            "format": "edgetrain.memory_trace/1",
            "total_bytes": int(self.total_bytes),
            "step_s": float(self.step_s),
            "device": self.device,
            "seed": self.seed,
            "meta": self.meta,
        }
        for name, _ in self._ARRAYS:
            obj[name] = getattr(self, name).tolist()
        return json.dumps(obj)

    @classmethod
    def from_json(cls, text: str) -> MemoryTrace:
        """Inverse of :meth:`to_json`; malformed input raises :class:`DataError`."""
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"memory trace is not valid JSON: {exc}") from exc
        if not isinstance(obj, dict) or obj.get("format") != "edgetrain.memory_trace/1":
            raise DataError("not an edgetrain memory trace (format edgetrain.memory_trace/1)")
        missing = [n for n, _ in cls._ARRAYS if n not in obj]
        if missing:
            raise DataError(f"memory trace lacks fields {missing}")
        arrays = {n: np.asarray(obj[n], dtype=d) for n, d in cls._ARRAYS}
        lengths = {a.shape for a in arrays.values()}
        if len(lengths) != 1 or len(next(iter(lengths))) != 1:
            raise DataError(f"memory trace arrays must be 1-D and equally long, got {lengths}")
        total = int(obj["total_bytes"])
        av = arrays["available_bytes"]
        if av.size and (av.min() < 0 or av.max() > total):
            raise DataError("memory trace available_bytes outside [0, total_bytes]")
        return cls(
            **arrays,
            total_bytes=total,
            step_s=float(obj["step_s"]),
            device=str(obj.get("device", "")),
            seed=obj.get("seed"),
            meta=dict(obj.get("meta") or {}),
        )


def memory_trace(
    profile: DeviceProfile,
    duration_s: float,
    step_s: float = 1.0,
    seed: int = 0,
    model: AppUsageModel | None = None,
) -> MemoryTrace:
    """Simulate ``duration_s`` seconds of app usage on ``profile`` (see the module doc)."""
    if duration_s <= 0 or step_s <= 0:
        raise ConfigError(f"duration_s and step_s must be > 0, got {duration_s}, {step_s}")
    m = model or AppUsageModel()
    rng = np.random.default_rng(seed)
    steps = int(np.ceil(duration_s / step_s))
    total = int(profile.memory_bytes)
    system = m.system_base_bytes + m.system_frac * total

    def app_size(median: int) -> float:
        return float(median * rng.lognormal(0.0, m.app_sigma))

    t = np.arange(steps, dtype=np.float64) * step_s
    avail = np.zeros(steps, dtype=np.int64)
    fg_arr = np.zeros(steps, dtype=np.int8)
    bg_arr = np.zeros(steps, dtype=np.int16)
    sess_arr = np.zeros(steps, dtype=bool)
    launch_arr = np.zeros(steps, dtype=bool)
    kill_arr = np.zeros(steps, dtype=np.int16)
    weight_arr = np.zeros(steps, dtype=np.float64)

    # state: cached background apps (LRU order: index 0 = least recently used)
    background: list[float] = [app_size(m.bg_median_bytes) for _ in range(m.min_background)]
    fg_size = 0.0
    in_session = False
    phase_end = float(rng.exponential(m.gap_mean_s))  # start idle
    launch_t0, launch_amp = -np.inf, 0.0
    switch_t0, switch_amp = -np.inf, 0.0
    n_sessions = 0

    for i in range(steps):
        now = t[i]
        while now >= phase_end:  # phase transitions (several if phases are shorter than a step)
            start = phase_end
            if in_session:
                background.append(fg_size)  # the foreground app is cached, not closed
                fg_size, in_session = 0.0, False
                phase_end = start + float(rng.exponential(m.gap_mean_s))
            else:
                n_sessions += 1
                k = int(rng.integers(m.min_background, m.max_background + 1))
                background = [app_size(m.bg_median_bytes) for _ in range(k)]
                fg_size, in_session = app_size(m.fg_median_bytes), True
                launch_t0, launch_amp = start, m.launch_spike_frac * fg_size
                dur = float(m.session_median_s * rng.lognormal(0.0, m.session_sigma))
                phase_end = start + max(dur, step_s)
        if in_session and background and rng.random() < m.switch_rate_per_s * step_s:
            j = int(rng.integers(len(background)))
            switch_t0, switch_amp = now, m.switch_spike_frac * background[j]
            background.append(background.pop(j))  # most recently used moves to the end
        launch = launch_amp * float(np.exp(-(now - launch_t0) / m.launch_tau_s))
        switch = switch_amp * float(np.exp(-(now - switch_t0) / m.switch_tau_s))
        used = system + fg_size + sum(background) + launch + switch
        kills = 0
        while total - used < m.lmk_minfree_bytes and background:
            used -= background.pop(0)  # lmkd kills the least recently used cached app
            kills += 1
        launching = in_session and launch > 0.05 * max(fg_size, 1.0)
        avail[i] = int(np.clip(total - used, 0, total))
        fg_arr[i] = 1 if in_session else 0
        bg_arr[i] = len(background)
        sess_arr[i] = in_session
        launch_arr[i] = launching
        kill_arr[i] = kills
        top = OOM_FOREGROUND if in_session and not launching else OOM_HOME
        weight_arr[i] = OOM_MAX_SCORE / top + len(background) * OOM_MAX_SCORE / OOM_CACHED

    return MemoryTrace(
        t=t,
        available_bytes=avail,
        foreground=fg_arr,
        background=bg_arr,
        in_session=sess_arr,
        launching=launch_arr,
        kills=kill_arr,
        oom_weight=weight_arr,
        total_bytes=total,
        step_s=float(step_s),
        device=profile.name,
        seed=seed,
        meta={"model": asdict(m), "sessions_started": n_sessions},
    )


PAGE_BYTES = 4096  # Android/arm64 base page size (4 KiB)


def reclaim_pages(trace: MemoryTrace, profile: DeviceProfile, footprint_bytes: float) -> np.ndarray:
    """Pages per step a training job of ``footprint_bytes`` forces the kernel to reclaim.

    It is the part of the footprint above FedHybrid's safe memory
    ``M_safe = M_avail - alpha * Watermark_high`` (§4.4.2), in 4 KiB pages: the pages that
    must be swapped out (to ZRAM or disk) and will fault back in when touched. Zero means the
    job fits without paging at that step.
    """
    if footprint_bytes < 0:
        raise ConfigError(f"footprint_bytes must be >= 0, got {footprint_bytes}")
    safe = np.maximum(
        0.0,
        trace.available_bytes.astype(np.float64)
        - SWAP_ALPHA[profile.swap_kind] * profile.low_watermark_bytes,
    )
    return np.ceil(np.maximum(0.0, footprint_bytes - safe) / PAGE_BYTES).astype(np.int64)

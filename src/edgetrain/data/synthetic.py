"""A learnable synthetic multichannel sensor stream, for scale tests.

Each class k owns, per channel c, a frequency f[k, c] (cycles per window, drawn
uniformly in [1, length/8)) and an amplitude a[k, c] in [0.5, 2). A sample of
class k from subject s is

    x[c, t] = a[k, c] * g[s] * sin(2 pi f[k, c] t / length + phase) + b[s, c] + noise,

with a random phase per sample and channel, a per-subject gain g[s] (N(1, 0.1))
and offset b[s, c] (N(0, 0.3)) — the "person effect" that makes by-subject
splits harder than IID ones — and Gaussian noise with std ``noise``. Classes
differ in spectrum, so a model that looks at frequency content can learn them.
"""

from __future__ import annotations

import numpy as np
import torch

from edgetrain.data.dataset import Dataset
from edgetrain.errors import DataError


def _positive(name: str, value: object, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise DataError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def synthetic_sensor(
    n: int,
    channels: int,
    length: int,
    classes: int,
    seed: int = 0,
    subjects: int = 10,
    noise: float = 0.3,
) -> Dataset:
    """``n`` windows N x ``channels`` x ``length`` (float32), balanced labels, groups = subject."""
    _positive("n", n)
    _positive("channels", channels)
    _positive("length", length, 16)
    _positive("classes", classes, 2)
    _positive("subjects", subjects)
    if noise < 0:
        raise DataError(f"noise must be >= 0, got {noise!r}")
    rng = np.random.default_rng(seed)
    freq = rng.uniform(1.0, length / 8.0, size=(classes, channels))
    amp = rng.uniform(0.5, 2.0, size=(classes, channels))
    gain = rng.normal(1.0, 0.1, size=subjects)
    offset = rng.normal(0.0, 0.3, size=(subjects, channels))
    y = rng.permutation(np.arange(n) % classes)
    groups = rng.permutation(np.arange(n) % subjects)
    phase = rng.uniform(0.0, 2 * np.pi, size=(n, channels, 1))
    t = np.arange(length)[None, None, :] / length
    wave = np.sin(2 * np.pi * freq[y][:, :, None] * t + phase)
    x = amp[y][:, :, None] * gain[groups][:, None, None] * wave + offset[groups][:, :, None]
    x += rng.normal(0.0, noise, size=x.shape)
    return Dataset(
        name="synthetic",
        x=torch.from_numpy(x.astype(np.float32)),
        y=torch.from_numpy(y.astype(np.int64)),
        classes=[f"class_{k}" for k in range(classes)],
        groups=torch.from_numpy(groups.astype(np.int64)),
        source=f"synthetic_sensor(seed={seed})",
        meta={"kind": "sensor", "window": length, "seed": seed, "noise": noise},
    )

"""Activation codecs: FedHybrid's channel-wise mix compression and uniform baselines.

``ChannelMixCodec`` is error-bounded (max |decode(encode(x)) - x| <= its bound);
``UniformCodec(bits)`` is the GACT-like int8/int4 baseline.  Encoded forms are real
``bytes`` in a self-describing frame (see :mod:`edgetrain.compress.container`).
"""

from edgetrain.compress.base import Codec, CodecInputError
from edgetrain.compress.container import unpack_frame
from edgetrain.compress.mix import ChannelMixCodec
from edgetrain.compress.uniform import UniformCodec


def make_codec(name: str, rel_error_bound: float = 0.01) -> Codec:
    """Codec by name: ``mix`` (error bound relative to range), ``int8``, ``int4``, ``int2``."""
    from edgetrain.errors import ConfigError

    if name == "mix":
        return ChannelMixCodec(rel_error_bound=rel_error_bound)
    if name in ("int8", "int4", "int2"):
        return UniformCodec(bits=int(name[3:]))
    raise ConfigError(f"unknown codec {name!r}; expected one of mix, int8, int4, int2")


def frame_meta(data: bytes) -> dict:
    """The JSON metadata of an encoded tensor (codec statistics: channels, blocks, patches)."""
    return unpack_frame(data)[0]


__all__ = [
    "ChannelMixCodec",
    "Codec",
    "CodecInputError",
    "UniformCodec",
    "frame_meta",
    "make_codec",
]

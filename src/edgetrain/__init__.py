"""edgetrain: training neural networks where the data lives."""

from edgetrain.errors import EdgetrainError

__version__ = "0.1.0"

__all__ = ["EdgetrainError", "__version__"]

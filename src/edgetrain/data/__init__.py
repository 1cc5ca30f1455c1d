"""Data for edgetrain: shipped real sets, real-format loaders, synthetic streams, partitioners.

Everything returns a :class:`Dataset` (tensors + class names + per-sample subject
``groups``) so the fleet builder can split it across devices with the
partitioners here, IID, by person or label-skewed (Dirichlet), and quantify the
skew with :func:`js_divergence`. Nothing is downloaded at run time.
"""

from edgetrain.data.dataset import Dataset
from edgetrain.data.formats.mhealth import load_mhealth
from edgetrain.data.formats.opportunity import load_opportunity
from edgetrain.data.formats.pamap2 import load_pamap2
from edgetrain.data.formats.uci_har import load_uci_har
from edgetrain.data.formats.unimib import load_unimib
from edgetrain.data.formats.wisdm import load_wisdm
from edgetrain.data.partition import (
    js_divergence,
    partition_by_group,
    partition_dirichlet,
    partition_dirichlet_held,
    partition_iid,
)
from edgetrain.data.registry import catalog, load, names, options
from edgetrain.data.synthetic import synthetic_sensor
from edgetrain.data.text import Vocabulary, tokenize
from edgetrain.data.ts_format import read_ts

__all__ = [
    "Dataset",
    "Vocabulary",
    "catalog",
    "js_divergence",
    "load",
    "load_mhealth",
    "load_opportunity",
    "load_pamap2",
    "load_uci_har",
    "load_unimib",
    "load_wisdm",
    "names",
    "options",
    "partition_by_group",
    "partition_dirichlet",
    "partition_dirichlet_held",
    "partition_iid",
    "read_ts",
    "synthetic_sensor",
    "tokenize",
]

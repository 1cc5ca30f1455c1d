"""Fine-tuning strategies: full, lp, ft-k and lora-k (TrainDeeploy §V-A, Table I).

``apply_strategy`` decides which parameters train and injects LoRA layers;
``save_adapter``/``load_adapter`` move the trained part in PEFT's format;
``merge_lora`` folds adapters back for export.
"""

from edgetrain.finetune.adapter import load_adapter, save_adapter
from edgetrain.finetune.lora import LoRALinear, lora_modules, merge_lora
from edgetrain.finetune.spec import DEFAULT_ALPHA, DEFAULT_RANK, StrategySpec
from edgetrain.finetune.strategy import (
    StrategyInfo,
    StrategyPlan,
    apply_strategy,
    plan_strategy,
    trainable_state_dict,
)

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_RANK",
    "LoRALinear",
    "StrategyInfo",
    "StrategyPlan",
    "StrategySpec",
    "apply_strategy",
    "load_adapter",
    "lora_modules",
    "merge_lora",
    "plan_strategy",
    "save_adapter",
    "trainable_state_dict",
]

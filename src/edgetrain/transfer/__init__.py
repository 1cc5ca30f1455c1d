"""On-device transfer: pretrain a zoo model, then fine-tune it on a few shots.

The few-shot protocol of TrainDeeploy §VI-A (k shots per class, SGD, batch 8, lr
0.01 cosine to 0.0005, accuracy = mean of the last five epochs, repeated over seeds)
on top of the fine-tuning strategies of :mod:`edgetrain.finetune`, with per-epoch
checkpoints that resume exactly, and what a device would store: the adapter or the
changed weights only. Frozen-prefix activation caching (:mod:`.prefix`) makes the
paper's 100-epoch protocol affordable on a CPU without changing a single update.
"""

from edgetrain.checkpoint import (
    Checkpoint,
    latest_checkpoint,
    restore_checkpoint,
    save_checkpoint,
)
from edgetrain.transfer.fewshot import FewShotSplit, few_shot_split, k_shot_indices
from edgetrain.transfer.loop import PrefixCache, build_prefix_cache, train_protocol
from edgetrain.transfer.prefix import PrefixPlan, PrefixSplit, cache_prefix, find_prefix
from edgetrain.transfer.protocol import PAPER, Protocol, final_accuracy, mean_std
from edgetrain.transfer.session import (
    FinetuneConfig,
    FinetuneResult,
    PretrainResult,
    PretrainSettings,
    load_finetuned,
    prepare,
    pretrain,
    read_config,
    resume_finetune,
    resume_pretrain,
    run_finetune,
)
from edgetrain.transfer.source import Card, DataRef, load_pretrained, select_groups
from edgetrain.transfer.steptime import StepTiming, count_train_flops, measure_step_time

__all__ = [
    "PAPER",
    "Card",
    "Checkpoint",
    "DataRef",
    "FewShotSplit",
    "FinetuneConfig",
    "FinetuneResult",
    "PrefixCache",
    "PrefixPlan",
    "PrefixSplit",
    "PretrainResult",
    "PretrainSettings",
    "Protocol",
    "StepTiming",
    "build_prefix_cache",
    "cache_prefix",
    "count_train_flops",
    "few_shot_split",
    "final_accuracy",
    "find_prefix",
    "k_shot_indices",
    "latest_checkpoint",
    "load_finetuned",
    "load_pretrained",
    "mean_std",
    "measure_step_time",
    "prepare",
    "pretrain",
    "read_config",
    "restore_checkpoint",
    "resume_finetune",
    "resume_pretrain",
    "run_finetune",
    "save_checkpoint",
    "select_groups",
    "train_protocol",
]

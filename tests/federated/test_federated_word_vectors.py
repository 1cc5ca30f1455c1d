"""model.word_vectors: ppmi -- a text model starts from co-occurrence word vectors."""

import pytest
import torch

from bench_loader import load_benchmark
from edgetrain.data.text import ppmi_word_vectors
from edgetrain.errors import ConfigError
from edgetrain.federated import FederatedServer, build_environment
from edgetrain.federated.environment import word_table
from fed_small import small_fleet_config


def test_ppmi_word_vectors_start_every_method_and_only_text_models_take_them():
    tta = load_benchmark("fedhybrid_tta")
    cfg = tta.task_config(True, "fedprox", 0, task="bbc-bert", word_vectors="ppmi")
    env = build_environment(cfg)
    table = word_table(env.build_model())
    # computed from the training split's ids only (no test article, no label)
    expected = ppmi_word_vectors(env.train.x.numpy(), table.shape[0], table.shape[1])
    assert torch.equal(table.detach(), torch.from_numpy(expected))
    server = FederatedServer(env, method="random")
    assert torch.equal(server.global_state["embeddings.word.weight"], table.detach())
    # the BBC task's default since round 34; "random" gives BERT's initialisation
    assert tta.task_config(True, "fedprox", 0, task="bbc-bert").model.word_vectors == "ppmi"
    plain = build_environment(
        tta.task_config(True, "fedprox", 0, task="bbc-bert", word_vectors="random")
    )
    assert plain.word_vectors is None
    assert not torch.equal(word_table(plain.build_model()).detach(), table.detach())
    with pytest.raises(ConfigError, match=r"model.word_vectors: ppmi needs a text model"):
        build_environment(small_fleet_config(model={"word_vectors": "ppmi"}))
    with pytest.raises(ConfigError, match="word_vectors"):
        small_fleet_config(model={"word_vectors": "glove"})

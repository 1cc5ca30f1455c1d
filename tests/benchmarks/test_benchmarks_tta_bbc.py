"""benchmarks/fedhybrid_tta.py --task bbc-bert: Table 3's NLP task at tiny scale.

The quick run trains a tiny BERT for real on BBC News articles and prints the Table 3
layout and the FedHybrid-vs-Oort comparison; the default task stays MNIST.
"""

import json

import pytest

from bench_loader import load_benchmark


@pytest.fixture(scope="module")
def tta():
    return load_benchmark("fedhybrid_tta")


def test_bbc_quick_prints_table3_layout(tta, capsys, tmp_path):
    out_file = tmp_path / "bbc.json"
    argv = ["--task", "bbc-bert", "--quick", "--aggregators", "fedprox", "--no-scale",
            "--no-ablations", "--methods", "random,oort,fedhybrid,oort+compress,heterofl",
            "--extend", "1.0",
            "--out", str(out_file)]  # fmt: skip
    assert tta.main(argv) == 0
    text = capsys.readouterr().out
    assert "Table 3/4 layout -- BBC News (small BERT at half width" in text
    assert "Table 3 comparison (+fedprox): FedHybrid vs Oort" in text
    assert "final FedHybrid - Oort:" in text
    assert "client-rounds over the run: selected / killed / page reclaim" in text
    out = json.loads(out_file.read_text())
    # the task's defaults since round 34: PPMI word vectors, gradients clipped to norm 1
    assert (out["word_vectors"], out["clip_grad_norm"]) == ("ppmi", 1.0)
    rows = out["tables"]["fedprox"]
    methods = ["random", "oort", "fedhybrid", "oort+compress", "heterofl"]
    assert [r["method"] for r in rows] == methods
    assert rows[-1]["skipped"].startswith("heterofl needs a model with a width_mult option")
    assert all(r["rounds"] == 3 for r in rows[:-1])  # --extend 1.0: no extra rounds
    assert "Table 4 comparison (+fedprox): FedHybrid vs Oort + Melon / Capuchin / GACT" in text
    assert "HeteroFL        refused: heterofl needs a model with a width_mult option" in text
    summ = out["summary"]["fedprox"]
    t4 = summ["table4"]
    assert t4["baselines"] == ["oort+compress"] and list(t4["skipped"]) == ["heterofl"]
    gact = t4["per_baseline"]["oort+compress"]
    assert gact["last_mean"] == summ["last_mean"]["oort+compress"]
    assert summ["lost"]["oort+compress"]["selected"] == 5 * 3
    by = {r["method"]: r for r in rows}
    diff = 100 * (by["fedhybrid"]["final_accuracy"] - by["oort"]["final_accuracy"])
    assert summ["final_diff_points"] == pytest.approx(diff)
    assert summ["common_rounds"] == [1, 2, 3]
    assert summ["round_to_target"]["random"] is not None  # Random reaches its own best
    curves = out["curves"]["fedprox"]
    for m, accs in summ["acc_at_round"].items():
        assert accs == [curves[m][n - 1][1] for n in (1, 2, 3)]
    for lost in summ["lost"].values():
        # every selected client-round has one outcome: int(1.3 x 4) = 5 a round
        assert lost["selected"] == 5 * 3
        assert 0 <= lost["killed"] + lost["pressure"] + lost["late"] <= lost["selected"]
    # every evaluated round has a predicted-class histogram over the test split
    assert "common rounds predicting one class" in text
    for m in ("random", "oort", "fedhybrid", "oort+compress"):
        c = summ["collapse"][m]
        assert c["evaluated_rounds"] == 3 and 0 <= c["one_class_rounds"] <= 3
        assert 0 <= c["cohort_share_of_predicted"] <= 1
        assert 0 < c["train_share_of_predicted"] < 1
    task = out["task"]
    assert task["name"] == "bbc-bert" and task["clients"] == 12
    # the held-out split of the 300 sampled articles, all of it evaluated
    assert task["train_samples"] + int(task["eval"].split("(")[1].split()[0]) == 300


def test_default_task_is_mnist(tta):
    a = tta.task_config(True, "fedprox", 0)
    assert a == tta.task_config(True, "fedprox", 0, task="mnist")
    assert (a.data.name, a.model.name) == ("mnist5k", "lenet")
    b = tta.task_config(False, "fedprox", 3, task="bbc-bert")
    assert (b.data.name, b.model.name, b.fleet.clients) == ("bbc", "bert-small", 100)
    f = b.federated
    assert (f.clients_per_round, f.local_steps, f.batch_size, f.lr) == (20, 1, 8, 0.1)
    assert b.memory.m_g == "share:0.7" and b.partition.alpha == 0.1
    assert b.clock.flops_per_sample == 7.4e9 and b.clock.model_bytes == 1.16e8
    assert b.memory.plan_model.options["hidden"] == 256  # the example's BERT is planned


def test_table3_summary_hand_computed(tta):
    def rec(t, acc, killed=0, pressure=0):
        return {"sim_time_s": t, "accuracy": acc,
                "outcomes": {"fit": 2, "killed": killed, "pressure": pressure, "late": 0}}  # fmt: skip

    recs = {
        "random": [rec(10, 0.2, 2), rec(20, 0.3, 1, 1), rec(30, 0.4, 2)],
        "oort": [rec(10, 0.25, 1), rec(20, 0.35), rec(30, 0.38)],
        "fedhybrid": [rec(5, 0.3), rec(10, 0.45), rec(15, 0.5), rec(20, 0.55)],
    }
    rows = [
        {"method": "random", "time_to_target_s": 30, "final_accuracy": 0.4, "best_accuracy": 0.4,
         "target_accuracy": 0.4},
        {"method": "oort", "time_to_target_s": None, "final_accuracy": 0.38,
         "best_accuracy": 0.38},
        {"method": "fedhybrid", "time_to_target_s": 10, "final_accuracy": 0.55,
         "best_accuracy": 0.55},
    ]  # fmt: skip
    s = tta.table3_summary(rows, recs)
    assert s["fedhybrid_vs_oort"] is None and not s["oort_reached"] and s["fedhybrid_reached"]
    assert s["final_diff_points"] == pytest.approx(17.0)
    assert s["best_diff_points"] == pytest.approx(17.0)
    assert s["common_rounds"] == [1, 2, 3]  # the shortest run has 3 rounds
    assert s["acc_at_round"]["fedhybrid"] == [0.3, 0.45, 0.5]
    # last eighth of 3 common rounds: round 3 alone
    assert s["last_rounds"] == 1 and s["last_mean"] == {"random": 0.4, "oort": 0.38,
                                                        "fedhybrid": 0.5}  # fmt: skip
    assert s["last_mean_diff_points"] == pytest.approx(12.0)
    assert s["round_to_target"] == {"random": 3, "oort": None, "fedhybrid": 2}
    assert s["lost"]["random"] == {
        "selected": 12, "killed": 5, "pressure": 1, "late": 0, "planned": 0,
    }  # fmt: skip
    rows[1]["time_to_target_s"] = 25
    assert tta.table3_summary(rows, recs)["fedhybrid_vs_oort"] == pytest.approx(2.5)


def test_table4_summary_hand_computed(tta):
    rows = [
        {"method": "random", "time_to_target_s": 300, "speedup_vs_random": 1.0,
         "final_accuracy": 0.30},
        {"method": "fedhybrid", "time_to_target_s": 50, "speedup_vs_random": 6.0,
         "final_accuracy": 0.32},
        {"method": "oort+recompute", "time_to_target_s": 200, "speedup_vs_random": 1.5,
         "final_accuracy": 0.35},
        {"method": "oort+swap", "time_to_target_s": 100, "speedup_vs_random": 3.0,
         "final_accuracy": 0.28},
        {"method": "oort+compress", "time_to_target_s": None, "speedup_vs_random": None,
         "final_accuracy": 0.25},
        {"method": "heterofl", "skipped": "heterofl needs a model with a width_mult option"},
    ]  # fmt: skip
    summ = {"last_rounds": 2, "last_mean": {"random": 0.25, "fedhybrid": 0.30,
            "oort+recompute": 0.27, "oort+swap": 0.31, "oort+compress": 0.20}}  # fmt: skip
    t4 = tta.table4_summary(rows, summ)
    assert t4["baselines"] == ["oort+recompute", "oort+swap", "oort+compress"]
    assert t4["skipped"] == {"heterofl": "heterofl needs a model with a width_mult option"}
    per = t4["per_baseline"]
    assert per["oort+recompute"]["fedhybrid_vs"] == pytest.approx(4.0)
    assert per["oort+compress"]["fedhybrid_vs"] is None and not per["oort+compress"]["reached"]
    assert per["oort+swap"]["final_diff_points"] == pytest.approx(4.0)
    assert per["oort+swap"]["last_mean_diff_points"] == pytest.approx(-1.0)
    # the fastest baseline reaching the target is Capuchin (100 s): FedHybrid 2x faster
    assert t4["fastest"] == "oort+swap" and t4["fedhybrid_vs_fastest"] == pytest.approx(2.0)
    # the best final accuracy is Melon's 35 %: FedHybrid -3 points; best last mean Capuchin's
    assert t4["best_final"] == "oort+recompute"
    assert t4["final_diff_points"] == pytest.approx(-3.0)
    assert t4["best_last_mean"] == "oort+swap"
    assert t4["last_mean_diff_points"] == pytest.approx(-1.0)
    for r in rows[2:5]:  # no baseline reaches the target: no fastest, no ratio
        r["time_to_target_s"] = None
    t4 = tta.table4_summary(rows, summ)
    assert t4["fastest"] is None and t4["fedhybrid_vs_fastest"] is None


def test_task_config_one_builder(tta):
    # the shared fields are the same for both tasks; each task's own come from TASK_FIELDS
    a = tta.task_config(False, "fedyogi", 1, rounds=9, batch=32, task="mnist")
    b = tta.task_config(False, "fedyogi", 1, rounds=9, batch=32, task="bbc-bert")
    assert a.partition == b.partition and a.federated.yogi == b.federated.yogi
    assert (a.federated.rounds, b.federated.rounds) == (9, 9)
    assert (a.federated.batch_size, b.federated.batch_size) == (32, 32)
    assert (a.name, b.name) == ("tta-fedyogi", "tta-bbc-fedyogi")
    assert a.data.max_samples == 3000 and b.data.max_samples is None
    assert b.data.options == {"max_len": 128, "vocab_size": 10000}
    assert (a.memory.plan_batch, b.memory.plan_batch) == (8, 4)
    q = tta.task_config(True, "fedprox", 0, task="bbc-bert")
    assert q.memory.plan_model is None and q.model.options["hidden"] == 32
    with pytest.raises(ValueError, match="unknown task 'cifar'"):
        tta.task_config(True, "fedprox", 0, task="cifar")


def test_collapse_stats_counts_one_class_rounds_and_the_next_cohort(tta):
    recs = [
        {"pred_hist": [10, 0], "aggregated_labels": [1, 1]},
        {"pred_hist": [5, 5], "aggregated_labels": [3, 1]},  # after a class-0 round: 3 / 4
        {"pred_hist": [0, 10], "aggregated_labels": [0, 4]},  # tie before: class 0, 0 / 4
        {"pred_hist": None, "aggregated_labels": [2, 2]},  # not evaluated: class 1, 2 / 4
        {"pred_hist": [9, 1], "aggregated_labels": [1, 3]},  # nothing evaluated before
    ]
    c = tta.collapse_stats(recs, [0.6, 0.4])
    assert c["evaluated_rounds"] == 4
    assert c["one_class_rounds"] == 2  # 10/10 twice; 9/10 is below 95 %
    assert c["cohort_share_of_predicted"] == pytest.approx(1.25 / 3)  # mean of 0.75, 0, 0.5
    assert c["train_share_of_predicted"] == pytest.approx(1.6 / 3)  # mean of 0.6, 0.6, 0.4
    none = tta.collapse_stats([{"accuracy": 0.5}], None)
    assert none["evaluated_rounds"] == 0 and none["cohort_share_of_predicted"] is None


def test_bbc_albert_task_is_bbc_with_albert(tta):
    # the same task fields as bbc-bert; the model, the plan model and the clock are ALBERT's
    a = tta.task_config(False, "fedprox", 2, task="bbc-albert")
    b = tta.task_config(False, "fedprox", 2, task="bbc-bert")
    assert a.name == "tta-bbc-albert-fedprox"
    assert (a.data, a.partition, a.fleet) == (b.data, b.partition, b.fleet)
    assert a.federated == b.federated and a.memory.m_g == b.memory.m_g == "share:0.7"
    assert (a.model.name, a.memory.plan_model.name) == ("albert-small", "albert-small")
    assert a.model.options["hidden"] == 128 and a.memory.plan_model.options["hidden"] == 256
    assert a.clock.flops_per_sample == 6.4e9 and a.clock.model_bytes == 2.9e7
    with pytest.raises(ValueError, match="unknown BBC model family 'gpt'"):
        tta.bbc_task(False, family="gpt")


def test_bbc_albert_quick_plans_the_shared_layer(tta, tmp_path):
    # ALBERT's one shared layer is planned per call (round 19): clients below M_G get plans
    out_file = tmp_path / "albert.json"
    argv = ["--task", "bbc-albert", "--quick", "--aggregators", "fedprox", "--no-scale",
            "--no-ablations", "--methods", "random,fedhybrid", "--extend", "1.0",
            "--out", str(out_file)]  # fmt: skip
    assert tta.main(argv) == 0
    out = json.loads(out_file.read_text())
    assert out["task"]["name"] == "bbc-albert"
    lost = out["summary"]["fedprox"]["lost"]
    assert lost["fedhybrid"]["planned"] > 0 and lost["random"]["planned"] == 0

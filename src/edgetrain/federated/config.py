"""The ``edgetrain federate`` config schema (YAML), validated by pydantic.

Every field has a default, so ``{}`` is a valid (tiny) run. Memory figures:

* ``memory.m_g``: M_G, the model's unplanned training memory on a phone. Either a size
  (``"6GB"``, ``"5.5GiB"``) or ``"share:P"``: the P-quantile of the fleet's predicted
  budgets, i.e. the model does not fit on a share P of the fleet. FedHybrid §2.1 reports
  that Oort-Practical excludes over 40% of clients for MobileNetV2 and over 70% for BERT;
  the defaults per model (``DEFAULT_M_G_SHARE``) use those shares.
* ``clock.flops_per_sample`` / ``clock.model_bytes``: the costs the simulated clock
  charges (defaults: the trained model's forward FLOPs and float32 size). Examples set
  paper-scale values so a small proxy model can stand in for the phone workload.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from edgetrain.config import RunName
from edgetrain.federated.methods import METHODS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# FedHybrid §2.1: Oort-Practical "excludes over 40% and 70% of clients for MobileNet and Bert
# training"; other models default to the MobileNet share.
DEFAULT_M_G_SHARE = {
    "mobilenetv2": 0.4,
    "shufflenetv2": 0.4,
    "bert-small": 0.7,
    "albert-small": 0.7,
}


class ModelSection(_Strict):
    name: str = "lenet"
    options: dict[str, Any] = Field(
        default_factory=lambda: {"in_channels": 28, "length": 28, "num_classes": 10}
    )
    # a text model's initial word embeddings: "random" (BERT's N(0, 0.02)) or "ppmi" (word
    # vectors from the training split's co-occurrence counts, no labels:
    # edgetrain.data.text.ppmi_word_vectors), a stand-in for the pretrained encoder
    # FedHybrid fine-tunes, which cannot be downloaded here
    word_vectors: Literal["random", "ppmi"] = "random"


class DataSection(_Strict):
    name: str = "mnist5k"
    options: dict[str, Any] = Field(default_factory=dict)
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    # reshape each sample (MNIST 1x28x28 -> 28x28, rows as channels, for the 1-D LeNet)
    reshape: list[int] | None = Field(default_factory=lambda: [28, 28])
    max_samples: int | None = Field(None, ge=10)


class FleetSection(_Strict):
    clients: int = Field(20, ge=1, le=100_000)
    memory_mix: dict[float, float] | None = None  # GB -> share; default FedHybrid §2.1
    compute_spread: float = Field(0.35, ge=0.0)


class PartitionSection(_Strict):
    scheme: Literal["dirichlet", "iid"] = "dirichlet"
    alpha: float = Field(0.1, gt=0.0)  # FedHybrid §5.2: Dirichlet alpha = 0.1
    # FedHybrid §1: "the unique data on [low-end devices] are underrepresented in the global
    # model" when they are dropped. K (or a list of class ids): those classes' training
    # samples live only on the phones whose physical memory cannot hold M_G (the ones an
    # unplanned method loses to kills), split among them by Dirichlet(alpha); the other
    # classes are split over every phone. 0: data independent of memory (the default).
    low_memory_classes: int | list[int] = 0

    @field_validator("low_memory_classes")
    @classmethod
    def _held(cls, v: int | list[int]) -> int | list[int]:
        if isinstance(v, int):
            if v < 0:
                raise ValueError("must be a class count >= 0 or a list of class ids")
            return v
        if not v or len(set(v)) != len(v) or min(v) < 0:
            raise ValueError("a list of class ids must be non-empty, distinct and >= 0")
        return sorted(v)


class YogiSection(_Strict):
    eta: float = Field(3e-3, gt=0.0)
    tau: float = Field(1e-8, gt=0.0)
    beta1: float = Field(0.9, ge=0.0, lt=1.0)
    beta2: float = Field(0.99, ge=0.0, lt=1.0)


class OortSection(_Strict):
    """Oort's selector settings, named and defaulted as FedScale's ``config_parser`` flags
    (``--exploration_factor`` ... ``--sample_window``; Lai et al., OSDI 2021 §4-5). They apply
    to every method that selects with Oort (``oort``, ``oort-oracle``, Table 4's ``oort+*``
    and ``fedhybrid-oortselector``)."""

    exploration_factor: float = Field(0.9, ge=0.0, le=1.0)  # initial explored share
    exploration_decay: float = Field(0.98, gt=0.0, le=1.0)  # x per round
    exploration_min: float = Field(0.3, ge=0.0, le=1.0)  # floor of the explored share
    round_threshold: float = Field(30.0, gt=0.0, le=100.0)  # preferred-duration percentile
    pacer_delta: float = Field(5.0, ge=0.0, le=100.0)  # 0: the pacer never moves it
    pacer_step: int = Field(20, ge=1)  # rounds between pacer updates
    round_penalty: float = Field(2.0, ge=0.0, le=100.0)  # alpha of (T / duration)^alpha; 0: none
    cut_off_util: float = Field(0.05, ge=0.0, le=1.0)  # exploit pool: scores >= this x k-th
    clip_bound: float = Field(0.98, gt=0.0, le=1.0)  # reward clipped at this quantile
    sample_window: float = Field(5.0, ge=1.0, le=1000.0)  # explore pool: this x n_explore
    # how the exploited share is drawn from that pool: "proportional" to the score as FedScale
    # does (the default), or "top", the highest scores in order -- a diagnostic variant that
    # exploits as FedHybrid's selector does, not FedScale's Oort
    exploit_draw: Literal["proportional", "top"] = "proportional"


class FederatedSection(_Strict):
    rounds: int = Field(5, ge=1, le=100_000)
    clients_per_round: int = Field(5, ge=1)
    local_steps: int = Field(5, ge=1)
    batch_size: int = Field(16, ge=1)
    # Local work per round. None: ``local_steps`` SGD steps of ``batch_size`` samples
    # (FedScale's ``--local_steps``). An integer E: E local epochs over the client's
    # partition (FedHybrid §5.1, CV tasks: "the batch size is 64, ... a local training epoch
    # of 10"), batches of min(batch_size, partition size), i.e. E x ceil(n_k / batch) steps;
    # ``local_steps`` is then ignored and the clock charges the E x n_k samples trained.
    local_epochs: int | None = Field(None, ge=1, le=1000)
    lr: float = Field(0.05, gt=0.0, le=10.0)
    # clip each local step's gradient (loss + FedProx's term) to this global L2 norm before
    # the SGD step; None: no clipping. 1.0 is BERT's (Devlin et al. 2019; google-research/bert
    # optimization.py clip_by_global_norm(grads, 1.0); Hugging Face Trainer max_grad_norm)
    clip_grad_norm: float | None = Field(None, gt=0.0, le=1e6)
    method: str = "fedhybrid"
    aggregator: Literal["fedavg", "fedprox", "fedyogi"] = "fedavg"
    mu: float = Field(0.1, ge=0.0)  # FedProx; FedScale's proxy_mu default
    yogi: YogiSection = Field(default_factory=YogiSection)
    # the round's reporting deadline. None: with failure_report "immediate" no deadline;
    # with "deadline", deadline_factor x the longest round the server expects from any
    # device of the fleet from its check-in (compute + communication, no memory effects)
    deadline_s: float | None = Field(None, gt=0.0)
    # 2: the slowest device still reports when it trains under a plan that costs up to 2x
    # an unplanned step. FedHybrid §3 / Fig. 5 measures recompute plans at 2.3x-2.9x on
    # tight budgets, so the factor admits moderate plans and cuts the costliest ones; the
    # README reports the time-to-accuracy figures' sensitivity to it.
    deadline_factor: float = Field(2.0, ge=1.0, le=100.0)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    eval_every: int = Field(1, ge=1)
    executor: Literal["inprocess", "ray"] = "inprocess"
    ray_actors: int = Field(2, ge=1, le=256)
    epsilon: float = Field(0.9, gt=0.0, le=1.0)  # FedHybrid §5.2
    # FedHybrid's MemStat: "eq4" as printed in eq. 4 (memory-poor clients keep factor 1,
    # memory-rich ones get M_i/M_G > 1), "eq1" eq. 1's form (memory-poor get M_i/M_G < 1)
    memstat: Literal["eq4", "eq1"] = "eq4"
    # FedHybrid's Stat: "eq2" as printed (per-sample RMS training loss); "samples" multiplies
    # it by the client's sample count as Oort's statistical utility does (Lai et al. OSDI
    # 2021 §4.2), a diagnostic variant: eq. 2 alone does not favour data-rich clients
    fedhybrid_stat: Literal["eq2", "samples"] = "eq2"
    # FedHybrid's exploration: "system" as printed (unexplored clients drawn in proportion to
    # their check-in MemStat x CompStat, "prioritize those with rich system resources");
    # "samples" draws them in proportion to their sample count, as FedScale's Oort explores
    # (a variant, not the paper's: round 31 measures what it changes where low-memory phones
    # hold unique data)
    fedhybrid_explore: Literal["system", "samples"] = "system"
    # What FedHybrid's selector exploits: "eq4" as printed (Stat x MemStat x CompStat);
    # "stat" ranks explored clients by Stat alone, without eq. 4's system factors;
    # "no-compstat" (Stat x MemStat) and "no-memstat" (Stat x CompStat) drop one of them
    # (diagnostic variants, round 36; the exploration draw is set by fedhybrid_explore)
    fedhybrid_util: Literal["eq4", "stat", "no-compstat", "no-memstat"] = "eq4"
    # FedHybrid's MAB-UCB exploration constant c in the bonus sqrt(c ln t / n_i) added to the
    # normalised utility. 1.5 (the default since round 40): the 3/2 of CUCB (Chen, Wang &
    # Yuan, ICML 2013, Algorithm 1), the MAB-UCB FedHybrid §4.2 cites, whose rewards lie in
    # [0, 1] as the normalised utility does; 0.1: the temporal-uncertainty constant FedScale's
    # Oort uses (the default through round 39)
    fedhybrid_ucb_c: float = Field(1.5, ge=0.0, le=100.0)
    oort: OortSection = Field(default_factory=OortSection)
    # Over-commitment: every selector picks int(overcommit x clients_per_round) clients and
    # the round closes when clients_per_round have reported (FedScale config_parser
    # ``--overcommitment`` default 1.3; Bonawitz et al. MLSys 2019 §2.2). 1.0 = none.
    overcommit: float = Field(1.3, ge=1.0, le=10.0)
    # When the server learns that a selected client failed (killed, dropped): "deadline" --
    # a client that does not report is only known to have failed when the round's
    # reporting deadline passes (Bonawitz et al. 2019 §2.2: devices that "do not report
    # back in time ... will simply be ignored"); "immediate" -- the failure is reported at
    # once (the behaviour before round 4).
    failure_report: Literal["deadline", "immediate"] = "deadline"
    # a client that trained but reported after the round closed on its first k reports:
    # "average" credits it with the mean utility of the round's aggregated clients (FedScale
    # round_completion_handler: "assign avg reward to explored, but not ran workers"),
    # "none" tells the selector only that it failed
    straggler_feedback: Literal["average", "none"] = "average"
    # FedProx's partial work (Li et al., MLSys 2020, §3 "gamma-inexact solutions" and §5.2:
    # "incorporating partial updates from stragglers" instead of dropping them): a selected
    # client still training when the round closes stops there, uploads the steps it
    # finished (at least one) and is aggregated with its sample count as weight. Its clock
    # and energy count only those steps. false: stragglers are discarded (FedAvg's rule).
    partial_work: bool = False
    # Table 4's baselines (oort+recompute / +swap / +compress): "uniform" -- Melon, Capuchin,
    # GACT as FedHybrid §5.2-5.3 describes them, one configuration for every client sized
    # for the fleet's smallest predicted budget, its overhead paid by every client, the plan
    # generated on each device (edgetrain.federated.baselines); "per_client" -- the rule
    # before round 5: the server fits a plan of the technique to each client below M_G
    baseline_plans: Literal["uniform", "per_client"] = "uniform"
    # when a uniform baseline's client pays its on-device plan generation (ON_DEVICE_PLAN_
    # SLOWDOWN x the planner's CPU time): "round" -- in every round it trains (each round is
    # a new local training job; the technique plans at the job's start), "once" -- only the
    # first time (it caches its plan), "none" -- never
    baseline_plan_charge: Literal["round", "once", "none"] = "round"
    # Fig. 17 "without the server optimizer": the plan generation each client runs on its
    # device for its own budget. "melon" -- Melon's (micro-batching + recompute), as FedHybrid
    # §5.4 says; "recompute" -- the recompute planner alone (the rule before round 5)
    device_plan_generator: Literal["melon", "recompute"] = "melon"
    # A client whose check-in budget no server-side plan fits (below the planner's floor:
    # on BBC News' small BERT, hybrid plans need >= 0.30 M_G): "exclude" (the default since
    # round 33) -- the server that makes the plans knows none fits, so the selector does not
    # pick it (FedScale's "feasible clients": only clients that can run the task are offered
    # to the selector; FedHybrid sends each selected client "an execution plan that fits its
    # predicted budget"); "dispatch" -- it can still be selected, trains without a plan and
    # is killed above its physical memory (the rule through round 32: figures measured
    # before then reproduce with it). Applies to methods whose plans the server makes
    # (fedhybrid and its -noselector / -nocompress / -nopredictor / -oortselector forms).
    # "microbatch" (a variant, not the paper's: FedHybrid §6 argues against micro-batches)
    # -- the client can be selected, and where no plan of the method's technique fits its
    # budget the server gives it Melon's plan instead (micro-batches + recompute,
    # edgetrain.federated.baselines.melon_exact), made on the server, so the client pays
    # no on-device planning; gradient accumulation is exact for the models here (no
    # BatchNorm), so only the clock and the memory demand change.
    unplannable: Literal["dispatch", "exclude", "microbatch"] = "exclude"

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        if v not in METHODS:
            raise ValueError(f"must be one of {', '.join(METHODS)}")
        return v


class MemorySection(_Strict):
    m_g: str | None = None  # "6GB" | "share:0.4" | None (model default share)
    # the model whose execution plans the server makes (default: the trained model). A
    # small proxy can be trained for real while plans (overhead factors) come from the
    # phone workload's model, e.g. LeNet trained, MobileNetV2 planned.
    plan_model: ModelSection | None = None
    plan_batch: int = Field(8, ge=1)  # batch the model is profiled at for planning
    bucket: float = Field(0.05, gt=0.0, le=0.5)
    cluster: bool = True
    # a run directory's plans.json to reuse: the same plans in any process (plans are
    # otherwise made from op costs profiled on this CPU, which vary slightly per process)
    plans: str | None = None


class ClockSection(_Strict):
    flops_per_sample: float | None = Field(None, gt=0.0)
    model_bytes: float | None = Field(None, gt=0.0)


class FederatedConfig(_Strict):
    """A federated run (``edgetrain federate``)."""

    name: RunName = "federated"
    seed: int = Field(0, ge=0)
    output_root: str = "runs"
    model: ModelSection = Field(default_factory=ModelSection)
    data: DataSection = Field(default_factory=DataSection)
    fleet: FleetSection = Field(default_factory=FleetSection)
    partition: PartitionSection = Field(default_factory=PartitionSection)
    federated: FederatedSection = Field(default_factory=FederatedSection)
    memory: MemorySection = Field(default_factory=MemorySection)
    clock: ClockSection = Field(default_factory=ClockSection)

    @model_validator(mode="after")
    def _cohort_fits_fleet(self) -> FederatedConfig:
        # a round cannot close on more reports than the fleet has clients
        if self.federated.clients_per_round > self.fleet.clients:
            raise ValueError(
                f"federated.clients_per_round ({self.federated.clients_per_round}) is more "
                f"than fleet.clients ({self.fleet.clients}); accepted: 1 to fleet.clients"
            )
        return self

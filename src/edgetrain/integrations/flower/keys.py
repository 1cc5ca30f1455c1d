"""Record keys shared by :class:`EdgetrainStrategy` and the client app (one place).

Flower's ``MetricRecord`` holds numbers and ``ConfigRecord`` holds numbers/strings, so
the check-in is a ``MetricRecord`` (numbers) plus a ``ConfigRecord`` (device class), and
the plan travels as a JSON string (the :meth:`ExecutionPlan.to_json` dict).
"""

ARRAYS = "arrays"  # ArrayRecord: the model state
CONFIG = "config"  # ConfigRecord: instructions (round, cid, plan, FedProx mu, ...)
METRICS = "metrics"  # MetricRecord: a node's numbers
CHECKIN_INFO = "checkin-info"  # ConfigRecord: a node's strings (device class)

WEIGHT = "num-examples"  # Flower's conventional aggregation weight key
QUERY_KIND = "edgetrain-query"
QUERY_CHECKIN = "checkin"

# check-in (FedHybrid §4.2 heartbeat): what the server needs for CheckIn + plans
CID = "cid"
N_SAMPLES = "n-samples"
MEMORY_BUDGET = "memory-budget"
STEP_TIME = "step-time-s"
EST_DURATION = "est-duration-s"
COMPUTE = "compute-flops"
DEVICE_CLASS = "device-class"

# train instructions
ROUND = "server-round"
PLAN_JSON = "plan-json"  # "" when the node trains without a plan
PLAN_FRACTION = "plan-fraction"
PLAN_FEASIBLE = "plan-feasible"
PLAN_OVERHEAD = "plan-overhead"
PROXIMAL_MU = "proximal-mu"
CLIP_NORM = "clip-grad-norm"  # 0.0: not clipped
LOCAL_STEPS = "local-steps"
BATCH_SIZE = "batch-size"
LR = "lr"
SEED = "seed"

# train reply
LOSS_SQ_MEAN = "loss-sq-mean"
MEAN_LOSS = "train-loss"
DURATION = "duration-s"
ENERGY = "energy-j"
PLAN_EXECUTED = "plan-executed"  # 1.0 when the node trained under the shipped plan

# evaluate reply
EVAL_LOSS = "eval-loss"
EVAL_ACC = "eval-acc"

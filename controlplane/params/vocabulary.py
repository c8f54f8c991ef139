"""The template schema's vocabulary: the value sets and name rules its fields draw on, the seed's default strict
patterns and intent tiers, and the Field type each leaf is (controlplane/params/schema.py lists the fields)."""

import re
from dataclasses import dataclass, field
from typing import Any, Literal

ROOT = "inference_params"
Apply = Literal["hot", "cold"]

INTENT_LABELS = (
    "order_status",
    "return_refund",
    "product_recommendation",
    "payment_billing",
    "coupon_promotion",
    "account_privacy",
    "legal_policy",
    "copywriting",
    "other",
)
TIERS = ("strict", "normal", "creative")
SPECULATIVE_METHODS = ("draft_model", "ngram", "eagle", "eagle3", "mtp")
# vLLM 0.32's quantization methods the product offers (each one of vLLM's QUANTIZATION_METHODS; the node also checks
# the choice against the checkpoint's own quantization_config: engine_node/checkpoints.py).
QUANTIZATIONS = ("awq", "awq_marlin", "gptq", "gptq_marlin", "fp8")
# The most of a GPU's memory vLLM may be given: vLLM refuses to start when gpu_memory_utilization x total is more
# than the memory free on the device at start-up, after its CUDA context (and NCCL's buffers under tensor
# parallelism) took theirs. 5 % leaves 4 GiB of an 80 GiB H100, 0.8 GiB of a 16 GiB card.
MAX_GPU_MEMORY_UTILIZATION = 0.95
SCENARIO_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# A model catalog name (controlplane/catalog/values.py has the same rule for registering one).
MODEL_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
# What clients put in a request's `model` field: a plain name, never one that reads like a flag.
SERVED_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
MAX_PATTERNS = 64
MAX_PATTERN_LENGTH = 500

# Payment amounts, order numbers, mainland phone numbers and resident ID numbers force strict (seed).
DEFAULT_STRICT_PATTERNS = [
    r"[¥￥$]\s?\d+(?:[.,]\d{1,2})?|\d+(?:\.\d{1,2})?\s?(?:元|块|RMB|CNY|USD)",
    r"(?i)(?:订单号?|order\s*(?:no\.?|number|id|#))\s*[:：#]?\s*[A-Za-z0-9-]{6,}",
    r"(?:^|\D)(?P<hit>1[3-9]\d{9})(?:\D|$)",
    r"(?:^|\D)(?P<hit>\d{17}[\dXx])(?:\D|$)",
]
DEFAULT_INTENT_TIERS = {
    "order_status": "strict",
    "return_refund": "normal",
    "product_recommendation": "creative",
    "payment_billing": "strict",
    "coupon_promotion": "normal",
    "account_privacy": "strict",
    "legal_policy": "strict",
    "copywriting": "creative",
    "other": "normal",
}


@dataclass(frozen=True)
class Field:
    """One leaf of the document: `hot` applies per request at the gateway, `cold` restarts vLLM."""

    path: str
    kind: Literal["int", "float", "bool", "str", "enum", "names", "regexes", "tiers", "model", "served_name"]
    apply: Apply
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    choices: tuple[str, ...] = ()
    nullable: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def section(self) -> str:
        return self.path.split(".", 1)[0]

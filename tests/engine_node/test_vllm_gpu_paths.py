"""Every engine flag set a template can produce, against vLLM 0.32's own parser and config classes on the CPU build.

One subprocess of .venv-vllm (one vLLM import) parses each rendered argv with vLLM's server parser and builds its
configs (`AsyncEngineArgs.create_engine_config()`, plus `verify_equal_vocab_size_if_draft_model()`, which vLLM
runs when its draft proposer starts), and answers the rest of what the GPU paths depend on: vLLM's quantization
methods, the memory check a GPU worker makes at start-up (`request_memory`), the maximum length vLLM derives for
each checkpoint, and PyTorch's own parsing of CUDA_VISIBLE_DEVICES. Each flag set is either built by vLLM or
refused by our validation (the control plane's, then the node's) with a message that starts with the template
field; where we refuse, vLLM refuses too, except for the refusals listed as the product's own rules.
"""

import dataclasses
import json
import os
import re
import subprocess
from dataclasses import dataclass

import pytest

from controlplane.params import schema
from controlplane.params.validation import validate
from engine_node import checkpoints
from engine_node.config import ConfigRejected, NodeConfig, content_hash, engine_args
from engine_node.config_checks import check_config
from engine_node.model_sources import ModelAllowList
from engine_node.settings import AgentSettings
from engine_node.telemetry.gpu_devices import parse_visible_devices
from tests.engine_node.checkpoint_dirs import read_config, variants
from tests.engine_node.conftest import ROOT, VLLM_ENV

pytestmark = pytest.mark.vllm

GIB = 1 << 30
MIB = 1 << 20
# What a GPU's CUDA context and cuBLAS workspaces hold when vLLM measures the free memory: about 0.5 GiB on an H100;
# 1 GiB leaves room for NCCL's buffers under tensor parallelism. scripts/gpu_check.py measures it on the real card.
HELD_BEFORE_VLLM = GIB
# Cards of 24 GB and up; the T4 shows the limit below them.
DEVICES_MIB = {"H100 80GB": 81559, "H200": 143771, "A100 40GB": 40960, "L40S": 46068, "L4": 23034}
SMALL_CARD_MIB = 15360
VISIBLE_DEVICES = ["0", "1,0", "2,2", "1,-1,0", "3gpu,1", "GPU-aa,GPU-bb", "MIG-abc", "", " 1 , 0 ", "GPU-aa,0"]


@dataclass
class Case:
    """A template's engine and speculative sections and the checkpoints it names (keys of checkpoint_dirs.variants).

    expect: "runs" (we accept, vLLM builds), "vllm_refuses" (we refuse naming `field`; so does vLLM), "policy" (we
    refuse naming `field`, a rule of the product or of a GPU that vLLM's CPU config classes would take: `why`),
    "gpu_only" (we accept; vLLM's CPU build refuses it in a branch of its own for the CPU: `why`, its error
    containing `vllm_error`)."""

    name: str
    engine: dict = dataclasses.field(default_factory=dict)
    speculative: dict = dataclasses.field(default_factory=dict)
    main: str = "tiny"
    draft: str | None = None
    expect: str = "runs"
    field: str = ""
    why: str = ""
    vllm_error: str = ""
    sections: dict = dataclasses.field(default_factory=dict)


# A template for the tiny model (2048 positions): its maximum length inside the model's, the long-context queue's
# threshold below it.
BASE = {"engine": {"max_model_len": 1024}, "batch": {"long_context_threshold": 512}}


def schema_cases() -> list[Case]:
    """Every engine field at its bounds and default, every choice: what a template can hold, field by field."""
    cases = []
    for spec in schema.FIELDS:
        section, key = spec.path.split(".", 1)
        if section != "engine" or spec.kind in ("model", "served_name"):
            continue
        if spec.kind == "enum":
            values = [None, *spec.choices]
        elif spec.kind == "bool":
            values = [True, False]
        else:
            low = spec.minimum if not spec.exclusive_minimum else spec.minimum + 0.05
            values = sorted({spec.default, type(spec.default)(low), type(spec.default)(spec.maximum)})
        for value in values:
            engine = {key: value}
            if key == "max_num_seqs":
                engine["max_num_batched_tokens"] = max(value, 8192)
            if key == "max_num_batched_tokens" and value < 64:
                engine["max_num_seqs"] = value
            sections = {"batch": {"long_context_threshold": 8}} if key == "max_model_len" else {}
            expect = "runs"
            if key == "max_model_len" and value > 2048:
                expect = "vllm_refuses"  # above the tiny model's own 2048
            if key == "quantization" and value not in (None, "fp8"):
                expect = "vllm_refuses"  # the weight-only methods need a quantized checkpoint; tiny is bfloat16
            cases.append(
                Case(
                    f"engine.{key}={value}",
                    engine,
                    main="tiny",
                    expect=expect,
                    field=spec.path if expect != "runs" else "",
                    sections=sections,
                )
            )
    for method in schema.SPECULATIVE_METHODS:
        for tokens in (3, 5):
            spec = {"enabled": True, "method": method, "num_speculative_tokens": tokens}
            main, draft = "tiny", None
            if method in ("draft_model", "eagle", "eagle3"):
                draft = "tiny-draft"
            if method == "mtp":
                main = "mtp-model"
            cases.append(Case(f"speculative {method} k={tokens}", speculative=spec, main=main, draft=draft))
    return cases


HAND_CASES = [
    # 3: speculative methods offered only with what they need.
    Case("eagle without a head", speculative={"method": "eagle"}, expect="vllm_refuses",
         field="speculative.draft_model"),
    Case("eagle3 without a head", speculative={"method": "eagle3"}, expect="vllm_refuses",
         field="speculative.draft_model"),
    Case("eagle with a head that has no tokenizer files", speculative={"method": "eagle"}, draft="eagle-head"),
    Case("mtp on a model without MTP layers", speculative={"method": "mtp"}, expect="vllm_refuses",
         field="speculative.method"),
    Case("ngram, widest window", speculative={"method": "ngram", "prompt_lookup_min": 16, "prompt_lookup_max": 16}),
    Case("ngram off above 4 running", engine={"max_num_seqs": 8},
         speculative={"method": "ngram", "disable_above_batch_size": 4}),
    # 4: quantization against vLLM's list and the checkpoint.
    Case("awq on an AWQ checkpoint", engine={"quantization": "awq"}, main="tiny-awq"),
    Case("awq_marlin on an AWQ checkpoint", engine={"quantization": "awq_marlin"}, main="tiny-awq",
         expect="gpu_only", why="vLLM 0.32's AWQ override returns None on CPU (auto_awq.py: 'Don't override on CPU'); "
         "on a GPU the checkpoint runs as auto_awq", vllm_error="does not match the quantization method"),
    Case("gptq on a GPTQ checkpoint", engine={"quantization": "gptq"}, main="tiny-gptq"),
    Case("gptq_marlin on a GPTQ checkpoint", engine={"quantization": "gptq_marlin"}, main="tiny-gptq"),
    Case("fp8 on an FP8 checkpoint", engine={"quantization": "fp8"}, main="tiny-fp8"),
    Case("awq on a GPTQ checkpoint", engine={"quantization": "awq"}, main="tiny-gptq", expect="vllm_refuses",
         field="engine.quantization"),
    Case("gptq on an AWQ checkpoint", engine={"quantization": "gptq"}, main="tiny-awq", expect="vllm_refuses",
         field="engine.quantization"),
    Case("fp8 on a GPTQ checkpoint", engine={"quantization": "fp8"}, main="tiny-gptq", expect="vllm_refuses",
         field="engine.quantization"),
    Case("awq on an FP8 checkpoint", engine={"quantization": "awq"}, main="tiny-fp8", expect="vllm_refuses",
         field="engine.quantization"),
    Case("bitsandbytes", engine={"quantization": "bitsandbytes"}, expect="vllm_refuses", field="engine.quantization"),
    Case("empty quantization on a GPTQ checkpoint", engine={"quantization": None}, main="tiny-gptq"),
    # 5: a draft with the same tokenizer files and another vocabulary size.
    Case("draft with a padded vocabulary", speculative={"method": "draft_model"}, draft="draft-padded-vocab",
         expect="vllm_refuses", field="speculative.draft_model"),
    # 6 and the engine fields vLLM relates to each other.
    Case("gpu_memory_utilization 1.0", engine={"gpu_memory_utilization": 1.0}, expect="policy",
         field="engine.gpu_memory_utilization", why="the CPU build takes no GPU memory; on a GPU, request_memory "
         "refuses it (test_gpu_memory_utilization_bound_is_what_a_gpu_worker_accepts)"),
    Case("max_num_batched_tokens below max_num_seqs", engine={"max_num_batched_tokens": 32, "max_num_seqs": 64},
         expect="vllm_refuses", field="engine.max_num_batched_tokens"),
    Case("max_model_len within a linear RoPE factor", engine={"max_model_len": 4096}, main="tiny-rope-linear"),
    Case("max_model_len above a YaRN model's positions", engine={"max_model_len": 4096}, main="tiny-rope-yarn",
         expect="vllm_refuses", field="engine.max_model_len"),
    # tokenizer_config.json's model_max_length bounds only pooling models in vLLM: not a generating one.
    Case("max_model_len above the tokenizer's", engine={"max_model_len": 2048}, main="tiny-short-tokenizer"),
    Case("num_speculative_tokens 6", speculative={"method": "ngram", "num_speculative_tokens": 6}, expect="policy",
         field="speculative.num_speculative_tokens", why="the report's 3-5 candidates"),
]  # fmt: skip

SUBPROCESS = r"""
import json, os, sys
from vllm.config import CacheConfig, ModelConfig
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.utils.mem_utils import MemorySnapshot
from vllm.v1.worker.utils import request_memory
import torch

job = json.loads(sys.stdin.read())
parser = make_arg_parser(FlexibleArgumentParser())
built = {}
for name, argv in job["flag_sets"].items():
    try:
        config = AsyncEngineArgs.from_cli_args(parser.parse_args(argv)).create_engine_config()
        if config.speculative_config is not None:
            config.speculative_config.verify_equal_vocab_size_if_draft_model()
        built[name] = {"ok": True}
    except BaseException as exc:
        built[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:600]}
derived = {}
for name, directory in job["checkpoints"].items():
    try:
        derived[name] = ModelConfig(model=directory).max_model_len
    except BaseException as exc:
        derived[name] = f"{type(exc).__name__}: {exc}"[:300]
memory = {}
for device, total in job["devices"].items():
    for utilization in job["utilizations"]:
        snapshot = MemorySnapshot(device="cpu", auto_measure=False, total_memory=total,
                                  free_memory=total - job["held"])
        try:
            request_memory(snapshot, CacheConfig(gpu_memory_utilization=utilization))
            memory[f"{device} {utilization}"] = True
        except ValueError:
            memory[f"{device} {utilization}"] = False
visible = {}
for value in job["visible"]:
    os.environ["CUDA_VISIBLE_DEVICES"] = value
    visible[value] = torch.cuda._parse_visible_devices()
os.environ.pop("CUDA_VISIBLE_DEVICES")
visible["(unset)"] = torch.cuda._parse_visible_devices()
print("RESULT " + json.dumps({"built": built, "derived": derived, "memory": memory, "visible": visible,
                              "quantization_methods": QUANTIZATION_METHODS}))
"""


def entry(name: str, source) -> dict:
    return {"name": name, "source": str(source), "tokenizer": "", "revision": "", "tokenizer_revision": "",
            "trust_remote_code": False, "is_draft_capable": True}  # fmt: skip


def node_config(content: dict) -> NodeConfig:
    return NodeConfig.from_message({"version": None, "hash": content_hash(content), "content": content})


def our_verdict(case: Case, dirs: dict, settings: AgentSettings, allow: ModelAllowList) -> tuple[str | None, list]:
    """(refusal message or None, rendered argv or None): the control plane's validation, then the node's."""
    spec = {"enabled": bool(case.speculative), **case.speculative}
    if case.draft:
        spec["draft_model"] = case.draft
    authored = {
        **BASE,
        **case.sections,
        "engine": {**BASE["engine"], "model": case.main, **case.engine},
        **({"speculative": spec} if case.speculative else {}),
    }
    _, errors = validate({schema.ROOT: authored})
    content = schema.effective({k: v for k, v in authored.items() if k in schema.SECTIONS})
    content["models"] = {
        "engine.model": entry(case.main, dirs[case.main]),
        "speculative.draft_model": entry(case.draft, dirs[case.draft]) if case.draft else None,
    }
    config = node_config(content)
    try:
        argv = engine_args(config, settings)
    except ConfigRejected:
        # A method that needs a checkpoint the template does not name: what vLLM is given without one.
        bare = node_config({**content, "speculative": {**content["speculative"], "enabled": False}})
        flag = {
            "method": spec.get("method"),
            "num_speculative_tokens": content["speculative"]["num_speculative_tokens"],
        }
        argv = [*engine_args(bare, settings), "--speculative-config=" + json.dumps(flag)]
    if errors:
        return str(errors[0]), argv
    try:
        check_config(config, settings, allow)
    except ConfigRejected as exc:
        return str(exc), argv
    return None, argv


@pytest.fixture(scope="module")
def vllm_answers(vllm_python, tiny_model_dir, tiny_draft_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    dirs = variants(root, tiny_model_dir, tiny_draft_model_dir)
    settings = AgentSettings(control_plane_url="", token="", node_name="n", backend="vllm", model=str(tiny_model_dir),
                             served_model_name="")  # fmt: skip
    allow = ModelAllowList(model_dirs=[root, tiny_model_dir.parent], allowed=[], own_model=str(tiny_model_dir),
                           allow_trust_remote_code=False)  # fmt: skip
    cases = schema_cases() + HAND_CASES
    ours = {case.name: our_verdict(case, dirs, settings, allow) for case in cases}
    job = {
        "flag_sets": {name: argv for name, (_, argv) in ours.items() if argv is not None},
        "checkpoints": {name: str(path) for name, path in dirs.items()},
        "devices": {name: mib * MIB for name, mib in {**DEVICES_MIB, "T4": SMALL_CARD_MIB}.items()},
        "utilizations": [0.9, schema.MAX_GPU_MEMORY_UTILIZATION, 0.99, 1.0],
        "held": HELD_BEFORE_VLLM,
        "visible": VISIBLE_DEVICES,
    }
    result = subprocess.run(
        [str(vllm_python), "-c", SUBPROCESS], input=json.dumps(job), cwd=ROOT,
        env=dict(os.environ, **VLLM_ENV, VLLM_LOGGING_LEVEL="ERROR"), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))
    return {"cases": cases, "ours": ours, "dirs": dirs, **json.loads(line.removeprefix("RESULT "))}


FIELD_MESSAGE = re.compile(r"^(?P<path>[a-z_]+\.[a-z_]+): \S")


def test_every_flag_set_either_builds_vllms_configs_or_is_refused_naming_the_field(vllm_answers):
    built, wrong = vllm_answers["built"], []
    for case in vllm_answers["cases"]:
        refusal, argv = vllm_answers["ours"][case.name]
        vllm = built.get(case.name)
        if case.expect == "gpu_only":
            if refusal is not None or vllm["ok"] or case.vllm_error not in vllm["error"]:
                wrong.append(f"{case.name}: expected our acceptance and vLLM's CPU-only refusal: {refusal}, {vllm}")
            continue
        if refusal is None:
            if not (vllm and vllm["ok"]):
                wrong.append(f"{case.name}: we accept {argv}, vLLM refuses: {vllm}")
            elif case.expect != "runs" and case.expect != "policy":
                wrong.append(f"{case.name}: expected a refusal naming {case.field}, we accept")
            continue
        named = FIELD_MESSAGE.match(refusal)
        if named is None or named["path"] not in schema.FIELDS_BY_PATH:
            wrong.append(f"{case.name}: the refusal names no template field: {refusal}")
        elif case.expect == "runs":
            wrong.append(f"{case.name}: expected to run, we refuse: {refusal}")
        elif case.field and named["path"] != case.field:
            wrong.append(f"{case.name}: refused naming {named['path']}, expected {case.field}: {refusal}")
        elif case.expect == "vllm_refuses" and vllm is not None and vllm["ok"]:
            wrong.append(f"{case.name}: we refuse ({refusal}) what vLLM builds")
    assert not wrong, "\n".join(wrong)
    assert sum(1 for v in built.values() if v["ok"]) >= 30  # the sets did reach vLLM's config classes


def test_the_refusals_vllms_cpu_build_would_take_are_the_ones_listed_with_their_reason(vllm_answers):
    listed = [case for case in vllm_answers["cases"] if case.expect in ("policy", "gpu_only")]
    assert {case.name for case in listed} == {
        "awq_marlin on an AWQ checkpoint", "gpu_memory_utilization 1.0", "num_speculative_tokens 6",
    }  # fmt: skip
    for case in listed:
        assert case.why, case.name
        if case.expect == "policy":
            assert vllm_answers["built"][case.name]["ok"], case.name


def test_speculative_methods_need_what_vllm_needs(vllm_answers):
    """Point 3: eagle and eagle3 without a head, and mtp on a model without MTP layers, never reach the engine."""
    ours, built = vllm_answers["ours"], vllm_answers["built"]
    assert ours["eagle without a head"][0].startswith("speculative.draft_model: required when method is eagle")
    assert "num_speculative_tokens was provided but without speculative model" in built["eagle without a head"]["error"]
    refusal = ours["mtp on a model without MTP layers"][0]
    assert refusal.startswith("speculative.method: mtp runs the main model's own multi-token-prediction layers")
    assert "Unsupported speculative method: 'mtp'" in built["mtp on a model without MTP layers"]["error"]
    assert ours["speculative mtp k=3"][0] is None and built["speculative mtp k=3"]["ok"]
    assert ours["eagle with a head that has no tokenizer files"][0] is None
    assert built["eagle with a head that has no tokenizer files"]["ok"]


def test_quantization_choices_are_vllms_and_fit_the_checkpoint(vllm_answers):
    """Point 4: the schema offers only vLLM's methods; the node compares the choice with the checkpoint's own."""
    assert set(schema.QUANTIZATIONS) <= set(vllm_answers["quantization_methods"])
    assert checkpoints.QUANTIZATIONS == schema.QUANTIZATIONS
    assert "bitsandbytes" not in vllm_answers["quantization_methods"]
    ours, built = vllm_answers["ours"], vllm_answers["built"]
    assert ours["bitsandbytes"][0].startswith("engine.quantization: must be one of")
    assert "Unknown quantization method: bitsandbytes" in built["bitsandbytes"]["error"]
    assert ours["awq on a GPTQ checkpoint"][0] == (
        "engine.quantization: 'awq' needs a checkpoint quantized with 'awq', and 'tiny-gptq' is quantized with 'gptq'"
    )
    assert "does not match the quantization method" in built["awq on a GPTQ checkpoint"]["error"]
    assert "Cannot find the config file for awq" in built["engine.quantization=awq"]["error"]
    assert "is not quantized" in ours["engine.quantization=awq"][0]


def test_a_draft_with_the_same_tokenizer_files_and_another_vocabulary_is_refused(vllm_answers):
    """Point 5: the tokenizer files match (the rule that hashes them passes), vocab_size does not."""
    dirs = vllm_answers["dirs"]
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (dirs["draft-padded-vocab"] / name).read_bytes() == (dirs["tiny"] / name).read_bytes()
    refusal = vllm_answers["ours"]["draft with a padded vocabulary"][0]
    main_vocab, draft_vocab = (
        read_config(dirs["tiny"])["vocab_size"],
        read_config(dirs["draft-padded-vocab"])["vocab_size"],
    )
    assert refusal.startswith(
        f"speculative.draft_model: 'draft-padded-vocab' has vocab_size {draft_vocab} and the main model 'tiny' "
        f"{main_vocab}"
    )
    assert "should have the same vocabulary size" in vllm_answers["built"]["draft with a padded vocabulary"]["error"]


def test_the_node_derives_each_models_maximum_length_as_vllm_does(vllm_answers):
    derived = vllm_answers["derived"]
    assert {derived["tiny"], derived["tiny-rope-linear"], derived["tiny-rope-yarn"]} == {2048, 4096}
    for name, path in vllm_answers["dirs"].items():
        assert checkpoints.max_model_len(read_config(path)) == derived[name], name


def test_gpu_memory_utilization_bound_is_what_a_gpu_worker_accepts(vllm_answers):
    """Point 6: vLLM's own start-up check (request_memory) with the CUDA context holding its share: the schema's
    largest value passes on every card of 24 GB and up, 1.0 on none (the runbook says what a 16 GB card takes)."""
    memory = vllm_answers["memory"]
    assert schema.FIELDS_BY_PATH["engine.gpu_memory_utilization"].maximum == schema.MAX_GPU_MEMORY_UTILIZATION
    for device in DEVICES_MIB:
        assert memory[f"{device} {schema.MAX_GPU_MEMORY_UTILIZATION}"] is True, device
        assert memory[f"{device} 1.0"] is False, device
    _, errors = validate({schema.ROOT: {"engine": {"gpu_memory_utilization": 1.0}}})
    assert [str(e) for e in errors] == [
        "engine.gpu_memory_utilization: must be greater than 0 and at most 0.95, got 1.0"
    ]
    assert memory["T4 0.9"] is True and memory[f"T4 {schema.MAX_GPU_MEMORY_UTILIZATION}"] is False


def test_cuda_visible_devices_is_read_as_pytorch_reads_it(vllm_answers):
    """Point 7: the agent parses CUDA_VISIBLE_DEVICES (the engine inherits it) exactly as PyTorch and CUDA do."""
    for value, expected in vllm_answers["visible"].items():
        ours = parse_visible_devices(None if value == "(unset)" else value)
        assert (list(range(64)) if ours is None else ours) == expected, value

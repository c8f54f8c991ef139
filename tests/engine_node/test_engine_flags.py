"""The fixed table of engine options: one `--flag=value` element each, no value that reads like a flag."""

import json
import os
import subprocess

import pytest

from engine_node.config import ConfigRejected, NodeConfig, content_hash, engine_args
from engine_node.engine_flags import FLAGS, FlagRefused, check_value, render
from engine_node.settings import AgentSettings
from tests.engine_node.conftest import ROOT, VLLM_ENV

SETTINGS = AgentSettings(
    control_plane_url="", token="", node_name="n1", backend="simulator", model="own-model", served_model_name=""
)


def config(engine=None, speculative=None, models=None) -> NodeConfig:
    content = {
        "engine": {"max_num_seqs": 4, **(engine or {})},
        "speculative": {"enabled": False, "method": "draft_model", "draft_model": None, **(speculative or {})},
        "models": models or {},
    }
    return NodeConfig.from_message({"version": None, "hash": content_hash(content), "content": content})


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("model", "/srv/models/qwen", "--model=/srv/models/qwen"),
        ("model", "Qwen/Qwen3-0.6B", "--model=Qwen/Qwen3-0.6B"),
        ("served_model_name", "chat", "--served-model-name=chat"),
        ("revision", "a" * 40, "--revision=" + "a" * 40),
        ("tokenizer_revision", "v1.0", "--tokenizer-revision=v1.0"),
        ("max_num_seqs", 64, "--max-num-seqs=64"),
        ("gpu_memory_utilization", 0.9, "--gpu-memory-utilization=0.9"),
        ("gpu_memory_utilization", 1, "--gpu-memory-utilization=1.0"),
        ("enable_prefix_caching", True, "--enable-prefix-caching"),
        ("enable_prefix_caching", False, "--no-enable-prefix-caching"),
        ("trust_remote_code", True, "--trust-remote-code"),
        ("trust_remote_code", False, None),
        ("speculative_config", {"method": "ngram", "num_speculative_tokens": 3}, None),
    ],
)
def test_each_option_renders_as_one_element(name, value, expected):
    flag = render(name, value, field="f")
    if name == "speculative_config":
        assert flag == '--speculative-config={"method":"ngram","num_speculative_tokens":3}'
    else:
        assert flag == expected


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("model", "--trust-remote-code.x", "starts with '-'"),
        ("model", "-x", "starts with '-'"),
        ("served_model_name", "chat\n--trust-remote-code", "control characters"),
        ("model", "", "must not be empty"),
        ("model", 7, "must be a string"),
        ("max_num_seqs", -1, "starts with '-'"),
        ("max_num_seqs", "8", "must be an integer"),
        ("max_num_seqs", True, "must be an integer"),
        ("gpu_memory_utilization", float("nan"), "finite number"),
        ("trust_remote_code", "yes", "true or false"),
        ("speculative_config", {"method": "draft_model", "model": "--trust-remote-code"}, "starts with '-'"),
        ("speculative_config", "{}", "JSON object"),
    ],
)
def test_refused_values_name_the_field(name, value, message):
    with pytest.raises(FlagRefused, match=message) as refused:
        render(name, value, field="engine.x")
    assert str(refused.value).startswith("engine.x")


def test_check_value_is_the_one_rule():
    assert check_value("f", "Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    with pytest.raises(FlagRefused):
        check_value("f", "-")
    with pytest.raises(FlagRefused):
        check_value("f", "x" * 5000)


def test_the_hostile_template_of_the_report_never_becomes_two_elements():
    hostile = config(
        engine={"model": "--trust-remote-code.x", "served_model_name": "attacker-org/evil-model"},
        models={"engine.model": {"name": "--trust-remote-code.x", "source": "--trust-remote-code.x"}},
    )
    with pytest.raises(ConfigRejected, match=r"^engine.model: '--trust-remote-code.x' starts with '-'"):
        engine_args(hostile, SETTINGS)
    with pytest.raises(ConfigRejected, match=r"^engine.served_model_name: '-x' starts with '-'"):
        engine_args(config(engine={"served_model_name": "-x"}), SETTINGS)
    with pytest.raises(ConfigRejected, match=r"^engine.quantization: .* starts with '-'"):
        engine_args(config(engine={"quantization": "--trust-remote-code"}), SETTINGS)


def test_every_config_flag_is_one_element_with_its_value():
    main = {
        "name": "m",
        "source": "/srv/models/m",
        "revision": "r1",
        "tokenizer": "/srv/tok",
        "trust_remote_code": True,
    }
    draft = {"name": "d", "source": "/srv/models/d", "is_draft_capable": True, "trust_remote_code": True}
    args = engine_args(
        config(
            engine={"model": "m", "served_model_name": "chat", "quantization": "fp8", "max_model_len": 2048},
            speculative={"enabled": True, "draft_model": "d", "num_speculative_tokens": 3},
            models={"engine.model": main, "speculative.draft_model": draft},
        ),
        SETTINGS,
    )
    assert args[:6] == [
        "--model=/srv/models/m",
        "--revision=r1",
        "--tokenizer=/srv/tok",
        "--trust-remote-code",
        "--served-model-name=chat",
        "--max-num-seqs=4",
    ]
    options = {arg.split("=", 1)[0] for arg in args}
    assert options <= {f.option for f in FLAGS.values()} | {"--no-enable-prefix-caching"}
    spec = next(a for a in args if a.startswith("--speculative-config="))
    assert json.loads(spec.split("=", 1)[1]) == {
        "method": "draft_model", "model": "/srv/models/d", "num_speculative_tokens": 3
    }  # fmt: skip
    # Every element is an option; no value stands alone where a parser could read it as a flag.
    assert all(arg.startswith("--") for arg in args)


# One vLLM interpreter answers both vLLM tests below (its import costs seconds of both cores): the option kinds of its
# server parser, and what its own SpeculativeConfig and schedule validation make of the speculative config the node
# renders for SPEC_SCHEDULE. Each answer is {"value": ...} or {"error": ...}, so one failing leaves the other's test
# its own answer.
VLLM_ANSWERS = """\
import json, sys


def parser_nargs():
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    p = make_arg_parser(FlexibleArgumentParser())
    return {o: a.nargs for a in p._actions for o in a.option_strings}


def speculative_lookup():
    from vllm.config.speculative import SpeculativeConfig
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    c = json.loads(sys.argv[1])
    missing = sorted(set(c) - set(SpeculativeConfig.__dataclass_fields__))
    assert not missing, missing
    return build_dynamic_sd_schedule_lookup(c["num_speculative_tokens_per_batch_size"], 16, 3)


answers = {}
for name, answer in (("nargs", parser_nargs), ("lookup", speculative_lookup)):
    try:
        answers[name] = {"value": answer()}
    except BaseException as exc:
        answers[name] = {"error": repr(exc)}
print(json.dumps(answers))
"""
SPEC_SCHEDULE = {"enabled": True, "method": "ngram", "num_speculative_tokens": 3, "disable_above_batch_size": 8}


@pytest.fixture(scope="module")
def vllm_answers(vllm_python) -> dict:
    rendered = _spec_flag(engine_args(config(speculative=SPEC_SCHEDULE), SETTINGS))
    result = subprocess.run(
        [str(vllm_python), "-c", VLLM_ANSWERS, json.dumps(rendered)], cwd=ROOT, env=dict(os.environ, **VLLM_ENV),
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def vllm_answer(answers: dict, name: str):
    assert "error" not in answers[name], answers[name]["error"]
    return answers[name]["value"]


@pytest.mark.vllm
def test_the_table_matches_vllms_own_parser(vllm_answers):
    """Each option exists in vLLM 0.32's server parser with the kind the table renders for it."""
    nargs = vllm_answer(vllm_answers, "nargs")
    for name, flag in FLAGS.items():
        assert flag.option in nargs, name
        # Switches and booleans take no value (argparse nargs 0); every other option takes exactly one.
        assert (nargs[flag.option] == 0) == (flag.kind in ("switch", "bool")), (name, nargs[flag.option])
    assert "--no-enable-prefix-caching" in nargs


def _spec_flag(args: list[str]) -> dict:
    return json.loads(next(a for a in args if a.startswith("--speculative-config=")).split("=", 1)[1])


def test_ngram_speculation_needs_no_draft_model_and_carries_its_lookup_window():
    spec = {"enabled": True, "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2}
    assert _spec_flag(engine_args(config(speculative={**spec, "prompt_lookup_max": 5}), SETTINGS)) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5,
    }  # fmt: skip


def test_batch_size_limit_becomes_vllms_schedule_with_no_candidates_above_it():
    spec = {"enabled": True, "method": "ngram", "num_speculative_tokens": 3, "disable_above_batch_size": 8}
    flag = _spec_flag(engine_args(config(speculative=spec), SETTINGS))
    assert flag["num_speculative_tokens_per_batch_size"] == [[1, 8, 3], [9, 9, 0]]


def test_speculation_off_leaves_the_flag_out():
    spec = {"enabled": True, "method": "ngram", "num_speculative_tokens": 3}
    args = engine_args(config(speculative=spec), SETTINGS, speculative=False)
    assert not any(a.startswith("--speculative-config") for a in args)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"num_speculative_tokens": 6}, "speculative.num_speculative_tokens: must be between 3 and 5, got 6"),
        ({"num_speculative_tokens": "3"}, "speculative.num_speculative_tokens: must be an integer, got str"),
        ({"prompt_lookup_min": 5, "prompt_lookup_max": 2}, "speculative.prompt_lookup_min: must be at most"),
        ({"prompt_lookup_max": "4 --trust-remote-code"}, "speculative.prompt_lookup_max: must be an integer"),
        ({"disable_above_batch_size": 0}, "speculative.disable_above_batch_size: must be between 1 and 4096"),
        ({"disable_above_batch_size": True}, "speculative.disable_above_batch_size: must be an integer"),
    ],
)
def test_speculative_values_the_node_refuses_name_the_field(spec, message):
    with pytest.raises(ConfigRejected, match=message.replace("(", r"\(")):
        engine_args(config(speculative={"enabled": True, "method": "ngram", "num_speculative_tokens": 3, **spec}),
                    SETTINGS)  # fmt: skip


@pytest.mark.vllm
def test_vllm_accepts_the_rendered_speculative_config(vllm_answers):
    """vLLM 0.32's own SpeculativeConfig fields and batch-size schedule validation take what the node renders."""
    lookup = vllm_answer(vllm_answers, "lookup")
    assert lookup[1:9] == [3] * 8 and lookup[9:] == [0] * 8

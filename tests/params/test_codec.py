"""YAML and JSON reading and writing of template documents."""

import json

import pytest

from controlplane.params import codec, schema, validation
from controlplane.params.exceptions import DocumentInvalid


def parse_error(text, fmt) -> str:
    with pytest.raises(DocumentInvalid) as caught:
        codec.parse(text, fmt)
    return str(caught.value.errors[0])


def test_seed_yaml_parses_to_a_valid_document(seed_yaml):
    document = codec.parse(seed_yaml, "yaml")
    params, errors = validation.validate(document)
    assert errors == []
    assert params["max_tokens"] == {"default": 256, "streaming_threshold": 200, "whitelist": ["legal"]}
    assert params["temperature"] == {"strict": 0.3, "normal": 0.7, "creative": 0.9}
    assert params["batch"] == {"min_size": 2, "max_size": 8, "timeout_ms": 50}


def test_bytes_are_decoded_as_utf8():
    assert codec.parse('inference_params:\n  engine:\n    model: "模型"\n'.encode(), "yaml") == {
        "inference_params": {"engine": {"model": "模型"}}
    }


def test_non_utf8_bytes_are_refused():
    assert parse_error(b"\xff\xfe inference_params: {}", "yaml") == "(document): must be UTF-8 text"


def test_unknown_format_is_refused():
    assert parse_error("{}", "toml").startswith("format: must be one of yaml, json")


def test_invalid_yaml_names_line_and_column():
    message = parse_error("inference_params:\n  temperature: [0.3, 0.7\n", "yaml")
    assert message.startswith("(document): invalid YAML at line 3")


def test_invalid_json_names_line_and_column():
    assert parse_error('{\n  "inference_params": {,}\n}', "json").startswith(
        "(document): invalid JSON at line 2, column 24"
    )


def test_yaml_tags_that_build_python_objects_are_refused():
    assert "invalid YAML" in parse_error("inference_params: !!python/object/apply:os.system ['true']\n", "yaml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "inference_params:\n  temperature:\n    strict: 0.3\n    strict: 0.5\n",
            "temperature.strict: duplicate key at line 4",
        ),
        ("inference_params:\n  batch: {}\n  batch: {}\n", "batch: duplicate key at line 3"),
        ("inference_params: {}\ninference_params: {}\n", "inference_params: duplicate key at line 2"),
    ],
)
def test_duplicate_yaml_keys_are_refused_with_their_path(text, expected):
    assert parse_error(text, "yaml") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"inference_params": {"temperature": {"strict": 0.3, "strict": 0.5}}}', "temperature.strict: duplicate key"),
        ('{"inference_params": {"batch": {}, "batch": {"max_size": 4}}}', "batch: duplicate key"),
        ('{"a": {"x": [{"k": 1, "k": 2}]}}', "a.x[0].k: duplicate key"),
    ],
)
def test_duplicate_json_keys_are_refused_with_their_path(text, expected):
    assert parse_error(text, "json").startswith(expected)


@pytest.mark.parametrize("fmt", codec.FORMATS)
def test_documents_over_the_limit_are_refused_before_parsing(settings, fmt):
    settings.TEMPLATE_MAX_BYTES = 64
    text = json.dumps({"inference_params": {"engine": {"model": "m" * 60}}})
    assert parse_error(text, fmt) == f"(document): must be at most 64 bytes, got {len(text)}"
    # Multi-byte characters count as the bytes they take.
    assert parse_error("é" * 33, fmt) == "(document): must be at most 64 bytes, got 66"


def test_document_at_the_limit_is_accepted(settings):
    text = '{"inference_params": {}}'
    settings.TEMPLATE_MAX_BYTES = len(text)
    assert codec.parse(text, "json") == {"inference_params": {}}


def test_default_limit_is_256_kib(settings):
    assert settings.TEMPLATE_MAX_BYTES == 256 * 1024


@pytest.mark.parametrize("fmt", codec.FORMATS)
def test_dump_then_parse_returns_the_same_document(fmt):
    document = {schema.ROOT: schema.defaults()}
    document[schema.ROOT]["engine"]["model"] = 'path with "quotes" and: colon # hash'
    document[schema.ROOT]["speculative"]["draft_model"] = "草稿-模型"
    document[schema.ROOT]["temperature"]["strict"] = 1e-05
    document[schema.ROOT]["degradation"]["speculative_decoding"] = True
    assert codec.parse(codec.dump(document, fmt), fmt) == document


def test_small_floats_are_written_as_yaml_floats_not_strings():
    text = codec.dump({"inference_params": {"temperature": {"strict": 1e-05}}}, "yaml")
    assert "strict: 1.0e-05\n" in text
    assert codec.parse(text, "yaml")["inference_params"]["temperature"]["strict"] == 1e-05


def test_yaml_dump_follows_the_seed_layout():
    document = {
        "inference_params": {
            "max_tokens": {"default": 256, "whitelist": ["legal"]},
            "temperature": {"strict_patterns": ["\\d+元"]},
            "engine": {"model": None, "enable_prefix_caching": False},
            "intent": {},
        }
    }
    assert codec.dump(document, "yaml") == (
        "inference_params:\n"
        "  max_tokens:\n"
        "    default: 256\n"
        '    whitelist: ["legal"]\n'
        "  temperature:\n"
        '    strict_patterns: ["\\\\d+元"]\n'
        "  engine:\n"
        "    model: null\n"
        "    enable_prefix_caching: false\n"
        "  intent: {}\n"
    )


def test_default_strict_patterns_survive_a_yaml_round_trip():
    document = {"inference_params": {"temperature": {"strict_patterns": schema.DEFAULT_STRICT_PATTERNS}}}
    assert codec.parse(codec.dump(document, "yaml"), "yaml") == document


def test_json_dump_is_indented_and_keeps_unicode():
    text = codec.dump({"inference_params": {"engine": {"model": "模型"}}}, "json")
    assert text.endswith("}\n")
    assert '\n  "inference_params": {\n' in text
    assert "模型" in text


def alias_bomb(levels: int) -> str:
    """A few hundred bytes whose aliases expand to 8**levels strings."""
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 8)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\ninference_params:\n  max_tokens:\n    whitelist: [*a{levels - 1}]\n"


def test_yaml_aliases_are_refused_so_a_small_document_cannot_expand():
    assert parse_error(alias_bomb(9), "yaml") == "a1[0]: YAML aliases (*name) are not allowed"


def test_alias_is_reported_where_it_is_used():
    text = "inference_params:\n  max_tokens:\n    whitelist: &names [legal]\n  intent:\n    tiers: *names\n"
    assert parse_error(text, "yaml") == "intent.tiers: YAML aliases (*name) are not allowed"


def test_recursive_yaml_alias_is_refused():
    assert "aliases" in parse_error("inference_params: &root\n  loop: *root\n", "yaml")


@pytest.mark.parametrize("fmt", codec.FORMATS)
def test_deep_nesting_is_refused_not_a_crash(fmt):
    text = "[" * 100_000 + "]" * 100_000
    message = parse_error(text, fmt)
    assert message.startswith("(document): ")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("inference_params:\n  ? [a, b]\n  : 1\n", "inference_params: keys must be plain names, not a list or mapping"),
        ("inference_params:\n  temperature:\n    ? {a: 1}\n    : 1\n", "temperature: keys must be plain names"),
    ],
)
def test_complex_yaml_keys_are_refused_not_a_crash(text, expected):
    assert parse_error(text, "yaml").startswith(expected)

"""The template schema: defaults, per-field rules, cross-field rules and the hot/cold tags."""

import pytest

from controlplane.params import schema, validation


def doc(**sections) -> dict:
    return {schema.ROOT: sections}


def messages(document) -> list[str]:
    return [str(error) for error in validation.validate(document)[1]]


def test_empty_document_is_valid_and_takes_every_default():
    params, errors = validation.validate(doc())
    assert errors == []
    assert params == {}
    effective = schema.effective(params)
    assert effective["temperature"] == {
        "strict": 0.3,
        "normal": 0.7,
        "creative": 0.9,
        "strict_patterns": schema.DEFAULT_STRICT_PATTERNS,
    }
    assert effective["max_tokens"]["whitelist"] == ["legal"]
    assert schema.flatten(effective).keys() == schema.FIELDS_BY_PATH.keys()


def test_defaults_satisfy_every_rule_of_the_schema():
    assert messages({schema.ROOT: schema.defaults()}) == []


def test_every_field_is_tagged_hot_or_cold_and_engine_flags_are_cold():
    assert {f.apply for f in schema.FIELDS} == {"hot", "cold"}
    cold = {f.path for f in schema.FIELDS if f.apply == "cold"}
    assert {"speculative.enabled", "engine.max_num_seqs", "engine.gpu_memory_utilization"} <= cold
    assert "temperature.strict" not in cold
    assert "batch.max_size" not in cold


def test_effective_fills_omitted_fields_and_keeps_authored_ones():
    effective = schema.effective({"temperature": {"strict": 0.1}, "batch": {"max_size": 16}})
    assert effective["temperature"]["strict"] == 0.1
    assert effective["temperature"]["normal"] == 0.7
    assert effective["batch"]["max_size"] == 16
    assert effective["batch"]["min_size"] == 2


def test_partial_intent_map_changes_only_the_labels_it_names():
    effective = schema.effective({"intent": {"tiers": {"other": "strict"}}})
    assert effective["intent"]["tiers"]["other"] == "strict"
    assert effective["intent"]["tiers"]["copywriting"] == "creative"
    assert schema.DEFAULT_INTENT_TIERS["other"] == "normal", "defaults must not be mutated"


def test_empty_sections_are_dropped_from_the_authored_params():
    params, errors = validation.validate(doc(temperature={}, batch=None, engine={"max_num_seqs": 32}))
    assert errors == []
    assert params == {"engine": {"max_num_seqs": 32}}


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ([], "(document): must be a mapping with the key 'inference_params'"),
        ({"params": {}}, "params: unknown field; the document's only key is 'inference_params'"),
        ({}, "inference_params: required"),
        ({schema.ROOT: [1]}, "inference_params: must be a mapping of sections"),
        (doc(sampling={}), "sampling: unknown section; expected one of max_tokens"),
        (doc(batch=[1]), "batch: must be a mapping"),
        (doc(temperature={"hot": 1}), "temperature.hot: unknown field; temperature has strict, normal"),
    ],
)
def test_structure_errors_name_the_offending_key(document, expected):
    assert any(m.startswith(expected) for m in messages(document)), messages(document)


@pytest.mark.parametrize(
    ("section", "values", "expected"),
    [
        ("temperature", {"strict": 5}, "temperature.strict: must be between 0 and 2, got 5"),
        ("temperature", {"strict": -0.1}, "temperature.strict: must be between 0 and 2, got -0.1"),
        ("temperature", {"strict": "low"}, "temperature.strict: must be a number, got a string"),
        ("temperature", {"strict": True}, "temperature.strict: must be a number, got a boolean"),
        ("temperature", {"strict": float("nan")}, "temperature.strict: must be a finite number"),
        ("batch", {"max_size": 8.5}, "batch.max_size: must be an integer, got a number"),
        ("batch", {"max_size": 0}, "batch.max_size: must be between 1 and 1024, got 0"),
        ("speculative", {"enabled": "yes"}, "speculative.enabled: must be true or false, got a string"),
        ("speculative", {"num_speculative_tokens": 6}, "speculative.num_speculative_tokens: must be between 3 and 5"),
        ("speculative", {"method": "magic"}, "speculative.method: must be one of draft_model, ngram"),
        ("speculative", {"num_speculative_tokens": 2}, "speculative.num_speculative_tokens: must be between 3 and 5"),
        ("speculative", {"prompt_lookup_max": 0}, "speculative.prompt_lookup_max: must be between 1 and 16, got 0"),
        ("speculative", {"rejection_threshold": 0}, "speculative.rejection_threshold: must be"),
        ("speculative", {"backoff_windows": 0}, "speculative.backoff_windows: must be between 1 and 100, got 0"),
        ("speculative", {"disable_above_batch_size": "8"}, "speculative.disable_above_batch_size: must be an integer"),
        (
            "speculative",
            {"prompt_lookup_min": 5, "prompt_lookup_max": 2},
            "speculative.prompt_lookup_min: must be at most speculative.prompt_lookup_max (2)",
        ),
        (
            "speculative",
            {"disable_above_batch_size": 64},
            "speculative.disable_above_batch_size: must be below engine.max_num_seqs (64)",
        ),
        ("engine", {"model": "  "}, "engine.model: must name a model catalog entry"),
        ("engine", {"model": "--trust-remote-code.x"}, "engine.model: must name a model catalog entry"),
        ("engine", {"model": "/srv/models/x"}, "engine.model: must name a model catalog entry"),
        ("speculative", {"draft_model": "-x"}, "speculative.draft_model: must name a model catalog entry"),
        ("engine", {"served_model_name": "--trust-remote-code"}, "engine.served_model_name: must be 1-128 letters"),
        ("engine", {"served_model_name": "a b"}, "engine.served_model_name: must be 1-128 letters"),
        ("engine", {"served_model_name": "x" * 129}, "engine.served_model_name: must be 1-128 letters"),
        ("engine", {"tokenizer": "tok"}, "engine.tokenizer: no longer a template field"),
        ("speculative", {"draft_tokenizer": "tok"}, "speculative.draft_tokenizer: no longer a template field"),
        ("engine", {"max_num_seqs": None}, "engine.max_num_seqs: must not be empty"),
        (
            "engine",
            {"gpu_memory_utilization": 0},
            "engine.gpu_memory_utilization: must be greater than 0 and at most 0.95",
        ),
        ("degradation", {"load_threshold": 0}, "degradation.load_threshold: must be greater than 0 and at most 1"),
        ("max_tokens", {"whitelist": "legal"}, "max_tokens.whitelist: must be a list of names, got a string"),
        ("max_tokens", {"whitelist": ["Legal!"]}, "max_tokens.whitelist[0]: must be a lowercase name"),
        ("max_tokens", {"whitelist": ["legal", "legal"]}, "max_tokens.whitelist: must not list a name twice"),
        ("temperature", {"strict_patterns": ["(unclosed"]}, "temperature.strict_patterns[0]: is not a valid regular"),
        ("temperature", {"strict_patterns": ["ok", ""]}, "temperature.strict_patterns[1]: must be a non-empty string"),
        ("temperature", {"strict_patterns": ["a" * 501]}, "temperature.strict_patterns[0]: must be at most 500"),
        ("temperature", {"strict_patterns": ["a"] * 65}, "temperature.strict_patterns: must hold at most 64"),
        ("intent", {"tiers": {"weather": "strict"}}, "intent.tiers.weather: unknown intent"),
        ("intent", {"tiers": {"other": "wild"}}, "intent.tiers.other: must be one of strict, normal, creative"),
    ],
)
def test_field_rules_name_the_path_and_the_rule(section, values, expected):
    assert any(m.startswith(expected) for m in messages(doc(**{section: values}))), messages(doc(**{section: values}))


def test_nullable_fields_accept_null_and_optional_enums_accept_null():
    assert messages(doc(engine={"model": None, "quantization": None}, speculative={"draft_model": None})) == []


@pytest.mark.parametrize(
    ("sections", "expected"),
    [
        ({"batch": {"min_size": 9, "max_size": 8}}, "batch.min_size: must be at most batch.max_size (8)"),
        ({"batch": {"long_context_max_size": 9}}, "batch.long_context_max_size: must be at most batch.max_size"),
        (
            {"batch": {"long_context_threshold": 8192}},
            "batch.long_context_threshold: must be below engine.max_model_len",
        ),
        ({"max_tokens": {"streaming_threshold": 300}}, "max_tokens.streaming_threshold: must be at most"),
        ({"max_tokens": {"hard_ceiling": 100}}, "max_tokens.hard_ceiling: must be at least max_tokens.default"),
        ({"temperature": {"strict": 0.8}}, "temperature: tiers must be ordered"),
        ({"degradation": {"exit_threshold": 0.8}}, "degradation.exit_threshold: must be below"),
        ({"degradation": {"max_tokens": 512}}, "degradation.max_tokens: must be at most max_tokens.default"),
        (
            {"speculative": {"enabled": True, "method": "draft_model"}},
            "speculative.draft_model: required when method is draft_model",
        ),
    ],
)
def test_cross_field_rules(sections, expected):
    assert any(m.startswith(expected) for m in messages(doc(**sections))), messages(doc(**sections))


def test_cross_field_rules_are_checked_against_effective_values():
    # max_size 1 is legal alone, but the default min_size (2) is then larger.
    assert messages(doc(batch={"max_size": 1})) == [
        "batch.min_size: must be at most batch.max_size (1)",
        "batch.long_context_max_size: must be at most batch.max_size (1)",
    ]


def test_a_draft_model_setup_is_valid_by_names_alone():
    # Whether the draft shares the main model's tokenizer is decided by the node, on the files; the catalog
    # references are checked when the version is saved (tests/catalog/test_references.py).
    sections = {"speculative": {"enabled": True, "draft_model": "qwen3-0.6b"}, "engine": {"model": "qwen3-8b"}}
    assert messages(doc(**sections)) == []


def test_every_error_is_reported_not_only_the_first():
    found = messages(doc(temperature={"strict": 5, "normal": "x"}, batch={"min_size": 0}))
    assert [m.split(":")[0] for m in found] == ["temperature.strict", "temperature.normal", "batch.min_size"]


def test_field_error_dict_carries_the_apply_tag():
    assert schema.FieldError("engine.max_num_seqs", "x").as_dict() == {
        "path": "engine.max_num_seqs",
        "message": "x",
        "apply": "cold",
    }
    assert schema.FieldError("(document)", "x").as_dict()["apply"] is None


def test_in_schema_order_sorts_sections_fields_and_intent_labels():
    scrambled = {
        "temperature": {"normal": 0.7, "strict": 0.3},
        "intent": {"tiers": {"other": "normal", "order_status": "strict"}},
        "batch": {"max_size": 8, "min_size": 2},
        "max_tokens": {"whitelist": [], "default": 256},
    }
    ordered = schema.in_schema_order(scrambled)
    assert list(ordered) == ["max_tokens", "temperature", "intent", "batch"]
    assert list(ordered["max_tokens"]) == ["default", "whitelist"]
    assert list(ordered["temperature"]) == ["strict", "normal"]
    assert list(ordered["intent"]["tiers"]) == ["order_status", "other"]
    assert ordered == scrambled

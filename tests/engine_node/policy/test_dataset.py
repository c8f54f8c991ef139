"""The checked-in intent dataset: complete, deduplicated, reproducible from its templates, split honestly, and kept
apart from the separately written held-out set."""

import importlib.util
from collections import Counter

from engine_node.policy.dataset import (
    DATASET_PATH,
    LABELS,
    REVIEWED_TEMPLATE_PREFIX,
    Example,
    load_examples,
    load_held_out,
    split_by_template,
    split_random,
)
from engine_node.policy.intent_quality import near_duplicates

BUILD_SCRIPT = DATASET_PATH.parent / "build_intents.py"


def load_build_script():
    spec = importlib.util.spec_from_file_location("build_intents", BUILD_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_label_has_at_least_300_messages_in_known_languages():
    examples = load_examples()
    assert set(Counter(example.label for example in examples)) == set(LABELS)
    assert min(Counter(example.label for example in examples).values()) >= 300
    assert {example.lang for example in examples} == {"zh", "en", "mixed"}


def test_no_two_messages_are_identical():
    texts = [example.text for example in load_examples()]
    assert len(texts) == len(set(texts))


def test_the_dataset_file_is_what_the_build_script_generates():
    build = load_build_script()
    assert [example.__dict__ for example in load_examples()] == build.build()
    assert build.LABELS == LABELS


def test_templates_are_many_per_label_and_language():
    build = load_build_script()
    per_section = Counter((label, lang) for _, label, lang, _ in build.read_templates())
    assert all(per_section[(label, lang)] >= 20 for label in LABELS for lang in ("zh", "en"))


def test_by_template_split_shares_no_template_between_train_and_held_out():
    train, held_out = split_by_template(load_examples())
    assert {e.template for e in train}.isdisjoint({e.template for e in held_out})
    assert {(e.label, e.lang) for e in held_out} == {(e.label, e.lang) for e in train}


def test_random_split_holds_out_a_fifth_of_each_label():
    examples = load_examples()
    _, held_out = split_random(examples)
    totals, held = Counter(e.label for e in examples), Counter(e.label for e in held_out)
    assert all(abs(held[label] - totals[label] / 5) <= 1 for label in LABELS)


def test_the_control_plane_schema_and_the_classifier_share_one_label_set():
    from controlplane.params.schema import INTENT_LABELS

    # The agent cannot import the control plane, so the two lists are kept equal by this test.
    assert tuple(INTENT_LABELS) == tuple(LABELS)


def test_the_held_out_set_covers_every_label_in_both_languages_and_mixed_text():
    messages = load_held_out()
    assert len(messages) >= 300
    assert len({message.text for message in messages}) == len(messages)
    per_label = Counter(message.label for message in messages)
    assert set(per_label) == set(LABELS) and min(per_label.values()) >= 30
    assert {(message.label, message.lang) for message in messages} == {
        (label, lang) for label in LABELS for lang in ("zh", "en", "mixed")
    }
    assert {"complaint", "suitability", "typo", "long", "terse", "mixed"} <= {message.style for message in messages}


def test_no_training_message_repeats_or_nearly_repeats_a_held_out_message():
    # The held-out set measures messages the model never saw: not even a reworded or re-punctuated copy
    # ("How do I reset my password?" / "how do i reset my password pls") may be in the training data.
    training = [example.text for example in load_examples()]
    assert near_duplicates([message.text for message in load_held_out()], training) == []


def test_the_near_duplicate_check_catches_a_re_punctuated_copy():
    held_out = ["is cash on delivery available", "the mug arrived in pieces"]
    training = ["Is cash on delivery available??", "my order has not arrived"]
    assert [pair[:2] for pair in near_duplicates(held_out, training)] == [
        ("is cash on delivery available", "Is cash on delivery available??")
    ]


def test_reviewed_messages_are_always_trained_on_and_leave_the_base_split_as_it_was():
    base = [
        Example(f"msg {i}", label, "en", f"{label}-t{i % 10}") for i, label in enumerate(["order_status", "other"] * 50)
    ]
    reviewed = [Example(f"reviewed {i}", "other", "en", f"{REVIEWED_TEMPLATE_PREFIX}{i}") for i in range(20)]
    base_train, base_held = split_by_template(base)
    train, held = split_by_template(base + reviewed)
    assert all(example in train for example in reviewed)
    assert held == base_held and train == base_train + reviewed

"""The node's own checks of a config's models: resolved entries, the operator's allow-list, draft tokenizer files."""

import json
import shutil
from pathlib import Path

import pytest

from engine_node.engine_flags import FlagRefused
from engine_node.model_sources import ModelAllowList, ModelEntry, config_models
from engine_node.tokenizer_files import (
    TokenizerMismatch,
    check_draft_tokenizer,
    tokenizer_digest,
    tokenizer_directory,
)


def entry(name: str, source: str, **extra) -> dict:
    return {"name": name, "source": source, **extra}


def content(model=None, draft=None, *, models=None, spec_enabled=None) -> dict:
    enabled = draft is not None if spec_enabled is None else spec_enabled
    return {
        "engine": {"model": model},
        "speculative": {"enabled": enabled, "method": "draft_model", "draft_model": draft},
        "models": models or {},
    }


def test_without_a_model_reference_the_node_runs_its_own():
    models = config_models(content(), "own-model")
    assert models.main == ModelEntry(name="", source="own-model") and models.draft is None


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (content("m"), "engine.model: 'm' comes without its resolved catalog entry"),
        (content("m", models={"engine.model": entry("other", "/x")}), "resolved catalog entry is 'other', not 'm'"),
        (content("m", models={"engine.model": entry("m", "-x")}), "engine.model: '-x' starts with '-'"),
        (
            content("m", models={"engine.model": entry("m", "/x", revision="--trust-remote-code")}),
            "engine.model \\(revision\\)",
        ),
        (content("m", models={"engine.model": entry("m", "/x", trust_remote_code="yes")}), "must be true or false"),
        (content(models={}, spec_enabled=True), "speculative.draft_model: required"),
        (
            content(None, "d", models={"speculative.draft_model": entry("d", "/d")}),
            "speculative.draft_model: 'd' is not marked as a draft model",
        ),
        (
            content(
                "m",
                "d",
                models={
                    "engine.model": entry("m", "/m", trust_remote_code=True),
                    "speculative.draft_model": entry("d", "/d", is_draft_capable=True),
                },
            ),
            "speculative.draft_model: 'd' is not allowed to run remote code",
        ),
    ],
)
def test_bad_resolved_entries_are_refused_naming_the_field(doc, message):
    with pytest.raises(FlagRefused, match=message):
        config_models(doc, "own-model")


def test_a_draft_entry_is_read_only_when_the_config_runs_one():
    doc = content(None, "d", models={"speculative.draft_model": entry("d", "/d", is_draft_capable=True)})
    assert config_models(doc, "own").draft.source == "/d"
    doc["speculative"]["enabled"] = False
    assert config_models(doc, "own").draft is None


@pytest.fixture
def model_dir(tmp_path) -> Path:
    root = tmp_path / "models"
    (root / "qwen").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "escape").symlink_to(tmp_path / "outside")
    (root / "inner-link").symlink_to(root / "qwen")
    return root


def allow_list(model_dir: Path, **kwargs) -> ModelAllowList:
    options = {"allowed": ["Qwen/Qwen3-0.6B"], "own_model": "own-model", "allow_trust_remote_code": False}
    return ModelAllowList(model_dirs=[model_dir], **(options | kwargs))


def test_the_allow_list_holds_the_operators_directories_and_names(model_dir, tmp_path):
    allowed = allow_list(model_dir)
    assert allowed.allows(str(model_dir / "qwen"))
    assert allowed.allows(str(model_dir / "inner-link"))  # a link that stays inside
    assert allowed.allows("Qwen/Qwen3-0.6B") and allowed.allows("own-model")
    assert not allowed.allows(str(model_dir / "escape"))  # a link that leaves the directory
    assert not allowed.allows(str(model_dir / "qwen" / ".." / ".." / "outside"))
    assert not allowed.allows(str(model_dir))  # the directory itself is not a model
    assert not allowed.allows(str(model_dir / "missing"))
    assert not allowed.allows("attacker-org/evil-model")
    assert not allowed.allows("models/qwen")  # relative paths depend on the working directory
    assert not allowed.allows(str(tmp_path / "outside"))


def test_allow_list_refusals_name_the_field(model_dir):
    allowed = allow_list(model_dir)
    evil = config_models(content("evil", models={"engine.model": entry("evil", "attacker-org/evil-model")}), "own")
    with pytest.raises(FlagRefused, match=r"^engine.model: 'attacker-org/evil-model' is not allowed on this node"):
        allowed.check(evil)
    tokenizer = entry("m", str(model_dir / "qwen"), tokenizer=str(model_dir / "escape"))
    with pytest.raises(FlagRefused, match=r"^engine.model: tokenizer '.*escape' is not allowed"):
        allowed.check(config_models(content("m", models={"engine.model": tokenizer}), "own"))
    draft = entry("d", "attacker-org/draft", is_draft_capable=True)
    doc = content(None, "d", models={"speculative.draft_model": draft})
    with pytest.raises(FlagRefused, match=r"^speculative.draft_model: 'attacker-org/draft' is not allowed"):
        allowed.check(config_models(doc, "own-model"))


def test_remote_code_needs_the_operators_consent(model_dir):
    trusted = config_models(
        content("m", models={"engine.model": entry("m", str(model_dir / "qwen"), trust_remote_code=True)}), "own"
    )
    with pytest.raises(FlagRefused, match=r"^engine.model: 'm' needs trust_remote_code, which this node does not"):
        allow_list(model_dir).check(trusted)
    allow_list(model_dir, allow_trust_remote_code=True).check(trusted)


# --- draft/main tokenizer files ------------------------------------------------------------------------------


def write_tokenizer(directory: Path, vocab: dict, *, config: dict | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab}}))
    (directory / "tokenizer_config.json").write_text(json.dumps(config or {"bos_token": "<s>"}))
    return directory


def models_of(main: Path, draft: Path):
    return config_models(
        content(
            "m",
            "d",
            models={
                "engine.model": entry("m", str(main)),
                "speculative.draft_model": entry("d", str(draft), is_draft_capable=True),
            },
        ),
        "own",
    )


def test_same_tokenizer_files_under_two_paths_pass(tmp_path):
    main = write_tokenizer(tmp_path / "main", {"a": 0, "b": 1})
    draft = write_tokenizer(tmp_path / "draft", {"a": 0, "b": 1})
    (draft / "model.safetensors").write_bytes(b"other weights")
    assert check_draft_tokenizer(models_of(main, draft), backend="vllm").startswith("draft and main tokenizer files")


def test_different_tokenizer_files_are_refused_naming_the_draft(tmp_path):
    main = write_tokenizer(tmp_path / "main", {"a": 0, "b": 1})
    draft = write_tokenizer(tmp_path / "draft", {"a": 0, "c": 1})
    with pytest.raises(
        TokenizerMismatch, match=r"^speculative.draft_model: 'd' does not share the tokenizer of the main model 'm'"
    ) as refused:
        check_draft_tokenizer(models_of(main, draft), backend="vllm")
    # Both sides are named with where their files are and their digests.
    assert f"main 'm' {main} sha256 " in str(refused.value) and f"draft 'd' {draft} sha256 " in str(refused.value)
    assert "tokenizer.json differ" in str(refused.value)
    # A file present on one side only is a difference too.
    (draft / "tokenizer.json").write_text((main / "tokenizer.json").read_text())
    (draft / "merges.txt").write_text("a b\n")
    with pytest.raises(TokenizerMismatch, match=r"merges.txt differ"):
        check_draft_tokenizer(models_of(main, draft), backend="vllm")


def test_missing_tokenizer_files_refuse_on_vllm_and_are_noted_on_the_simulator(tmp_path):
    main = write_tokenizer(tmp_path / "main", {"a": 0})
    draft = tmp_path / "draft"
    draft.mkdir()
    with pytest.raises(TokenizerMismatch, match=r"speculative.draft_model: cannot prove 'd' shares"):
        check_draft_tokenizer(models_of(main, draft), backend="vllm")
    assert "(simulated engine)" in check_draft_tokenizer(models_of(main, draft), backend="simulator")


def test_repo_ids_are_read_from_the_hugging_face_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    repo = tmp_path / "hub" / "models--Qwen--Qwen3-0.6B"
    commit = "c" * 40
    write_tokenizer(repo / "snapshots" / commit, {"a": 0})
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    assert tokenizer_directory("Qwen/Qwen3-0.6B") == repo / "snapshots" / commit
    assert tokenizer_directory("Qwen/Qwen3-0.6B", commit) == repo / "snapshots" / commit
    assert tokenizer_directory("Qwen/Qwen3-0.6B", "v2") is None
    assert tokenizer_directory("Qwen/Qwen3-0.6B", "../../../etc") is None
    assert tokenizer_directory("Qwen/Qwen3-8B") is None


@pytest.mark.subprocess
def test_the_tiny_test_models_share_one_tokenizer_and_a_changed_copy_does_not(
    tiny_model_dir, tiny_draft_model_dir, tmp_path
):
    """The real pair scripts/make_tiny_model.py writes (--draft: same tokenizer, other weights)."""
    main, draft = tokenizer_digest(tiny_model_dir), tokenizer_digest(tiny_draft_model_dir)
    assert main is not None and set(main.files) >= {"tokenizer.json", "tokenizer_config.json"}
    assert main.sha256 == draft.sha256
    check_draft_tokenizer(models_of(tiny_model_dir, tiny_draft_model_dir), backend="vllm")

    other = tmp_path / "tiny-draft-other"
    shutil.copytree(tiny_draft_model_dir, other)
    # Same vocabulary size (vLLM's own check passes), two ids swapped: the draft's tokens would mean other words.
    document = json.loads((other / "tokenizer.json").read_text())
    vocab = document["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[-2:]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (other / "tokenizer.json").write_text(json.dumps(document))
    with pytest.raises(TokenizerMismatch, match=r"tokenizer.json differ"):
        check_draft_tokenizer(models_of(tiny_model_dir, other), backend="vllm")

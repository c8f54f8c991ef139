"""The draft/main tokenizer rule, checked on the files the node would load rather than on two names.

vLLM tokenizes for a draft model with the main model's tokenizer; a draft trained with another vocabulary
proposes token ids that mean something else, and acceptance collapses (the seed's checklist: never mix
tokenizers). Two catalog entries can name one tokenizer under two paths, or two tokenizers under one name, so
the agent hashes the tokenizer files of both before it starts an engine with a draft model.
"""

import hashlib
from dataclasses import dataclass
from pathlib import Path

from engine_node.checkpoints import local_directory
from engine_node.model_sources import DRAFT_FIELD, ConfigModels

# Everything that decides how text becomes token ids (Hugging Face fast and slow tokenizers, SentencePiece).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)
# Methods whose draft is a head trained on the main model's tokens (vLLM tokenizes with the main model's tokenizer):
# such a checkpoint often ships no tokenizer files of its own, and needs none.
HEAD_METHODS = ("eagle", "eagle3")


class TokenizerMismatch(Exception):
    """The draft's tokenizer files differ from the main model's, or cannot be compared on this node."""


@dataclass(frozen=True)
class TokenizerDigest:
    """sha256 of each tokenizer file found in a directory, and one digest over all of them."""

    directory: Path
    files: dict[str, str]

    @property
    def sha256(self) -> str:
        lines = "".join(f"{name}\0{digest}\n" for name, digest in sorted(self.files.items()))
        return hashlib.sha256(lines.encode()).hexdigest()


def tokenizer_directory(source: str, revision: str = "") -> Path | None:
    """The local directory holding a model's tokenizer: the path itself, or the Hugging Face cache's snapshot of a
    repo id at `revision` (its `main` when unpinned); None when the node has no copy."""
    return local_directory(source, revision)


def tokenizer_digest(directory: Path) -> TokenizerDigest | None:
    """Digest of the tokenizer files in `directory`; None when it holds none."""
    files = {}
    for name in TOKENIZER_FILES:
        path = directory / name
        if path.is_file():
            files[name] = _file_sha256(path)
    return TokenizerDigest(directory=directory, files=files) if files else None


def check_draft_tokenizer(models: ConfigModels, *, backend: str, method: str = "draft_model") -> str:
    """Compare the draft's tokenizer files with the main model's; return a line saying what was compared.

    Raises TokenizerMismatch (its message names speculative.draft_model) when they differ, or when the files are
    missing on a vLLM node. The simulator never tokenizes, so there a missing copy is only noted. An EAGLE head
    (`method` eagle or eagle3) without tokenizer files of its own passes: it runs on the main model's tokens; its
    vocabulary size is compared with the main model's all the same (engine_node/config_checks.py)."""
    if models.draft is None:
        return "no draft model"
    main = _digest(*models.main.tokenizer_source)
    draft = _digest(*models.draft.tokenizer_source)
    if draft is None and method in HEAD_METHODS and _has_config(models.draft):
        return f"{method} head {models.draft.label} has no tokenizer files of its own: it uses the main model's"
    if main is None or draft is None:
        missing = models.main if main is None else models.draft
        if backend == "simulator":
            return f"tokenizers not compared: no tokenizer files of {missing.label} on this node (simulated engine)"
        raise TokenizerMismatch(
            f"{DRAFT_FIELD}: cannot prove {models.draft.name!r} shares the tokenizer of the main model "
            f"{models.main.label}: no tokenizer files of {missing.label} on this node"
        )
    if main.files != draft.files:
        differing = sorted(
            name for name in main.files.keys() | draft.files.keys() if main.files.get(name) != draft.files.get(name)
        )
        raise TokenizerMismatch(
            f"{DRAFT_FIELD}: {models.draft.name!r} does not share the tokenizer of the main model "
            f"{models.main.label}: {', '.join(differing)} differ (main {models.main.label} {main.directory} sha256 "
            f"{main.sha256[:12]}, draft {models.draft.label} {draft.directory} sha256 {draft.sha256[:12]})"
        )
    return f"draft and main tokenizer files identical (sha256 {main.sha256[:12]})"


def _digest(source: str, revision: str) -> TokenizerDigest | None:
    directory = tokenizer_directory(source, revision)
    return tokenizer_digest(directory) if directory is not None else None


def _has_config(entry) -> bool:
    directory = local_directory(entry.source, entry.revision)
    return directory is not None and (directory / "config.json").is_file()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

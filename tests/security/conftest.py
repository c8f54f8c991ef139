"""Fixtures of the security tests: the real vLLM CPU build and the tiny test models (tests/engine_node/conftest.py)."""

from tests.engine_node.conftest import (  # noqa: F401 - fixtures, found by name
    tiny_draft_model_dir,
    tiny_model_dir,
    vllm_python,
)

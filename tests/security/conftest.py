"""Fixtures of the security tests: the real vLLM CPU build and the tiny test models (tests/engine_node/conftest.py)."""

from tests.engine_node.conftest import (  # noqa: F401 - fixtures, found by name
    shared_vllm_agent,
    tiny_draft_model_dir,
    tiny_model_dir,
    vllm_node,
    vllm_python,
)
from tests.tuning.conftest import tuning_world  # noqa: F401 - a fixture, found by name

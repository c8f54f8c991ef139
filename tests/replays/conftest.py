"""Fixtures of the replay tests: the real vLLM CPU build and the tiny test model (tests/engine_node/conftest.py)."""

from tests.engine_node.conftest import (  # noqa: F401 - fixtures, found by name
    shared_vllm_agent,
    tiny_model_dir,
    vllm_node,
    vllm_python,
)

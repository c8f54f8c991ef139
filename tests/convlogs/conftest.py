"""Fixtures of conversation-log tests: a log directory of the test's own, a published pool, a log on disk."""

import pytest

from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from tests.factories import legal_whitelist


@pytest.fixture(autouse=True)
def log_dir(tmp_path, settings):
    settings.CONVERSATION_LOG_DIR = tmp_path / "stored-logs"
    return settings.CONVERSATION_LOG_DIR


@pytest.fixture
def staging(users):
    """Pool `staging` publishing chat v1: the seed's cap 256 and the `legal` whitelist (legal, legal_policy)."""
    sre = users["sre"]
    legal_whitelist(sre)
    template = template_create(actor=sre, name="chat")
    document = {"inference_params": {"max_tokens": {"default": 256, "whitelist": ["legal"]}}}
    version = template_version_create(actor=sre, template=template, document=document, base_number=None)
    pool = pool_create(actor=sre, name="staging", is_production=False)
    pool_publish(actor=sre, pool=pool, version=version, reason="first")
    pool.refresh_from_db()
    return pool

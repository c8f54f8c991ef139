"""Fixtures of the comparison tests: a template with two versions (v1 and v2), a staging pool."""

import pytest

from tests.factories import pools, template_with_versions


@pytest.fixture
def versions(agent):
    _, (v1, v2) = template_with_versions(agent, temperatures=(0.3, 0.2))
    return v1, v2


@pytest.fixture
def staging(sre):
    return pools(sre)[0]

"""Impact tests write their pool samples right at the change: no settling time unless a test sets one."""

import pytest


@pytest.fixture(autouse=True)
def no_settling(settings):
    settings.IMPACT_SETTLE_S = 0

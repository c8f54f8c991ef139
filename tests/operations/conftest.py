"""A small world for the operations tests: whitelist `legal`, pools `staging` and `prod-main`."""

import pytest

from tests.factories import legal_whitelist, pools


@pytest.fixture
def world(users):
    legal = legal_whitelist(users["agent"])
    staging, prod = pools(users["sre"])
    return {**users, "legal": legal, "staging": staging, "prod": prod}


@pytest.fixture
def sent(monkeypatch):
    """Events handed to the channel layer, in order."""
    events = []
    monkeypatch.setattr("controlplane.lib.realtime.send", lambda groups, event: events.append((groups, event)))
    return events

"""Shared fixtures: one user per role, API clients signed in as each, and the seed document."""

from pathlib import Path

import pytest
from rest_framework.test import APIClient

from controlplane.accounts.models import User
from controlplane.accounts.roles import Role

SEED_YAML_PATH = Path(__file__).resolve().parent.parent / "controlplane/params/fixtures/seed_inference_params.yaml"
PASSWORD = "correct-horse-battery"


@pytest.fixture(autouse=True)
def fast_password_hashing(request, settings):
    """PBKDF2 costs ~0.3 s a user; browser tests keep it because daphne checks their passwords."""
    if request.node.get_closest_marker("browser") is None:
        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def fresh_shared_samples():
    """Every test starts without the nodes' latest samples an earlier test's processes shared through Redis (their
    entries would count in a same-named pool's figures for a few seconds)."""
    from django.conf import settings

    if settings.REDIS_URL:
        import redis

        from controlplane.metrics.shared_latest import shared_key

        client = redis.Redis.from_url(settings.REDIS_URL)
        try:
            client.delete(shared_key())
        finally:
            client.close()


@pytest.fixture
def seed_yaml() -> str:
    return SEED_YAML_PATH.read_text(encoding="utf-8")


def make_user(role: str, username: str | None = None) -> User:
    return User.objects.create_user(username=username or role, password=PASSWORD, role=role)


@pytest.fixture
def users(db) -> dict[str, User]:
    return {role: make_user(role) for role in Role.values}


@pytest.fixture
def agent(users) -> User:
    return users[Role.AGENT]


@pytest.fixture
def sre(users) -> User:
    return users[Role.SRE]


@pytest.fixture
def oncall(users) -> User:
    return users[Role.ONCALL]


@pytest.fixture
def admin_user(users) -> User:
    return users[Role.ADMIN]


@pytest.fixture
def api_for(users):
    """api_for("sre") -> an APIClient authenticated as that role's user (or None for anonymous)."""

    def build(role: str | None) -> APIClient:
        client = APIClient()
        if role is not None:
            client.force_authenticate(users[role])
        return client

    return build


def pytest_collection_modifyitems(config, items):
    """Browser tests run last: they are the slowest and their event loop must not precede async_to_sync users."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)

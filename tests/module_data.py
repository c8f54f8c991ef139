"""Rows built once for a whole test module instead of once per test.

`module_rows(django_db_blocker)` opens a transaction that lasts the module: what a module fixture writes inside it is
there for every test of the module, each test's own writes are rolled back to a savepoint as always (pytest-django's
`db`), and the module's rows are rolled back when it ends, so the next module starts from an empty database. Only for
modules whose tests use plain `django_db` (a transactional test would flush the tables from under the module).

`fresh(value)` reads model instances (also inside lists and dicts) again from the database, one query per model, so
a test that changes an instance in memory never hands that change to the next test.

`module_world_fixtures(build, roles)` gives a module the three fixtures that do both: `module_world` (one user per
role and `build(users)`, once), and `users` and `world` (fresh copies for each test), to be assigned to module names:
`module_world, users, world = module_world_fixtures(build_world, Role.values)`.
"""

import contextlib
import copy

import pytest
from django.db import models, transaction
from django.test import override_settings

from tests.conftest import make_user


@contextlib.contextmanager
def module_rows(django_db_blocker):
    with django_db_blocker.unblock(), transaction.atomic():
        yield
        transaction.set_rollback(True)


def module_users(roles) -> dict:
    """One user per role, as the `users` fixture makes them (with the fast hasher the non-browser tests use)."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        return {role: make_user(role) for role in roles}


def fresh(value):
    """`value` with each model instance in it read again (one query per model, however many instances)."""
    found: dict[type, set] = {}
    _collect(value, found)
    rows = {model: model.objects.in_bulk(pks) for model, pks in found.items()}
    return _rebuild(value, rows, set())


def _collect(value, found: dict[type, set]) -> None:
    if isinstance(value, models.Model):
        found.setdefault(type(value), set()).add(value.pk)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _collect(item, found)


def _rebuild(value, rows: dict[type, dict], given: set):
    """The instance read for each one in `value`; one named twice is handed out as two objects, as two reads were."""
    if isinstance(value, models.Model):
        try:
            row = rows[type(value)][value.pk]
        except KeyError:
            raise type(value).DoesNotExist(f"{type(value).__name__} {value.pk} is gone") from None
        if (type(value), value.pk) in given:
            return copy.copy(row)
        given.add((type(value), value.pk))
        return row
    if isinstance(value, list | tuple):
        return type(value)(_rebuild(item, rows, given) for item in value)
    if isinstance(value, dict):
        return {key: _rebuild(item, rows, given) for key, item in value.items()}
    return value


def module_world_fixtures(build, roles, before_each=None):
    """(module_world, users, world) fixtures; `before_each()`, when given, runs in each test's transaction first (to
    bring a module-old row up to the test's time, say)."""

    @pytest.fixture(scope="module", name="module_world")
    def module_world(django_db_setup, django_db_blocker):
        with module_rows(django_db_blocker):
            users = module_users(roles)
            yield users, build(users)

    @pytest.fixture(name="users")
    def users(db, module_world):
        return fresh(module_world[0])

    @pytest.fixture(name="world")
    def world(users, module_world):
        if before_each is not None:
            before_each()
        return fresh(module_world[1])

    return module_world, users, world

"""User services: creation rules, role changes, self-lockout protection and API tokens."""

import pytest
from django.test import RequestFactory
from rest_framework.authtoken.models import Token

from controlplane.accounts.models import User
from controlplane.accounts.roles import PERMISSIONS, Action, Role, role_allows
from controlplane.accounts.services import BadCredentials, user_create, user_token_issue, user_update
from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import Conflict, InvalidField
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def token_request():
    return RequestFactory().post("/api/v1/auth/token/")


def test_permission_map_names_every_action_and_admin_holds_all():
    assert set(PERMISSIONS) == set(Action)
    assert all(role_allows(Role.ADMIN, action) for action in Action)
    assert not role_allows(None, Action.VIEW)
    assert not role_allows(Role.AGENT, Action.POOL_PUBLISH)
    assert not role_allows(Role.ONCALL, Action.TEMPLATE_WRITE)


def test_inactive_users_can_do_nothing(agent):
    agent.is_active = False
    assert not agent.can(Action.VIEW)


def test_user_create_checks_role_password_and_uniqueness(admin_user):
    user = user_create(actor=admin_user, username="newbie", password=PASSWORD, role="oncall")
    assert user.check_password(PASSWORD) and user.role == "oncall"
    with pytest.raises(Conflict, match="username: 'newbie' is taken"):
        user_create(actor=admin_user, username="newbie", password=PASSWORD, role="oncall")
    with pytest.raises(InvalidField, match="role: must be one of agent, oncall, sre, admin"):
        user_create(actor=admin_user, username="other", password=PASSWORD, role="root")
    with pytest.raises(InvalidField, match="password: This password is too short"):
        user_create(actor=admin_user, username="other", password="short", role="agent")
    assert not User.objects.filter(username="other").exists()
    assert AuditEntry.objects.filter(action="user.create").count() == 1


def test_role_change_is_audited_with_before_and_after(admin_user, agent):
    user_update(actor=admin_user, user=agent, role="sre", reason="on-call rotation")
    agent.refresh_from_db()
    assert agent.role == "sre"
    entry = AuditEntry.objects.get(action="user.update")
    assert entry.before == {"role": "agent", "is_active": True}
    assert entry.after == {"role": "sre", "is_active": True}


@pytest.mark.parametrize("change", [{"role": "sre"}, {"is_active": False}])
def test_admins_cannot_lock_themselves_out(admin_user, change):
    with pytest.raises(InvalidField, match="you cannot remove your own admin role"):
        user_update(actor=admin_user, user=admin_user, **change)
    admin_user.refresh_from_db()
    assert (admin_user.role, admin_user.is_active) == ("admin", True)


def test_deactivation_revokes_api_tokens(admin_user, oncall):
    user_token_issue(request=token_request(), username="oncall", password=PASSWORD)
    user_update(actor=admin_user, user=oncall, is_active=False)
    assert not Token.objects.filter(user=oncall).exists()
    with pytest.raises(BadCredentials):
        user_token_issue(request=token_request(), username="oncall", password=PASSWORD)


def test_a_new_token_replaces_the_old_one(oncall):
    first = user_token_issue(request=token_request(), username="oncall", password=PASSWORD)
    second = user_token_issue(request=token_request(), username="oncall", password=PASSWORD)
    assert first.key != second.key
    assert list(Token.objects.filter(user=oncall).values_list("key", flat=True)) == [second.key]

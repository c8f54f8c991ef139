"""Every write to users: creation, role and activation changes, API tokens."""

from django.contrib.auth import authenticate
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from rest_framework.authtoken.models import Token

from controlplane.accounts.models import User
from controlplane.accounts.roles import Role
from controlplane.audit.services import audit_record, mutating_service
from controlplane.lib.errors import Conflict, DomainError, InvalidField


class BadCredentials(DomainError):
    status_code = 401
    code = "bad_credentials"


@mutating_service
def user_create(*, actor, username: str, password: str, role: str, email: str = "") -> User:
    """A new active user with one role."""
    _check_role(role)
    try:
        validate_password(password)
    except ValidationError as exc:
        raise InvalidField("password", " ".join(exc.messages)) from None
    with transaction.atomic():
        try:
            with transaction.atomic():
                user = User.objects.create_user(username=username, password=password, role=role, email=email)
        except IntegrityError:
            raise Conflict(f"username: {username!r} is taken") from None
        audit_record(actor=actor, action="user.create", target=user, after={"username": username, "role": role})
    return user


@mutating_service
def user_update(*, actor, user: User, role: str | None = None, is_active: bool | None = None, reason: str = "") -> User:
    """Change a user's role or activation; admins cannot demote or deactivate themselves."""
    if role is not None:
        _check_role(role)
    if user.pk == actor.pk and ((role is not None and role != Role.ADMIN) or is_active is False):
        raise InvalidField("role", "you cannot remove your own admin role or deactivate yourself")
    with transaction.atomic():
        locked = User.objects.select_for_update().get(pk=user.pk)
        before = {"role": locked.role, "is_active": locked.is_active}
        if role is not None:
            locked.role = role
        if is_active is not None:
            locked.is_active = is_active
        locked.save(update_fields=["role", "is_active"])
        if is_active is False:
            Token.objects.filter(user=locked).delete()
        audit_record(
            actor=actor,
            action="user.update",
            target=locked,
            before=before,
            after={"role": locked.role, "is_active": locked.is_active},
            reason=reason,
        )
    return locked


@mutating_service
def user_token_issue(*, request: HttpRequest, username: str, password: str) -> Token:
    """Exchange a password for a fresh API token; the previous token stops working.

    `request` is the HTTP request asking: failed attempts count per user name and client address, and a locked-out
    pair is refused without checking the password (django-axes; the lockout answer is its middleware's 429)."""
    user = authenticate(request, username=username, password=password)
    if user is None:
        raise BadCredentials("username or password is wrong, or the user is inactive")
    with transaction.atomic():
        Token.objects.filter(user=user).delete()
        token = Token.objects.create(user=user)
        audit_record(actor=user, action="user.token_issue", target=user)
    return token


def _check_role(role: str) -> None:
    if role not in Role.values:
        raise InvalidField("role", f"must be one of {', '.join(Role.values)}; got {role!r}")

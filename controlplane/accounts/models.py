"""A person who signs in to the dashboard or API, with exactly one role."""

from django.contrib.auth.models import AbstractUser
from django.db import models

from controlplane.accounts.roles import Role, role_allows


class User(AbstractUser):
    """A dashboard/API user; `role` decides every permission (see roles.PERMISSIONS)."""

    role = models.CharField(max_length=16, choices=Role.choices, default=Role.ONCALL)

    def can(self, action: str) -> bool:
        return self.is_active and role_allows(self.role, action)

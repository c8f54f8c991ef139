"""Django admin shows users read-only; changes go through the dashboard so they are audited."""

from django.contrib import admin

from controlplane.accounts.models import User
from controlplane.lib.admin import ReadOnlyAdmin


@admin.register(User)
class UserAdmin(ReadOnlyAdmin):
    list_display = ["username", "role", "is_active", "last_login"]
    list_filter = ["role", "is_active"]
    exclude = ["password"]

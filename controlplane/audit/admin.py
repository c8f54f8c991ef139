from django.contrib import admin

from controlplane.audit.models import AuditEntry
from controlplane.lib.admin import ReadOnlyAdmin


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ["at", "actor_name", "action", "target_repr", "request_id"]
    list_filter = ["action", "target_type"]
    search_fields = ["actor_name", "target_repr", "reason", "request_id"]
    actions = None

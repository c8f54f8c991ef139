from django.contrib import admin

from controlplane.datasets.models import (
    IntentDataset,
    IntentModel,
    IntentModelRelease,
    PoolWarmup,
    WarmupDataset,
    WarmupDatasetVersion,
)
from controlplane.lib.admin import ReadOnlyAdmin


@admin.register(IntentDataset)
class IntentDatasetAdmin(ReadOnlyAdmin):
    list_display = ["name", "row_count", "source_format", "created_by", "created_at"]
    exclude = ["rows_json"]


@admin.register(IntentModel)
class IntentModelAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "status", "progress", "accuracy", "created_at"]
    exclude = ["document_text"]


admin.site.register(IntentModelRelease, ReadOnlyAdmin)


@admin.register(WarmupDatasetVersion)
class WarmupDatasetVersionAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "source", "message_count", "author", "created_at"]
    exclude = ["messages_json"]


admin.site.register(WarmupDataset, ReadOnlyAdmin)
admin.site.register(PoolWarmup, ReadOnlyAdmin)

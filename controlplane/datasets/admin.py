from django.contrib import admin

from controlplane.datasets.models import IntentDataset, IntentModel, IntentModelRelease
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

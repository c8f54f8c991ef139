from django.contrib import admin

from controlplane.catalog.models import ModelEntry
from controlplane.lib.admin import ReadOnlyAdmin

admin.site.register(ModelEntry, ReadOnlyAdmin)

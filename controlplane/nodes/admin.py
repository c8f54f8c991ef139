from django.contrib import admin

from controlplane.lib.admin import ReadOnlyAdmin
from controlplane.nodes.models import Pool, PoolRelease

for model in (Pool, PoolRelease):
    admin.site.register(model, ReadOnlyAdmin)

from django.contrib import admin

from controlplane.lib.admin import ReadOnlyAdmin
from controlplane.params.models import ParameterTemplate, TemplateVersion, Whitelist, WhitelistVersion

for model in (ParameterTemplate, TemplateVersion, Whitelist, WhitelistVersion):
    admin.site.register(model, ReadOnlyAdmin)

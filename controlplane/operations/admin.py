from django.contrib import admin

from controlplane.lib.admin import ReadOnlyAdmin
from controlplane.operations.models import ConversationOverride

admin.site.register(ConversationOverride, ReadOnlyAdmin)

from django.contrib import admin

from controlplane.alerts.models import (
    Alert,
    AlertEvent,
    AlertGroup,
    AlertNotification,
    AlertRule,
    AlertRuleVersion,
    Silence,
)
from controlplane.lib.admin import ReadOnlyAdmin

for model in (AlertRule, AlertRuleVersion, Alert, AlertGroup, AlertEvent, Silence, AlertNotification):
    admin.site.register(model, ReadOnlyAdmin)

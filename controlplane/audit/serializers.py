from rest_framework import serializers

from controlplane.audit.models import AuditEntry


class AuditEntrySerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name")
    target = serializers.CharField(source="target_repr")

    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "at",
            "actor",
            "request_id",
            "action",
            "target_type",
            "target_id",
            "target",
            "before",
            "after",
            "reason",
        ]

"""API shapes of review items, labels and the dataset built from them."""

from rest_framework import serializers

from controlplane.lib.serializers import SlugNameField, StrictSerializer
from controlplane.params.schema import INTENT_LABELS
from controlplane.reviews.models import ReviewItem


class ReviewItemSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool.name")
    labelled_by = serializers.CharField(source="labelled_by.username", default=None)
    agrees = serializers.BooleanField(allow_null=True)

    class Meta:
        model = ReviewItem
        fields = [
            "id",
            "text",
            "pool",
            "node_name",
            "predicted_intent",
            "confidence",
            "runner_up",
            "runner_up_confidence",
            "reasons",
            "tier",
            "first_seen_at",
            "last_seen_at",
            "seen_count",
            "status",
            "label",
            "labelled_by",
            "labelled_at",
            "agrees",
        ]


class ReviewLabelSerializer(StrictSerializer):
    label = serializers.ChoiceField(choices=INTENT_LABELS)


class ReviewDatasetCreateSerializer(StrictSerializer):
    base = SlugNameField(help_text="the intent dataset whose rows the new one starts from")
    name = SlugNameField(help_text="the new dataset's name")

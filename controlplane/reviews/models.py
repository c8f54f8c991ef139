"""Messages the nodes' policies were unsure of, masked on the node, waiting for (or holding) a reviewer's label."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.params.schema import INTENT_LABELS


class ReviewItem(models.Model):
    """One distinct masked message: where and how often it was sampled, what the classifier said, and its label."""

    class Status(models.TextChoices):
        PENDING = "pending"
        LABELLED = "labelled"

    # Identical masked texts are one item (a common question asked by many customers is labelled once).
    text_sha256 = models.CharField(max_length=64, unique=True)
    text = models.TextField()
    pool = models.ForeignKey("nodes.Pool", on_delete=models.CASCADE, related_name="review_items")
    node_name = models.CharField(max_length=64)
    predicted_intent = models.CharField(max_length=32, blank=True)
    confidence = models.FloatField(null=True, blank=True)
    runner_up = models.CharField(max_length=32, blank=True)
    runner_up_confidence = models.FloatField(null=True, blank=True)
    reasons = models.JSONField()
    tier = models.CharField(max_length=16, blank=True)
    first_seen_at = models.DateTimeField(db_index=True)
    last_seen_at = models.DateTimeField()
    seen_count = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    label = models.CharField(max_length=32, blank=True)
    labelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    labelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["first_seen_at", "id"]
        indexes = [models.Index(fields=["status", "first_seen_at"], name="review_item_queue")]
        constraints = [
            models.CheckConstraint(
                condition=Q(status="pending", label="") | Q(status="labelled", label__in=INTENT_LABELS),
                name="review_item_label_matches_status",
            ),
        ]

    def __str__(self) -> str:
        return f"review item {self.pk}"

    @property
    def agrees(self) -> bool | None:
        """Whether the reviewer's label is what the classifier predicted (None while pending)."""
        if self.status != self.Status.LABELLED:
            return None
        return self.label == self.predicted_intent

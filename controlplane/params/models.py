"""Templates and whitelists, each a named series of immutable, numbered versions."""

import hashlib
import json

from django.conf import settings
from django.db import models
from django.db.models import Q

from controlplane.params import schema
from controlplane.params.exceptions import DocumentInvalid


class ImmutableVersion(models.Model):
    """Shared shape of a version: number within its parent, author, comment and base."""

    number = models.PositiveIntegerField()
    base_number = models.PositiveIntegerField(null=True, blank=True)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    comment = models.CharField(max_length=500, blank=True)

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise DocumentInvalid("versions are immutable", errors=[schema.FieldError("version", "is immutable")])
        super().save(*args, **kwargs)


class ParameterTemplate(models.Model):
    """A named parameter template (e.g. `chat-default`); its content lives in its versions."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    latest_number = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TemplateVersion(ImmutableVersion):
    """One immutable revision of a template's `inference_params` document."""

    template = models.ForeignKey(ParameterTemplate, on_delete=models.PROTECT, related_name="versions")
    # The parameters as authored (omitted fields take schema defaults).
    params = models.JSONField()
    # Exact text of an imported document, so an unchanged export returns the same bytes.
    source_text = models.TextField(blank=True)
    source_format = models.CharField(max_length=8, blank=True)
    # The model catalog entries the document's model references resolved to when it was saved, keyed by field path
    # ("engine.model", "speculative.draft_model"): a version runs what was reviewed, whatever the catalog says later.
    pinned_models = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["template", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["template", "number"], name="template_version_number_unique"),
            models.CheckConstraint(condition=Q(number__gte=1), name="template_version_number_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.template.name} v{self.number}"

    @property
    def ref(self) -> str:
        """`template:number`, how forms and URLs name a version."""
        return f"{self.template.name}:{self.number}"

    @property
    def document(self) -> dict:
        return {schema.ROOT: schema.in_schema_order(self.params)}

    @property
    def effective_params(self) -> dict:
        return schema.effective(self.params)

    @property
    def node_content(self) -> dict:
        """What a node gets: the effective parameters and, under `models`, the catalog entries they name."""
        pinned = self.pinned_models or {}
        return {
            **self.effective_params,
            "models": {field: pinned.get(field) for field in schema.MODEL_REFERENCE_FIELDS},
        }

    @property
    def content_hash(self) -> str:
        """sha256 of `node_content` in canonical JSON; what a node reports once applied. It covers the pinned catalog
        entries, so a version that runs other weights never shares a hash with one that does not."""
        canonical = json.dumps(self.node_content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class Whitelist(models.Model):
    """A named list of scenarios exempt from the max_tokens cap (the seed's `legal`)."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    latest_number = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class WhitelistVersion(ImmutableVersion):
    """One immutable revision of a whitelist's scenarios (intent labels or business tags)."""

    whitelist = models.ForeignKey(Whitelist, on_delete=models.PROTECT, related_name="versions")
    scenarios = models.JSONField()

    class Meta:
        ordering = ["whitelist", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["whitelist", "number"], name="whitelist_version_number_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.whitelist.name} v{self.number}"

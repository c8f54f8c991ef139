"""The model catalog: every model the nodes may run, under the name templates use for it."""

from django.db import models
from django.db.models import Q


class ModelEntry(models.Model):
    """A model registered by an SRE or admin: where its weights and tokenizer come from, at which revision, whether it
    may serve as a draft model, and whether vLLM may run its repository's own code (an admin's decision)."""

    # The name templates put in engine.model and speculative.draft_model; it never changes once registered.
    name = models.CharField(max_length=64, unique=True)
    # An absolute path on the nodes or a Hugging Face repo id: what vLLM gets as --model.
    source = models.CharField(max_length=512)
    # Blank: the model's own tokenizer.
    tokenizer = models.CharField(max_length=512, blank=True)
    revision = models.CharField(max_length=128, blank=True)
    # Blank: vLLM uses `revision` for the model's own tokenizer.
    tokenizer_revision = models.CharField(max_length=128, blank=True)
    is_draft_capable = models.BooleanField(default=False)
    trust_remote_code = models.BooleanField(default=False)
    description = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            # Names reach engine command lines inside configs: never one that reads like a flag.
            models.CheckConstraint(condition=~Q(name__startswith="-"), name="model_entry_name_not_a_flag"),
            models.CheckConstraint(condition=~Q(source__startswith="-"), name="model_entry_source_not_a_flag"),
        ]
        verbose_name = "model catalog entry"
        verbose_name_plural = "model catalog entries"

    def __str__(self) -> str:
        return self.name

    def resolved(self) -> dict:
        """The entry as a config carries it to the nodes (engine_node/model_sources.py reads it)."""
        return {
            "name": self.name,
            "source": self.source,
            "tokenizer": self.tokenizer,
            "revision": self.revision,
            "tokenizer_revision": self.tokenizer_revision,
            "trust_remote_code": self.trust_remote_code,
            "is_draft_capable": self.is_draft_capable,
        }

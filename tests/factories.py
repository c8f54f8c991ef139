"""Builders for domain objects, going through the services so invariants and audit hold."""

from controlplane.nodes.services.pools import pool_create
from controlplane.params.services.templates import template_create, template_version_create
from controlplane.params.services.whitelists import whitelist_create


def legal_whitelist(actor):
    return whitelist_create(actor=actor, name="legal", scenarios=["legal", "legal_policy"])


def template_with_versions(actor, name="chat", temperatures=(0.3,)):
    """A template whose version i sets temperature.strict to temperatures[i]."""
    template = template_create(actor=actor, name=name)
    versions = []
    for i, strict in enumerate(temperatures):
        document = {"inference_params": {"temperature": {"strict": strict}, "max_tokens": {"whitelist": []}}}
        versions.append(
            template_version_create(
                actor=actor, template=template, document=document, base_number=i or None, comment=f"v{i + 1}"
            )
        )
    return template, versions


def pools(actor):
    return (
        pool_create(actor=actor, name="staging", is_production=False),
        pool_create(actor=actor, name="prod-main", is_production=True),
    )

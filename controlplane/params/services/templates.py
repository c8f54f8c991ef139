"""Creating templates and their versions, from edits or imported documents."""

from django.conf import settings
from django.db import IntegrityError, transaction

from controlplane.audit.services import audit_record, mutating_service
from controlplane.catalog.resolution import references_resolve
from controlplane.lib.errors import Conflict, check_slug
from controlplane.params import codec, schema, validation
from controlplane.params.exceptions import DocumentInvalid, StaleBaseVersion
from controlplane.params.models import ParameterTemplate, TemplateVersion, Whitelist
from controlplane.params.schema import FieldError


def document_validate(*, document) -> dict:
    """Size, schema and references: return authored params or raise DocumentInvalid naming every field."""
    return document_resolve(document=document)[0]


def document_resolve(*, document) -> tuple[dict, dict]:
    """Validate like `document_validate`; also return the model catalog entries its model references resolve to."""
    codec.check_size(codec.encoded_size(document))
    params, errors = validation.validate(document)
    models: dict = {}
    if not errors:
        errors = _check_whitelist_references(params)
        models, problems = references_resolve(schema.effective(params))
        errors += [FieldError(path, message) for path, message in problems]
    if errors:
        raise DocumentInvalid("document is invalid", errors=errors)
    return params, models


def _check_whitelist_references(params: dict) -> list[FieldError]:
    names = params.get("max_tokens", {}).get("whitelist")
    if names is None:
        names = schema.FIELDS_BY_PATH["max_tokens.whitelist"].default
    known = set(Whitelist.objects.filter(name__in=names).values_list("name", flat=True))
    return [
        FieldError(f"max_tokens.whitelist[{i}]", f"unknown whitelist {name!r}")
        for i, name in enumerate(names)
        if name not in known
    ]


@mutating_service
def template_create(*, actor, name: str, description: str = "") -> ParameterTemplate:
    """A new, empty template; its first version comes from an edit or an import."""
    check_slug("name", name)
    with transaction.atomic():
        try:
            with transaction.atomic():
                template = ParameterTemplate.objects.create(name=name, description=description)
        except IntegrityError:
            raise Conflict(f"name: a template named {name!r} already exists") from None
        audit_record(actor=actor, action="template.create", target=template, after={"name": name})
    return template


@mutating_service
def template_version_create(
    *,
    actor,
    template: ParameterTemplate,
    document,
    base_number: int | None,
    comment: str = "",
    source_text: str = "",
    source_format: str = "",
) -> TemplateVersion:
    """Save the next version, edited from `base_number`; a stale base raises 409 and stores nothing. The model catalog
    entries the document names are resolved now and pinned to the version."""
    params, pinned_models = document_resolve(document=document)
    with transaction.atomic():
        # The row lock orders concurrent saves on one template; the loser sees the new latest.
        locked = ParameterTemplate.objects.select_for_update().get(pk=template.pk)
        if (base_number or 0) != locked.latest_number:
            current = locked.versions.get(number=locked.latest_number) if locked.latest_number else None
            raise StaleBaseVersion(
                f"base_version: version {base_number} is stale; the latest is {locked.latest_number}",
                detail={"current_version": _version_summary(current)},
            )
        version = TemplateVersion.objects.create(
            template=locked,
            number=locked.latest_number + 1,
            base_number=base_number,
            author=actor,
            comment=comment,
            params=params,
            pinned_models=pinned_models,
            source_text=source_text,
            source_format=source_format,
        )
        locked.latest_number = version.number
        locked.save(update_fields=["latest_number"])
        before = locked.versions.get(number=base_number).params if base_number else None
        audit_record(
            actor=actor,
            action="template.version_create",
            target=version,
            before=before,
            after=params,
            reason=comment,
        )
    template.latest_number = locked.latest_number
    return version


def template_import(
    *,
    actor,
    template: ParameterTemplate,
    text: str | bytes,
    fmt: str,
    base_number: int | None,
    comment: str = "",
) -> TemplateVersion:
    """Import a YAML or JSON document as the next version, keeping its exact text for export."""
    document = codec.parse(text, fmt)
    source = text.decode("utf-8") if isinstance(text, bytes) else text
    return template_version_create(
        actor=actor,
        template=template,
        document=document,
        base_number=base_number,
        comment=comment or f"imported from {fmt.upper()}",
        source_text=source,
        source_format=fmt,
    )


def template_version_export(*, version: TemplateVersion, fmt: str) -> str:
    """The document as text; an imported version exported in its own format returns its exact bytes."""
    if fmt not in codec.FORMATS:
        raise DocumentInvalid(
            "unknown format", errors=[FieldError("format", f"must be one of {', '.join(codec.FORMATS)}")]
        )
    if version.source_text and version.source_format == fmt:
        return version.source_text
    return codec.dump(version.document, fmt)


def _version_summary(version: TemplateVersion | None) -> dict | None:
    if version is None:
        return None
    return {
        "number": version.number,
        "author": version.author.get_username(),
        "created_at": version.created_at.isoformat(),
        "comment": version.comment,
        "document": version.document,
    }


def max_document_bytes() -> int:
    return settings.TEMPLATE_MAX_BYTES

"""Template pages: list, version history, version view, editor with inline errors, import, diff."""

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from controlplane.accounts.roles import Action
from controlplane.advice.selectors import template_suggestions
from controlplane.dashboard import forms
from controlplane.dashboard.access import page
from controlplane.lib.errors import DomainError
from controlplane.nodes.models import Pool
from controlplane.params import codec, schema, selectors
from controlplane.params.diff import needs_restart
from controlplane.params.exceptions import DocumentInvalid, StaleBaseVersion
from controlplane.params.models import ParameterTemplate
from controlplane.params.services import templates as services


@page(write_action=Action.TEMPLATE_WRITE)
def template_list(request):
    form = forms.TemplateCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            template = services.template_create(actor=request.user, **form.cleaned_data)
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, f"Template {template.name} created; save its first version.")
            return redirect("dashboard:template-edit", name=template.name)
    templates = ParameterTemplate.objects.prefetch_related("versions__author")
    return render(request, "params/template_list.html", {"templates": templates, "form": form})


@page()
def template_detail(request, name):
    template = selectors.template_get(name=name)
    versions = template.versions.select_related("author")
    return render(
        request,
        "params/template_detail.html",
        {
            "template": template,
            "versions": versions,
            "import_form": forms.ImportForm(),
            "suggestions": template_suggestions(template=template)["suggestions"],
        },
    )


@page()
def version_detail(request, name, number):
    template = selectors.template_get(name=name)
    version = selectors.template_version_get(template=template, number=number)
    authored = schema.flatten(version.params)
    values = schema.flatten(version.effective_params)
    rows = [{"spec": f, "value": values[f.path], "is_default": f.path not in authored} for f in schema.FIELDS]
    yaml_text = services.template_version_export(version=version, fmt="yaml")
    return render(
        request,
        "params/version_detail.html",
        {
            "template": template,
            "version": version,
            "rows": rows,
            "yaml_text": yaml_text,
            "pools": Pool.objects.order_by("name"),
            "pinned_models": [(field, entry) for field, entry in (version.pinned_models or {}).items() if entry],
        },
    )


@page(write_action=Action.TEMPLATE_WRITE)
def template_edit(request, name):
    template = selectors.template_get(name=name)
    errors: list = []
    conflict = None
    if request.method == "POST":
        form = forms.VersionEditForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            try:
                version = services.template_import(
                    actor=request.user,
                    template=template,
                    text=data["text"],
                    fmt=data["format"],
                    base_number=data["base_version"] or None,
                    comment=data["comment"] or "edited in the dashboard",
                )
            except DocumentInvalid as exc:
                errors = exc.errors
            except StaleBaseVersion as exc:
                conflict = exc
            else:
                messages.success(request, f"Saved {version}.")
                return redirect("dashboard:version-detail", name=name, number=version.number)
    else:
        latest = template.versions.filter(number=template.latest_number).first()
        text = services.template_version_export(version=latest, fmt="yaml") if latest else _starter_document()
        form = forms.VersionEditForm(initial={"text": text, "format": "yaml", "base_version": template.latest_number})
    return render(
        request,
        "params/template_edit.html",
        {
            "template": template,
            "form": form,
            "errors": [e.as_dict() for e in errors],
            "conflict": conflict,
            "fields": schema.FIELDS,
        },
        status=409 if conflict else (400 if errors else 200),
    )


@require_POST
@page(write_action=Action.TEMPLATE_WRITE)
def template_import(request, name):
    template = selectors.template_get(name=name)
    form = forms.ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        messages.error(request, "Import: choose a YAML or JSON file.")
        return redirect("dashboard:template-detail", name=name)
    upload = form.cleaned_data["file"]
    fmt = "json" if upload.name.lower().endswith(".json") else "yaml"
    try:
        version = services.template_import(
            actor=request.user,
            template=template,
            text=upload.read(services.max_document_bytes() + 1),
            fmt=fmt,
            base_number=form.cleaned_data["base_version"] or None,
            comment=form.cleaned_data["comment"],
        )
    except DomainError as exc:
        messages.error(request, f"Import refused, nothing saved. {exc.message}")
        return redirect("dashboard:template-detail", name=name)
    messages.success(request, f"Imported {version}.")
    return redirect("dashboard:version-detail", name=name, number=version.number)


@page()
def version_export(request, name, number):
    version = selectors.template_version_get(template=selectors.template_get(name=name), number=number)
    fmt = request.GET.get("format", "yaml")
    text = services.template_version_export(version=version, fmt=fmt)
    response = HttpResponse(text.encode("utf-8"), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}-v{version.number}.{fmt}"'
    return response


@page()
def template_diff(request, name):
    template = selectors.template_get(name=name)
    versions = list(template.versions.select_related("author"))
    newest = versions[0].number if versions else 0
    old = request.GET.get("from") or max(newest - 1, 1)
    new = request.GET.get("to") or newest
    changes = selectors.template_versions_diff(template=template, old_number=old, new_number=new) if versions else []
    return render(
        request,
        "params/template_diff.html",
        {
            "template": template,
            "versions": versions,
            "old": int(old),
            "new": int(new),
            "changes": changes,
            "needs_restart": needs_restart(changes),
        },
    )


def _starter_document() -> str:
    return codec.dump({schema.ROOT: {"max_tokens": {"default": 256}}}, "yaml")

"""Intent pages: datasets and upload, a dataset's counts and models, a model's live training and evaluation."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlplane.accounts.roles import Action
from controlplane.dashboard import forms
from controlplane.dashboard.access import page
from controlplane.datasets import selectors
from controlplane.datasets.exceptions import DatasetInvalid
from controlplane.datasets.models import IntentDataset, IntentModel
from controlplane.datasets.services.datasets import intent_dataset_create
from controlplane.datasets.services.releases import intent_model_publish, intent_model_unpublish
from controlplane.datasets.services.training import intent_model_create
from controlplane.datasets.uploads import MAX_BYTES
from controlplane.lib.errors import DomainError
from controlplane.nodes.models import Pool
from controlplane.reviews.comparison import review_comparison


@page(write_action=Action.INTENT_TRAIN)
def intent_overview(request):
    """Datasets with the upload form, recent models, and which model each pool uses."""
    form = forms.IntentDatasetUploadForm(request.POST or None, request.FILES or None)
    upload_errors: DatasetInvalid | None = None
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        upload = data["file"]
        if upload.size > MAX_BYTES:
            form.add_error("file", f"{upload.size} bytes is over the limit of {MAX_BYTES} bytes (20 MiB)")
        else:
            try:
                dataset = intent_dataset_create(
                    actor=request.user,
                    name=data["name"],
                    description=data["description"],
                    content=upload.read(),
                    fmt=data["format"] or _format_of(upload.name),
                )
            except DatasetInvalid as exc:
                upload_errors = exc
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                stored = f"{dataset.row_count} rows stored, {dataset.duplicates_removed} duplicates removed"
                messages.success(request, f"Dataset {dataset.name}: {stored}.")
                return redirect("dashboard:intent-dataset", name=dataset.name)
    datasets = IntentDataset.objects.select_related("created_by").defer("rows_json")
    return render(
        request,
        "datasets/intent_overview.html",
        {
            "datasets": datasets,
            "models": selectors.intent_models()[:20],
            "pools": selectors.pools_intent_models(),
            "form": form,
            "upload_errors": upload_errors,
        },
        status=400 if request.method == "POST" else 200,
    )


def _format_of(filename: str) -> str:
    return "csv" if filename.lower().endswith(".csv") else "jsonl"


@page(write_action=Action.INTENT_TRAIN)
def intent_dataset(request, name):
    """Per-label counts, the first rows, the dataset's models; POST starts a training run."""
    dataset = selectors.intent_dataset_get(name=name)
    form = forms.IntentTrainForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            model = intent_model_create(actor=request.user, dataset=dataset, epochs=form.cleaned_data["epochs"])
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, f"Training {model} queued.")
            return redirect("dashboard:intent-model", name=name, number=model.number)
    counts = dataset.label_counts
    most = max(counts.values()) or 1
    return render(
        request,
        "datasets/intent_dataset.html",
        {
            "dataset": dataset,
            "counts": [{"label": label, "count": n, "width": round(100 * n / most)} for label, n in counts.items()],
            "preview": selectors.intent_dataset_preview(dataset=dataset),
            "models": selectors.intent_models(dataset=dataset),
            "form": form,
        },
        status=400 if request.method == "POST" else 200,
    )


@page()
def intent_model(request, name, number):
    return _render_model(request, name, number)


def _render_model(request, name, number, publish_form=None, status=200):
    dataset = selectors.intent_dataset_get(name=name)
    model = selectors.intent_model_get(dataset=dataset, number=number)
    pools = selectors.pools_intent_models()
    return render(
        request,
        "datasets/intent_model.html",
        {
            "dataset": dataset,
            "model": model,
            "evaluation": _evaluation_view(model.evaluation) if model.evaluation else None,
            "pools": pools,
            "releases": model.releases.select_related("pool", "published_by"),
            "publish_form": publish_form or forms.IntentPublishForm(),
            **_comparison(request, model, pools),
        },
        status=status,
    )


def _comparison(request, model: IntentModel, pools: list[dict]) -> dict:
    """The model against the current one of the pool asked for (the first pool by default), on the review queue's
    messages; nothing before the model has finished training."""
    if model.status != IntentModel.Status.SUCCEEDED or not pools:
        return {}
    wanted = request.GET.get("compare_pool")
    chosen = next((p for p in pools if p["pool"].name == wanted), pools[0])
    release = chosen["release"]
    current = IntentModel.objects.get(pk=release.intent_model_id) if release and release.intent_model_id else None
    return {
        "comparison": review_comparison(candidate=model, current=current),
        "compare_pool": chosen["pool"].name,
    }


def _evaluation_view(evaluation: dict) -> dict:
    """Rows of the per-label table and the confusion matrix, each cell with its share of the row for the heat map."""
    labels = evaluation["labels"]
    matrix = []
    for i, label in enumerate(labels):
        row = evaluation["confusion"][i]
        total = sum(row) or 1
        cells = []
        for j, count in enumerate(row):
            share = count / total
            # Mistakes are a few percent of a row, so their colour saturates at a fifth of it to stay visible.
            alpha = round(0.08 + 0.8 * share if i == j else 0.1 + 0.7 * min(1.0, 5 * share), 3)
            cells.append({"count": count, "correct": i == j, "alpha": alpha, "is_strong": alpha > 0.5})
        matrix.append({"label": label, "cells": cells, "total": sum(row)})
    return {
        **evaluation,
        "per_label_rows": [{"label": label, **evaluation["per_label"][label]} for label in labels],
        "matrix": matrix,
    }


@require_POST
@page(write_action=Action.INTENT_PUBLISH)
def intent_publish(request, name, number):
    dataset = selectors.intent_dataset_get(name=name)
    model = selectors.intent_model_get(dataset=dataset, number=number)
    form = forms.IntentPublishForm(request.POST)
    if form.is_valid():
        pool = Pool.objects.filter(name=form.cleaned_data["pool"]).first()
        try:
            if pool is None:
                raise DomainError(f"pool: no pool named {form.cleaned_data['pool']!r}")
            intent_model_publish(actor=request.user, pool=pool, intent_model=model, reason=form.cleaned_data["reason"])
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, f"Published {model} to {pool.name}; its agents are told now.")
            return redirect("dashboard:intent-model", name=name, number=number)
    return _render_model(request, name, number, publish_form=form, status=400)


@require_POST
@page(write_action=Action.INTENT_PUBLISH)
def intent_builtin(request, name):
    """Return a pool's gateway to the model built into the agent."""
    pool = get_object_or_404(Pool, name=name)
    form = forms.IntentRevertForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Say why the pool goes back to the built-in model.")
        return redirect("dashboard:intents")
    try:
        intent_model_unpublish(actor=request.user, pool=pool, reason=form.cleaned_data["reason"])
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"{pool.name} uses the built-in intent model again.")
    return redirect("dashboard:intents")

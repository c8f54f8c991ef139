"""Warmup pages: datasets with the upload form and each pool's assignment; a dataset's versions, preview and assign."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from controlplane.accounts.roles import Action
from controlplane.dashboard import forms
from controlplane.dashboard.access import page
from controlplane.datasets import selectors
from controlplane.datasets.conversation_logs import DEFAULT_TOP_N
from controlplane.datasets.exceptions import DatasetInvalid
from controlplane.datasets.models import WarmupDataset
from controlplane.datasets.rows import MAX_BYTES
from controlplane.datasets.services.warmup import pool_warmup_assign, warmup_dataset_create, warmup_version_create
from controlplane.datasets.warmup_uploads import NO_INTENT
from controlplane.lib.errors import DomainError, NotFound
from controlplane.nodes.models import Pool
from controlplane.params.exceptions import StaleBaseVersion


@page(write_action=Action.WARMUP_WRITE)
def warmup_overview(request):
    """Datasets, each pool's warmup dataset, and the form that creates a dataset from a file or a log."""
    form = forms.WarmupDatasetCreateForm(request.POST or None, request.FILES or None)
    upload_errors: DatasetInvalid | None = None
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            dataset = warmup_dataset_create(
                actor=request.user, name=data["name"], description=data["description"], **_upload(form)
            )
        except DatasetInvalid as exc:
            upload_errors = exc
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            version = selectors.warmup_version_get(dataset=dataset, number=1)
            messages.success(request, f"Warmup dataset {dataset.name}: {_stored(version)}.")
            return redirect("dashboard:warmup-dataset", name=dataset.name)
    versions = {version.dataset_id: version for version in selectors.warmup_latest_versions()}
    datasets = [
        {"dataset": dataset, "latest": versions.get(dataset.pk)}
        for dataset in WarmupDataset.objects.select_related("created_by")
    ]
    return render(
        request,
        "datasets/warmup_overview.html",
        {
            "datasets": datasets,
            "pools": selectors.pools_warmups(),
            "form": form,
            "upload_errors": upload_errors,
            "default_top_n": DEFAULT_TOP_N,
        },
        status=400 if request.method == "POST" else 200,
    )


@page(write_action=Action.WARMUP_WRITE)
def warmup_dataset(request, name, number=None):
    """A version's counts and first messages, the dataset's versions; POST saves the next version."""
    dataset = selectors.warmup_dataset_get(name=name)
    form = None
    upload_errors: DatasetInvalid | None = None
    status = 200
    if request.method == "POST":
        form = forms.WarmupVersionForm(request.POST, request.FILES)
        status = 400
        if form.is_valid():
            try:
                version = warmup_version_create(
                    actor=request.user, dataset=dataset, base_number=form.cleaned_data["base_version"], **_upload(form)
                )
            except DatasetInvalid as exc:
                upload_errors = exc
            except StaleBaseVersion as exc:
                form.add_error(None, f"Someone saved a newer version first: {exc.message}. Nothing was stored.")
                status = 409
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, f"Saved {version}: {_stored(version)}.")
                return redirect("dashboard:warmup-version", name=name, number=version.number)
    return _render_dataset(request, dataset, number, form=form, upload_errors=upload_errors, status=status)


@require_POST
@page(write_action=Action.WARMUP_ASSIGN)
def warmup_assign(request, name):
    """Make one of the dataset's versions the warmup dataset of a pool."""
    dataset = selectors.warmup_dataset_get(name=name)
    form = forms.WarmupAssignForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            pool = Pool.objects.filter(name=data["pool"]).first()
            if pool is None:
                raise NotFound(f"pool: no pool named {data['pool']!r}")
            version = selectors.warmup_version_get(dataset=dataset, number=data["version"])
            pool_warmup_assign(actor=request.user, pool=pool, version=version, reason=data["reason"])
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, f"{pool.name} now warms up with {version}; its agents are told now.")
            return redirect("dashboard:warmup-version", name=name, number=version.number)
    number = form.cleaned_data.get("version")
    if not dataset.versions.filter(number=number).exists():
        number = None
    return _render_dataset(request, dataset, number, assign_form=form, status=400)


def _render_dataset(request, dataset, number, *, form=None, upload_errors=None, assign_form=None, status=200):
    version = selectors.warmup_version_get(dataset=dataset, number=number or dataset.latest_number)
    pools = selectors.pools_warmups()
    counts = [(label, n) for label, n in version.intent_counts.items() if n]
    most = max((n for _, n in counts), default=1)
    return render(
        request,
        "datasets/warmup_dataset.html",
        {
            "dataset": dataset,
            "version": version,
            "versions": [
                {"version": v, "pools": [p["pool"].name for p in pools if _runs(p, v)]}
                for v in selectors.warmup_versions(dataset=dataset)
            ],
            "counts": [
                {"label": label, "count": n, "width": round(100 * n / most), "is_none": label == NO_INTENT}
                for label, n in counts
            ],
            "preview": selectors.warmup_preview(version=version),
            "pools": pools,
            # A dataset's next version usually comes the way its versions came: a fresh log, or an edited file.
            "form": form or forms.WarmupVersionForm(initial={"source": version.source}),
            "upload_errors": upload_errors,
            "assign_form": assign_form or forms.WarmupAssignForm(),
            "default_top_n": DEFAULT_TOP_N,
        },
        status=status,
    )


def _runs(pool_row: dict, version) -> bool:
    assignment = pool_row["assignment"]
    return assignment is not None and assignment.version_id == version.pk


def _upload(form) -> dict:
    """The service arguments of an upload form: content, format (from the file name unless chosen), source, top_n."""
    data = form.cleaned_data
    upload = data["file"]
    if upload.size > MAX_BYTES:
        raise DomainError(f"file: {upload.size} bytes is over the limit of {MAX_BYTES} bytes (20 MiB)")
    return {
        "content": upload.read(),
        "fmt": data["format"] or ("csv" if upload.name.lower().endswith(".csv") else "jsonl"),
        "source": data["source"],
        "top_n": data["top_n"] or DEFAULT_TOP_N,
        "comment": data["comment"],
    }


def _stored(version) -> str:
    derived = version.derived_from
    if derived:
        return (
            f"the top {version.message_count} of {derived['distinct_queries']} distinct queries "
            f"in {derived['user_messages']} user messages"
        )
    return f"{version.message_count} messages stored, {version.duplicates_removed} duplicates removed"

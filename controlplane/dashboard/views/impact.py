"""Impact pages: the record list with its filters, one record, and the page of one parameter field."""

from collections import Counter
from types import SimpleNamespace

from django.http import Http404
from django.shortcuts import get_object_or_404, render

from controlplane.dashboard.access import page
from controlplane.impact import charts, conclusions, selectors
from controlplane.impact.models import ImpactRecord
from controlplane.lib.errors import InvalidField
from controlplane.nodes.models import Pool
from controlplane.params import schema
from controlplane.params.models import ParameterTemplate

RECORDS_SHOWN = 200
FILTERS = ("field", "pool", "template", "kind", "outcome", "since", "until")


@page()
def record_list(request):
    chosen = {name: request.GET.get(name, "").strip() for name in FILTERS}
    error = ""
    try:
        records = list(selectors.impact_records(**chosen)[:RECORDS_SHOWN])
    except InvalidField as exc:
        records, error = [], exc.message
    return render(
        request,
        "impact/record_list.html",
        {
            "records": records,
            "chosen": chosen,
            "error": error,
            "kinds": ImpactRecord.Kind.values,
            "outcomes": ImpactRecord.Outcome.values,
            "pools": Pool.objects.order_by("name").values_list("name", flat=True),
            "templates": ParameterTemplate.objects.order_by("name").values_list("name", flat=True),
            "fields": [spec.path for spec in schema.FIELDS],
        },
    )


@page()
def record_detail(request, pk):
    record = get_object_or_404(selectors.impact_records(), pk=pk)
    if record.kind == ImpactRecord.Kind.REPLAY_COMPARISON:
        figures = [SimpleNamespace(key=key, label=v.get("label", key)) for key, v in record.conclusions.items()]
    else:
        figures = list(conclusions.FIGURES)
    rows = [
        {
            "figure": figure,
            "before": record.before.get(figure.key) or {},
            "after": record.after.get(figure.key) or {},
            "verdict": record.conclusions.get(figure.key) or {},
            "label": ((record.conclusions.get(figure.key) or {}).get("verdict") or "unknown").replace("_", " "),
        }
        for figure in figures
    ]
    return render(request, "impact/record_detail.html", {"record": record, "rows": rows})


@page()
def field_page(request, path):
    try:
        changes = selectors.field_history(path=path)
    except InvalidField:
        raise Http404(f"no parameter field named {path[:200]!r}") from None
    pools = Counter(c.record.pool_name for c in changes)
    pool = request.GET.get("pool") or (pools.most_common(1)[0][0] if pools else "")
    if pool and pool not in pools:
        pool = pools.most_common(1)[0][0] if pools else ""
    spec = next((s for s in schema.FIELDS if s.path == path.removesuffix(selectors.CATALOG_SUFFIX)), None)
    return render(
        request,
        "impact/field_page.html",
        {
            "path": path,
            "spec": spec,
            "changes": list(reversed(changes)),
            "pools": sorted(pools),
            "pool": pool,
            "chart": charts.field_chart(path=path, pool=pool, changes=changes) if pool else None,
        },
    )

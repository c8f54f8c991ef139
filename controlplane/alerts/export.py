"""The alert rules as a Prometheus rule file and the overview as a Grafana dashboard, over `/metrics`'s series.

For teams that already run Prometheus, Alertmanager and Grafana: scrape the control plane's `/metrics`, load
these, and the same thresholds page them (each rule's warning and critical levels are two alerts).
"""

import json

import yaml

from controlplane.alerts import runbooks, signals
from controlplane.alerts.models import AlertRuleVersion

_OPERATORS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
GROUP_NAME = "controlplane-alerts"


def alert_name(rule: str, severity: str) -> str:
    """`p99-latency`, `critical` -> `P99LatencyCritical` (Prometheus alert names are identifiers)."""
    return "".join(part.capitalize() for part in rule.split("-") if part) + severity.capitalize()


def promql(version: AlertRuleVersion, threshold: float) -> str:
    """The rule's condition over the exported series; the same semantics as controlplane/alerts/evaluation.py."""
    signal = signals.SIGNALS[version.metric]
    op = _OPERATORS[version.comparison]
    if signal is signals.ENGINE_RESTARTS_10M:
        series = f"increase({signal.prom_series(version.scope)}[10m])"
    else:
        series = signal.prom_series(version.scope)
    expr = f"{series} {op} {threshold:g}"
    if signal is signals.METRICS_STALE:
        # A lost node is node-lost's page, not a second one (as in the evaluator).
        expr = f"({expr}) unless on(node) (controlplane_node_lost == 1)"
    return expr


def prometheus_rules(versions) -> dict:
    rules = []
    for version in versions:
        if not version.is_enabled:
            continue
        levels = [("warning", version.warn)]
        if version.critical is not None:
            levels.append(("critical", version.critical))
        for severity, threshold in levels:
            rule = {
                "alert": alert_name(version.rule.name, severity),
                "expr": promql(version, threshold),
            }
            if version.for_s:
                rule["for"] = f"{version.for_s}s"
            rule["labels"] = {"severity": severity, "rule": version.rule.name, "scope": version.scope}
            rule["annotations"] = {
                "summary": version.summary,
                "description": f"{_entity(version.scope)}: {version.metric} is {{{{ $value }}}} "
                f"({version.condition_text}; rule v{version.number})",
                "runbook_url": runbooks.runbook_url(version.runbook),
            }
            rules.append(rule)
    return {"groups": [{"name": GROUP_NAME, "interval": "10s", "rules": rules}]}


def _entity(scope: str) -> str:
    return {"node": "{{ $labels.node }}", "pool": "{{ $labels.pool }}", "fleet": "fleet"}[scope]


def prometheus_rules_yaml(versions) -> str:
    header = (
        "# Alert rules exported by the inference control plane (manage.py export_monitoring).\n"
        "# Series come from the control plane's /metrics; thresholds and `for` from its alert rules.\n"
    )
    return header + yaml.safe_dump(prometheus_rules(versions), sort_keys=False, allow_unicode=True, width=200)


def _panel(panel_id: int, title: str, targets: list[tuple[str, str]], *, unit: str, x: int, y: int, **extra) -> dict:
    panel = {
        "id": panel_id,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit, **extra.pop("defaults", {})}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend, "datasource": {"type": "prometheus"}}
            for i, (expr, legend) in enumerate(targets)
        ],
    }
    panel.update(extra)
    return panel


def _threshold_lines(*steps: tuple[str, float | None]) -> dict:
    return {
        "thresholds": {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]},
        "custom": {"thresholdsStyle": {"mode": "line+area"}},
    }


def grafana_dashboard(versions) -> dict:
    """The overview's panels: latency against the SLO lines, QPS, KV usage, batch efficiency with its band, ..."""
    rules = {v.rule.name: v for v in versions}
    p99 = rules.get("p99-latency")
    warn, critical = (p99.warn, p99.critical) if p99 else (1.6, 2.0)
    pool = 'pool=~"$pool"'
    panels = [
        _panel(
            1,
            "Latency percentiles (max over the pool's nodes) against the SLO lines",
            [
                (f"controlplane_pool_latency_p50_seconds{{{pool}}}", "P50 {{pool}}"),
                (f"controlplane_pool_latency_p99_seconds{{{pool}}}", "P99 {{pool}}"),
                (f"controlplane_pool_latency_p999_seconds{{{pool}}}", "P99.9 {{pool}}"),
            ],
            unit="s",
            x=0,
            y=0,
            defaults=_threshold_lines(("transparent", None), ("orange", warn), ("red", critical)),
        ),
        _panel(2, "Requests per second", [(f"controlplane_pool_requests_per_second{{{pool}}}", "{{pool}}")],
               unit="reqps", x=12, y=0),
        _panel(3, "KV-cache usage", [(f"controlplane_node_kv_cache_usage_ratio{{{pool}}}", "{{node}}")],
               unit="percentunit", x=0, y=8),
        _panel(
            4,
            "Batch efficiency (target band 65-75 %)",
            [(f"controlplane_pool_batch_efficiency_ratio{{{pool}}}", "{{pool}}")],
            unit="percentunit",
            x=12,
            y=8,
            defaults=_threshold_lines(("red", None), ("green", 0.65), ("orange", 0.75)),
        ),
        _panel(5, "Speculative-decoding acceptance",
               [(f"controlplane_pool_spec_acceptance_ratio{{{pool}}}", "{{pool}}")], unit="percentunit", x=0, y=16),
        _panel(6, "GPU memory fragmentation",
               [(f"controlplane_node_memory_fragmentation_ratio{{{pool}}}", "{{node}}")], unit="percentunit",
               x=12, y=16, defaults=_threshold_lines(("transparent", None), ("orange", 0.20), ("red", 0.35))),
        _panel(7, "Request length distribution",
               [(f"controlplane_pool_requests_by_length{{{pool}}}", "{{bucket}}")], unit="short", x=0, y=24,
               defaults={"custom": {"stacking": {"mode": "percent"}, "fillOpacity": 60}}),
        _panel(8, "Open alerts", [("sum by (rule, severity) (controlplane_alerts{state=\"firing\"})",
                                   "{{rule}} {{severity}}")], unit="short", x=12, y=24),
    ]  # fmt: skip
    return {
        "title": "Inference control plane — overview",
        "uid": "controlplane-overview",
        "tags": ["controlplane", "vllm"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "5s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
                {
                    "name": "pool",
                    "type": "query",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": "label_values(controlplane_nodes, pool)",
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                },
            ]
        },
        "panels": panels,
    }


def grafana_dashboard_json(versions) -> str:
    return json.dumps(grafana_dashboard(versions), indent=2, ensure_ascii=False) + "\n"

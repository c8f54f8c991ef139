"""Run figures and comparisons as files: JSON as stored, CSV one figure per row (spreadsheet-ready)."""

import csv
import io
import json

from controlplane.lib.errors import InvalidField
from controlplane.replays.export import FORMULA_PREFIXES

FORMATS = ("json", "csv")
SIMULATED_NOTE = "simulated: figures from the vLLM-protocol simulator, not vLLM measurements"


def check_format(value: str | None) -> str:
    fmt = value or "json"
    if fmt not in FORMATS:
        raise InvalidField("format", f"must be json or csv, got {fmt!r}")
    return fmt


def flat_figures(figures: dict, prefix: str = "") -> list[tuple[str, object, object]]:
    """(key, value, seq of the request that holds it) for every scalar figure, in the figures' own order."""
    rows = []
    for key, value in figures.items():
        if key.endswith("_seq") or key == "method":
            continue
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            rows.extend(flat_figures(value, f"{path}."))
        else:
            rows.append((path, value, figures.get(f"{key}_seq")))
    return rows


def _cell(value):
    """Text a spreadsheet would run as a formula (a run label starting with `=`, say) is quoted; numbers stay."""
    if isinstance(value, str) and value[:1] in FORMULA_PREFIXES:
        return "'" + value
    return value


def _csv(rows: list[list]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerows([_cell(value) for value in row] for row in rows)
    return buffer.getvalue()


def run_figures_export(payload: dict, fmt: str) -> str:
    """`payload`: the run figures endpoint's body (run, is_simulated, figures, latency_cdf)."""
    if fmt == "json":
        return json.dumps(payload, ensure_ascii=False, indent=2)
    rows: list[list] = [["# run", payload["run_id"], payload["label"]]]
    if payload["is_simulated"]:
        rows.append(["# " + SIMULATED_NOTE])
    rows.append(["# " + payload["figures"]["method"]])
    rows.append(["figure", "value", "request_seq"])
    rows += [
        [key, "" if value is None else value, "" if seq is None else seq]
        for key, value, seq in flat_figures(payload["figures"])
    ]
    return _csv(rows)


def comparison_export(payload: dict, fmt: str) -> str:
    """`payload`: the comparison endpoint's body (id, label, result, ...)."""
    if fmt == "json":
        return json.dumps(payload, ensure_ascii=False, indent=2)
    result = payload["result"]
    runs = result["runs"]
    base, others = runs[0], runs[1:]
    rows: list[list] = [["# comparison", payload["id"], payload["label"]]]
    if result["is_simulated"]:
        rows.append(["# " + SIMULATED_NOTE])
    rows += [["# verdict", sentence] for sentence in result["verdict"]]
    rows.append(["# method", result["method"]["percentiles"], result["method"]["bootstrap"]])
    header = ["figure", "label", "unit", "better"] + [run["label"] for run in runs]
    for run in others:
        header += [
            f"{run['label']} - {base['label']}",
            "relative",
            "ci_low",
            "ci_high",
            "repeat_spread",
            "beyond_noise",
        ]
    rows.append(header)
    for figure in result["figures"]:
        row = [figure["key"], figure["label"], figure["unit"], figure["better"]]
        row += ["" if v is None else v for v in figure["values"]]
        for cmp in figure["comparisons"]:
            ci = cmp["ci"] or ["", ""]
            row += [
                "" if cmp["diff"] is None else cmp["diff"],
                "" if cmp["relative"] is None else cmp["relative"],
                ci[0],
                ci[1],
                "" if cmp["spread"] is None else cmp["spread"],
                "" if cmp["beyond_noise"] is None else ("yes" if cmp["beyond_noise"] else "no"),
            ]
        rows.append(row)
    return _csv(rows)

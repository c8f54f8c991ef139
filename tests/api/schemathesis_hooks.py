"""Schemathesis hooks of the fuzz test (loaded through SCHEMATHESIS_HOOKS).

Random path parameters almost always name nothing (404), which would leave every handler past its lookup untested.
Each path parameter with known values (`FUZZ_KNOWN_PATH_VALUES`, found by the test) becomes "any value the schema
allows, or one of these", so every phase draws both existing objects and random names.
"""

import json
import os
from pathlib import Path

import schemathesis

_KNOWN = (
    json.loads(Path(os.environ["FUZZ_KNOWN_PATH_VALUES"]).read_text()) if "FUZZ_KNOWN_PATH_VALUES" in os.environ else {}
)


@schemathesis.hook
def before_load_schema(context, raw_schema: dict) -> None:
    for path, item in raw_schema.get("paths", {}).items():
        known = _KNOWN.get(path, {})
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            for parameter in operation.get("parameters", []):
                values = known.get(parameter.get("name")) if parameter.get("in") == "path" else None
                if values:
                    # Existing objects first: generation leans towards the first choice.
                    parameter["schema"] = {"anyOf": [{"enum": values}, parameter["schema"]]}


@schemathesis.hook
def filter_failure(context, failure, case, response) -> bool:
    """Twisted, under daphne, answers a multipart body it cannot parse (e.g. one with no part at all) with a bare 400
    before Django sees the request: that is the HTTP server's answer, not the API's."""
    multipart = str(case.media_type or "").startswith("multipart/")
    return not (multipart and response.status_code == 400 and not response.content)

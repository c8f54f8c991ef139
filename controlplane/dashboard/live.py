"""Where a live page's event numbers start (controlplane/lib/event_sequence.py): read before the page's state, so
every event the page must still receive has a later number (static/js/live.js)."""

import json

from controlplane.lib import event_sequence


def live_numbers(*groups: str) -> str:
    """The numbers taken so far in `groups`, as the JSON a page's script tag carries in `data-live-seq`."""
    return json.dumps(event_sequence.current_numbers(list(groups)))

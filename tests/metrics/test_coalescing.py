"""The per-connection coalescer of live chart samples: newest per node, pool and fleet once the window is full."""

import pytest

from controlplane.metrics import coalescing
from controlplane.metrics.coalescing import LiveSampleCoalescer, receipt_seq


def event(scope: str, name: str, qps: float) -> dict:
    return {"type": "metrics.sample", "scope": scope, "name": name, "t": qps, "values": {"qps": qps}}


def test_within_the_window_every_sample_goes_out_in_order():
    c = LiveSampleCoalescer(window=3)
    c.offer(event("fleet", "fleet", 1.0))
    c.offer(event("pool", "prod", 2.0))
    frames = c.frames_ready()
    assert [(f["name"], f["seq"], f["thinned"]) for f in frames] == [("fleet", 1, 0), ("prod", 2, 0)]
    assert c.in_flight == 2 and c.pending == 0


def test_a_full_window_keeps_only_the_newest_sample_per_key_and_counts_the_rest():
    c = LiveSampleCoalescer(window=2)
    for qps in (1.0, 2.0):
        c.offer(event("fleet", "fleet", qps))
        assert len(c.frames_ready()) == 1
    for qps in range(3, 13):  # the browser confirms nothing: ten more fleet samples and two nodes' samples
        c.offer(event("fleet", "fleet", float(qps)))
        c.offer(event("node", f"gpu-{qps % 2}", float(qps)))
        assert c.frames_ready() == []
    assert c.pending == 3  # fleet, gpu-0, gpu-1
    assert c.thinned == 9 + 8
    c.confirm(2)
    frames = c.frames_ready()
    assert [(f["name"], f["values"]["qps"]) for f in frames] == [("fleet", 12.0), ("gpu-1", 11.0)]
    assert [f["seq"] for f in frames] == [3, 4]
    assert all(f["thinned"] == 17 for f in frames)
    c.confirm(4)
    assert [(f["name"], f["values"]["qps"], f["seq"]) for f in c.frames_ready()] == [("gpu-0", 12.0, 5)]


def test_receipts_beyond_what_was_sent_or_going_backwards_open_nothing():
    c = LiveSampleCoalescer(window=1)
    c.offer(event("fleet", "fleet", 1.0))
    assert len(c.frames_ready()) == 1
    c.confirm(10**9)  # a frame never sent
    assert c.confirmed == 1
    c.offer(event("fleet", "fleet", 2.0))
    assert [f["seq"] for f in c.frames_ready()] == [2]
    c.confirm(1)  # an old receipt
    c.offer(event("fleet", "fleet", 3.0))
    assert c.frames_ready() == [] and c.in_flight == 1


def test_the_process_counters_follow_every_connection():
    before = dict(coalescing.counters)
    c = LiveSampleCoalescer(window=1)
    for qps in (1.0, 2.0, 3.0):
        c.offer(event("node", "gpu-1", qps))
        c.frames_ready()
    assert coalescing.counters["live_samples_sent"] - before.get("live_samples_sent", 0) == 1
    assert coalescing.counters["live_samples_thinned"] - before.get("live_samples_thinned", 0) == 1


@pytest.mark.parametrize(
    ("message", "seq"),
    [
        ({"type": "metrics.received", "seq": 4}, 4),
        ({"type": "metrics.received", "seq": 0}, 0),
        ({"type": "metrics.received", "seq": -1}, None),
        ({"type": "metrics.received", "seq": True}, None),
        ({"type": "metrics.received", "seq": 2.5}, None),
        ({"type": "metrics.received", "seq": "4"}, None),
        ({"type": "metrics.received"}, None),
        ({"type": "other", "seq": 4}, None),
        ([4], None),
        ("4", None),
    ],
)
def test_receipt_seq_accepts_only_a_well_formed_receipt(message, seq):
    assert receipt_seq(message) == seq


def test_a_window_below_one_is_refused():
    with pytest.raises(ValueError, match="window"):
        LiveSampleCoalescer(window=0)

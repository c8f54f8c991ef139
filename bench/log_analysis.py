"""Conversation-log analysis: throughput (conversations/s) and peak memory at N and 10N conversations.

Each size runs in a fresh process (so its peak RSS is its own) on a synthetic log shaped like the field report
(controlplane/convlogs/synthetic.py). Baselines measured in the same run:
- throughput: only reading the log (LogReader: decoding, JSON, validation, grouping), without classifying,
  matching patterns or counting;
- memory: a process that loads the same code and the intent classifier and reads nothing.
Memory must stay flat as the log grows: the 10N/N ratio of peak RSS above the baseline is printed.
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

N = 10_000


def measure(mode: str, path: str) -> dict:
    """In this process: `mode` is "idle", "read" or "analyse"."""
    import django

    django.setup()
    from controlplane.convlogs.analysis import LogAnalyser
    from controlplane.convlogs.reader import LogReader
    from controlplane.convlogs.suggestions import suggest
    from engine_node.policy.intent import IntentClassifier
    from engine_node.policy.rules import Policy

    policy = Policy({}, {"whitelists": {"legal": ["legal", "legal_policy"]}}, IntentClassifier.load())
    conversations = 0
    started = time.perf_counter()
    if mode == "read":
        for _ in LogReader(path):
            conversations += 1
    elif mode == "analyse":
        analyser = LogAnalyser(policy)
        for conversation in LogReader(path):
            analyser.add(conversation)
        analyser.result()
        suggest(analyser)
        conversations = analyser.conversations
    seconds = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"conversations": conversations, "seconds": seconds, "peak_mib": peak_kib / 1024}


def run(mode: str, path: str) -> dict:
    output = subprocess.run(
        [sys.executable, __file__, "--one", mode, path], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    import django

    django.setup()
    from controlplane.convlogs.synthetic import write_log

    with tempfile.TemporaryDirectory() as tmp:
        idle = run("idle", "")
        rows = []
        for count in (N, 10 * N):
            path = write_log(Path(tmp) / f"log-{count}.jsonl", count, seed=1)
            size_mib = path.stat().st_size / (1 << 20)
            read = run("read", str(path))
            analysed = run("analyse", str(path))
            rows.append((count, size_mib, read, analysed))
    header = ("conversations", "file", "analysis", "read only", "ratio", "peak RSS", "over idle")
    print("{:>13} {:>9} {:>13} {:>13} {:>6} {:>9} {:>10}".format(*header))
    for count, size_mib, read, analysed in rows:
        rate = analysed["conversations"] / analysed["seconds"]
        read_rate = read["conversations"] / read["seconds"]
        print(
            f"{count:>13} {size_mib:>6.1f} MiB {rate:>8.0f} conv/s {read_rate:>8.0f} conv/s {read_rate / rate:>5.1f}x"
            f" {analysed['peak_mib']:>5.0f} MiB {analysed['peak_mib'] - idle['peak_mib']:>6.1f} MiB"
        )
    small, large = rows[0][3]["peak_mib"], rows[1][3]["peak_mib"]
    print(f"idle process (code + classifier loaded, nothing read): {idle['peak_mib']:.0f} MiB peak RSS")
    print("ratio: analysis time per conversation against reading only (decode, JSON, validation, grouping)")
    print(f"peak RSS of the analysis, 10N / N: {large / small:.2f}x (flat is 1.00x; the log grew 10x)")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        print(json.dumps(measure(sys.argv[2], sys.argv[3])))
    else:
        main()

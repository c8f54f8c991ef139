"""Comparing two replay runs of 100,000 requests each (every figure, 1,000 bootstrap resamples per figure), against
baselines measured in the same run:

- one literal bootstrap resample of the P99 (draw 100,000 requests with replacement, sort): what each of the 1,000
  resamples of each figure would cost without the exact order-statistic and binomial draws of noise.py;
- sorting the run's 100,000 latencies once (the floor any percentile costs).

Run: .venv/bin/python bench/replay_comparison.py (no database: the comparison is a pure function of the records).
"""

import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controlplane.replays.comparison import RunInput, SloLines, compare_runs  # noqa: E402
from controlplane.replays.figures import nearest_rank  # noqa: E402

N = 100_000
INTENTS = ("order_status", "coupon", "refund", "logistics", "product_info", "payment", "account", "complaint", "other")


def synthetic_run(seed: int, median: float) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for seq in range(N):
        failed = rng.random() < 0.01
        e2e = rng.lognormvariate(0, 0.45) * median
        rounds = 0 if failed else rng.choice((0, 0, 0, 1))
        rows.append(
            {
                "seq": seq,
                "intent": INTENTS[seq % len(INTENTS)],
                "status_code": rng.choice((429, 503)) if failed else 200,
                "ok": not failed,
                "sent_at": seq / 53.0,
                "e2e_s": 0.002 if failed else e2e,
                "ttft_s": None if failed else e2e / 9,
                "reply_tokens": 0 if failed else rng.randint(30, 256),
                "continuation_rounds": rounds,
                "first_round_s": None if failed else (e2e * 0.6 if rounds else e2e),
            }
        )
    return rows


def timed(func) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def main() -> None:
    a, b = synthetic_run(1, 1.2), synthetic_run(2, 0.55)
    runs = [RunInput(run_id=1, label="defaults", records=a), RunInput(run_id=2, label="tuned", records=b)]
    slo = SloLines(warn_s=1.6, critical_s=2.0)
    result = {}
    measured = timed(lambda: result.update(compare_runs(runs, slo=slo, resamples=1000)))
    figures = len(result["figures"])
    latencies = [r["e2e_s"] for r in a if r["ok"]]
    rng = random.Random(0)
    k = nearest_rank(len(latencies), 99)
    literal_one = min(timed(lambda: sorted(rng.choices(latencies, k=len(latencies)))[k - 1]) for _ in range(3))
    sort_once = min(timed(lambda: sorted(latencies)) for _ in range(3))
    literal_all = literal_one * 1000 * figures * 2
    print(f"compare 2 runs x {N:,} requests, {figures} figures x 1,000 resamples: {measured:.2f} s")
    print(f"  vs one literal P99 resample ({literal_one * 1000:.1f} ms): {measured / literal_one:.0f}x one resample;")
    print(f"     a literal bootstrap of every figure: ~{literal_all / 60:.0f} min ({literal_all / measured:.0f}x)")
    print(f"  vs sorting one run's latencies once ({sort_once * 1000:.1f} ms): {measured / sort_once:.0f}x")
    print(f"  verdict: {result['verdict'][0]}")


if __name__ == "__main__":
    main()

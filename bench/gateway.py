"""What the engine-node gateway's request policy costs, each figure against a baseline measured in the same run.

0. Versions (bench/gateway_versions.py): the agent of `--baseline` (a revision, default df22adb) and this tree's,
   alternating: CPU per request (JSON, SSE), latency added at `--qps`, idle CPU share, /healthz while clients with a
   valid key send maximum-size bodies.
1. HTTP, gateway vs direct: one stand-alone agent (`python -m engine_node --backend simulator`, no control plane, the
   template defaults and a policy bundle written to its state dir) runs its simulator child on an engine port this
   script picks (`--engine-port`), so the direct baseline calls *the same simulator process* the gateway forwards to.
   Non-streaming chat requests, a zh/en shop-message mix from engine_node/policy/data/intents.jsonl:
   - 50 QPS open loop (Poisson arrivals, the same schedule and messages for both targets): p50/p99 end-to-end
     latency direct and through the gateway, the gateway's added latency and the ratio, for JSON replies and for
     SSE streams (read to their end), and the agent process's CPU time per gateway request (from /proc: the
     gateway's own work, not the simulator's), raw and net of what the agent spends while the direct slices run;
   - saturation, closed loop with C clients (64), and with as many as the gateway lets through to the engine
     (4 x batch.max_size = 32): throughput direct vs through the gateway, and latency.
   Direct and gateway slices alternate (D G, G D, ...) so drift and noisy neighbours hit both alike. Gateway
   requests carry a client key (Authorization: Bearer), granted through the policy bundle the agent starts with.
   Like for like: the direct request body is what the gateway forwards (its tier temperature and max_tokens, worked
   out by the same Policy in-process and checked against the gateway's X-Policy-* headers), and replies (8-160
   tokens) stay under the 256-token first-turn cap, so the gateway never adds continuation rounds (counted anyway).
   With the template's defaults the batcher holds a lone request up to batch.timeout_ms for a partner while others
   are in flight, by design; a second agent with batch.min_size=1 shows the gateway without that wait.
2. Policy decision time per message, in-process, over every message of intents.jsonl: Policy.decide (classification
   and rules), the classifier alone and the rules alone (a Policy without classifier: strict regexes over the system
   prompt and the message, precedence, max_tokens); per message the best of the passes, so other processes' noise
   stays out. Baseline: json.loads of the chat request body carrying the same message, work every request costs the
   gateway before any policy runs.
3. Classifier accuracy on the separately written held-out set the shipped model is judged by (never trained on),
   with per-label recall; baseline: always answering the training set's most common label. Calibration and the
   comparison with the previous model: bench/intent_quality.py.

Run from the repository root:
`.venv/bin/python bench/gateway.py [--duration S] [--parts versions,http,policy,accuracy]`.
Every process it starts is killed on exit, Ctrl-C or error (the agent and its simulator run in their own sessions).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


from gateway_agent import BUNDLE, MODEL, REPLY_MAX_TOKENS, SYSTEM_PROMPT  # noqa: E402
from gateway_load import Side, percentile, run_http  # noqa: E402
from gateway_versions import print_versions, run_versions  # noqa: E402

from controlplane.params import schema  # noqa: E402
from engine_node import openai_api  # noqa: E402
from engine_node.policy.dataset import dataset_sha256, load_examples, load_held_out  # noqa: E402
from engine_node.policy.intent import IntentClassifier  # noqa: E402
from engine_node.policy.rules import Policy  # noqa: E402
from engine_node.policy.train_intent import evaluate  # noqa: E402

# --- policy decision time -----------------------------------------------------------------------------------------


def run_policy(passes: int) -> dict:
    content = schema.defaults()
    classifier = IntentClassifier.load()
    policy = Policy(content, BUNDLE, classifier)
    rules_only = Policy(content, BUNDLE, None)
    texts = [example.text for example in load_examples()]
    bodies = [
        openai_api.compact_json(
            {
                "model": MODEL,
                "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}],
                "temperature": 1.0,
            }
        ).encode("utf-8")
        for text in texts
    ]
    prompt_tokens = [openai_api.estimate_tokens(SYSTEM_PROMPT + text) + 8 for text in texts]
    # The strict patterns read every message, the system prompt too, as in the gateway.
    conversations = [(SYSTEM_PROMPT, text) for text in texts]
    keys = ("decide", "classify", "rules", "json")
    # Per message and row, the best of the passes: what the work costs, without the preemptions and cache misses other
    # processes on this shared machine cause (bench/run.py's convention, per message instead of per loop).
    best = {key: [float("inf")] * len(texts) for key in keys}
    clock = time.perf_counter_ns
    rng = random.Random(5)
    order = list(range(len(texts)))
    work = {
        "json": lambda i: json.loads(bodies[i]),
        "classify": lambda i: policy.classify(texts[i]),
        "rules": lambda i: rules_only.decide(texts[i], prompt_tokens=prompt_tokens[i], message_texts=conversations[i]),
        "decide": lambda i: policy.decide(texts[i], prompt_tokens=prompt_tokens[i], message_texts=conversations[i]),
    }
    for _ in range(passes):
        # One sweep per row over the messages in a fresh order: every call follows a call of the same code on another
        # message, as in the gateway, where one request's buckets are not in the CPU cache for the next one.
        for key in keys:
            rng.shuffle(order)
            run, row = work[key], best[key]
            for i in order:
                t0 = clock()
                run(i)
                elapsed = clock() - t0
                if elapsed < row[i]:
                    row[i] = elapsed
    timings = {key: [ns / 1000 for ns in values] for key, values in best.items()}
    # What perf_counter_ns itself adds to every row, for the reader to subtract if it matters.
    empty = []
    for _ in range(20000):
        t0 = clock()
        empty.append(clock() - t0)
    return {"timings": timings, "n": len(texts), "passes": passes, "timer_us": statistics.median(empty) / 1000}


# --- classifier accuracy ------------------------------------------------------------------------------------------


def run_accuracy(floor: float) -> dict:
    classifier = IntentClassifier.load()
    train_set, held_out = load_examples(), load_held_out()
    result = evaluate(classifier, held_out)
    majority_label, _ = Counter(example.label for example in train_set).most_common(1)[0]
    majority = sum(example.label == majority_label for example in held_out) / len(held_out)
    confident = correct = 0
    for example in held_out:
        intent = classifier.classify(example.text)
        if intent.confidence >= floor:
            confident += 1
            correct += intent.label == example.label
    recall_support = Counter(example.label for example in held_out)
    return {
        "result": result,
        "majority_label": majority_label,
        "majority": majority,
        "n_train": len(train_set),
        "coverage": confident / len(held_out),
        "accuracy_confident": correct / confident if confident else float("nan"),
        "floor": floor,
        "support": recall_support,
        "model_split": classifier.meta.get("split"),
        "model_data_matches": classifier.meta.get("training_set_sha256") == dataset_sha256(),
        "model_n_train": classifier.meta.get("n_train"),
    }


# --- report -------------------------------------------------------------------------------------------------------


def report(http: tuple[dict, dict] | None, policy: dict | None, accuracy: dict | None, args) -> None:
    cores = os.cpu_count()
    print()
    print(f"== engine-node gateway benchmark ({cores} CPU cores, shared by the load generator, the gateway and the")
    print("   simulator; other processes on the machine add noise: compare ratios, not absolute figures)")
    if http:
        print_http(http, args)
    if policy:
        print_policy(policy)
    if accuracy:
        print_accuracy(accuracy)


def print_http(http: tuple[dict, dict], args) -> None:
    levels, caps = http
    print()
    print("HTTP chat completions (JSON, and SSE where marked); direct = the agent's own simulator child on its engine")
    print(f"port (the process the gateway forwards to); {args.rounds} alternating slices per target and load level")
    print(f"{'':44} {'direct':>10} {'gateway':>10} {'added':>10} {'ratio':>7}")
    notes = []
    for (label, kind, load), level in levels.items():
        d, g = level.direct, level.gateway
        if kind.startswith("open"):
            head = f"{load:g} QPS{', SSE' if kind == 'open-sse' else ''}, {label}:"
            latency_rows(head, d, g)
            raw, net, idle = level.cpu_ms_per_request()
            print(f"{head + ' agent CPU per gateway request':<66} {raw:>7.2f} ms (net of idle {net:.2f} ms)")
            notes.append(
                f"{head} agent CPU {1000 * level.cpu['gateway_cpu_s'] / level.cpu['gateway_wall_s']:.0f} ms/s over "
                f"the gateway slices ({len(g.samples)} requests), {idle:.0f} ms/s over the direct ones (sampling, "
                f"engine scrapes); net = raw minus the latter rate"
            )
            c = level.counters
            waits = c["engine_node_admission_queue_wait_seconds_count"]
            batches = c["engine_node_admission_batch_size_count"]
            decisions = c["engine_node_policy_decision_seconds_count"]
            if c["scrape_failures"] or not waits:
                inside = f"gateway's counters unavailable ({c['scrape_failures']:.0f} /metrics scrapes failed)"
            else:
                inside = (
                    f"gateway admission wait mean "
                    f"{1000 * c['engine_node_admission_queue_wait_seconds_sum'] / waits:.1f} ms, "
                    f"batch size mean {c['engine_node_admission_batch_size_sum'] / batches:.2f}, "
                    f"policy decision mean {1e6 * c['engine_node_policy_decision_seconds_sum'] / decisions:.0f} us "
                    f"(the gateway's own histograms)"
                )
            notes.append(
                f"{head} {len(g.ok)}/{len(g.samples)} gateway and {len(d.ok)}/{len(d.samples)} "
                f"direct answered 200; {inside}; load generator late by p99 "
                f"{1000 * percentile([s.lag_s for s in d.samples + g.samples], 0.99):.1f} ms"
            )
        else:
            head = f"{load:g} clients, {label}:"
            dt, gt = d.throughput, g.throughput
            print(f"{head + ' req/s':<44} {dt:>10.1f} {gt:>10.1f} {gt - dt:>+10.1f} {gt / dt if dt else 0:>6.2f}x")
            latency_rows(head, d, g)
            if load > caps[label]:
                notes.append(
                    f"{load:g} clients: the gateway releases at most {caps[label]} requests to the engine at once "
                    f"(4 x batch.max_size) and queues the rest; direct, all {load:g} share the engine's batch "
                    f"(max_num_seqs {schema.defaults()['engine']['max_num_seqs']})"
                )
    samples = list(levels.values())
    via_gateway = [s for level in samples for s in level.gateway.ok]
    tokens_d = [s.completion_tokens for level in samples for s in level.direct.ok]
    tokens_g = [s.completion_tokens for s in via_gateway]
    rounds = sum(s.continuation_rounds for s in via_gateway)
    mismatches = sum(s.policy_mismatch for s in via_gateway)
    errors = Counter()
    for level in samples:
        errors.update({f"direct {k}": v for k, v in level.direct.errors.items()})
        errors.update({f"gateway {k}": v for k, v in level.gateway.errors.items()})
    print(
        f"like for like: direct bodies carry the gateway's temperature and max_tokens (differing from its X-Policy-* "
        f"headers: {mismatches} of {len(via_gateway)}); replies {statistics.fmean(tokens_d):.1f} tokens direct, "
        f"{statistics.fmean(tokens_g):.1f} via the gateway, all under its 256-token cap (longest {REPLY_MAX_TOKENS}); "
        f"continuation rounds added by the gateway: {rounds}; errors: {dict(errors) or 'none'}"
    )
    for note in notes:
        print(f"- {note}")


def latency_rows(head: str, direct: Side, gateway: Side) -> None:
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        dv, gv = direct.latency_ms(q), gateway.latency_ms(q)
        print(f"{head + ' latency ' + name:<44} {dv:>7.1f} ms {gv:>7.1f} ms {gv - dv:>+7.1f} ms {gv / dv:>6.2f}x")


def print_policy(policy: dict) -> None:
    t = policy["timings"]
    base = statistics.fmean(t["json"])
    print()
    print(
        f"policy decision per message, in-process, {policy['n']} messages, each the best of {policy['passes']} passes "
        f"(timer overhead {policy['timer_us'] * 1000:.0f} ns included in every row)"
    )
    print(f"{'':44} {'p50':>9} {'p99':>9} {'mean':>9} {'mean / baseline':>16}")
    rows = [
        ("Policy.decide (classification + rules)", "decide"),
        ("  classification (IntentClassifier)", "classify"),
        ("  rules (regexes, precedence, max_tokens)", "rules"),
        ("baseline: json.loads of the request body", "json"),
    ]
    for name, key in rows:
        values = t[key]
        mean = statistics.fmean(values)
        print(
            f"{name:<44} {percentile(values, 0.5):>6.1f} us {percentile(values, 0.99):>6.1f} us "
            f"{mean:>6.1f} us {mean / base:>15.1f}x"
        )


def print_accuracy(acc: dict) -> None:
    result = acc["result"]
    print()
    print(
        f"intent classifier (shipped model, trained on the '{acc['model_split']}' split, "
        f"n_train {acc['model_n_train']}) on the separately written held-out set: n={result['n']}"
    )
    if not acc["model_data_matches"]:
        print("  WARNING: the shipped model was not trained on this dataset: its figures may not be reproducible")
    ratio = result["accuracy"] / acc["majority"]
    print(f"{'accuracy':<44} {result['accuracy']:>9.4f}")
    print(
        f"{'baseline: majority class (' + acc['majority_label'] + ')':<44} {acc['majority']:>9.4f}   ratio {ratio:.1f}x"
    )
    print(
        f"{'at the confidence floor ' + format(acc['floor'], 'g') + ': coverage':<44} {acc['coverage']:>9.4f}   "
        f"accuracy of those {acc['accuracy_confident']:.4f}"
    )
    print("per-label recall (held-out support):")
    for label, scores in result["per_label"].items():
        print(f"  {label:<26} {scores['recall']:.3f}  ({acc['support'][label]})")


def interrupted(signum, frame) -> None:
    """SIGTERM ends the run as Ctrl-C does: through the finally blocks that stop every agent."""
    raise KeyboardInterrupt


# --- main ---------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=12, help="seconds per target and load level (default 12)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating slices the duration is cut into")
    parser.add_argument("--qps", type=float, default=50, help="open-loop arrival rate (default 50)")
    parser.add_argument("--concurrency", type=int, default=64, help="closed-loop clients at saturation (default 64)")
    parser.add_argument("--passes", type=int, default=3, help="passes over the dataset for the policy timing")
    parser.add_argument("--seed", type=int, default=7, help="seed of the message sample, arrivals and the simulator")
    parser.add_argument("--gateway-port", type=int, default=0, help="first gateway port (0: free ports)")
    parser.add_argument("--engine-port", type=int, default=0, help="first simulator port (0: free ports)")
    parser.add_argument("--skip-no-batch-wait", action="store_true", help="skip the second agent with batch.min_size=1")
    parser.add_argument("--parts", default="versions,http,policy,accuracy", help="any of versions,http,policy,accuracy")
    parser.add_argument("--baseline", default="df22adb", help="the revision 'before' runs from (versions part)")
    parser.add_argument("--versions-rounds", type=int, default=2, help="alternating rounds per version (default 2)")
    parser.add_argument("--versions-slice", type=float, default=4, help="seconds per slice (versions part)")
    parser.add_argument("--versions-clients", type=int, default=16, help="closed-loop clients (versions part)")
    parser.add_argument("--hostile-clients", type=int, default=4, help="clients sending maximum-size bodies")
    parser.add_argument("--idle-s", type=float, default=10, help="seconds of idle CPU measured (versions part)")
    parser.add_argument("--keep", action="store_true", help="keep the agents' state dirs and logs")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if unknown := parts - {"versions", "http", "policy", "accuracy"}:
        parser.error(f"--parts: unknown {sorted(unknown)}")
    if args.duration <= 0 or args.rounds < 1 or args.qps <= 0 or args.concurrency < 1:
        parser.error("--duration, --qps must be positive; --rounds, --concurrency at least 1")

    signal.signal(signal.SIGTERM, interrupted)
    started = time.perf_counter()
    accuracy = policy = http = versions = None
    if "accuracy" in parts:
        print("classifier accuracy on the held-out split ...", flush=True)
        accuracy = run_accuracy(schema.defaults()["intent"]["confidence_floor"])
    if "policy" in parts:
        print(f"policy decision time, {args.passes} passes over the dataset ...", flush=True)
        gc.collect()
        policy = run_policy(args.passes)
    work = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    try:
        if "versions" in parts:
            print(f"the gateway before ({args.baseline}) and after ...", flush=True)
            versions = run_versions(args, work)
        if "http" in parts:
            print("gateway vs direct over HTTP ...", flush=True)
            http = run_http(args, work)
    except RuntimeError as exc:
        raise SystemExit(f"bench/gateway.py: {exc}") from None
    finally:
        if args.keep:
            print(f"  logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(http, policy, accuracy, args)
    if versions:
        print_versions(versions, args)
    print(f"\n(whole benchmark: {time.perf_counter() - started:.0f}s)")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("\nbench/gateway.py: interrupted; the processes it started are stopped", file=sys.stderr)
        sys.exit(130)

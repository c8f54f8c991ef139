"""The replay plan: selection (all, sample, top-N), requests per user turn, pacing, caps, shares, nodes."""

import itertools
import statistics

from controlplane.replays import plan
from controlplane.replays.plan import Spec
from tests.replays.logs import conversation


def log():
    return [
        conversation("a", 100.0, "order?", "and the refund?"),
        conversation("b", 101.0, "coupon"),
        conversation("c", 103.0, "Order?"),  # same first message as "a" once normalised
        conversation("d", None, "order?"),
        conversation("e", 110.0, "coupon"),
        conversation("f", 111.0, "order?"),
    ]


def test_every_user_turn_is_one_request_carrying_the_logged_history():
    requests = plan.plan(log()[:1], Spec(qps=10, arrival="uniform"))
    assert [(r.conversation_id, r.turn) for r in requests] == [("a", 0), ("a", 1)]
    assert [m["role"] for m in requests[1].messages] == ["user", "assistant", "user"]
    assert requests[1].messages[-1]["content"] == "and the refund?"


def test_top_n_takes_the_most_frequent_first_messages_most_frequent_first():
    chosen = plan.select(log(), Spec(selection="top", top_n=2))
    # "order?" x4 (case and spacing normalised), "coupon" x2: one conversation each, the first seen.
    assert [c.id for c in chosen] == ["a", "b"]


def test_a_sample_is_reproducible_from_its_seed_and_keeps_log_order():
    conversations = [conversation(f"c{i}", float(i), f"q{i}") for i in range(200)]
    first = plan.select(conversations, Spec(selection="sample", sample_size=20, sample_seed=5))
    again = plan.select(conversations, Spec(selection="sample", sample_size=20, sample_seed=5))
    other = plan.select(conversations, Spec(selection="sample", sample_size=20, sample_seed=6))
    assert [c.id for c in first] == [c.id for c in again] != [c.id for c in other]
    assert len(first) == 20
    assert [int(c.id[1:]) for c in first] == sorted(int(c.id[1:]) for c in first)


def test_uniform_pacing_spaces_requests_by_one_over_qps():
    requests = plan.plan(log(), Spec(qps=4, arrival="uniform"))
    assert [r.at for r in requests[:4]] == [0, 0.25, 0.5, 0.75]


def test_poisson_pacing_has_the_asked_mean_rate_and_the_same_schedule_for_every_share():
    many = [conversation(f"c{i}", None, "q") for i in range(4000)]
    requests = plan.plan(many, Spec(qps=200, seed=3, duration_cap_s=100))
    gaps = [b.at - a.at for a, b in itertools.pairwise(requests)]
    assert abs(statistics.mean(gaps) - 1 / 200) < 0.0003
    assert abs(statistics.stdev(gaps) - 1 / 200) < 0.0005  # exponential gaps: stdev equals the mean
    assert plan.plan(many, Spec(qps=200, seed=3, duration_cap_s=100)) == requests


def test_log_times_keep_the_logs_offsets_scaled_and_space_later_turns():
    requests = plan.plan(log(), Spec(pacing="log_times", time_scale=0.5, turn_gap_s=4))
    at = {(r.conversation_id, r.turn): r.at for r in requests}
    assert at[("a", 0)] == 0 and at[("a", 1)] == 2.0  # 4 s turn gap, halved
    assert at[("b", 0)] == 0.5 and at[("c", 0)] == 1.5
    assert at[("d", 0)] == at[("c", 0)]  # no start time: follows the conversation before it
    assert at[("f", 0)] == 5.5
    assert [r.seq for r in requests] == list(range(len(requests)))
    assert [r.at for r in requests] == sorted(r.at for r in requests)


def test_the_duration_cap_and_the_request_cap_cut_the_plan():
    many = [conversation(f"c{i}", None, "q") for i in range(1000)]
    assert len(plan.plan(many, Spec(qps=10, arrival="uniform", duration_cap_s=5))) == 51  # 0.0 .. 5.0
    assert len(plan.plan(many, Spec(qps=10, arrival="uniform", duration_cap_s=500, max_requests=30))) == 30


def test_shares_split_the_plan_evenly_and_cover_it_once():
    many = [conversation(f"c{i}", None, "q") for i in range(1000)]
    requests = plan.plan(many, Spec(qps=250, arrival="uniform", duration_cap_s=10))
    shares = plan.shares_for(requests, per_share_qps=100, max_shares=16)
    assert shares == 3
    parts = [plan.share_of(requests, index=i, shares=shares) for i in range(shares)]
    assert sorted(r.seq for part in parts for r in part) == [r.seq for r in requests]
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert plan.shares_for(requests, per_share_qps=10, max_shares=16) == 16


def test_nodes_take_requests_in_turn():
    assert [plan.node_for(seq, ["n1", "n2", "n3"]) for seq in range(5)] == ["n1", "n2", "n3", "n1", "n2"]


def test_conversations_without_a_user_message_are_skipped():
    from controlplane.convlogs.reader import LogConversation, LogMessage

    silent = LogConversation("s", 1.0, [LogMessage("assistant", "hello")])
    assert plan.plan([silent, *log()[:1]], Spec(qps=1)) and plan.select([silent], Spec()) == []


def test_a_ladder_paces_each_step_at_its_own_rate_back_to_back():
    many = [conversation(f"c{i}", None, "q") for i in range(2000)]
    uniform = plan.plan(many, Spec(pacing="ladder", qps_steps=(2, 4), step_s=1, arrival="uniform", duration_cap_s=2))
    assert [r.at for r in uniform] == [0, 0.5, 1, 1.25, 1.5, 1.75, 2.0]
    spec = Spec(pacing="ladder", qps_steps=(50, 150, 300), step_s=4, seed=5, duration_cap_s=12)
    requests = plan.plan(many, spec)
    counts = [sum(1 for r in requests if step * 4 <= r.at < (step + 1) * 4) for step in range(3)]
    # Poisson counts: 200, 600 and 1,200 expected; five standard deviations either way.
    for count, expected in zip(counts, (200, 600, 1200), strict=True):
        assert abs(count - expected) < 5 * expected**0.5, counts
    assert plan.plan(many, spec) == requests and requests[-1].at <= 12

"""Memory cleanup on agents running the simulator, against the real control plane (daphne, Redis, Postgres).

The simulator's KV cache is tiny (16 blocks) and its replies vary in length, so steady mixed traffic strands
blocks and its (simulated) fragmentation passes 35 % within seconds. An SRE's cleanup brings it back below with
no failed request; the automatic trigger on two nodes of one pool never cleans both at once; a cleanup whose
drain outlasts cleanup.max_duration_s resumes the node, reports failure, and the request it waited for finishes.
"""

import itertools
import json
import re
import threading
import urllib.request

import pytest

from controlplane.accounts.models import User
from controlplane.accounts.roles import Role
from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import EngineNode, NodeCommand, Pool
from controlplane.nodes.realtime import config_to_nodes
from controlplane.nodes.services.engine_nodes import node_command_request, node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from tests.engine_node.fleet import AgentProcess, Traffic, engine_url, start_agents, stop_agents, wait_until
from tests.engine_node.shared_fleet import SharedRows, module_database
from tests.live_server import Daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]

FRAGMENTING_PROFILE = """
latency:
  time_scale: 0.05
reply_length:
  median: 10
  sigma: 0.6
  min: 2
  max: 32
kv_cache:
  block_size: 16
  bytes_per_token: 1024
  kv_cache_bytes: 300000
"""
# The 16-block cache holds 256 tokens: the node's own flag keeps max_model_len within it whatever the template says.
SMALL_CONTEXT = ["--engine-arg=--max-model-len", "--engine-arg=128"]
TEXTS = ["我的订单到哪了？", "怎么退货", "推荐一款适合送礼的耳机，预算五百元左右", "优惠券为什么不能用", "发票怎么开"]
THRESHOLD = 0.35
JSON = {"Content-Type": "application/json"}


def document(**cleanup) -> dict:
    return {
        "inference_params": {
            "max_tokens": {"whitelist": [], "continuation_max_rounds": 0},
            "cleanup": {"fragmentation_threshold": 1.0, **cleanup},  # 1.0: no automatic cleanup unless a test asks
        }
    }


def operator_cleanups(agent: AgentProcess) -> float:
    """The agent's own count of the operator's cleanups that succeeded (the fleet outlives a test: it counts on)."""
    metrics = urllib.request.urlopen(f"{agent.url}/metrics", timeout=10).read().decode()
    found = re.search(
        r'^engine_node_memory_cleanups_total\{result="succeeded",trigger="operator"\} (\S+)$', metrics, re.M
    )
    return float(found.group(1)) if found else 0.0


def finished(command: NodeCommand) -> bool:
    command.refresh_from_db()
    return command.is_finished


def fragmentation(agent: AgentProcess) -> float:
    return (agent.health().get("memory") or {}).get("fragmentation") or 0.0


def set_faults(agent: AgentProcess, **faults) -> None:
    request = urllib.request.Request(
        f"{engine_url(agent)}/sim/faults",
        data=json.dumps(faults).encode(),
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=10).read()


def clear_faults(agent: AgentProcess) -> None:
    urllib.request.urlopen(urllib.request.Request(f"{engine_url(agent)}/sim/faults", method="DELETE"), timeout=10)


def start_slow_request(agent: AgentProcess) -> tuple[threading.Thread, dict]:
    """A 16-token chat request through the gateway, in flight when this returns; `slow` gets its outcome."""
    slow: dict = {}
    body = {
        "model": agent.model,
        "messages": [{"role": "user", "content": "请详细说明退货流程"}],
        "max_tokens": 16,
        "min_tokens": 16,
        "ignore_eos": True,
    }

    def call():
        request = urllib.request.Request(
            f"{agent.url}/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers=agent.headers,
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            slow["status"], slow["body"] = response.status, json.loads(response.read())

    caller = threading.Thread(target=call)
    caller.start()
    wait_until(lambda: agent.health()["in_flight"] >= 1, 10, "the slow request to be in flight")
    return caller, slow


@pytest.fixture(scope="module")
def shared_fleet(django_db_setup, django_db_blocker, tmp_path_factory):
    """daphne + pool `staging` with template `chat` v1 (automatic cleanup off) on two agents, gpu-1 and gpu-2, for
    every test here."""
    work = tmp_path_factory.mktemp("fleet")
    profile = work / "fragmenting.yaml"
    profile.write_text(FRAGMENTING_PROFILE)
    server = Daphne(work)
    agents = []
    with module_database(django_db_blocker):
        server.start()
        owner = User.objects.create_user(username="fleet-owner", role=Role.SRE)
        pool = pool_create(actor=owner, name="staging", is_production=False)
        # These tests are about every node taking a publish at once, not about canary stages (test_canary_rollout.py).
        Pool.objects.filter(pk=pool.pk).update(canary_stages=[{"percent": 100}])
        template = template_create(actor=owner, name="chat")
        v1 = template_version_create(actor=owner, template=template, document=document(), base_number=None)
        pool_publish(actor=owner, pool=pool, version=v1, reason="first")
        backend = ["--backend", "simulator", "--simulator-profile", str(profile), *SMALL_CONTEXT]
        for name in ("gpu-1", "gpu-2"):
            _, token = node_create(actor=owner, name=name, pool=pool)
            url = server.ws_agent_url
            agents.append(AgentProcess(name=name, token=token, control_plane_url=url, work=work, backend_args=backend))
        try:
            start_agents(agents)
            wait_until(
                lambda: EngineNode.objects.filter(applied_hash=v1.content_hash, is_connected=True).count() == 2,
                30,
                "both agents to connect and apply v1",
            )
            rows = SharedRows()
            rows.keep()
            yield {"server": server, "agents": agents, "rows": rows}
        finally:
            stop_agents(agents)
            server.stop()


@pytest.fixture
def fleet(shared_fleet, transactional_db):
    """The module's fleet, reset: its rows back after the flush, no fault on either engine, both nodes on v1 again
    (automatic cleanup off), serving, and no cleanup of a test before under way or on record."""
    rows, agents = shared_fleet["rows"], shared_fleet["agents"]
    rows.restore()
    pool = Pool.objects.select_related("desired_version__template").get(name="staging")
    v1 = pool.desired_version
    for agent in agents:
        clear_faults(agent)
    behind = [agent for agent in agents if agent.health()["applied"] != str(v1)]
    if behind:
        config_to_nodes(
            list(EngineNode.objects.filter(name__in=[a.name for a in behind]).values_list("pk", flat=True)), v1
        )
    wait_until(
        lambda: all(a.health()["applied"] == str(v1) and a.health()["status"] == "online" for a in agents),
        30,
        "both nodes back on v1 and serving",
    )
    wait_until(lambda: not NodeCommand.objects.filter(finished_at__isnull=True).exists(), 30, "no command under way")
    NodeCommand.objects.all().delete()  # asked for by the config of a test before
    yield {"server": shared_fleet["server"], "pool": pool, "template": v1.template, "agents": agents}
    rows.carry()


def test_sre_cleanup_under_traffic_brings_fragmentation_below_the_threshold(fleet, sre):
    agent = fleet["agents"][0]
    node = EngineNode.objects.get(name=agent.name)
    cleanups_before = operator_cleanups(agent)
    with Traffic(fleet["agents"], per_agent_threads=4, texts=TEXTS) as traffic:
        wait_until(lambda: fragmentation(agent) > THRESHOLD, 30, "fragmentation above 35 % under mixed traffic")
        command = node_command_request(actor=sre, node=node, op="cleanup", reason="fragmentation above 35 %")
        wait_until(lambda: finished(command), 30, "the cleanup to finish")
        # Traffic keeps flowing after the resume: every client's next requests are served too.
        served = traffic.outcomes[200]
        wait_until(lambda: traffic.outcomes[200] >= served + 16, 30, "requests after the resume")
    assert command.state == "succeeded", command.result
    result = json.loads(command.result)
    assert result["trigger"] == "operator"
    assert result["before"]["fragmentation"] > THRESHOLD
    assert result["after"]["fragmentation"] < THRESHOLD
    assert result["before"]["device"] == "simulated"
    assert 0 <= result["after"]["kv_cache_usage"] <= 1
    assert result["prefix_cache_reset"] is True and result["released"]["released_blocks"] > 0
    assert traffic.outcomes[200] > 0, (traffic.outcomes, traffic.errors[:5])
    assert traffic.failed == 0, (traffic.outcomes, traffic.errors[:5])
    assert agent.health()["status"] == "online"
    entry = AuditEntry.objects.get(action="node.cleanup")
    assert (entry.actor_name, entry.reason, entry.target_id) == ("sre", "fragmentation above 35 %", str(node.pk))
    assert operator_cleanups(agent) == cleanups_before + 1


def test_automatic_cleanups_of_two_nodes_never_overlap(fleet, sre):
    pool, template, (gpu1, gpu2) = fleet["pool"], fleet["template"], fleet["agents"]
    # A 3 s cooldown (300 s by default): a node that fragments again within seconds of its cleanup would otherwise
    # ask for the pool's lease again at once, every time, and the other node, refused, would wait for a gap.
    v2 = template_version_create(
        actor=sre, template=template, document=document(fragmentation_threshold=0.3, cooldown_s=3), base_number=1
    )
    pool_publish(actor=sre, pool=pool, version=v2, reason="clean up above 30 %")
    wait_until(
        lambda: EngineNode.objects.filter(applied_hash=v2.content_hash).count() == 2, 30, "both nodes to apply v2"
    )
    cleanups = NodeCommand.objects.filter(op="cleanup", finished_at__isnull=False).select_related("node")
    automatic = cleanups.filter(requested_by__isnull=True)

    logged = gpu2.log_path.stat().st_size
    # gpu-1 holds the pool's lease for several seconds (its cleanup drains a slow request) while gpu-2 fragments.
    set_faults(gpu1, latency_factor=800)
    caller, slow = start_slow_request(gpu1)
    with Traffic([gpu2], per_agent_threads=4, texts=TEXTS) as alone:
        held = node_command_request(actor=sre, node=EngineNode.objects.get(name="gpu-1"), op="cleanup", reason="held")
        wait_until(lambda: finished(held), 30, "gpu-1's cleanup to finish")
    caller.join(timeout=30)
    assert slow["status"] == 200
    assert held.state == "succeeded", held.result
    assert json.loads(held.result)["drained_s"] > 3
    assert "cleanup lease refused: gpu-1 of pool staging is cleaning up" in gpu2.log_path.read_bytes()[logged:].decode()
    clear_faults(gpu1)

    with Traffic([gpu1, gpu2], per_agent_threads=4, texts=TEXTS) as both:
        wait_until(
            lambda: (
                automatic.filter(node__name="gpu-1").count() >= 1 and automatic.filter(node__name="gpu-2").count() >= 2
            ),
            180,  # fragmentation builds with the traffic the machine can carry: slower on a loaded machine
            "automatic cleanups on both nodes",
            interval_s=0.5,
        )
    for traffic in (alone, both):
        assert traffic.failed == 0, (traffic.outcomes, traffic.errors[:5])
        assert traffic.outcomes[200] > 0
    commands = list(cleanups)
    assert all(c.state == "succeeded" for c in commands), [c.result for c in commands]
    # The agents' own clocks: when each one closed and reopened its gate. Never two at once.
    spans = sorted(
        (json.loads(c.result)["started_at"], json.loads(c.result)["finished_at"], c.node.name) for c in commands
    )
    for (_, previous_end, previous_node), (start, _, node) in itertools.pairwise(spans):
        assert start >= previous_end, f"{node} started cleaning before {previous_node} had finished"
    # The control plane's view agrees: no two leases overlapped.
    leases = sorted((c.sent_at, c.finished_at) for c in commands)
    for (_, previous_end), (start, _) in itertools.pairwise(leases):
        assert start >= previous_end
    for command in automatic:
        result = json.loads(command.result)
        assert command.reason.startswith("automatic: memory fragmentation")
        assert result["trigger"] == "threshold"
        assert result["before"]["fragmentation"] > 0.3 > result["after"]["fragmentation"]


def test_a_cleanup_whose_drain_outlasts_its_bound_resumes_and_drops_nothing(fleet, sre):
    pool, template = fleet["pool"], fleet["template"]
    agent = fleet["agents"][1]
    node = EngineNode.objects.get(name=agent.name)
    v2 = template_version_create(actor=sre, template=template, document=document(max_duration_s=5), base_number=1)
    pool_publish(actor=sre, pool=pool, version=v2, reason="5 s bound")
    wait_until(lambda: EngineNode.objects.get(pk=node.pk).applied_hash == v2.content_hash, 30, "ACK of v2")
    set_faults(agent, latency_factor=1250)  # ~0.6 s per decode step: 16 tokens take ~10 s, past the 5 s bound
    caller, slow = start_slow_request(agent)
    command = node_command_request(actor=sre, node=node, op="cleanup", reason="try it under a slow request")
    wait_until(
        lambda: finished(command),
        60,
        "the cleanup to give up",
        explain=lambda: (
            f"command {command.state} sent {command.sent_at} result {command.result!r}; "
            f"node {agent.health()}; request {slow}"
        ),
    )
    assert caller.is_alive() and "status" not in slow, "it gave up on its bound, while the request still ran"
    assert command.state == "failed"
    result = json.loads(command.result)
    assert "still running" in result["error"] or "max_duration_s" in result["error"], result
    assert "prefix_cache_reset" not in result
    wait_until(lambda: agent.health()["status"] == "online", 5, "the node to resume")
    caller.join(timeout=60)
    assert slow["status"] == 200 and slow["body"]["usage"]["completion_tokens"] == 16
    clear_faults(agent)
    assert agent.chat()[0] == 200

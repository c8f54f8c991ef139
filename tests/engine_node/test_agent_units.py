"""The agent's pieces on their own: config integrity, engine flags, last good config, admission, backoff."""

import asyncio
import json
import random
from pathlib import Path

import pytest

from engine_node.admission import Admission, GateClosed
from engine_node.config import ConfigRejected, NodeConfig, content_hash, engine_args
from engine_node.control import BACKOFF_CAP_S, backoff_delay
from engine_node.settings import AgentSettings
from engine_node.state import LastGoodStore
from tests.aiohttp_apps import start_app

SETTINGS = AgentSettings(
    control_plane_url="",
    token="",
    node_name="n1",
    backend="simulator",
    model="base-model",
    served_model_name="chat",
    engine_args=["--enforce-eager"],
)
CONTENT = {
    "engine": {"max_num_seqs": 64, "max_model_len": 8192, "enable_prefix_caching": True, "quantization": None},
    "speculative": {"enabled": False, "method": "draft_model", "draft_model": None, "num_speculative_tokens": 3},
    "temperature": {"strict": 0.3},
}


def message(content=CONTENT, **override):
    return {"version": {"template": "chat", "number": 2}, "hash": content_hash(content), "content": content, **override}


def test_hash_matches_the_control_plane_canonical_form(db):
    from tests.conftest import make_user
    from tests.factories import template_with_versions

    _, (version,) = template_with_versions(make_user("sre"))
    assert content_hash(version.node_content) == version.content_hash


def test_tampered_content_is_rejected():
    tampered = message()
    tampered["content"] = {**CONTENT, "engine": {**CONTENT["engine"], "max_num_seqs": 1}}
    with pytest.raises(ConfigRejected, match="hash: content hashes to"):
        NodeConfig.from_message(tampered)


def test_missing_engine_section_is_rejected():
    content = {"speculative": CONTENT["speculative"]}
    with pytest.raises(ConfigRejected, match="engine: missing"):
        NodeConfig.from_message(message(content))


def flag_value(args: list[str], flag: str) -> str | None:
    values = [arg.removeprefix(flag + "=") for arg in args if arg.startswith(flag + "=")]
    return values[0] if values else None


def test_engine_args_follow_the_config():
    args = engine_args(NodeConfig.from_message(message()), SETTINGS)
    assert args == [
        "--model=base-model",
        "--served-model-name=chat",
        "--max-num-seqs=64",
        "--max-model-len=8192",
        "--enable-prefix-caching",
        "--enforce-eager",
    ]


def test_speculative_decoding_becomes_a_speculative_config_flag():
    spec = {"enabled": True, "method": "draft_model", "draft_model": "draft-7b", "num_speculative_tokens": 4}
    draft = {"name": "draft-7b", "source": "/srv/models/draft-7b", "revision": "v2", "is_draft_capable": True}
    content = {**CONTENT, "speculative": spec, "models": {"speculative.draft_model": draft}}
    args = engine_args(NodeConfig.from_message(message(content)), SETTINGS)
    config = json.loads(flag_value(args, "--speculative-config"))
    assert config == {
        "method": "draft_model", "model": "/srv/models/draft-7b", "revision": "v2", "num_speculative_tokens": 4
    }  # fmt: skip


def test_speculative_false_leaves_the_speculative_flag_out_and_nothing_else():
    spec = {"enabled": True, "method": "ngram", "draft_model": None, "num_speculative_tokens": 3}
    config = NodeConfig.from_message(message({**CONTENT, "speculative": spec}))
    on, off = engine_args(config, SETTINGS), engine_args(config, SETTINGS, speculative=False)
    assert json.loads(flag_value(on, "--speculative-config")) == {
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 4
    }  # fmt: skip
    assert flag_value(off, "--speculative-config") is None
    assert off == [arg for arg in on if not arg.startswith("--speculative-config=")]
    # A config without speculative decoding gives the same flags either way.
    assert engine_args(NodeConfig.from_message(message()), SETTINGS, speculative=False) == engine_args(
        NodeConfig.from_message(message()), SETTINGS
    )


def test_agent_engine_args_follow_the_policy_bundles_degradation(tmp_path):
    from engine_node.agent import Agent

    settings = AgentSettings(
        control_plane_url="", token="", node_name="n1", backend="simulator", model="base-model",
        served_model_name="chat", state_dir=tmp_path,
    )  # fmt: skip
    spec = {"enabled": True, "method": "ngram", "draft_model": None, "num_speculative_tokens": 3}
    config = NodeConfig.from_message(message({**CONTENT, "speculative": spec}))

    def bundle(**degradation) -> dict:
        content = {"pool": "p", "whitelists": {}, "overrides": [], "degradation": degradation, "intent_model": None}
        return {"type": "policy", "hash": content_hash(content), "content": content}

    async def scenario():
        agent = Agent(settings)
        flags = {"no bundle": agent._engine_args(config)}
        agent.apply_policy(bundle(active=True, cause="manual", reason="r", since=1.0, speculative_decoding=False))
        flags["degraded, off"] = agent._engine_args(config)
        agent.apply_policy(bundle(active=True, cause="manual", reason="r", since=1.0, speculative_decoding=True))
        flags["degraded, kept"] = agent._engine_args(config)
        agent.apply_policy(bundle(active=False, cause="", reason="", since=None, speculative_decoding=True))
        flags["normal"] = agent._engine_args(config)
        # A bundle that does not hash to its hash is refused: the flags stay those of the last good bundle.
        forged = bundle(active=True, cause="manual", reason="r", since=1.0, speculative_decoding=False)
        forged["hash"] = "0" * 64
        agent.apply_policy(forged)
        flags["forged"] = agent._engine_args(config)
        return flags

    flags = asyncio.run(scenario())
    with_spec = engine_args(config, settings)
    assert flag_value(with_spec, "--speculative-config") is not None
    assert flags == {
        "no bundle": with_spec,
        "degraded, off": engine_args(config, settings, speculative=False),
        "degraded, kept": with_spec,
        "normal": with_spec,
        "forged": with_spec,
    }


def test_the_rules_off_state_leaves_the_flag_out_and_new_speculative_settings_start_it_afresh(tmp_path):
    from engine_node.agent import Agent

    settings = AgentSettings(
        control_plane_url="", token="", node_name="n1", backend="simulator", model="base-model",
        served_model_name="chat", state_dir=tmp_path,
    )  # fmt: skip
    spec = {"enabled": True, "method": "ngram", "draft_model": None, "num_speculative_tokens": 3}
    config = NodeConfig.from_message(message({**CONTENT, "speculative": spec}))
    hot_only = NodeConfig.from_message(message({**CONTENT, "speculative": {**spec, "window_s": 5}}))
    four = NodeConfig.from_message(message({**CONTENT, "speculative": {**spec, "num_speculative_tokens": 4}}))

    async def scenario():
        agent = Agent(settings)
        agent.config = config
        agent.speculation.applied("off", "rejected")
        off = agent._engine_args(config)
        # What apply() compares: the rule's hot fields do not change the flag, the candidates do.
        return (
            off,
            agent._speculative_flag(hot_only) == agent._speculative_flag(config),
            (agent._speculative_flag(four) != agent._speculative_flag(config)),
        )

    off, same, differs = asyncio.run(scenario())
    assert off == engine_args(config, settings, speculative=False)
    assert same and differs


def test_hot_only_change_keeps_the_engine_flags():
    hot = {**CONTENT, "temperature": {"strict": 0.1}}
    assert engine_args(NodeConfig.from_message(message(hot)), SETTINGS) == engine_args(
        NodeConfig.from_message(message()), SETTINGS
    )


def test_last_good_config_round_trips_and_ignores_a_corrupt_file(tmp_path: Path):
    store = LastGoodStore(tmp_path)
    assert store.load() is None
    config = NodeConfig.from_message(message())
    store.save(config)
    assert store.load() == config
    assert [p.name for p in tmp_path.iterdir()] == ["last_good_config.json"]
    store.path.write_text('{"hash": "x", "content": {}')
    assert store.load() is None


def test_admission_drains_in_flight_and_bounds_waiting():
    async def scenario():
        gate = Admission(queue_timeout_s=0.2)
        release = asyncio.Event()

        async def slow_request(until: asyncio.Event = release):
            async with gate.admitted():
                await until.wait()

        task = asyncio.create_task(slow_request())
        await asyncio.sleep(0.01)
        drain = asyncio.create_task(gate.drain(timeout_s=5))
        await asyncio.sleep(0.01)
        assert not drain.done() and gate.in_flight == 1
        with pytest.raises(GateClosed):
            async with gate.admitted():
                pass
        release.set()
        done, _ = await drain
        await task
        assert done and gate.in_flight == 0
        waiter = asyncio.create_task(slow_request(asyncio.Event()))
        await asyncio.sleep(0.05)
        assert gate.waiting == 1
        gate.resume()
        await asyncio.sleep(0.01)
        assert gate.in_flight == 1
        waiter.cancel()

    asyncio.run(scenario())


def test_backoff_grows_with_jitter_and_is_capped():
    rng = random.Random(1)
    first = [backoff_delay(1, rng) for _ in range(200)]
    late = [backoff_delay(40, rng) for _ in range(200)]
    assert min(first) >= 0.37 and max(first) <= 0.75
    assert max(late) <= BACKOFF_CAP_S and min(late) >= BACKOFF_CAP_S / 2
    assert len(set(late)) > 100


def test_gpu_inventory_parses_nvidia_smi_csv():
    from engine_node.gpus import parse

    output = "0, NVIDIA H200, GPU-3f2a9c1e-0000, 143771, 570.86.15\n1, NVIDIA H200, GPU-77aa, 143771, 570.86.15\n"
    assert parse(output) == [
        {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-3f2a9c1e-0000", "memory_mib": 143771, "driver": "570.86.15"},
        {"index": 1, "name": "NVIDIA H200", "uuid": "GPU-77aa", "memory_mib": 143771, "driver": "570.86.15"},
    ]
    assert parse("") == []


@pytest.mark.subprocess
def test_hello_reports_the_gateway_url_and_the_model_clients_send_and_heartbeats_follow_a_renamed_model(tmp_path):
    from engine_node.agent import Agent

    settings = AgentSettings(
        control_plane_url="", token="", node_name="n1", backend="simulator", model="base-model",
        served_model_name="chat", state_dir=tmp_path, port=9123,
    )  # fmt: skip

    async def scenario():
        agent = Agent(settings)
        agent.engine.args = engine_args(NodeConfig.from_message(message()), settings)
        hello = agent.hello()
        quiet = agent.heartbeat()
        renamed = {**CONTENT, "engine": {**CONTENT["engine"], "served_model_name": "support-bot"}}
        agent.engine.args = engine_args(NodeConfig.from_message(message(renamed)), settings)
        return hello, quiet, agent.heartbeat(), agent.heartbeat()

    hello, quiet, renamed, after = asyncio.run(scenario())
    assert (hello["gateway_url"], hello["served_model_name"]) == ("http://127.0.0.1:9123", "chat")
    assert "served_model_name" not in quiet
    assert renamed["served_model_name"] == "support-bot"
    assert "served_model_name" not in after


def test_advertise_url_is_checked_and_a_wildcard_host_advertises_the_host_name(monkeypatch):
    import socket

    from engine_node.settings import from_args, gateway_url

    advertised = from_args(["--backend", "simulator", "--advertise-url", "https://gpu-1.example.com:9443/"])
    assert gateway_url(advertised, 9000) == "https://gpu-1.example.com:9443"
    for bad in ("javascript:alert(1)", "ftp://gpu-1/", "https://user:pw@gpu-1/", "http://", "http://gpu 1/"):
        with pytest.raises(SystemExit):
            from_args(["--backend", "simulator", "--advertise-url", bad])
    monkeypatch.setattr(socket, "getfqdn", lambda: "gpu-7.example.com")
    assert (
        gateway_url(from_args(["--backend", "simulator", "--host", "0.0.0.0"]), 9000) == "http://gpu-7.example.com:9000"
    )
    assert gateway_url(from_args(["--backend", "simulator", "--host", "::1"]), 9000) == "http://[::1]:9000"


def test_stopping_the_control_link_cancels_the_message_handlers_still_running():
    """A config being applied (cold restart, warmup) when the agent stops must not run on into its shut-down."""
    from aiohttp import web

    from engine_node.control import ControlLink

    async def scenario():
        async def agent_socket(request):
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            await ws.send_json({"type": "welcome", "heartbeat_s": 60})
            await ws.receive()  # the hello
            await ws.send_json({"type": "config"})
            async for _ in ws:
                pass
            return ws

        app = web.Application()
        app.router.add_get("/ws/agent/", agent_socket)
        runner, base_url = await start_app(app)
        handling, outcome = asyncio.Event(), []

        async def on_message(message):
            handling.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                outcome.append("cancelled")
                raise

        link = ControlLink(
            urls=[base_url.replace("http://", "ws://") + "/ws/agent/"], token="t", hello=lambda: {"type": "hello"},
            heartbeat=lambda: {"type": "heartbeat"}, on_message=on_message,
        )  # fmt: skip
        running = asyncio.create_task(link.run())
        await asyncio.wait_for(handling.wait(), 10)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        settled = list(outcome)  # before asyncio.run cancels whatever is left at its end
        await runner.cleanup()
        return settled

    assert asyncio.run(scenario()) == ["cancelled"]


def test_the_control_link_fails_over_to_the_next_url_when_a_process_is_gone():
    """Several control-plane URLs: whichever the link starts on, a dead one is left for the next within a second."""
    from aiohttp import web

    from engine_node.control import ControlLink
    from tests.live_server import free_port

    async def scenario():
        hellos = []

        async def agent_socket(request):
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            await ws.send_json({"type": "welcome", "heartbeat_s": 60})
            hellos.append((await ws.receive()).json())
            async for _ in ws:
                pass
            return ws

        app = web.Application()
        app.router.add_get("/ws/agent/", agent_socket)
        runner, base_url = await start_app(app)
        live = base_url.replace("http://", "ws://") + "/ws/agent/"
        dead = f"ws://127.0.0.1:{free_port()}/ws/agent/"  # nothing listens there
        results = []
        for urls in ([dead, live], [live, dead]):
            hellos.clear()

            async def on_message(message):
                pass

            link = ControlLink(
                urls=urls, token="t", hello=lambda: {"type": "hello"}, heartbeat=lambda: {"type": "heartbeat"},
                on_message=on_message,
            )  # fmt: skip
            running = asyncio.create_task(link.run())
            await asyncio.wait_for(link.connected.wait(), 5)
            results.append((link.url, list(hellos)))
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
        await runner.cleanup()
        return live, results

    live, results = asyncio.run(scenario())
    assert results == [(live, [{"type": "hello"}]), (live, [{"type": "hello"}])]


def test_a_command_arriving_during_a_config_apply_says_so_and_a_cleanup_gives_its_lease_back(tmp_path):
    """A cold apply holds the agent's apply lock for minutes (restart, warmup): a command sent meanwhile used to wait
    in silence, and a cleanup kept its pool's lease all that time."""
    from engine_node.agent import Agent

    settings = AgentSettings(
        control_plane_url="", token="", node_name="n1", backend="simulator", model="base-model",
        served_model_name="chat", state_dir=tmp_path,
    )  # fmt: skip

    async def scenario():
        agent = Agent(settings)
        sent: list[dict] = []

        async def record(message: dict) -> None:
            sent.append(message)

        agent._send = record
        agent.status = "warming"
        async with agent._apply_lock:
            await agent.command(7, "cleanup")
            drain = asyncio.create_task(agent.command(8, "drain"))
            await asyncio.sleep(0.05)
            assert not drain.done()  # it waits for the apply, and has said so
            drain.cancel()
        return sent

    sent = asyncio.run(scenario())
    assert sent == [
        {
            "type": "command_progress",
            "id": 7,
            "state": "failed",
            "progress": "",
            "result": "not started: the node is warming up a new config; ask again when it is online",
        },
        {
            "type": "command_progress",
            "id": 8,
            "state": "pending",
            "progress": "waiting: the node is warming up a new config",
            "result": "",
        },
    ]

"""One agent on the real vLLM CPU build for the whole session, shared by the vLLM tests that can share it.

A vLLM start costs 25-30 s of both cores; an agent that outlives the tests pays it once. Every test still gets
its own world: the `vllm_node` fixture (tests/engine_node/conftest.py) creates the pool `cpu` and the node
`cpu-1` again (the transactional flush after the last test removed them) with the token the agent holds, and
starts a daphne of its own on the port the agent knows. `vllm_node.connect()` hands over the agent once it has
reconnected to that daphne and said hello; the control plane then knows it as a fresh connection would:

- engine: started on the base config (BASE_DOCUMENT: max_model_len 1024, max_num_seqs 4), found on the node's disk
  as after an earlier apply, so publishing any version with the same `engine` section is hot (or, for the base
  document itself, ACKed at once). A test that restarted the engine on other flags leaves it so; `connect()` finds
  the engine's command line changed (or the agent gone, or not online: a test that failed half-way) and starts a
  new agent on the base config.
- applied config: the one the last test applied (the same engine flags); a test that relies on its own policy
  publishes its own version first, as the tests here do.
- warmup dataset: the control plane's answer to every hello says the new pool has none, so the agent forgets one an
  earlier test gave it before it handles any later message.
- the agent's settings: one queue timeout for all (QUEUE_TIMEOUT_S), drain timeout 10 s, probes every 30 s.
- counters on the agent's /metrics: the agent's life's, not the test's; assert on differences.

`vllm_node.start_fresh(last_good)` is for a test about the agent's own start (a start-up warmup, one vLLM start in
all): it stops the shared agent, starts a new one on that config with an empty state directory, and returns as
soon as its gateway listens; the new agent is the shared one afterwards. The tests that share the agent run in a
row, ordered so that vLLM starts as seldom as it can (tests/conftest.py, shared_vllm_order): first the one that
starts it (`pytest.mark.vllm(shared_node="starts")`), then the others, last the one that leaves its engine on other
flags (`shared_node="changes"`). After the last of them the agent stops (`release_shared_agent`): its worker polls
for work for a second after every memory reading (every 2 s), half a core that the next tests need.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine_node.config import NodeConfig, engine_args
from engine_node.fragmentation import WORKER_EXTENSION
from engine_node.settings import AgentSettings
from tests.engine_node.conftest import SERVED_MODEL_NAME
from tests.engine_node.fleet import AgentProcess, engine_cmdline, vllm_agent, wait_until
from tests.live_server import Daphne, free_port

POOL = "cpu"
NODE = "cpu-1"
# Long enough for the requests queued while a cleanup drains the engine (a reply of up to ~960 tokens in flight
# on two shared cores) and for those queued during a cold restart to be answered by the new engine.
QUEUE_TIMEOUT_S = 60
START_TIMEOUT_S = 300

BASE_DOCUMENT = {
    "inference_params": {
        # A small first-turn cap: the random-weight model rarely stops by itself, so replies are cut and continued.
        "max_tokens": {"whitelist": [], "default": 16, "streaming_threshold": 16},
        "degradation": {"max_tokens": 16},
        "batch": {"long_context_threshold": 512},
        "engine": {"max_model_len": 1024, "max_num_seqs": 4, "served_model_name": SERVED_MODEL_NAME},
    }
}


def config_text(document: dict) -> str:
    """The config push of `document` as the node stores it, from an unsaved version (no row left behind)."""
    from controlplane.nodes.realtime import config_message
    from controlplane.params.models import ParameterTemplate, TemplateVersion
    from controlplane.params.services.templates import document_resolve

    params, pinned = document_resolve(document=document)
    version = TemplateVersion(template=ParameterTemplate(name="node-base"), number=1, params=params)
    version.pinned_models = pinned
    return config_message(version)["text"]


def engine_options(agent: AgentProcess) -> list[str]:
    """The options the agent gave its engine (after the address and the worker extension)."""
    args = engine_cmdline(agent.health()["engine_pid"])
    return args[args.index(f"--worker-extension-cls={WORKER_EXTENSION}") + 1 :]


class SharedVllmAgent:
    """The session's agent: its control-plane port, its token, and the process once started."""

    def __init__(self, *, vllm_python: Path, model_dir: Path, tmp_path_factory):
        from controlplane.nodes import tokens

        self.vllm_python, self.model_dir = vllm_python, model_dir
        self.tmp_path_factory = tmp_path_factory
        self.port = free_port()
        self.token = tokens.token_generate()
        self.agent: AgentProcess | None = None

    def start(self, last_good: str) -> AgentProcess:
        """A new agent (and vLLM) on `last_good`, in an empty state directory; returns once its gateway listens."""
        self.stop()
        work = self.tmp_path_factory.mktemp("vllm-node")
        (work / NODE).mkdir()
        (work / NODE / "last_good_config.json").write_text(last_good, encoding="utf-8")
        agent = vllm_agent(
            vllm_python=self.vllm_python,
            model_dir=self.model_dir,
            queue_timeout_s=QUEUE_TIMEOUT_S,
            name=NODE,
            token=self.token,
            control_plane_url=f"ws://127.0.0.1:{self.port}/ws/agent/",
            work=work,
        )
        self.agent = agent
        agent.start(timeout_s=START_TIMEOUT_S)
        return agent

    def on_base(self) -> bool:
        """Whether the agent runs, serves, and its engine has the base config's flags."""
        if self.agent is None or self.agent.process.poll() is not None:
            return False
        try:
            if self.agent.health()["status"] != "online":
                return False  # a test that failed half-way (draining, restarting): a new agent, not its leftovers
            options = engine_options(self.agent)
        except (OSError, KeyError, ValueError, TypeError):
            return False
        settings = AgentSettings(
            control_plane_url="",
            token="",
            node_name=NODE,
            backend="vllm",
            model=str(self.model_dir),
            served_model_name=SERVED_MODEL_NAME,
            engine_args=["--enforce-eager"],
        )
        expected = engine_args(NodeConfig.from_message(json.loads(config_text(BASE_DOCUMENT))), settings)
        return options == expected

    def stop(self) -> None:
        if self.agent is not None:
            self.agent.stop()
            self.agent = None


# One per process: the session fixture is imported into the conftests of several directories, each of which would
# otherwise hold an agent of its own.
_shared: SharedVllmAgent | None = None


def shared_agent(*, vllm_python: Path, model_dir: Path, tmp_path_factory) -> SharedVllmAgent:
    global _shared
    if _shared is None:
        _shared = SharedVllmAgent(vllm_python=vllm_python, model_dir=model_dir, tmp_path_factory=tmp_path_factory)
    return _shared


def release_shared_agent() -> None:
    """Stop the shared agent (and its vLLM) if one runs; a later test that connects starts a new one."""
    if _shared is not None:
        _shared.stop()


class VllmNode:
    """One test's pool, node and control plane around the session's agent (the `vllm_node` fixture)."""

    def __init__(self, shared: SharedVllmAgent, *, pool, node, server: Daphne):
        self.shared, self.pool, self.node, self.server = shared, pool, node, server

    @property
    def token(self) -> str:
        return self.shared.token

    def connect(self) -> AgentProcess:
        """The shared agent on the base engine flags (started if need be), connected to this test's control plane."""
        from controlplane.nodes.models import EngineNode

        if not self.shared.on_base():
            self.shared.start(config_text(BASE_DOCUMENT))
        agent = self.shared.agent
        wait_until(
            lambda: EngineNode.objects.get(pk=self.node.pk).is_connected,
            60,
            "the shared vLLM agent to connect to this test's control plane",
            explain=lambda: agent.log_path.read_text(errors="replace")[-2000:],
        )
        return agent

    def start_fresh(self, last_good: str) -> AgentProcess:
        """A new agent on `last_good` (and nothing else on its disk), back as soon as its gateway listens."""
        return self.shared.start(last_good)


def make_node(shared: SharedVllmAgent, *, sre, log_dir: Path) -> VllmNode:
    """The rows an agent needs (they do not outlive a transactional test) and a daphne on the agent's port."""
    from controlplane.nodes import tokens
    from controlplane.nodes.models import EngineNode
    from controlplane.nodes.services.engine_nodes import node_create
    from controlplane.nodes.services.pools import pool_create

    pool = pool_create(actor=sre, name=POOL, is_production=False)
    node, _ = node_create(actor=sre, name=NODE, pool=pool)
    EngineNode.objects.filter(pk=node.pk).update(
        token_hash=tokens.token_hash(shared.token), token_prefix=shared.token[:12]
    )
    node.refresh_from_db()
    server = Daphne(log_dir, port=shared.port)
    server.start()
    return VllmNode(shared, pool=pool, node=node, server=server)

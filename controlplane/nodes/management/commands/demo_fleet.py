"""Start a simulated fleet for the demo: agents on the vLLM-protocol simulator plus synthetic traffic.

Every number these nodes report comes from the simulator's latency model (profiles/demo.yaml), not from vLLM.
SIGTERM or SIGINT stops every process it started within STOP_TIMEOUT_S; if this command dies without stopping them
(SIGKILL), its agents get SIGTERM from the kernel and stop their simulators (engine_node/lifetime.py).
"""

import os
import signal
import socket
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand

from controlplane.accounts.models import User
from controlplane.accounts.roles import Role
from controlplane.nodes.models import ClientKey, EngineNode, Pool
from controlplane.nodes.services.client_keys import client_key_create, client_key_revoke
from controlplane.nodes.services.engine_nodes import node_create, node_token_rotate
from engine_node.lifetime import tied_to_parent
from engine_node.simulator.profile import DEMO_PROFILE_PATH

DEMO_NODES = [("sim-staging-1", "staging"), ("sim-prod-1", "prod-main"), ("sim-prod-2", "prod-main")]
MODEL_NAME = "simulated-chat-model"
# An agent stops its gateway (6 s at most, engine_node/agent.py) and then its simulator (2 s); past this it is killed.
STOP_TIMEOUT_S = 10.0
DEMO_KEY_NAME = "demo-traffic"
# The seed's whitelisted scenario, so a visitor can see a granted tag keep its longer max_tokens.
DEMO_KEY_TAGS = ["legal"]


def demo_client_key(admin, pools: list[Pool]) -> str:
    """A fresh client key for the demo pools (keys are never stored, so each start revokes the last one)."""
    for old in ClientKey.objects.filter(name=DEMO_KEY_NAME, revoked_at__isnull=True):
        client_key_revoke(actor=admin, client_key=old, reason="make run: demo fleet started; new demo key issued")
    _, key = client_key_create(actor=admin, name=DEMO_KEY_NAME, pools=pools, business_tags=DEMO_KEY_TAGS)
    return key


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Command(BaseCommand):
    help = "Run simulated engine nodes (agent + simulator) and synthetic traffic against this control plane."

    def add_arguments(self, parser):
        parser.add_argument("--control-plane", default="ws://127.0.0.1:8000/ws/agent/", help="agent WebSocket URL")
        parser.add_argument("--qps", type=float, default=3.0, help="synthetic requests per second over all nodes")
        parser.add_argument(
            "--simulator-profile",
            default=str(DEMO_PROFILE_PATH),
            help="latency profile of the nodes' simulators (default: the field report's tuned deployment, demo.yaml)",
        )

    def handle(self, *args, control_plane, qps, simulator_profile, **options):
        admin = User.objects.filter(role=Role.ADMIN, is_active=True).order_by("pk").first()
        if admin is None:
            self.stderr.write("no active admin to issue node tokens; run `manage.py seed_demo` first")
            return
        processes: dict[subprocess.Popen, str] = {}
        gateways = []
        state_root = settings.VAR_DIR / "demo-fleet"
        for name, pool_name in DEMO_NODES:
            pool = Pool.objects.filter(name=pool_name).first()
            if pool is None:
                continue
            node = EngineNode.objects.filter(name=name).first()
            if node is None:
                node, token = node_create(actor=admin, name=name, pool=pool, description="simulated node (make run)")
            else:
                # Tokens are never stored, so each demo start issues fresh ones.
                token = node_token_rotate(actor=admin, node=node, reason="make run: demo fleet started")
            port = _free_port()
            gateways.append(f"http://127.0.0.1:{port}")
            agent = subprocess.Popen(
                tied_to_parent(
                    [
                        sys.executable,
                        "-m",
                        "engine_node",
                        "--backend",
                        "simulator",
                        # The seeded catalog entry qwen3-0.6b, so a template may name it (seed_demo.DEMO_MODEL).
                        "--allow-model",
                        "Qwen/Qwen3-0.6B",
                        "--simulator-profile",
                        str(simulator_profile),
                        "--node-name",
                        name,
                        "--control-plane-url",
                        control_plane,
                        "--port",
                        str(port),
                        "--served-model-name",
                        MODEL_NAME,
                        "--state-dir",
                        str(state_root / name),
                    ]
                ),
                env={**os.environ, "ENGINE_NODE_TOKEN": token},
            )
            processes[agent] = f"the agent of {name}"
            self.stdout.write(f"  simulated node {name} ({pool_name}) gateway http://127.0.0.1:{port}/v1")
        if not processes:
            self.stderr.write("no pool named staging or prod-main; run `manage.py seed_demo` first")
            return
        self.stdout.write(f"  model name: {MODEL_NAME} (each node's page shows an example call)")
        pools = list(Pool.objects.filter(name__in={pool_name for _, pool_name in DEMO_NODES}))
        key = demo_client_key(admin, pools)
        # Tests parse this line (`Gateway client key: (\S+)`): keep its form.
        self.stdout.write(f"  Gateway client key: {key}")
        self.stdout.flush()
        # A flag, not a threading.Event: a handler that set() an Event could deadlock on the lock its wait() holds.
        stopping: list[int] = []
        signal.signal(signal.SIGTERM, lambda signum, _: stopping.append(signum))
        signal.signal(signal.SIGINT, lambda signum, _: stopping.append(signum))
        started = time.monotonic()
        while not stopping:
            time.sleep(0.2)
            if len(processes) == len(gateways) and time.monotonic() - started >= 3:
                loadgen = [sys.executable, "-m", "engine_node.loadgen", "--qps", str(qps), "--model", MODEL_NAME]
                traffic = subprocess.Popen(
                    tied_to_parent([*loadgen, *gateways]), env={**os.environ, "LOADGEN_API_KEY": key}
                )
                processes[traffic] = "the synthetic traffic"
                self.stdout.write(f"  synthetic traffic: {qps} requests/s over {len(gateways)} simulated nodes")
                self.stdout.flush()
            exited = [p for p in processes if p.poll() is not None]
            if exited:
                self.stderr.write(f"demo fleet: {processes[exited[0]]} exited with {exited[0].returncode}; stopping")
                break
        _stop(list(processes))


def _stop(processes: list[subprocess.Popen]) -> None:
    """SIGTERM to every process (agents stop their engines), SIGKILL to any still running after STOP_TIMEOUT_S: an
    agent killed that way still takes its engine with it (engine_node/lifetime.py)."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

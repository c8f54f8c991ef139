"""Start a simulated fleet for the demo: agents on the vLLM-protocol simulator plus synthetic traffic.

Every number these nodes report comes from the simulator's latency model, not from vLLM.
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

DEMO_NODES = [("sim-staging-1", "staging"), ("sim-prod-1", "prod-main"), ("sim-prod-2", "prod-main")]
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

    def handle(self, *args, control_plane, qps, **options):
        admin = User.objects.filter(role=Role.ADMIN, is_active=True).order_by("pk").first()
        if admin is None:
            self.stderr.write("no active admin to issue node tokens; run `manage.py seed_demo` first")
            return
        processes: list[subprocess.Popen] = []
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
            processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "engine_node",
                        "--backend",
                        "simulator",
                        # The seeded catalog entry qwen3-0.6b, so a template may name it (seed_demo.DEMO_MODEL).
                        "--allow-model",
                        "Qwen/Qwen3-0.6B",
                        "--node-name",
                        name,
                        "--control-plane-url",
                        control_plane,
                        "--port",
                        str(port),
                        "--state-dir",
                        str(state_root / name),
                    ],
                    env={**os.environ, "ENGINE_NODE_TOKEN": token},
                )
            )
            self.stdout.write(f"  simulated node {name} ({pool_name}) gateway http://127.0.0.1:{port}/v1")
        pools = list(Pool.objects.filter(name__in={pool_name for _, pool_name in DEMO_NODES}))
        key = demo_client_key(admin, pools) if pools else ""
        if key:
            # Tests parse this line (`Gateway client key: (\S+)`): keep its form.
            self.stdout.write(f"  Gateway client key: {key}")
            self.stdout.flush()
        time.sleep(3)
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "engine_node.loadgen", "--qps", str(qps), *gateways],
                env={**os.environ, "LOADGEN_API_KEY": key},
            )
        )
        self.stdout.write(f"  synthetic traffic: {qps} requests/s over {len(gateways)} simulated nodes")

        def stop(*_):
            for process in processes:
                process.terminate()

        signal.signal(signal.SIGTERM, stop)
        try:
            while all(p.poll() is None for p in processes):
                time.sleep(1)
        except KeyboardInterrupt:
            pass
        finally:
            stop()
            for process in processes:
                process.wait(timeout=30)

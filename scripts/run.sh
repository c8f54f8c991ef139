#!/usr/bin/env bash
# Starts the control plane: one ASGI server (HTTP + WebSocket); with REDIS_URL also a Celery worker and beat,
# without it the periodic tasks inside the server's process (manage.py run_periodic --serve).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT INT TERM

if [ -n "${REDIS_URL:-}" ]; then
  mkdir -p var
  "$BIN/celery" -A controlplane worker --loglevel INFO --concurrency 2 & pids+=($!)
  "$BIN/celery" -A controlplane beat --loglevel INFO --schedule var/celerybeat-schedule & pids+=($!)
  mode="Postgres/Redis: ${DATABASE_URL:+DATABASE_URL set}${DATABASE_URL:-SQLite (DATABASE_URL unset)}, Redis channel layer and Celery broker"
else
  mode="embedded: ${DATABASE_URL:+DATABASE_URL set}${DATABASE_URL:-SQLite in ${CONTROLPLANE_VAR_DIR:-var}/}, in-memory channel layer, in-process tasks"
fi

if [ -n "${REDIS_URL:-}" ]; then
  "$BIN/daphne" --bind "$HOST" --port "$PORT" controlplane.asgi:application & pids+=($!)
else
  # No beat, no worker: the periodic tasks (alert evaluation, metric rollups) run in the server's own process,
  # where the in-memory channel layer can carry their events to browsers.
  "$BIN/python" manage.py run_periodic --serve "$HOST:$PORT" & pids+=($!)
fi
for _ in $(seq 50); do (echo > "/dev/tcp/$HOST/$PORT") 2>/dev/null && break; sleep 0.2; done
if [ "${DEMO_FLEET:-1}" != "0" ]; then
  "$BIN/python" manage.py demo_fleet --control-plane "ws://$HOST:$PORT/ws/agent/" --qps "${DEMO_QPS:-3}" & pids+=($!)
fi

cat <<BANNER

  Inference control plane is starting at  http://$HOST:$PORT/
  Mode: $mode
  Demo logins (user / password):
    agent   agent / agent-demo-pass     edit templates and whitelists, save versions
    sre     sre / sre-demo-pass         also publish, roll back
    oncall  oncall / oncall-demo-pass   read everything
    admin   admin / admin-demo-pass     everything, plus users
  Fleet:    http://$HOST:$PORT/fleet/  (simulated nodes: their numbers come from the simulator, not vLLM)
  Gateways: every /v1 call needs a client key (a pool's page issues them); the demo fleet prints its own below.
  API docs: http://$HOST:$PORT/api/v1/docs/   Stop with Ctrl-C.

BANNER
wait -n

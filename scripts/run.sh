#!/usr/bin/env bash
# Starts the control plane: one ASGI server (HTTP + WebSocket); with REDIS_URL also a Celery worker and beat,
# without it the periodic tasks inside the server's process (manage.py run_periodic --serve).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
# Log lines in the order they happen, also when the output goes to a pipe or a file.
export PYTHONUNBUFFERED=1
# Every child is tied to this script (engine_node/lifetime.py): it gets SIGTERM if the script dies, even by SIGKILL.
# (A prefix, not a function: a function would run in a subshell between this script and the child.)
TIED=("$BIN/python" -m engine_node.lifetime "$$" TERM)
pids=()
stopped=0
# Ctrl-C, SIGTERM (also from `make`, which passes it on) or a child that exits: SIGTERM to every child, which stops
# its own children (the demo fleet its agents, each agent its simulator); SIGKILL to any still running after 15 s.
stop() {
  [ "$stopped" = 1 ] && return
  stopped=1
  trap '' INT TERM
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 150); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap stop EXIT

if [ -n "${REDIS_URL:-}" ]; then
  mkdir -p var
  "${TIED[@]}" "$BIN/celery" -A controlplane worker --loglevel INFO --concurrency 2 & pids+=($!)
  "${TIED[@]}" "$BIN/celery" -A controlplane beat --loglevel INFO --schedule var/celerybeat-schedule & pids+=($!)
  mode="Postgres/Redis: ${DATABASE_URL:+DATABASE_URL set}${DATABASE_URL:-SQLite (DATABASE_URL unset)}, Redis channel layer and Celery broker"
else
  mode="embedded: ${DATABASE_URL:+DATABASE_URL set}${DATABASE_URL:-SQLite in ${CONTROLPLANE_VAR_DIR:-var}/}, in-memory channel layer, in-process tasks"
fi

if [ -n "${REDIS_URL:-}" ]; then
  "${TIED[@]}" "$BIN/daphne" --bind "$HOST" --port "$PORT" controlplane.asgi:application & pids+=($!)
else
  # No beat, no worker: the periodic tasks (alert evaluation, metric rollups) run in the server's own process,
  # where the in-memory channel layer can carry their events to browsers.
  "${TIED[@]}" "$BIN/python" manage.py run_periodic --serve "$HOST:$PORT" & pids+=($!)
fi
for _ in $(seq 50); do (echo > "/dev/tcp/$HOST/$PORT") 2>/dev/null && break; sleep 0.2; done
if [ "${DEMO_FLEET:-1}" != "0" ]; then
  "${TIED[@]}" "$BIN/python" manage.py demo_fleet --control-plane "ws://$HOST:$PORT/ws/agent/" --qps "${DEMO_QPS:-3}" & pids+=($!)
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
  API docs: http://$HOST:$PORT/api/v1/docs/   Stop with Ctrl-C (or SIGTERM): every process stops within seconds.

BANNER
wait -n

# The engine-node agent beside vLLM, on vLLM's own image: the agent supervises `vllm.entrypoints.openai.api_server`
# in the same container (it starts, drains, restarts and cleans it up) and serves the gateway on port 9000; the
# engine listens on 127.0.0.1 only. Build from the repository root:
#   docker build -f deploy/agent.Dockerfile -t llm-engine-node:dev .
FROM vllm/vllm-openai:v0.32.0

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ENGINE_NODE_BACKEND=vllm \
    ENGINE_NODE_ENGINE_PYTHON=python3 \
    ENGINE_NODE_HOST=0.0.0.0 \
    ENGINE_NODE_PORT=9000 \
    ENGINE_NODE_STATE_DIR=/var/lib/engine-node

WORKDIR /opt/engine-node
# The agent's own packages only: vLLM and PyTorch come with the base image.
COPY requirements-engine.txt ./
RUN pip install -r requirements-engine.txt
COPY engine_node ./engine_node

RUN useradd --uid 10002 --no-create-home --shell /usr/sbin/nologin engine-node \
    && mkdir -p /var/lib/engine-node && chown engine-node /var/lib/engine-node
USER 10002

EXPOSE 9000
HEALTHCHECK --interval=10s --timeout=3s --start-period=600s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9000/healthz', timeout=2)"]
# vLLM's image starts its own server by default; here the agent does, with the flags the control plane pushes.
ENTRYPOINT ["python3", "-m", "engine_node"]

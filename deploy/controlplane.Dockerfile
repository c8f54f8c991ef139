# The control plane: one image for the ASGI server (HTTP + WebSocket), the Celery worker, beat and migrations; the
# command picks the role (deploy/compose.yaml, deploy/kubernetes/). Build from the repository root:
#   docker build -f deploy/controlplane.Dockerfile -t llm-controlplane:dev .
FROM python:3.11.14-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CONTROLPLANE_VAR_DIR=/app/var

WORKDIR /app
COPY requirements.txt requirements-engine.txt ./
RUN pip install -r requirements.txt

# The control plane checks templates and explains decisions with the gateway's own policy code (engine_node.policy).
COPY manage.py ./
COPY controlplane ./controlplane
COPY engine_node ./engine_node
COPY templates ./templates
COPY static ./static
# Static files are collected at build time (no database is needed for it); WhiteNoise serves them.
RUN DJANGO_SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput -v0

RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin controlplane \
    && mkdir -p /app/var && chown controlplane /app/var
USER 10001

EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "--proxy-headers", "controlplane.asgi:application"]

"""Operations control plane for LLM inference on vLLM."""

from controlplane.celery import app as celery_app

__all__ = ["celery_app"]

"""The agent that runs on each GPU host next to vLLM; it never imports Django or the control plane."""

__version__ = "0.1.0"

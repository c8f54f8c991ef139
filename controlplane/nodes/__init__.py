"""Pools of engine nodes and the template version each pool should run."""

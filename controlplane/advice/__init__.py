"""Tuning suggestions: the report's rules on a pool's recent figures, and what the impact records show worked."""

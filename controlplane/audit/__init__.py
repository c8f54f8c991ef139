"""The append-only record of every change: who, when, what, before and after, and why."""

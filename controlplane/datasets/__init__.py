"""Labelled datasets, the intent models trained on them, and which model each pool's gateway uses."""

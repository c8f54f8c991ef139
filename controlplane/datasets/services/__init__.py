"""Every write to intent datasets, models and releases."""

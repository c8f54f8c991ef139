"""Every write to pools and engine nodes."""

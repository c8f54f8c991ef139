"""Every write to templates, versions and whitelists."""

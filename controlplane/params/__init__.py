"""Parameter templates, their immutable versions, and the whitelists they reference."""

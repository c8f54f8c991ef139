"""People, their roles, and what each role may do."""

"""Clean-ups on generated IR."""

"""Analyses on the typed IR; each stores what it finds on the Function (`fn.facts`)."""

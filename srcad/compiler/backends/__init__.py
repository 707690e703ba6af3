"""Targets: print IR as source, compile it, cache it."""

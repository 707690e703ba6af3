"""Reverse mode on the IR: the rule table, the save policy and the reverse transform."""

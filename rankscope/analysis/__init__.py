"""Analyses: each declares its name, inputs and a run function returning tables and findings."""

"""Helpers shared by tests (fixtures builders, reference implementations' adapters)."""

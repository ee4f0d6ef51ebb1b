"""Adapters to everything outside the process: one module per outside thing."""

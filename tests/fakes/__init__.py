"""Real-protocol fake servers for tests (127.0.0.1 only)."""

"""Query graph: a question becomes a cited answer (or a clarifying question, or a refusal)."""

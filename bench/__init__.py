"""Benchmarks: retrieval quality against baselines (`bench.retrieval`) and speed at scale (`bench.speed`)."""

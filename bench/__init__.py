"""Benchmarks of the selector against its baselines, on the same data in the same run."""

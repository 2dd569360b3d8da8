"""Benchmarks of django_rl against its floors and its peers (see docs/performance.md)."""

"""Benchmarks of agent_persistence: figures printed beside raw-SQL baselines, never timed tests.

Run them from the repository root with ``python -m benchmarks <name>``; see
``benchmarks/README.md`` for what each figure measures.
"""

from __future__ import annotations

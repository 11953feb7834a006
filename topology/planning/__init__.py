"""Planning: the logical tree becomes a plan of stages (one operator each), with fast paths chosen
by rule, columns pruned, and stages fused.

A room of docs/architecture.md; users import from ``topology`` only.
"""

"""Running a plan: inline in one process, or on Ray (deploy, feeding, step hosts), the handles of
running queries and what their steps report.

A room of docs/architecture.md; users import from ``topology`` only.
"""

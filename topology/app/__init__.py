"""The applications: the cedar command line and the demo.

A room of docs/architecture.md; users import from ``topology`` only.
"""

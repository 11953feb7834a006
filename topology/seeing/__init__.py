"""Seeing into queries: why (no output yet), the event-flow debugger, timeline pictures, the web
view and cedar check.

A room of docs/architecture.md; users import from ``topology`` only.
"""

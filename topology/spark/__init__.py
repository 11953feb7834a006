"""Spark: DataFrames as sources (batch and streaming) and sinks that write DataFrames and tables.

A room of docs/architecture.md; users import from ``topology`` only.
"""

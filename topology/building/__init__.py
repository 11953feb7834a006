"""Building a query: the logical nodes and the facts they state, the checks of the builder's
arguments, the clock of a query's times, and the readers of its sources' data.

A room of docs/architecture.md; users import from ``topology`` only.
"""

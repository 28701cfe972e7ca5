"""Analyzers over fast-path record batches: capture statistics, conversations/RC analysis, export."""

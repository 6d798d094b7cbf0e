"""Explanations offline: contributions of a model version on a data file (contributions), the
global view over many rows (global_view) and its HTML rendering (html_report)."""

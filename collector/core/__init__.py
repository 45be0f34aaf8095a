"""Shared vocabulary every part may import: parse shapes, metric roles, runtime files."""

"""What to do with a run: checkpoint recommendation and the health checklist."""

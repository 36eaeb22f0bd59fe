"""One module per dashboard tab; each draws what dashboard.engine computes for a runs.Selection."""

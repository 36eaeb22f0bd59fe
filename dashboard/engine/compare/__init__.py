"""The compare floor: several runs (same work? speed, diffs, op alignment, the review's tables and
findings, the bootstrap, the gate and its verdict formats, ranks). Imports only the floors below
it.
"""

"""What the tables of the rules floor share."""

from __future__ import annotations


def joined(patterns: list[str]) -> str:
    """One regular expression that matches where any of `patterns` does."""
    return "|".join(f"(?:{p})" for p in patterns) or "(?!)"

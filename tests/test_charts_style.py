"""The charts' one style (dashboard/charts/style.py) against the engine's names."""

from __future__ import annotations

from dashboard.charts import style
from dashboard.engine.rules.families import FAMILIES


def test_every_family_the_engine_names_has_its_colour_and_no_other():
    """The colour table is in the charts' order (legends, stacks), so it types the names; the
    engine's rules (rules.FAMILIES) say which names there are."""
    assert set(style.FAMILY_COLORS) == set(FAMILIES)
    assert style.FAMILY_ORDER == tuple(style.FAMILY_COLORS)

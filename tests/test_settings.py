"""One table of environment variables (dashboard/engine/settings.py): the docs page is generated from
it, every ATTNSCOPE_ name in the code is in it, and the readers honour it."""

from __future__ import annotations

import re
from pathlib import Path

from dashboard.engine import settings

ROOT = Path(__file__).resolve().parent.parent


def test_the_settings_page_is_the_generated_table():
    assert (ROOT / "docs" / "settings.md").read_text() == settings.markdown()


def test_every_attnscope_variable_in_the_code_is_in_the_table_and_every_row_is_used():
    named = set()
    for folder in ("dashboard", "collectors"):
        for path in (ROOT / folder).rglob("*.py"):
            named |= set(re.findall(r"_?ATTNSCOPE_[A-Z_]+[A-Z]", path.read_text()))
    table = {s.name for s in settings.SETTINGS}
    assert named - table == set()
    unused = {
        s.name
        for s in settings.SETTINGS
        if s.name not in named
        and not any(s is getattr(settings, attr) for attr in dir(settings) if attr.isupper() and attr != "SETTINGS")
    }
    assert unused == set()


def test_the_readers_take_their_values_from_the_table(tmp_path, monkeypatch):
    from dashboard.engine.load import json_limit
    from dashboard.engine.store import default_max_bytes, default_root

    monkeypatch.setenv(settings.MAX_JSON_BYTES.name, " 1234 ")
    monkeypatch.setenv(settings.STORE.name, str(tmp_path))
    assert json_limit() == 1234
    assert default_root() == tmp_path
    assert default_max_bytes({settings.STORE_MAX_BYTES.name: "5000"}) == 5000
    assert default_max_bytes({settings.STORE_MAX_BYTES.name: "  "}) is None

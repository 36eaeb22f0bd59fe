"""One table of environment variables (dashboard/engine/model/settings.py): the docs page is generated from
it, every ATTNSCOPE_ name in the code is in it, and the readers honour it."""

from __future__ import annotations

import pytest

import re
from pathlib import Path

from dashboard.engine.model import settings

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
    from dashboard.engine.store.store import default_max_bytes, default_root

    monkeypatch.setenv(settings.MAX_JSON_BYTES.name, " 1234 ")
    monkeypatch.setenv(settings.STORE.name, str(tmp_path))
    assert json_limit() == 1234
    assert default_root() == tmp_path
    assert default_max_bytes({settings.STORE_MAX_BYTES.name: "5000"}) == 5000
    assert default_max_bytes({settings.STORE_MAX_BYTES.name: "  "}) is None


def test_the_byte_settings_are_parsed_in_one_place_and_their_callers_keep_their_advice(monkeypatch):
    from dashboard.catalog import upload_limit
    from dashboard.engine.model import settings
    from dashboard.engine.model.errors import TraceError
    from dashboard.engine.load.limits import json_limit
    from dashboard.engine.store.store import default_max_bytes

    bytes_settings = (settings.MAX_JSON_BYTES, settings.STORE_MAX_BYTES, settings.MAX_UPLOAD_BYTES)
    for setting in bytes_settings:
        assert setting.whole_bytes({}) is None and setting.whole_bytes({setting.name: "  "}) is None
        assert setting.whole_bytes({setting.name: " 2048 "}) == 2048
        for bad in ("0", "-5", "1.5", "4GB"):
            with pytest.raises(settings.SettingError) as caught:
                setting.whole_bytes({setting.name: bad})
            assert str(caught.value) == f"{setting.name}={bad!r} is not a whole number of bytes above 0"
    monkeypatch.setenv("ATTNSCOPE_MAX_JSON_BYTES", "4GB")
    with pytest.raises(
        TraceError,
        match=r"^run.json: not read: ATTNSCOPE_MAX_JSON_BYTES='4GB' is not a whole number .* \(e\.g\. 8589934592 for 8 GiB",
    ):
        json_limit(label="run.json")
    with pytest.raises(TraceError, match=r"ATTNSCOPE_STORE_MAX_BYTES='x' .* unset it for no cap\)$"):
        default_max_bytes({"ATTNSCOPE_STORE_MAX_BYTES": "x"})
    assert upload_limit(100, {"ATTNSCOPE_MAX_UPLOAD_BYTES": "-1"}) == (
        100,
        "ATTNSCOPE_MAX_UPLOAD_BYTES='-1' is not a whole number of bytes above 0; uploads are limited to 100 B, the server's own limit",
    )
    assert upload_limit(100, {"ATTNSCOPE_MAX_UPLOAD_BYTES": "50"}) == (50, None)


def test_path_lists_split_on_the_path_separator_and_drop_blanks():
    import os

    from dashboard.engine.model import settings

    assert settings.TRACES.paths({}) == [] and settings.RULES.paths({"ATTNSCOPE_RULES": " "}) == []
    given = {"ATTNSCOPE_TRACES": f" a/b {os.pathsep}{os.pathsep} c "}
    assert settings.TRACES.paths(given) == ["a/b", "c"]

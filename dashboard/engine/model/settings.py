"""Every environment variable attnscope reads, in one table: its name, default, unit and meaning,
and the module that checks its value. The modules take their variable's name from here
(`settings.MAX_JSON_BYTES.name`, ...), so a name exists once; docs/settings.md is generated from
this table (`python -m dashboard.engine.model.settings > docs/settings.md`), and a test keeps the two equal
and checks that every `ATTNSCOPE_` name in the code is one of these.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Setting:
    """One environment variable: name, default (as the user would write it, or what happens
    when it is unset), meaning (one paragraph), checked_by (the module that reads and checks it)."""

    name: str
    default: str
    meaning: str
    checked_by: str

    def value(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The variable's text with surrounding blanks removed; None when unset or blank."""
        raw = (os.environ if environ is None else environ).get(self.name)
        return raw.strip() if raw is not None and raw.strip() else None

    def whole_bytes(self, environ: Mapping[str, str] | None = None) -> int | None:
        """The variable as a number of bytes: None when unset or blank; a SettingError (one line,
        naming the variable and what it holds) when it is not a whole number above 0. The one
        parser of MAX_JSON_BYTES, STORE_MAX_BYTES and MAX_UPLOAD_BYTES; each caller adds what to do."""
        raw = self.value(environ)
        if raw is None:
            return None
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value <= 0:
            raise SettingError(f"{self.name}={raw!r} is not a whole number of bytes above 0")
        return value

    def paths(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """The variable as a list of paths separated by the path separator (':' here), blanks
        dropped; [] when unset. TRACES and RULES."""
        raw = self.value(environ)
        return [part.strip() for part in raw.split(os.pathsep) if part.strip()] if raw else []


class SettingError(ValueError):
    """A variable whose value cannot be used: str() is one line naming it and its value."""


MAX_JSON_BYTES = Setting(
    "ATTNSCOPE_MAX_JSON_BYTES",
    "4294967296 (4 GiB)",
    "The most JSON bytes a trace may hold (a .json.gz is measured inflated): past it a file is refused with one "
    "line instead of exhausting memory (a gzip bomb, or a mistake). Whole bytes above 0.",
    "dashboard/engine/load/limits.py",
)
STORE = Setting(
    "ATTNSCOPE_STORE",
    "$XDG_CACHE_HOME/attnscope, else ~/.cache/attnscope",
    "The trace store's folder: parsed traces (Parquet) and the SQLite catalog, shared by the CLI and the "
    "dashboard (`--store DIR` overrides it for one command).",
    "dashboard/engine/store/store.py",
)
STORE_MAX_BYTES = Setting(
    "ATTNSCOPE_STORE_MAX_BYTES",
    "unset: no cap",
    "The store's size cap in bytes: past it the least recently opened traces that are not pinned are removed. "
    "Whole bytes above 0.",
    "dashboard/engine/store/store.py",
)
NO_STORE = Setting(
    "ATTNSCOPE_NO_STORE",
    "unset: the dashboard writes parsed traces to the store",
    "Set to anything but an empty text to keep the dashboard's parsed traces in memory only.",
    "dashboard/catalog.py",
)
MAX_UPLOAD_BYTES = Setting(
    "ATTNSCOPE_MAX_UPLOAD_BYTES",
    "unset: Streamlit's server.maxUploadSize",
    "The largest upload the dashboard accepts, in bytes (a team server's limit).",
    "dashboard/catalog.py",
)
TRACES = Setting(
    "ATTNSCOPE_TRACES",
    "unset: the bundled collections only",
    "Extra trace files or folders the dashboard opens at start, separated by the path separator (':' on "
    "Linux); the same as `streamlit run dashboard/app.py -- PATH ...`.",
    "dashboard/catalog_sources.py",
)
RULES = Setting(
    "ATTNSCOPE_RULES",
    "unset: the built-in name rules only",
    "Files of extra name rules (TOML or JSON, separated by the path separator): [[backend]], [[family]] and "
    "[[collective]] rows, each a pattern with its reason, tried before the built-in rows of the same table "
    "(docs/design.md, section Name rules). Read once per process; a file that cannot be used is one error line "
    "naming it and the problem.",
    "dashboard/engine/rules/user.py",
)
SLICE_WORKER = Setting(
    "_ATTNSCOPE_SLICE_WORKER",
    "set by attnscope itself",
    "Internal: marks the worker processes that read a large trace's slices (they keep polars' own allocator "
    "setting). Not for users.",
    "dashboard/engine/model/slice_workers.py",
)

SETTINGS: tuple[Setting, ...] = (
    MAX_JSON_BYTES,
    STORE,
    STORE_MAX_BYTES,
    NO_STORE,
    MAX_UPLOAD_BYTES,
    TRACES,
    RULES,
    SLICE_WORKER,
)
"""Every variable, in the order docs/settings.md lists them."""


def markdown() -> str:
    """docs/settings.md: the table of every variable."""
    lines = [
        "# Settings",
        "",
        "attnscope reads these environment variables; nothing else configures it besides the command-line",
        "options (see [the CLI reference](cli.md)). This page is generated from `dashboard/engine/model/settings.py`",
        "(`python -m dashboard.engine.model.settings > docs/settings.md`); a test keeps them equal.",
        "",
        "| variable | default | meaning | checked by |",
        "|---|---|---|---|",
    ]
    for s in SETTINGS:
        lines.append(f"| `{s.name}` | {s.default} | {s.meaning} | `{s.checked_by}` |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")

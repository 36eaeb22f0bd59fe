"""A user's rows (ATTNSCOPE_RULES: TOML or JSON files, read once) and the tables with them first:
backend_table, family_rules, and the lookups that read them (attention_backend, is_fused_attention,
is_collective_op). The lookups live here, above the tables, because a user's rows are checked
against the built-in ones (a [[backend]] row names a BACKEND_TABLE row)."""

from __future__ import annotations

import functools
import json
import re
import sys
from dataclasses import dataclass

from dashboard.engine.model import settings
from dashboard.engine.rules.backends import BACKEND_NAMES, BACKEND_TABLE, AttentionBackend
from dashboard.engine.rules.collectives import COLLECTIVE_OPS, Collective
from dashboard.engine.rules.common import joined as _joined
from dashboard.engine.rules.families import FAMILIES, FAMILY_RULES, FamilyRule
from dashboard.engine.rules.names import parse


class RulesError(ValueError):
    """A rules file that cannot be used; its text is one line naming the variable, the file and the problem."""


@dataclass(frozen=True)
class UserRules:
    """The rows of a user's rules files (read_rules): each table's rows in file order."""

    files: tuple[str, ...] = ()
    backends: tuple[AttentionBackend, ...] = ()
    families: tuple[FamilyRule, ...] = ()
    collectives: tuple[Collective, ...] = ()


# Each section of a rules file: its keys (required ones first) and what a row becomes.
SECTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "backend": (("backend", "reason"), ("op", "kernel", "source")),
    "family": (("family", "name", "reason"), ("template", "source")),
    "collective": (("pattern", "reason"), ("kernel", "op", "source")),
}


def read_rules(paths: list[str]) -> UserRules:
    """The rows of the rules files `paths` (TOML or JSON by suffix), in order. A file holds lists
    of rows under the section names of SECTIONS:

        [[backend]]     backend (a BACKEND_TABLE name), op and/or kernel (regular expressions over
                        the function name, case-sensitive), reason, source
        [[family]]      family (a FAMILIES name but 'fused attention': that is a backend row's),
                        name (regular expression over the function name, case-insensitive),
                        template (over the template arguments; optional), reason, source
        [[collective]]  pattern (case-insensitive), kernel / op (true by default: the kernel
                        family, the copies' op chains), reason, source

    source defaults to the file's path. Raises RulesError (one line) for a file that cannot be read,
    is not TOML/JSON, or holds a section, key or value these tables do not take."""
    rows: dict[str, list] = {"backend": [], "family": [], "collective": []}
    for path in paths:
        doc = _read_document(path)
        for section, entries in doc.items():
            if section not in SECTIONS:
                _fail(path, f"unknown section {section!r} (known: {', '.join(SECTIONS)})")
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                _fail(
                    path,
                    f"{section!r} must be a list of rows ([[{section}]] tables in TOML, a list of objects in JSON)",
                )
            for i, entry in enumerate(entries, start=1):
                rows[section].append(_row(path, section, i, entry))
    return UserRules(tuple(paths), tuple(rows["backend"]), tuple(rows["family"]), tuple(rows["collective"]))


def _fail(path: str, problem: str) -> None:
    raise RulesError(" ".join(f"{settings.RULES.name}: {path}: {problem}".split()))


def _read_document(path: str) -> dict:
    if not path.endswith((".toml", ".json")):
        _fail(path, "a rules file must be .toml or .json")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        _fail(path, f"cannot be read ({exc.strerror or exc})")
    try:
        if path.endswith(".json"):
            doc = json.loads(data)
        else:
            doc = _toml().loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        _fail(path, "is not UTF-8 text")
    except RulesError:
        raise
    except ValueError as exc:  # json.JSONDecodeError and tomllib.TOMLDecodeError are ValueErrors
        _fail(path, f"is not valid {'JSON' if path.endswith('.json') else 'TOML'} ({exc})")
    if not isinstance(doc, dict):
        _fail(path, "must hold sections of rows (a JSON object, or [[family]] ... tables in TOML)")
    return doc


def _toml():
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    try:
        import tomli  # type: ignore[import-not-found]
    except ImportError:
        raise RulesError(
            f"{settings.RULES.name}: reading a .toml rules file needs Python 3.11 or the tomli package "
            "(pip install tomli); or write the rules as .json"
        ) from None
    return tomli


@dataclass(frozen=True)
class _Entry:
    """One row of a rules file as written, read with the file's name and the row's place in errors."""

    path: str
    where: str
    entry: dict

    def text(self, key: str, default: str = "") -> str:
        value = self.entry.get(key, default)
        if not isinstance(value, str):
            _fail(self.path, f"{self.where}: {key!r} must be text")
        return value

    def pattern(self, key: str, flags: int) -> str:
        value = self.text(key)
        try:
            re.compile(value, flags)
        except re.error as exc:
            _fail(self.path, f"{self.where}: {key!r} is not a regular expression ({exc})")
        return value

    def flag(self, key: str) -> bool:
        value = self.entry.get(key, True)
        if not isinstance(value, bool):
            _fail(self.path, f"{self.where}: {key!r} must be true or false")
        return value


def _row(path: str, section: str, i: int, entry: dict):
    required, optional = SECTIONS[section]
    where = f"{section} row {i}"
    for key in entry:
        if key not in required + optional:
            _fail(path, f"{where}: unknown key {key!r} (known: {', '.join(required + optional)})")
    for key in required:
        if key not in entry:
            _fail(path, f"{where}: {key!r} is missing")
    row = _Entry(path, where, entry)
    reason, source = row.text("reason").strip(), row.text("source", path)
    if not reason:
        _fail(path, f"{where}: 'reason' is empty (say why the row is right)")
    build = {"backend": _backend_row, "family": _family_row}.get(section, _collective_row)
    return build(row, reason, source)


def _backend_row(row: _Entry, reason: str, source: str) -> AttentionBackend:
    name = row.text("backend")
    builtin = next((b for b in BACKEND_TABLE if b.name == name), None)
    if builtin is None:
        _fail(row.path, f"{row.where}: {name!r} is not a backend (one of: {', '.join(BACKEND_NAMES)})")
    op, kernel = row.pattern("op", 0), row.pattern("kernel", 0)
    if not op and not kernel:
        _fail(row.path, f"{row.where}: give 'op' or 'kernel' (or both)")
    return AttentionBackend(name, op, kernel, builtin.library, builtin.vendor, builtin.fused, source, reason)


def _family_row(row: _Entry, reason: str, source: str) -> FamilyRule:
    family = row.text("family")
    if family not in FAMILIES or family == "fused attention":
        _fail(
            row.path,
            f"{row.where}: {family!r} is not a family (one of: {', '.join(f for f in FAMILIES if f != 'fused attention')}; "
            "attention kernels take a [[backend]] row)",
        )
    name = row.pattern("name", re.IGNORECASE)
    if not name:
        _fail(row.path, f"{row.where}: 'name' is empty")
    return FamilyRule(family, name, row.pattern("template", re.IGNORECASE), reason, source)


def _collective_row(row: _Entry, reason: str, source: str) -> Collective:
    kernel, op = row.flag("kernel"), row.flag("op")
    if not kernel and not op:
        _fail(row.path, f"{row.where}: 'kernel' and 'op' are both false: the row would match nothing")
    value = row.pattern("pattern", re.IGNORECASE)
    if not value:
        _fail(row.path, f"{row.where}: 'pattern' is empty")
    return Collective(value, kernel, op, reason, source)


def rule_files(environ: dict[str, str] | None = None) -> list[str]:
    """The files ATTNSCOPE_RULES names (os.pathsep-separated), in order; [] when unset."""
    return settings.RULES.paths(environ)


@functools.lru_cache(maxsize=1)
def user_rules() -> UserRules:
    """The rows of the files ATTNSCOPE_RULES names, read once per process (the first analysis that
    classifies a name reads them; the CLI and the dashboard read them at start, so a bad file is
    one line there). Raises RulesError."""
    paths = rule_files()
    return read_rules(paths) if paths else UserRules()


def backend_table() -> tuple[AttentionBackend, ...]:
    """BACKEND_TABLE with a user's rows first."""
    return user_rules().backends + BACKEND_TABLE


def family_rules() -> tuple[FamilyRule, ...]:
    """FAMILY_RULES with a user's rows first: their [[family]] rows, then their [[collective]]
    kernel rows as one 'communication' row."""
    mine = user_rules()
    kernels = [c.pattern for c in mine.collectives if c.kernel]
    collective = (FamilyRule("communication", _joined(kernels), "", "a user's [[collective]] rows", "ATTNSCOPE_RULES"),)
    return mine.families + (collective if kernels else ()) + FAMILY_RULES


@functools.lru_cache(maxsize=1)
def _collective_ops() -> re.Pattern[str]:
    mine = [c.pattern for c in user_rules().collectives if c.op]
    return re.compile(_joined(mine + [COLLECTIVE_OPS]), re.IGNORECASE)


def is_collective_op(name: str) -> bool:
    """True for a CPU op that is a collective or its staging (COLLECTIVES' op rows, a user's first)."""
    return _collective_ops().search(name) is not None


@functools.lru_cache(maxsize=1 << 16)
def attention_backend(name: str) -> AttentionBackend | None:
    """The backend_table() row an op or kernel name belongs to (first match: a user's rows, then
    BACKEND_TABLE), or None. The row's patterns are matched against the name's function name
    (names.parse), not the raw text."""
    qualname = parse(name).qualname
    return next((row for row in backend_table() if row.pattern.search(qualname)), None)


def is_fused_attention(name: str) -> bool:
    """True for the ops and kernels of a fused attention backend (every row but math)."""
    row = attention_backend(name)
    return row is not None and row.fused

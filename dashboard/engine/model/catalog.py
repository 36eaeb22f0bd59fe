"""The catalogue of analyses: what each per_trace analysis (model.trace.per_trace) returns, declared
once where the analysis is defined, and read by the kept analyses' writer and reader (store/kept.py),
the tests and the generated page docs/analyses.md. Light (no polars import): the store's kept
answers of the CLI read it without loading the analyses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Declared:
    """What a per_trace analysis returns, declared once (the catalogue of analyses, docs/analyses.md).
    Exactly one of: schema (a polars DataFrame's columns -> dtypes, in order: kept as Arrow, checked
    when written and read), json (the shape of a JSON-able answer, in words: kept as JSON) or
    returns (an object of the analyses' own, in words: kept only when it is plain JSON, as None)."""

    key: str
    doc: str
    schema: dict[str, Any] | None = None
    json: str | None = None
    returns: str | None = None

    @property
    def kind(self) -> str:
        """'table', 'json' or 'object'."""
        return "table" if self.schema is not None else "json" if self.json is not None else "object"


CATALOG: dict[str, Declared] = {}  # every per_trace analysis's declaration, by its key


def schema_problem(actual: Any, declared: dict[str, Any]) -> str | None:
    """Where a table's schema (a polars Schema or mapping) differs from the declared one: the first
    column missing, extra, out of place or of another dtype, in words; None when they are the same
    (names, order, dtypes)."""
    have = dict(actual)
    want = {name: dtype() if isinstance(dtype, type) else dtype for name, dtype in declared.items()}  # instances
    for place, (name, dtype) in enumerate(want.items()):
        if name not in have:
            return f"column {name!r} is missing"
        if have[name] != dtype:
            return f"column {name!r} is {have[name]}, declared {dtype}"
        if list(have).index(name) != place:
            return f"column {name!r} is at place {list(have).index(name)}, declared {place}"
    extra = [name for name in have if name not in want]
    return f"column {extra[0]!r} is not declared" if extra else None

"""The trace's names classified once: every distinct (category, name) of a trace with what the
rules say it is, and the predicates the analyses filter on instead of applying a pattern of
their own (Perfetto's way: one model, every question a query over it).

Columns of `name_classes(trace)` (CLASSES_SCHEMA), one row per distinct (cat, name):
- family: a device event's kernel family (rules.FAMILY_RULES, the fused attention rows of
  rules.BACKEND_TABLE first; a GPU memcpy is 'copy', a memset 'memset'), also for a cpu_op (a
  CPU-only trace's unit of work is a leaf cpu_op); null for other categories.
- backend: the attention implementation a cpu_op or kernel name belongs to (rules.BACKEND_TABLE's
  first row that claims it), else null.
- launch: for a host call that queues device work (model.trace.LAUNCH_CATEGORIES), 'graph' for a
  graph replay and 'kernel' for a kernel launch (rules.LAUNCH_CALLS), else null.
- op_kind: for a cpu_op or user annotation, what kind of op it is when it is not an op the
  model's code called: one of OP_KINDS (rules.ops.NOT_MODEL_OP_RULES' kinds, then 'metadata' for a
  view or allocation, then 'annotation' for a record_function mark), null for the model's op.

A name that two kinds' rows match takes the first kind of OP_KIND_ORDER, chosen so that each
reader's set of kinds (BOOKKEEPING_KINDS, WRAPPING_KINDS, ...) holds exactly the names its
pattern held before the table (tests/test_classes.py checks this on every real trace's names):
'CompiledFunctionBackward' is autograd before compiled graph, '## Call CompiledFxGraph ...' a
compiled region before bookkeeping.
"""

from __future__ import annotations

import functools
import re

import polars as pl

from dashboard.engine.model.trace import GPU_CATEGORIES, LAUNCH_CATEGORIES, Trace, names_by_category, per_trace
from dashboard.engine.rules import GRAPH_LAUNCH, KERNEL_LAUNCH, attention_backend, family_rules, is_fused_attention
from dashboard.engine.rules.names import parse
from dashboard.engine.rules.ops import ANNOTATION, METADATA_OPS, NOT_MODEL_KINDS, NOT_MODEL_OP_RULES

CLASSES_SCHEMA: dict[str, pl.DataType] = {
    "cat": pl.String(),
    "name": pl.String(),
    "family": pl.String(),
    "backend": pl.String(),
    "op_kind": pl.String(),
    "launch": pl.String(),
}

METADATA = "metadata"
ANNOTATION_KIND = "annotation"
OP_KINDS: tuple[str, ...] = NOT_MODEL_KINDS + (METADATA, ANNOTATION_KIND)
OP_KIND_ORDER: tuple[str, ...] = ("autograd", "compiled region", "compiled graph", "bookkeeping", "wrapper")
"""The not-the-model kinds in the order a name matching rows of two kinds takes (see the module's note)."""

# Each reader's kinds (the names rules.ops gave its pattern before the table).
BOOKKEEPING_KINDS = frozenset({"bookkeeping", "compiled region"})  # no work of their own (rules.ops.BOOKKEEPING_OPS)
WORKLESS_KINDS = BOOKKEEPING_KINDS | {METADATA}  # not a CPU-only trace's unit of work
WRAPPING_KINDS = frozenset(set(NOT_MODEL_KINDS) | {ANNOTATION_KIND})  # never a copy's origin (copies.is_wrapper)
AUTOGRAD_KINDS = frozenset({"autograd"})
NOT_MODEL_FINGERPRINT_KINDS = BOOKKEEPING_KINDS | {METADATA, "autograd", "compiled graph"}  # fingerprint's op set
COMPILED_REGION_KINDS = frozenset({"compiled region"})

FAMILY_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "cpu_op")
BACKEND_CATEGORIES = ("cpu_op", "kernel")
OP_CATEGORIES = ("cpu_op", "user_annotation")
FIXED_FAMILIES = {"gpu_memcpy": "copy", "gpu_memset": "memset"}


@functools.lru_cache(maxsize=1)
def _family_regex() -> tuple[tuple[str, re.Pattern[str], re.Pattern[str] | None], ...]:
    """rules.family_rules() compiled, once per process (a user's rows read then)."""
    return tuple(
        (r.family, re.compile(r.name, re.IGNORECASE), re.compile(r.template, re.IGNORECASE) if r.template else None)
        for r in family_rules()
    )


@functools.lru_cache(maxsize=1 << 16)
def family_of(name: str) -> str:
    """The family of one kernel or op name: 'fused attention' when a fused row of
    rules.backend_table() claims it, else the first rules.family_rules() row that matches (a
    user's rows, then FAMILY_RULES), else 'other'."""
    if is_fused_attention(name):
        return "fused attention"
    parsed = parse(name)
    qualname, template = parsed.qualname, parsed.template_text
    for family, name_re, template_re in _family_regex():
        if name_re.search(qualname) and (template_re is None or template_re.search(template)):
            return family
    return "other"


@functools.lru_cache(maxsize=1)
def _kind_regex() -> tuple[tuple[str, re.Pattern[str]], ...]:
    by_kind = {kind: [r.pattern for r in NOT_MODEL_OP_RULES if r.kind == kind] for kind in OP_KIND_ORDER}
    return tuple((kind, re.compile("^(?:" + "|".join(pats) + ")")) for kind, pats in by_kind.items() if pats)


@functools.lru_cache(maxsize=1 << 16)
def op_kind_of(name: str) -> str | None:
    """What kind of op `name` is when it is not the model's (one of OP_KINDS), else None: the
    first kind of OP_KIND_ORDER whose rows match, then a view or allocation (METADATA_OPS), then
    a record_function mark (ANNOTATION)."""
    for kind, pattern in _kind_regex():
        if pattern.search(name):
            return kind
    if re.search(METADATA_OPS, name):
        return METADATA
    if ANNOTATION.search(name):
        return ANNOTATION_KIND
    return None


def _families(names: pl.Series) -> pl.Series:
    """family_of over a column: each distinct name classified once, then mapped back."""
    names = names.cast(pl.String)
    distinct = names.drop_nulls().unique().to_list()
    return names.replace_strict({n: family_of(n) for n in distinct}, default="other", return_dtype=pl.String)


def family_expr(name: pl.Expr, cat: pl.Expr | None = None) -> pl.Expr:
    """A polars expression that maps the names of any frame to a kernel family (see family_of;
    family_column does the same for a trace's own events from name_classes). GPU memcpy
    events are 'copy' and GPU memset events are 'memset' whatever their name."""
    by_name = name.map_batches(_families, return_dtype=pl.String, is_elementwise=True)
    if cat is None:
        return by_name
    return (
        pl.when(cat == "gpu_memcpy")
        .then(pl.lit("copy"))
        .when(cat == "gpu_memset")
        .then(pl.lit("memset"))
        .otherwise(by_name)
    )


LAUNCH_KINDS = (("graph", re.compile(GRAPH_LAUNCH)), ("kernel", re.compile(KERNEL_LAUNCH)))


def launch_of(name: str) -> str | None:
    """'graph' for a graph replay call, 'kernel' for a kernel launch call (rules.LAUNCH_CALLS), else None."""
    return next((kind for kind, pattern in LAUNCH_KINDS if pattern.search(name)), None)


def backend_of(name: str) -> str | None:
    """The attention backend whose BACKEND_TABLE row claims `name` (an op or kernel), else None."""
    row = attention_backend(name)
    return row.name if row is not None else None


@per_trace(schema=CLASSES_SCHEMA)
def name_classes(trace: Trace) -> pl.DataFrame:
    """Every distinct (category, name) of the trace with its family, backend, op kind and launch kind
    (CLASSES_SCHEMA; see the module's note), sorted by category then name."""
    rows = []
    for cat, names in names_by_category(trace).items():
        for name in names:
            family = FIXED_FAMILIES.get(cat) or (family_of(name) if cat in FAMILY_CATEGORIES else None)
            backend = backend_of(name) if cat in BACKEND_CATEGORIES else None
            kind = op_kind_of(name) if cat in OP_CATEGORIES else None
            launch = launch_of(name) if cat in LAUNCH_CATEGORIES else None
            rows.append((cat, name, family, backend, kind, launch))
    return pl.DataFrame(rows, schema=CLASSES_SCHEMA, orient="row")


def names_where(trace: Trace, column: str, values: frozenset[str] | set[str], cats: tuple[str, ...] = ()) -> list[str]:
    """The distinct names (of `cats`, or of every category) whose `column` is one of `values`, sorted."""
    table = name_classes(trace)
    if cats:
        table = table.filter(pl.col("cat").is_in(list(cats)))
    return sorted(set(table.filter(pl.col(column).is_in(list(values)))["name"].to_list()))


def name_is(trace: Trace, column: str, values: frozenset[str] | set[str], cats: tuple[str, ...] = ()) -> pl.Expr:
    """`pl.col("name")` is one of the names whose `column` is one of `values` (see names_where):
    a test over the Categorical names' codes, never a pattern run per event."""
    return pl.col("name").is_in(names_where(trace, column, values, cats))


def family_column(trace: Trace, names: pl.Series) -> pl.Expr:
    """Each event's family from name_classes (by category and name; null where it has none):
    a GPU memcpy is 'copy', a memset 'memset', a kernel or cpu_op its name's family. `names` is
    the name column of the frame the expression runs on (rows of the trace's events): each of its
    distinct names is looked up once and the rows mapped by their Categorical codes, not every
    row's name cast to text and looked up (40 ms of 470k kernels)."""
    table = name_classes(trace).filter(pl.col("cat").is_in(["kernel", "cpu_op"]))
    mapping = dict(zip(table["name"].to_list(), table["family"].to_list()))
    distinct = names.unique()  # the frame's own codes (polars before 2.0 numbers each column's apart)
    families = distinct.cast(pl.String).replace_strict(mapping, default="other", return_dtype=pl.String)
    by_name = (
        pl.col("name")
        .to_physical()
        .replace_strict(distinct.to_physical(), families, default="other", return_dtype=pl.String)
    )
    return (
        pl.when(pl.col("cat") == "gpu_memcpy")
        .then(pl.lit("copy"))
        .when(pl.col("cat") == "gpu_memset")
        .then(pl.lit("memset"))
        .otherwise(by_name)
    )


__all__ = ["GPU_CATEGORIES", "name_classes", "family_of", "op_kind_of", "backend_of", "names_where", "name_is"]

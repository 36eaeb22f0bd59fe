"""The Trace: one normalized model of a torch.profiler trace that every analysis asks questions of.

Units: every `*_ns` column is an integer number of nanoseconds relative to the trace start
(the earliest complete event); `bytes` are bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import polars as pl

from dashboard.engine.model.constants import TRACE_TABLES as TABLES
from dashboard.engine.model.constants import MISSING
from dashboard.engine.model.catalog import CATALOG, Declared

# Categories after normalization (see load.CATEGORIES, the one table of categories and their roles).
# Device work of every accelerator is one of these three (MTIA's mtia_ccp_events become kernel).
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# Host calls that queue device work, tied to it by args.correlation; other vendors' keep their names.
LAUNCH_CATEGORIES = (
    "cuda_runtime",
    "cuda_driver",
    "mtia_runtime",
    "glow_runtime",
    "xpu_runtime",
    "xpu_driver",
    "hpu_op",
    "privateuse1_runtime",
    "privateuse1_driver",
)

# The events table's columns (Trace.events, see Trace), in the loader's order: what an analysis
# that hands back events' rows (kernels.leaf_work_ops) or some of their columns declares.
EVENTS_SCHEMA: dict[str, Any] = {
    "id": pl.Int64,
    "cat": pl.Categorical,
    "name": pl.Categorical,
    "pid": pl.Categorical,
    "tid": pl.Categorical,
    "dur_ns": pl.Int64,
    "stream": pl.Int64,
    "device": pl.Int64,
    "correlation": pl.Int64,
    "external_id": pl.Int64,
    "bytes": pl.Int64,
    "input_dims": pl.Categorical,
    "input_types": pl.Categorical,
    "concrete_inputs": pl.Categorical,
    "ts_ns": pl.Int64,
    "kind": pl.Categorical,
    "depth": pl.Int32,
    "parent": pl.Int64,
    "launch": pl.Int64,
    "step": pl.Int64,
}


def events_columns(*names: str, **retyped: Any) -> dict[str, Any]:
    """Some of EVENTS_SCHEMA's columns, in the order named, each with the events' dtype unless
    `retyped` gives another (a name read as text: name=pl.String)."""
    return {name: retyped.get(name, EVENTS_SCHEMA[name]) for name in names}


# The memory table's columns (Trace.memory): one row per "[memory]" instant event, which a trace
# recorded with profile_memory=True holds for every allocation and free. Units: ts_ns in ns from
# the trace start (the events' origin), the rest in bytes except the ids; see Trace.memory.
MEMORY_SCHEMA: dict[str, Any] = {
    "ts_ns": pl.Int64,
    "pid": pl.Categorical,
    "tid": pl.Categorical,
    "device_type": pl.Int32,
    "device_id": pl.Int32,
    "bytes": pl.Int64,
    "total_allocated": pl.Int64,
    "total_reserved": pl.Int64,
    "addr": pl.Int64,
    "step": pl.Int64,
    "op": pl.Categorical,
}


def empty_memory() -> pl.DataFrame:
    """The memory table of a trace without memory events: no rows, MEMORY_SCHEMA's columns."""
    return pl.DataFrame(schema=MEMORY_SCHEMA)


@dataclass(frozen=True)
class Cut:
    """Where a file cut off mid-write (the profiler killed while writing) was closed.

    bytes_kept: bytes of JSON up to the end of the last whole event that was read.
    bytes_total: bytes of JSON the file holds (decompressed, for a .json.gz); how long the file
        would have been is unknown.
    last_ts_ns: start of the last complete event before the cut in file order, ns from the trace
        start (None when it had no readable timestamp). Kineto writes host ops first and device
        activity after them, so events after the cut, device ones above all, are missing.
    gzip_bytes: for a cut .json.gz, the compressed bytes the file holds; None for plain JSON.
    events_whole: True when the cut fell after the traceEvents array had ended: every event was
        read and only metadata written after the events is lost (a milder case than the rest).
    """

    bytes_kept: int
    bytes_total: int
    last_ts_ns: int | None
    gzip_bytes: int | None = None
    events_whole: bool = False

    @property
    def kept_share(self) -> float:
        """bytes_kept / bytes_total (0..1): the share of the bytes present that was read."""
        return self.bytes_kept / max(self.bytes_total, 1)


@dataclass
class Trace:
    """A loaded trace.

    events: one row per complete ("X") event, sorted by (pid, tid, ts_ns, -dur_ns); `id` is the
        row number. Columns: id, cat, name, pid, tid, ts_ns, dur_ns, stream, device, correlation,
        external_id, bytes, kind (memcpy kind such as DtoD), input_dims, input_types and
        concrete_inputs (the raw JSON text of those args, when shapes were recorded), depth (nesting on its thread), parent
        (id of the innermost enclosing event on the same thread), launch (for GPU events: id of
        the launch call, see LAUNCH_CATEGORIES, with the same correlation), step (ProfilerStep index).
    flows: ac2g / fwdbwd links: id, cat, name, ph, pid, tid, ts_ns.
    steps: name, step (the N of ProfilerStep#N), start_ns, end_ns, dur_ns, implicit.
    meta: the trace's top-level keys except traceEvents (deviceProperties, distributedInfo,
        versions, the collectors' "attnscope" block, ...).
    raw_categories: complete events per category exactly as the file spells it (before
        normalization: "mtia_ccp_events", "Kernel", ...), which keeps the vendor visible.
    cut: where a file cut off mid-write was closed (see Cut), or None for a whole file.
    memory: one row per "[memory]" event (profile_memory=True: one per allocation and free), sorted
        by (ts_ns, file order); no rows when the trace was recorded without it. Columns: ts_ns (ns
        from the trace start, the events' origin), pid, tid, device_type (c10's DeviceType: 0 CPU,
        1 CUDA, also for ROCm; see memory.DEVICE_TYPES), device_id (-1 for the CPU), bytes (signed:
        the allocation's size in bytes, negative for a free), total_allocated and total_reserved
        (the allocator's totals on that device after the event, bytes; null where the profiler
        did not write them, as in 2021 traces), addr (the block's address), step (the ProfilerStep
        whose span holds ts_ns), op (name of the innermost cpu_op of the same thread that holds it:
        op.ts <= ts < op.end; null when none does).
    """

    source: str
    events: pl.DataFrame
    flows: pl.DataFrame
    steps: pl.DataFrame
    meta: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    size_bytes: int = 0
    raw_categories: dict[str, int] = field(default_factory=dict)
    cut: Cut | None = None
    memory: pl.DataFrame = field(default_factory=empty_memory)
    _analyses: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _kept: Any = field(default=None, repr=False, compare=False)  # kept.Kept: the store's copy of the analyses, or None
    _computing: dict[str, threading.Lock] = field(default_factory=dict, repr=False, compare=False)  # per analysis

    def __getattr__(self, name: str) -> Any:
        # only called for an attribute not set: a table left in the store (leave_on_disk) or, for
        # a ReopenedTrace, not read yet
        if name in TABLES:
            read = self.__dict__.get("_read")
            if read is not None:
                with self.__dict__["_read_lock"]:
                    if name not in self.__dict__:
                        self.__dict__[name] = read(name)
                return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def leave_on_disk(self, read: Callable[[str], pl.DataFrame], names: tuple[str, ...]) -> None:
        """Let go of tables `names`, now stored: `read(name)` gives one back when something asks
        for it. The store does this for the flows of a trace it has just written (no analysis
        reads them: 7.7 MiB of the 176 MB dense trace's peak). Safe while other threads read the
        trace: the reader is in place before a table leaves."""
        self.__dict__.setdefault("_read_lock", threading.Lock())
        self.__dict__.setdefault("_read", read)
        for name in names:
            self.__dict__.pop(name, None)

    @property
    def has_gpu(self) -> bool:
        """True when the trace holds any kernel, GPU memcpy or GPU memset: a category of
        names_by_category, which a reopened trace reads from its kept analyses, not its events."""
        if "has_gpu" not in self._analyses:
            self._analyses["has_gpu"] = any(cat in GPU_CATEGORIES for cat in names_by_category(self))
        return self._analyses["has_gpu"]

    @property
    def implicit_step(self) -> bool:
        """True when the trace had no ProfilerStep and holds one step spanning the whole trace."""
        return bool(self.steps.height and self.steps["implicit"][0])

    @property
    def collector(self) -> dict[str, Any]:
        """The collectors' self-description ("attnscope" top-level key), or {} for foreign traces.
        Fields the analyses read are checked here, once: a value of the wrong type reads as absent."""
        if "collector" not in self._analyses:
            self._analyses["collector"] = clean_collector(self.meta.get("attnscope"))
        return self._analyses["collector"]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def clean_collector(block: Any) -> dict[str, Any]:
    """The "attnscope" metadata with the fields the analyses use coerced to their types."""
    if not isinstance(block, dict):
        return {}
    clean = dict(block)
    for key in ("variant", "backend_requested", "device_name", "dtype"):
        if key in clean and not isinstance(clean[key], str):
            clean[key] = None
    tokens = clean.get("tokens_per_step")
    clean["tokens_per_step"] = int(tokens) if _number(tokens) and tokens > 0 else None
    clean["compiled"] = clean.get("compiled") is True
    parity = clean.get("parity")
    if isinstance(parity, dict):
        passed = parity.get("passed")
        clean["parity"] = {
            **{key: _number(parity.get(key)) for key in ("max_abs", "max_rel", "atol", "rtol")},
            "passed": passed if isinstance(passed, bool) else None,
        }
    else:
        clean["parity"] = None
    return clean


class ReopenedTrace(Trace):
    """A trace reopened from the store (Store.get): its fields are there at once, each table is
    read from the store the first time something asks for it. A trace seen once answers from its
    kept analyses (kept.py) without reading its tables at all: the 1 GB trace's events are 0.4 s
    of Parquet that a tab drawn from kept answers never needs. `read(name)` gives a table."""

    @classmethod
    def stored(cls, read: Callable[[str], pl.DataFrame], fields: dict[str, Any]) -> "ReopenedTrace":
        """The trace of `fields` (every field but the tables), its tables read by `read` when asked."""
        trace = cls.__new__(cls)
        for f in dataclasses.fields(Trace):  # the dataclass's own defaults for what `fields` leaves out
            if f.name not in TABLES and f.name not in fields:
                if f.default is not dataclasses.MISSING:
                    trace.__dict__[f.name] = f.default
                elif f.default_factory is not dataclasses.MISSING:
                    trace.__dict__[f.name] = f.default_factory()
        trace.__dict__.update(fields)
        trace.__dict__["_read"] = read
        trace.__dict__["_read_lock"] = threading.Lock()
        return trace

    def tables_read(self) -> list[str]:
        """The tables read so far, in TABLES order (for tests and benchmarks)."""
        return [name for name in TABLES if name in self.__dict__]


def detached(trace: Trace) -> Trace:
    """The trace with its own polars objects (each table cloned: the columns' memory is shared,
    not copied) and its own analyses cache, for another thread to read while this one does:
    polars before 2.0 refuses to read a frame while another thread writes it out ("Already
    mutably borrowed", polars 1.20). The store's background writer and the dashboard's deferred
    store write use it."""
    return dataclasses.replace(
        trace,
        events=trace.events.clone(),
        flows=trace.flows.clone(),
        steps=trace.steps.clone(),
        memory=trace.memory.clone(),
        _analyses={},
        _computing={},
    )


R = TypeVar("R")
ANALYSES: dict[str, Callable[[Any], Any]] = {}  # every per_trace analysis by its key (the kept files' names)


def per_trace(
    analysis: Callable[..., Any] | None = None,
    *,
    schema: dict[str, Any] | None = None,
    json: str | None = None,
    returns: str | None = None,
) -> Callable[[Callable[[Trace], R]], Callable[[Trace], R]]:
    """Compute a one-argument analysis once per Trace: the dashboard, the reports and the gate
    ask for the same tables many times. Results are shared, so callers must not mutate them.
    A trace opened through the store also keeps the result on disk (kept.py) and reads it back
    on a later open instead of computing it again.

    Every analysis declares what it returns, exactly one of `@per_trace(schema=COLUMNS)` (a table:
    column -> polars dtype, in order), `@per_trace(json="shape")` or `@per_trace(returns="what")`
    (see Declared); a bare `@per_trace` is refused when the module is imported."""
    if analysis is not None or [schema is not None, json is not None, returns is not None].count(True) != 1:
        where = f" ({analysis.__module__}.{analysis.__qualname__})" if callable(analysis) else ""
        raise TypeError(f"per_trace{where} declares what the analysis returns: exactly one of schema=, json=, returns=")

    def register(analysis: Callable[[Trace], R]) -> Callable[[Trace], R]:
        key = analysis.__module__ + "." + analysis.__qualname__
        doc = " ".join((analysis.__doc__ or "").split())
        CATALOG[key] = Declared(key, doc, None if schema is None else dict(schema), json, returns)
        return _cached(key, analysis)

    return register


_LOCKS_MADE = threading.Lock()  # guards the making of each trace's per-analysis locks


def _computing(trace: Trace, key: str) -> threading.Lock:
    """The lock a thread holds while it computes analysis `key` of `trace`."""
    with _LOCKS_MADE:
        lock = trace._computing.get(key)
        if lock is None:
            lock = trace._computing[key] = threading.Lock()
        return lock


def _cached(key: str, analysis: Callable[[Trace], R]) -> Callable[[Trace], R]:
    """The analysis computed once per trace. A thread that asks while another computes it waits
    for that answer instead of computing it again (the dashboard computes a selection's analyses
    ahead of its tabs in a thread of its own: dashboard/prepare.py). Each (trace, analysis) has its
    own lock, and an analysis only asks for analyses of its own trace that it depends on, so locks
    are taken in the order of those dependencies, which has no cycle: no two threads can wait on
    each other."""

    @functools.wraps(analysis)
    def cached(trace: Trace) -> R:
        found = trace._analyses.get(key, MISSING)
        if found is not MISSING:
            return found
        with _computing(trace, key):
            if key not in trace._analyses:
                kept = trace._kept
                value = kept.get(key) if kept is not None else MISSING
                if value is MISSING:
                    value = analysis(trace)
                    if kept is not None:
                        kept.put(
                            key, value, later=True
                        )  # (after the page's run, when one holds the writes: kept.Writer)
                trace._analyses[key] = value
            return trace._analyses[key]

    ANALYSES[key] = cached
    return cached


@per_trace(json="{category: [distinct event name, ...] sorted}, categories sorted")
def names_by_category(trace: Trace) -> dict[str, list[str]]:
    """Each category that has events -> its events' distinct names, sorted. One query over the
    Categorical codes for every analysis that asks which names a category holds (backends,
    attention, graphs, the device type): each asked with a query of its own before, which is most
    of what a small trace costs."""
    pairs = trace.events.lazy().select("cat", "name").unique().select(pl.col("cat", "name").cast(pl.String)).collect()
    found: dict[str, set[str]] = {}
    for cat, name in pairs.iter_rows():
        names = found.setdefault(cat, set())
        if name is not None:
            names.add(name)
    return {cat: sorted(names) for cat, names in sorted(found.items())}


def names_in(trace: Trace, *categories: str) -> list[str]:
    """The distinct names of the events of these categories (see names_by_category), sorted."""
    by_cat = names_by_category(trace)
    return sorted({name for cat in categories for name in by_cat.get(cat, ())})


def names_matching(names: pl.Series, predicate: Callable[[pl.Expr], pl.Expr]) -> pl.Expr:
    """`pl.col("name")` tested against a string predicate once per distinct name instead of once
    per event: the names' column is Categorical, and casting 2 million of them to text to run
    a regex took 50-100 ms where the distinct names take a few. Same values as
    `predicate(pl.col("name").cast(pl.String))`, null for a null name."""
    distinct = names.unique().cast(pl.String).drop_nulls()
    hits = distinct.filter(pl.select(predicate(pl.lit(distinct))).to_series().fill_null(False))
    return pl.col("name").is_in(hits.to_list())

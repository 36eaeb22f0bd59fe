"""attnscope: profile attention from torch.profiler traces (engine, dashboard and CLI)."""

import os as _os
import sys as _sys

__version__ = "0.1.0"

if "polars" not in _sys.modules and not _os.environ.get("_ATTNSCOPE_SLICE_WORKER"):  # (workers: see load._Workers)
    # polars sets its allocator (jemalloc) to keep freed pages for 0.5-1 s; loading a large trace
    # frees hundreds of MB between its steps, and a first open's peak RSS grows by that much
    # (measured: the 187 MB trace's peak 460 -> 367 MB at the same speed; the 910 MB trace's
    # 1.45x -> 0.99x the JSON for about 1 s more of its 11-12 s).
    # Only settable before polars is first imported, so here, before any module of the package
    # (the dashboard's charts import polars before the engine does). A caller's own decay setting
    # wins; polars' default, which a process that imported polars passes on to its children, does not.
    _given = [
        _p
        for _p in _os.environ.get("_RJEM_MALLOC_CONF", "").split(",")
        if _p and _p not in ("dirty_decay_ms:500", "muzzy_decay_ms:1000")
    ]
    if not any(_p.startswith(("dirty_decay_ms:", "muzzy_decay_ms:")) for _p in _given):
        _os.environ["_RJEM_MALLOC_CONF"] = ",".join([*_given, "dirty_decay_ms:0", "muzzy_decay_ms:0"])
        _DECAY_GIVEN = ",".join(_given)  # the caller's own settings, for keep_freed_pages


def keep_freed_pages() -> None:
    """Before polars is imported, by a command whose first file is large (cli/files.py): keep the
    pages polars frees for a second (dirty_decay_ms:1000) instead of returning each at once. At
    0 ms the first open of the 882 MB dense trace spent 2.9 s of its CPU time in the kernel, most
    of it faulting in fresh pages; at 1000 ms 1.5 s, for a peak of 0.90x the JSON instead of 0.75x
    (1.41x -> 1.7x on the 146 MB one, where the fixed cost of the interpreter is a third of the
    peak: hence only for large files). A caller's own decay setting, or polars already imported,
    leaves it as it is."""
    if "polars" in _sys.modules or "_DECAY_GIVEN" not in globals():
        return
    _os.environ["_RJEM_MALLOC_CONF"] = ",".join(
        _p for _p in (_DECAY_GIVEN, "dirty_decay_ms:1000", "muzzy_decay_ms:0") if _p
    )

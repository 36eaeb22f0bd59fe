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

"""attnscope: profile attention from torch.profiler traces (engine, dashboard and CLI)."""

import os as _os
import sys as _sys

__version__ = "0.1.0"

if "polars" not in _sys.modules:
    # polars sets its allocator (jemalloc) to keep freed pages for 0.5-1 s; loading a large trace
    # frees hundreds of MB between its steps, and a first open's peak RSS grows by that much
    # (measured on the 187 MB trace: 460 MB peak kept, 367 MB returned at once, same speed).
    # Only settable before polars is first imported, so here, before any module of the package
    # (the dashboard's charts import polars before the engine does); a caller's own setting wins.
    _os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")

"""attnscope: profile attention from torch.profiler traces (engine, dashboard and CLI)."""

__version__ = "0.1.0"

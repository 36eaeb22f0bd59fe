"""runs.json: the manifest of one collection (one output folder of `python -m collectors`).

The dashboard opens a whole collection through it. Schema (version 1), all paths relative to the
folder holding runs.json:

    {
      "schema": 1,
      "collection": "cpu",                     # the output folder's name
      "created": "2026-01-01T12:00:00+00:00",  # UTC, ISO 8601
      "command": "python -m collectors ...",   # how it was produced
      "device": "cpu" | "cuda",
      "device_name": "NVIDIA H100 80GB HBM3",
      "dtype": "float32" | "bfloat16" | "float16",
      "shape": {"batch": 2, "heads": 8, "seq": 512, "head_dim": 64},
      "active_steps": 3,                       # profiled steps per trace, one forward each
      "seed": 0,
      "torch_version": "2.13.0+cpu",
      "cuda_version": null,
      "runs": [                                # one per trace written
        {"variant": "naive", "backend_requested": null, "compiled": false,
         "trace": "naive.json.gz", "table": "naive.txt",
         "parity": {"max_abs": 0.0, "max_rel": 0.0, "atol": 1e-4, "rtol": 1e-4, "passed": true}}
      ],
      "skipped": [                             # one per variant (or compiled variant) not run
        {"variant": "hub", "backend_requested": "hub", "compiled": false, "reason": "..."}
      ]
    }

backend_requested: "default" (plain SDPA), "math", "flash", "efficient", "cudnn" (forced SDPA),
"hub" (kernels hub), null (the hand-written naive variants). parity errors are null when the
output was not finite. Each trace also carries its own copy of this description under the
top-level key "attnscope" (see collectors.profile).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_NAME = "runs.json"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Run:
    """One trace in the collection."""

    variant: str
    backend_requested: str | None
    compiled: bool
    trace: str
    table: str
    parity: dict[str, Any]
    cuda_graphs: bool = False  # compiled with mode="reduce-overhead": kernels replayed from CUDA graphs


@dataclass(frozen=True)
class Skip:
    """One variant that was not profiled, with the reason (PyTorch's own text where it gave one)."""

    variant: str
    backend_requested: str | None
    compiled: bool
    reason: str
    cuda_graphs: bool = False


@dataclass
class Manifest:
    """The collection's description; `runs` and `skipped` grow as the collector goes."""

    collection: str
    created: str
    command: str
    device: str
    device_name: str
    dtype: str
    shape: dict[str, int]
    active_steps: int
    seed: int
    torch_version: str
    cuda_version: str | None
    runs: list[Run] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)

    def write(self, folder: Path) -> Path:
        """Write <folder>/runs.json (UTF-8, indented); return its path."""
        path = folder / MANIFEST_NAME
        path.write_text(json.dumps({"schema": SCHEMA_VERSION, **asdict(self)}, indent=2) + "\n")
        return path


def read_manifest(folder: Path) -> dict[str, Any]:
    """The parsed runs.json of a collection folder."""
    return json.loads((folder / MANIFEST_NAME).read_text())

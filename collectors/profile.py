"""Profile one attention variant under torch.profiler and write a self-describing trace.

Each profiled step is one forward under `torch.no_grad()` and `record_function("attention::<name>")`
(on CUDA followed by a device synchronize, so a step's CPU span covers its GPU work). The schedule
is wait=1, warmup=1, active=N, after a few unprofiled warm-up calls. The profiler records shapes
and memory (`profile_memory=True`: a "[memory]" instant event per allocation and free, with the
allocator's Total Allocated, which the dashboard's per-step memory peaks read). Written beside each other:
<stem>.json.gz (the gzip'd Chrome trace) and <stem>.txt (the key_averages() table).

The run's description goes into the trace through the profiler's metadata API, as one top-level
JSON object under the key "attnscope" (see `describe`). add_metadata_json only reaches the trace
when called while the profiler records, so it is called in the first active step.
"""

from __future__ import annotations

import datetime
import gzip
import json
import platform
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from collectors.parity import Parity
from collectors.variants import Attention, Shape

METADATA_KEY = "attnscope"
WARMUP_CALLS = 2
"""Unprofiled calls before the profiler starts (compilation, allocator and cache warm-up)."""


@dataclass(frozen=True)
class Written:
    """Files written for one profiled run."""

    trace: Path
    table: Path


def device_name(device: torch.device) -> str:
    """Marketing name of the GPU, or the CPU model name from /proc/cpuinfo."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe(
    *,
    variant: str,
    backend: str | None,
    shape: Shape,
    q: Tensor,
    compiled: bool,
    seed: int,
    parity: Parity,
) -> dict[str, Any]:
    """The "attnscope" metadata object of one run (times in UTC ISO 8601, tokens per step)."""
    return {
        "variant": variant,
        "backend_requested": backend,
        "shape": shape.as_dict(),
        "dtype": str(q.dtype).removeprefix("torch."),
        "device": q.device.type,
        "device_name": device_name(q.device),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "host": socket.gethostname(),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "seed": seed,
        "tokens_per_step": shape.tokens,
        "compiled": compiled,
        "parity": parity.as_dict(),
    }


def profile_attention(
    fn: Attention,
    qkv: tuple[Tensor, Tensor, Tensor],
    *,
    label: str,
    out_dir: Path,
    stem: str,
    active: int,
    metadata: dict[str, Any],
) -> Written:
    """Profile `active` steps of fn(*qkv); write <stem>.json.gz and <stem>.txt into out_dir."""
    written = Written(trace=out_dir / f"{stem}.json.gz", table=out_dir / f"{stem}.txt")
    cuda = qkv[0].device.type == "cuda"
    with torch.no_grad():
        for _ in range(WARMUP_CALLS):
            fn(*qkv)
    if cuda:
        torch.cuda.synchronize()

    def export(prof: profile) -> None:
        prof.export_chrome_trace(str(written.trace))  # gzip'd by torch for a .gz path
        sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
        written.table.write_text(prof.key_averages().table(sort_by=sort, row_limit=-1) + "\n")

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    plan = schedule(wait=1, warmup=1, active=active, repeat=1)
    with profile(
        activities=activities, schedule=plan, record_shapes=True, profile_memory=True, on_trace_ready=export
    ) as prof:
        for step in range(2 + active):
            if step == 2:  # first active step: the profiler is recording, metadata sticks
                prof.add_metadata_json(METADATA_KEY, json.dumps(metadata))
            with torch.no_grad(), record_function(f"attention::{label}"):
                fn(*qkv)
            if cuda:
                torch.cuda.synchronize()
            prof.step()
    check_metadata(written.trace)
    return written


def read_metadata(trace: Path) -> dict[str, Any] | None:
    """The "attnscope" object at the top level of a .json.gz trace, or None."""
    with gzip.open(trace, "rt") as fh:
        found = json.load(fh).get(METADATA_KEY)
    return found if isinstance(found, dict) else None


def check_metadata(trace: Path) -> None:
    """Raise RuntimeError when the written trace lacks the "attnscope" object."""
    if read_metadata(trace) is None:
        raise RuntimeError(f"{trace}: the profiler dropped the {METADATA_KEY!r} metadata")

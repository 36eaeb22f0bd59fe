"""What a device event's category and name mean on each accelerator: the category table (every
accelerator's categories in the roles the analyses read), the device classes (events an accelerator
files under one category that are copies or sync events by name), the copy directions, and the
device-vendor detection the summary shows. Name rules, each row with its reason and source; the
loader (load/devices.py) applies them to its frames.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable


# Every category the loader knows, lower-cased as written (Kineto's ActivityType names, the 2021
# legacy names, older flow names) -> (the normalized category the analyses read, its role, the
# accelerator it implies). One table: the aliases, the launch and device roles, the vendor shown
# by summary.device_info and the "not analysed" warning all come from it.
# Roles: device (work on the accelerator; normalized to model.GPU_CATEGORIES), launch (the host
# call that queued it, tied by args.correlation; model.LAUNCH_CATEGORIES), host (CPU spans the
# analyses read), flow (ac2g/fwdbwd links), quiet (profiler bookkeeping: nothing to analyse, no
# warning), unread (known, kept in the events table, not analysed: named in a warning).
# Categories missing here are kept as written and warned about like unread ones.
DEVICE, LAUNCH, HOST, FLOW, QUIET, UNREAD = "device", "launch", "host", "flow", "quiet", "unread"
CATEGORIES: dict[str, tuple[str, str, str | None]] = {
    "cpu_op": ("cpu_op", HOST, None),
    "operator": ("cpu_op", HOST, None),
    "user_annotation": ("user_annotation", HOST, None),
    "gpu_user_annotation": ("gpu_user_annotation", HOST, None),
    "python_function": ("python_function", HOST, None),
    "kernel": ("kernel", DEVICE, None),
    "gpu_memcpy": ("gpu_memcpy", DEVICE, None),
    "memcpy": ("gpu_memcpy", DEVICE, None),
    "gpu_memset": ("gpu_memset", DEVICE, None),
    "memset": ("gpu_memset", DEVICE, None),
    "mtia_ccp_events": ("kernel", DEVICE, "mtia"),
    "cuda_runtime": ("cuda_runtime", LAUNCH, None),  # ROCm writes its hip* calls here too
    "runtime": ("cuda_runtime", LAUNCH, None),
    "cuda_driver": ("cuda_driver", LAUNCH, None),
    "driver": ("cuda_driver", LAUNCH, None),
    "mtia_runtime": ("mtia_runtime", LAUNCH, "mtia"),
    "glow_runtime": ("glow_runtime", LAUNCH, None),
    "xpu_runtime": ("xpu_runtime", LAUNCH, "xpu"),
    "xpu_driver": ("xpu_driver", LAUNCH, "xpu"),
    "hpu_op": ("hpu_op", LAUNCH, "hpu"),
    "privateuse1_runtime": ("privateuse1_runtime", LAUNCH, "privateuse1"),
    "privateuse1_driver": ("privateuse1_driver", LAUNCH, "privateuse1"),
    "ac2g": ("ac2g", FLOW, None),
    "async_cpu_to_gpu": ("ac2g", FLOW, None),
    "async": ("ac2g", FLOW, None),
    "fwdbwd": ("fwdbwd", FLOW, None),
    "trace": ("Trace", QUIET, None),
    "overhead": ("overhead", QUIET, None),
    "cpu_instant_event": ("cpu_instant_event", QUIET, None),
    "external_correlation": ("external_correlation", QUIET, None),
    "cuda_sync": ("cuda_sync", UNREAD, None),
    "cuda_event": ("cuda_event", UNREAD, None),
    "cuda_profiler_range": ("cuda_profiler_range", UNREAD, None),
    "gpu_pm_counter": ("gpu_pm_counter", UNREAD, None),
    "collective_comm": ("collective_comm", UNREAD, None),
    "mtia_insight": ("mtia_insight", UNREAD, "mtia"),
    "mtia_counters": ("mtia_counters", UNREAD, "mtia"),
    "xpu_scope_profiler": ("xpu_scope_profiler", UNREAD, "xpu"),
    "xpu_sync": ("xpu_sync", UNREAD, "xpu"),
}
# Lower-cased category as written -> normalized category. Unknown categories are kept as written.
CATEGORY_ALIASES: dict[str, str] = {raw: row[0] for raw, row in CATEGORIES.items()}
MEMCPY_KIND = re.compile(r"Memcpy\s+(\w+)")  # a CUDA copy's name says its direction: "Memcpy DtoD (Device -> Device)"


DEVICE_SYNC = "device_sync"  # a device queue's event record or wait: neither work nor a copy


@dataclass(frozen=True)
class DeviceClass:
    """One row of DEVICE_CLASSES: on a trace of `accelerator`, events of the device category
    `category` (as written) whose name matches `name` (a regex, case-insensitive) are `becomes`
    (gpu_memcpy: a copy, its direction read from args.direction (ARG_DIRECTIONS), else from the
    name where it says one (COPY_DIRECTIONS); its bytes from args.bytes or args.size, as a CUDA
    memcpy's; DEVICE_SYNC: kept in
    the events table, counted as no work), not kernels."""

    accelerator: str
    category: str
    name: str
    becomes: str
    reason: str
    source: str
    launched: bool = True
    """False: the device queues events of this class itself, so one with no launch call (no
    correlation) is by design, not a lost launch (health's device_event_without_launch skips them)."""


_MTIA_SOURCE = (
    "an MTIA inference trace read by hand (issue #27 item 4): of its 1,313 mtia_ccp_events, 877 "
    "dma_request (host-to-device and device-to-host transfers), 339 event_record / event_wait, "
    "about 100 compute; no public MTIA trace holds these, so the rows follow that reading; issue #37 "
    "item 5: 220 of its dma_request and its 24 pe_exe events carry no correlation at all"
)
DEVICE_CLASSES: tuple[DeviceClass, ...] = (
    DeviceClass(
        "mtia",
        "mtia_ccp_events",
        r"^dma_request",
        "gpu_memcpy",
        "a DMA transfer between host and device memory: a copy, not a kernel; the device's DMA engine "
        "queues some itself (prefetch, spills), with no launch call",
        _MTIA_SOURCE,
        launched=False,
    ),
    DeviceClass(
        "mtia",
        "mtia_ccp_events",
        r"^event_(record|wait)\b",
        DEVICE_SYNC,
        "an event the device queue records or waits on: no work, no copy",
        _MTIA_SOURCE,
    ),
    DeviceClass(
        "mtia",
        "mtia_ccp_events",
        r"^pe_exe\b",
        "kernel",
        "a processing element's execution record: work, written by the device's own scheduler with no "
        "launch call of its own",
        _MTIA_SOURCE,
        launched=False,
    ),
)
# A copy's direction, where its name says one (memcpy kinds as CUDA traces write them).
COPY_DIRECTIONS: tuple[tuple[str, str], ...] = (
    (r"(?i)(h2d|htod|host_?to_?device)", "HtoD"),
    (r"(?i)(d2h|dtoh|device_?to_?host)", "DtoH"),
    (r"(?i)(d2d|dtod|device_?to_?device)", "DtoD"),
)
_DIRECTION_SOURCE = (
    "the same MTIA inference trace (issue #37 item 5): every one of its 877 dma_request events carries "
    "args.direction, 450 DEVICE_TO_HOST and 427 HOST_TO_DEVICE; DEVICE_TO_DEVICE by the same naming"
)
# A copy's direction as its args say it (args.direction, read where args.kind is absent): the value
# (matched without regard to case) -> the memcpy kind, reason, source. It comes before the name's
# direction (COPY_DIRECTIONS); a value not listed here says nothing.
ARG_DIRECTIONS: tuple[tuple[str, str, str, str], ...] = (
    ("HOST_TO_DEVICE", "HtoD", "a DMA from host memory into the device's", _DIRECTION_SOURCE),
    ("DEVICE_TO_HOST", "DtoH", "a DMA from device memory back to the host's", _DIRECTION_SOURCE),
    ("DEVICE_TO_DEVICE", "DtoD", "a DMA within device memory", _DIRECTION_SOURCE),
)


def unlaunched_by_design(raw_categories: Iterable[str]) -> list[DeviceClass]:
    """The DEVICE_CLASSES rows of the accelerator these categories imply whose events may carry no
    launch call by design (launched=False): none on CUDA and ROCm traces."""
    written = {raw.lower() for raw in raw_categories}
    implied = accelerator(written)
    return [
        row for row in DEVICE_CLASSES if row.accelerator == implied and row.category in written and not row.launched
    ]


def accelerator(raw_categories: Iterable[str]) -> str | None:
    """The accelerator that categories as written imply ("mtia", "xpu", "hpu", "privateuse1";
    see CATEGORIES), or None for CUDA, ROCm and CPU traces, which share their categories."""
    for raw in raw_categories:
        implied = CATEGORIES.get(raw.lower(), ("", "", None))[2]
        if implied:
            return implied
    return None


# What a trace's metadata says about its GPU's vendor: version keys that Kineto writes before
# traceEvents, and words in deviceProperties names. ROCm first: its traces can say "cuda" nowhere.
GPU_VENDORS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "rocm",
        ("roctracer_version", "hip_runtime_version", "hip_driver_version"),
        ("AMD", "Radeon", "Instinct", "MI2", "MI3"),
    ),
    (
        "cuda",
        ("cupti_version", "cuda_runtime_version", "cuda_driver_version"),
        ("NVIDIA", "Tesla", "GeForce", "Quadro", "TITAN"),
    ),
)


def device_names(meta: dict[str, Any]) -> list[str]:
    """The non-empty device names in the trace's deviceProperties, in order."""
    props = meta.get("deviceProperties")
    if not isinstance(props, list):
        return []
    return [p["name"] for p in props if isinstance(p, dict) and isinstance(p.get("name"), str) and p["name"]]


def gpu_vendor(meta: dict[str, Any]) -> str | None:
    """'rocm' or 'cuda' as the metadata tells (it comes before traceEvents, so a cut file keeps
    it), or None when it does not say."""
    names = device_names(meta)
    for vendor, keys, words in GPU_VENDORS:
        if any(key in meta for key in keys) or any(word in name for name in names for word in words):
            return vendor
    return None

"""The host side: calls that launch a CUDA/HIP graph or one kernel (LAUNCH_CALLS) and the host
categories the timeline draws and op_diff compares (HOST_CATEGORIES)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchCall:
    """One row of LAUNCH_CALLS: a host runtime call that queues device work, as the profiler names
    it (matched as a prefix: cuLaunchKernelEx is cuLaunchKernel's). kind: 'graph' (one call replays
    a captured graph: many kernels under one correlation id) or 'kernel' (one kernel)."""

    name: str
    kind: str
    vendor: str
    reason: str
    source: str


LAUNCH_CALLS: tuple[LaunchCall, ...] = (
    LaunchCall(
        "cudaGraphLaunch",
        "graph",
        "NVIDIA",
        "the CUDA runtime's graph replay (torch.cuda.CUDAGraph.replay)",
        "CUDA runtime API; Kineto cat cuda_runtime",
    ),
    LaunchCall(
        "cuGraphLaunch", "graph", "NVIDIA", "the CUDA driver's graph replay", "CUDA driver API; Kineto cat cuda_driver"
    ),
    LaunchCall(
        "hipGraphLaunch",
        "graph",
        "AMD",
        "HIP's graph replay (PyTorch's CUDA graphs on ROCm)",
        "ROCm HIP runtime API; roctracer through Kineto",
    ),
    LaunchCall(
        "cudaLaunchKernel",
        "kernel",
        "NVIDIA",
        "the CUDA runtime's kernel launch (and cudaLaunchKernelExC)",
        "CUDA runtime API",
    ),
    LaunchCall(
        "cuLaunchKernel",
        "kernel",
        "NVIDIA",
        "the CUDA driver's kernel launch (and cuLaunchKernelEx: cuDNN, Triton)",
        "CUDA driver API",
    ),
    LaunchCall("hipLaunchKernel", "kernel", "AMD", "HIP's kernel launch", "ROCm HIP runtime API"),
    LaunchCall(
        "hipExtModuleLaunchKernel",
        "kernel",
        "AMD",
        "HIP's module launch with extra arguments (hipBLASLt, Tensile)",
        "ROCm HIP runtime API",
    ),
    LaunchCall("hipModuleLaunchKernel", "kernel", "AMD", "HIP's module launch (Triton, CK)", "ROCm HIP runtime API"),
)
LAUNCH_KINDS = ("graph", "kernel")


def launch_pattern(kind: str) -> str:
    """The names of LAUNCH_CALLS of one kind as a regular expression over a call's name (a prefix match)."""
    if kind not in LAUNCH_KINDS:
        raise ValueError(f"kind must be one of {', '.join(LAUNCH_KINDS)}")
    return "^(" + "|".join(re.escape(c.name) for c in LAUNCH_CALLS if c.kind == kind) + ")"


GRAPH_LAUNCH = launch_pattern("graph")  # graphs.py, diff.readings
KERNEL_LAUNCH = launch_pattern("kernel")  # diff.readings


# ---------------------------------------------------------------- host categories


@dataclass(frozen=True)
class HostCategory:
    """One row of HOST_CATEGORIES: an event category (after normalization) of the host side."""

    category: str
    reason: str
    source: str


# The host side of a step as the timeline draws it and op_diff compares it, besides the launch
# calls (model.LAUNCH_CATEGORIES, every vendor's, which diff.py adds): ops and annotations.
# python_function spans (with_stack) are left out: one per Python frame, they would outnumber the ops.
HOST_CATEGORIES: tuple[HostCategory, ...] = (
    HostCategory(
        "cpu_op",
        "the operators the profiler records: aten:: ops, custom ops, compiled regions",
        "torch.profiler (Kineto) category cpu_op; 'Operator' in legacy traces (load.CATEGORIES)",
    ),
    HostCategory(
        "user_annotation",
        "record_function ranges: ProfilerStep#N, module and user annotations",
        "torch.profiler.record_function (Kineto category user_annotation)",
    ),
)
HOST_SPANS: tuple[str, ...] = tuple(c.category for c in HOST_CATEGORIES)

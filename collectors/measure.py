"""Measurements the modes of `python -m collectors` share (sweep, dispatch, e2e, serve): call
times, the peak memory one call adds, which attention backend really ran, out-of-memory and
refusal outcomes, a real memory cap, and the FLOP count of one forward; and `outcome`, the one
classification of a failed call (oom, refused, unavailable or error) that sweep, e2e and serve share.

Units: times in milliseconds (ms), memory in bytes, FLOPs as a count (multiply-add = 2 FLOPs).

- Time: `time_calls` (sweep's forwards, e2e's steps, serve's passes) runs `warmup` untimed calls,
  then times `reps` calls one by one: on CUDA with a pair of CUDA events around each call (device
  time, read after one synchronize), on the CPU with time.perf_counter_ns around each call. Median
  and p10/p90 use linear interpolation between order statistics (numpy's default "linear" method,
  Hyndman-Fan type 7).
- Peak memory: bytes the call added on top of what was allocated before it. CUDA:
  torch.cuda.reset_peak_memory_stats, then max_memory_allocated() - memory_allocated() before
  the call. CPU: one call under torch.profiler(profile_memory=True); over the [memory] events of
  the CPU allocator, max('Total Allocated') - the level before the first event ('Total
  Allocated' - 'Bytes' of the first event).
- Backend: the op and kernel names of one profiled call, classified with SDPA_BACKENDS (the
  names of dashboard.engine.analyses.backends.BACKEND_TABLE), plus "eager" for hand-written attention (a
  matmul-like and a softmax op, by the dashboard's EAGER_CHAIN_MATMUL and EAGER_SOFTMAX), "flex"
  for FlexAttention's compiled region and "hub" for the kernels-hub ops.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import resource
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor
from torch.profiler import ProfilerActivity, profile

from collectors.unavailable import Unavailable
from dashboard.engine.rules.backends import BACKEND_TABLE, FLEX_EVIDENCE, HUB_EVIDENCE
from dashboard.engine.rules.names import parse
from dashboard.engine.rules.ops import EAGER_CHAIN_MATMUL, EAGER_SOFTMAX

Attention = Callable[..., Tensor]
QKV = tuple[Tensor, Tensor, Tensor]

QUANTILE_METHOD = "linear interpolation between order statistics (numpy 'linear', Hyndman-Fan type 7)"
FLOP_CONVENTION = (
    "forward FLOPs = 4 * batch * heads * seq^2 * head_dim (two matmuls, 2 FLOPs per multiply-add); "
    "causal counted as half of that, as FlashAttention's benchmarks do; "
    "tflops = flops / (time_ms * 1e-3) / 1e12 from the median time"
)
CPU_PEAK_METHOD = (
    "one call under torch.profiler(profile_memory=True): max over the CPU allocator's [memory] events of "
    "'Total Allocated' minus the level before the call ('Total Allocated' - 'Bytes' of its first event)"
)
CUDA_PEAK_METHOD = (
    "torch.cuda.reset_peak_memory_stats(); max_memory_allocated() after the call minus memory_allocated() before it"
)

# Names that prove a backend the dashboard's BACKEND_TABLE has no row for.
_FLEX_NAMES = re.compile(FLEX_EVIDENCE)
# Hand-written attention: the dashboard's own patterns, so that both call the same ops eager.
_EAGER_MATMUL = re.compile(EAGER_CHAIN_MATMUL)
_EAGER_SOFTMAX = re.compile(EAGER_SOFTMAX)
# The evidence is the first of these that ran: the pattern's ops, the ones attention code calls
# (matmul, einsum) before the bmm / mm they call in turn.
_EAGER_ORDER = tuple(
    f"aten::{op}"
    for op in sorted(
        re.fullmatch(r"\^aten::\((.*)\)\$", EAGER_CHAIN_MATMUL).group(1).split("|"),
        key=lambda op: op not in ("matmul", "einsum"),
    )
)
_OOM_TEXT = re.compile(r"out of memory|can't allocate memory|Cannot allocate memory", re.IGNORECASE)
_CPU_ASKED = re.compile(r"you tried to allocate (\d+) bytes")
_CUDA_ASKED = re.compile(r"Tried to allocate (\d+(?:\.\d+)?) ?([KMGTP]?i?B)")
_UNITS = {
    "B": 1,
    "KiB": 1 << 10,
    "MiB": 1 << 20,
    "GiB": 1 << 30,
    "TiB": 1 << 40,
    "PiB": 1 << 50,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "PB": 10**15,
}


# ---------------------------------------------------------------- FLOPs and sizes


def attention_flops(batch: int, heads: int, seq: int, head_dim: int, causal: bool) -> int:
    """FLOPs of one attention forward: 4*B*H*S^2*D (Q·Kᵀ and P·V), half of it when causal."""
    dense = 4 * batch * heads * seq * seq * head_dim
    return dense // 2 if causal else dense


def tflops(flops: int, time_ms: float | None) -> float | None:
    """Achieved TFLOP/s: flops / (time_ms * 1e-3) / 1e12; None without a positive time."""
    if time_ms is None or not time_ms > 0:
        return None
    return flops / (time_ms * 1e-3) / 1e12


def scores_bytes(batch: int, heads: int, seq: int, dtype: torch.dtype) -> int:
    """Bytes of the [B, H, S, S] scores matrix in `dtype`: what naive attention materializes."""
    return batch * heads * seq * seq * torch.empty((), dtype=dtype).element_size()


# ---------------------------------------------------------------- time


@dataclass(frozen=True)
class Timing:
    """Forward time over `reps` timed calls, in milliseconds."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    reps: int


def quantile(samples: Sequence[float], q: float) -> float:
    """The q-quantile (0 <= q <= 1) of samples by linear interpolation between order statistics
    (numpy's default method): position q*(n-1) in the sorted samples."""
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("quantile of no samples")
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize_times(samples_ms: Sequence[float]) -> Timing:
    """Median, p10 and p90 of per-call times in ms (see `quantile`)."""
    return Timing(quantile(samples_ms, 0.5), quantile(samples_ms, 0.1), quantile(samples_ms, 0.9), len(samples_ms))


def time_calls(call: Callable[[int], object], cuda: bool, *, reps: int, warmup: int) -> list[float]:
    """Milliseconds of each of call(0) .. call(reps - 1), timed one by one after `warmup` untimed
    calls call(0) .. call(warmup - 1), under torch.no_grad: CUDA events around each call on a GPU
    (device time, read after one synchronize), time.perf_counter_ns on the CPU."""
    with torch.no_grad():
        for i in range(warmup):
            call(i)
        if cuda:
            torch.cuda.synchronize()
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
            for i, (start, end) in enumerate(events):
                start.record()
                call(i)
                end.record()
            torch.cuda.synchronize()
            return [start.elapsed_time(end) for start, end in events]
        samples = []
        for i in range(reps):
            t0 = time.perf_counter_ns()
            call(i)
            samples.append((time.perf_counter_ns() - t0) / 1e6)
        return samples


def time_forward(fn: Attention, qkv: QKV, *, reps: int, warmup: int) -> Timing:
    """Time `reps` forwards of fn(*qkv) after `warmup` untimed ones (see `time_calls`)."""
    cuda = qkv[0].device.type == "cuda"
    return summarize_times(time_calls(lambda _: fn(*qkv), cuda, reps=reps, warmup=warmup))


# ---------------------------------------------------------------- one observed call


@dataclass(frozen=True)
class Observation:
    """What one call showed: names: distinct cpu_op and kernel names of a profiled call (sorted);
    peak_mem_bytes: bytes the call added at its peak over what was allocated before it."""

    names: tuple[str, ...]
    peak_mem_bytes: int


def observe(fn: Attention, qkv: QKV, **kwargs: object) -> Observation:
    """Profile one call of fn(*qkv, **kwargs) for its op and kernel names and measure its peak
    memory (module docstring). On CUDA the memory comes from a separate, unprofiled call, so the
    profiler's own buffers never count."""
    cuda = qkv[0].device.type == "cuda"
    with torch.no_grad():
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            out = fn(*qkv, **kwargs)
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - before
            del out
            names = profiled_names(fn, qkv, **kwargs)
            return Observation(names, max(0, peak))
        with tempfile.TemporaryDirectory(prefix="attnscope-measure-") as tmp:
            trace = Path(tmp) / "call.json"
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                out = fn(*qkv, **kwargs)
                del out
            names = _names(prof)
            prof.export_chrome_trace(str(trace))
            peak = cpu_peak_bytes(json.loads(trace.read_text()))
    return Observation(names, peak)


def profiled_names(fn: Attention, qkv: QKV, **kwargs: object) -> tuple[str, ...]:
    """Distinct cpu_op and (on CUDA) kernel names of one profiled call of fn(*qkv, **kwargs)."""
    cuda = qkv[0].device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.no_grad(), profile(activities=activities) as prof:
        fn(*qkv, **kwargs)
        if cuda:
            torch.cuda.synchronize()
    return _names(prof)


def _names(prof: profile) -> tuple[str, ...]:
    return tuple(sorted({e.name for e in prof.events() if e.name and e.name != "[memory]"}))


def cpu_peak_bytes(trace: dict) -> int:
    """Peak bytes added during a profiled window, from a Chrome trace's CPU [memory] events:
    max('Total Allocated') - ('Total Allocated' - 'Bytes') of the first event; 0 without events."""
    events = [
        e
        for e in trace.get("traceEvents", [])
        if e.get("name") == "[memory]" and int(e.get("args", {}).get("Device Type", 0)) == 0
    ]
    if not events:
        return 0
    events.sort(key=lambda e: float(e.get("ts", 0)))
    first = events[0]["args"]
    level_before = int(first["Total Allocated"]) - int(first["Bytes"])
    return max(0, max(int(e["args"]["Total Allocated"]) for e in events) - level_before)


# ---------------------------------------------------------------- which backend ran


SDPA_BACKEND_NAMES = ("cpu_flash", "flash", "efficient", "cudnn", "math")
SDPA_BACKENDS = tuple(row for row in BACKEND_TABLE if row.name in SDPA_BACKEND_NAMES)
"""PyTorch's SDPA backends as the dashboard's BACKEND_TABLE has them (its rows, not a copy), fused
ones first: an op name matches a row's `op`, a device kernel's function name (rules.names.parse)
its `kernel`; one call's names are matched, so only the forward names occur."""
_LIBRARY_ROWS = {row.name: row for row in BACKEND_TABLE if row.name in ("sage", "flash-attn", "flashinfer")}
"""The third-party variants' backends (collectors.thirdparty): their kernels by the dashboard's own rows."""
_HUB_NAMES = re.compile(HUB_EVIDENCE)


def backend_ran(names: Sequence[str], variant_backend: str | None) -> tuple[str, str]:
    """(backend, evidence) from a profiled call's op and kernel names.

    backend: the first SDPA_BACKENDS row any name matches (cpu_flash, flash, efficient, cudnn,
    then math); for the flex variant "flex" when its compiled region ran; for the hub variant
    "hub" (its op namespace or FlashAttention kernels); for a third-party variant (sage, flash-attn,
    flashinfer) its BACKEND_TABLE row's names; for hand-written attention "eager" (a
    matmul and a softmax op, no SDPA backend); else "unknown".
    evidence: the name that proves it, a device kernel's rather than the op's when both match
    ('' for unknown).
    """
    if variant_backend == "flex":
        hit = next((n for n in names if _FLEX_NAMES.search(n)), "")
        return ("flex", hit) if hit else ("unknown", "")
    if variant_backend == "hub":
        hit = next((n for n in names if _HUB_NAMES.search(n)), "")
        return ("hub", hit) if hit else ("unknown", "")
    if variant_backend in _LIBRARY_ROWS:
        row = _LIBRARY_ROWS[variant_backend]
        hit = next((n for n in names if row.pattern.search(parse(n).qualname)), "")
        return (variant_backend, hit) if hit else ("unknown", "")
    for row in SDPA_BACKENDS:
        kernels = [
            n for n in names if row.kernel and not n.startswith("aten::") and re.search(row.kernel, parse(n).qualname)
        ]
        ops = [n for n in names if row.op and re.match(row.op, n)]
        if kernels or ops:
            return row.name, (kernels or ops)[0]
    matmul = min((n for n in names if _EAGER_MATMUL.match(n)), key=_EAGER_ORDER.index, default="")
    if matmul and any(_EAGER_SOFTMAX.match(n) for n in names):
        return "eager", matmul
    return "unknown", ""


# ---------------------------------------------------------------- failures


def is_oom(exc: BaseException) -> bool:
    """True for an allocator failure: torch.OutOfMemoryError (CUDA), MemoryError, or a
    RuntimeError with the CPU allocator's "can't allocate memory" text."""
    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    return isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and bool(_OOM_TEXT.search(str(exc))))


def asked_bytes(message: str) -> int | None:
    """Bytes the failed allocation asked for, parsed from the allocator's message: the CPU
    DefaultCPUAllocator's 'you tried to allocate N bytes' or CUDA's 'Tried to allocate 2.00 GiB'
    (converted with its binary or decimal unit, so rounded as printed); None when absent."""
    if m := _CPU_ASKED.search(message):
        return int(m.group(1))
    if m := _CUDA_ASKED.search(message):
        return round(float(m.group(1)) * _UNITS.get(m.group(2), 1))
    return None


def oom_reason(exc: BaseException) -> str:
    """One line for an out-of-memory outcome, naming the bytes the allocator was asked for."""
    text = str(exc)
    asked = asked_bytes(text)
    cuda = _CUDA_ASKED.search(text)
    if cuda:
        return f"out of memory: tried to allocate {cuda.group(1)} {cuda.group(2)} (~{asked} bytes)"
    if asked is not None:
        return f"out of memory: tried to allocate {asked} bytes ({asked / 2**20:.2f} MiB)"
    return "out of memory: " + one_line(text)


def one_line(text: str, chars: int = 400) -> str:
    """Non-empty lines of text joined with ' / ', cut to `chars` characters."""
    return " / ".join(line.strip() for line in text.splitlines() if line.strip())[:chars]


_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\.?")


def refusal_reason(exc: BaseException, caught: Sequence[warnings.WarningMessage | str] = ()) -> str:
    """PyTorch's own words for a refused call: the error text, then the warnings it raised (they
    say why each backend declined, e.g. 'Flash attention kernel not used because: Both fused
    kernels do not support non-zero dropout.'), joined with ' / '; the C++ source locations of
    the warnings ('(Triggered internally at ...)') are left out."""
    parts: list[str] = []
    for text in [str(exc), *(w if isinstance(w, str) else str(w.message) for w in caught)]:
        line = one_line(_TRIGGERED.sub("", text))
        if not line:
            continue
        if parts and parts[-1].endswith(":"):
            parts[-1] = f"{parts[-1]} {line}"
        else:
            parts.append(line)
    return " / ".join(dict.fromkeys(parts))


@dataclass(frozen=True)
class KnownUnavailable:
    """One way a variant is known not to run here. An exception matches when it, its
    `inner_exception` (dynamo's BackendCompilerFailed / inductor's InductorError wrap the
    compiler's) or its `__cause__` is one of `types` (by class name, any base class counts; ()
    any type) and `text` (a regex, searched in the message; '' any text) matches that same
    exception. what: the reason's opening words; source: where the message or type comes from."""

    what: str
    types: tuple[str, ...]
    text: str
    source: str


KNOWN_UNAVAILABLE: tuple[KnownUnavailable, ...] = (
    KnownUnavailable(
        "a package is missing", ("ImportError",), "", "Python's ImportError / ModuleNotFoundError (an import failed)"
    ),
    KnownUnavailable(
        "no attention backend for this device, dtype or input",
        ("RuntimeError",),
        r"No viable backend for scaled_dot_product_attention was found|No available kernel\.\s+Aborting execution",
        "aten/src/ATen/native/transformers sdp_utils select_sdp_backend (torch >= 2.3 'No viable backend ...', "
        "2.0-2.2 'No available kernel.  Aborting execution.'); torch/nested/_internal/sdpa.py for nested tensors",
    ),
    KnownUnavailable(
        "torch.compile: no working C++ compiler",
        (),
        r"No working C\+\+ compiler found|Compiler: .* is not found",
        "torch/_inductor/exc.py InvalidCxxCompiler",
    ),
    KnownUnavailable(
        "torch.compile: no working Triton",
        (),
        r"Cannot find a working triton installation",
        "torch/_inductor/exc.py TritonMissing",
    ),
    KnownUnavailable(
        "torch.compile: GPU too old for Triton",
        (),
        r"too old to be supported by the triton GPU compiler",
        "torch/_inductor/exc.py GPUTooOldForTriton",
    ),
    KnownUnavailable(
        "torch.compile: not supported on this platform",
        (),
        r"not yet supported for torch\.compile|torch\.compile is not supported on"
        r"|torch\.compile on current platform is not supported",
        "torch/_dynamo/eval_frame.py check_if_dynamo_supported (Python version, free-threaded builds; "
        "'Windows not yet supported' in older torch); torch/_inductor/kernel/flex/flex_cpu.py "
        "(check_cpu_supported: a CPU without the vector ISA flex needs)",
    ),
    KnownUnavailable(
        "torch.compile: the generated kernel needs more than this GPU has",
        (),
        r"out of resource: [^,]+, Required: \d+, Hardware limit: \d+",
        "triton/runtime/errors.py OutOfResources (shared memory, registers or threads per block)",
    ),
)
"""Every named, known unavailability: the only exceptions `outcome` calls unavailable (besides
collectors.unavailable.Unavailable, which a variant raises with its own reason)."""


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """exc, then what it wraps: `inner_exception` (dynamo, inductor) and the explicit `__cause__`
    (not `__context__`: an error raised while handling an ImportError is still an error)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [x for x in (getattr(e, "inner_exception", None), e.__cause__) if isinstance(x, BaseException)]


def known_unavailable(exc: BaseException) -> KnownUnavailable | None:
    """The KNOWN_UNAVAILABLE row exc matches (see KnownUnavailable), or None."""
    for e in _chain(exc):
        names = {c.__name__ for c in type(e).__mro__}
        for row in KNOWN_UNAVAILABLE:
            if (not row.types or names & set(row.types)) and (not row.text or re.search(row.text, str(e))):
                return row
    return None


def outcome(exc: BaseException, *, forced: bool = False, said: Sequence[str] = ()) -> tuple[str, str]:
    """(status, reason) of a variant's call that raised: the one classification the sweep, e2e and
    serve collectors share. A row's status is ok, parity_failed (it ran, the output is off the
    reference) or one of these:

    oom: `is_oom` (the bytes asked for). refused: `forced` (the variant forces one SDPA backend)
    and a RuntimeError: PyTorch's words (`refusal_reason`). unavailable: a
    collectors.unavailable.Unavailable (its own reason) or a KNOWN_UNAVAILABLE row ("what:
    TypeName: message"). error: anything else, "TypeName: message". said: what PyTorch said
    meanwhile (warnings, log lines), appended like the exception's __notes__."""
    extra = [*said, *(n for n in getattr(exc, "__notes__", ()) if isinstance(n, str))]
    if is_oom(exc):
        return "oom", oom_reason(exc)
    if isinstance(exc, Unavailable):
        return "unavailable", _with(str(exc), extra)
    if forced and isinstance(exc, RuntimeError):
        return "refused", refusal_reason(exc, extra)
    text = _with(f"{type(exc).__name__}: {one_line(str(exc))}", extra)
    row = known_unavailable(exc)
    if row is not None:
        return "unavailable", f"{row.what}: {text}"[:REASON_CHARS]
    return "error", text


REASON_CHARS = 1000
"""The longest reason `outcome` gives."""


def _with(text: str, said: Sequence[str]) -> str:
    """text, then each distinct non-empty line of `said`, joined with ' / ', cut to REASON_CHARS."""
    parts = [text, *(one_line(_TRIGGERED.sub("", s)) for s in said)]
    return " / ".join(dict.fromkeys(p for p in parts if p))[:REASON_CHARS]


@contextlib.contextmanager
def catching_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Record every warning raised inside the block (none is shown)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


# ---------------------------------------------------------------- memory cap


def address_space_bytes() -> int:
    """This process's virtual address-space size in bytes (VmSize in /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise OSError("no VmSize in /proc/self/status")


@contextlib.contextmanager
def memory_cap(cap_bytes: int | None, device: torch.device) -> Iterator[None]:
    """Let the block allocate at most about `cap_bytes` more than the process holds when it
    starts; allocations beyond fail for real (and are recorded as oom by the caller).

    CUDA: torch.cuda.empty_cache(), then set_per_process_memory_fraction((reserved + cap) /
    total) (the caching allocator compares its reserved bytes with that limit); back to 1.0 after.
    CPU: resource.setrlimit(RLIMIT_AS, current address-space size + cap), the previous soft
    limit restored after. The thread pool is started first so that no thread is created under
    the cap. None: no cap.
    """
    if cap_bytes is None:
        yield
        return
    if device.type == "cuda":
        torch.cuda.empty_cache()
        total = torch.cuda.get_device_properties(device).total_memory
        fraction = min(1.0, (torch.cuda.memory_reserved(device) + cap_bytes) / total)
        torch.cuda.set_per_process_memory_fraction(fraction, device)
        try:
            yield
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0, device)
            torch.cuda.empty_cache()
        return
    torch.ones(256, 256) @ torch.ones(256, 256)  # the intra-op pool exists before the cap
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = address_space_bytes() + cap_bytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# ---------------------------------------------------------------- provenance


def provenance(device: torch.device, command: str) -> dict[str, object]:
    """Where and when a table was measured: versions, device, host, UTC time, command."""
    import datetime
    import platform
    import socket

    from collectors.profile import device_name

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "command": command,
        "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "device": device.type,
        "device_name": device_name(device),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": cudnn,
        "python_version": platform.python_version(),
        "cpu_threads": torch.get_num_threads(),
    }

"""Peak compute and memory bandwidth of accelerators, and which row a trace's device is.

PEAK_TABLE holds vendors' published dense numbers (never the 2:4-sparsity figures the datasheets
print first): TFLOP/s by data type and memory bandwidth in TB/s (10^12 bytes/s). A trace names its
device in deviceProperties (name, computeMajor/computeMinor, numSms: SMs on NVIDIA, compute units
on AMD, totalGlobalMem in bytes); match_device() finds the row by name, then by those properties.
A device the table lacks can be given by the caller (`override`), e.g. {"bf16": 989.5, "bandwidth_tbps": 3.35}.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

# Data types a peak is given for (keys of DevicePeak's TFLOP/s fields).
PEAK_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class DevicePeak:
    """One accelerator as a trace shows it (one device id: on MI250/MI250X that is one GCD, half a package).

    name: the product; pattern: regular expression (case-insensitive) over deviceProperties' name;
    compute: (computeMajor, computeMinor); units: numSms (SMs / compute units); memory_gb: nominal
    memory in GB (10^9 bytes). fp32 .. fp8: dense peak TFLOP/s (fp32: the highest FP32 rate: CUDA
    cores on NVIDIA, matrix cores on AMD CDNA; None: the device has no such mode or the vendor does
    not publish it). bandwidth_tbps: peak memory bandwidth, TB/s. source: where the numbers come from.
    """

    name: str
    vendor: str
    pattern: str
    compute: tuple[int, int] | None
    units: int | None
    memory_gb: float | None
    fp32: float | None
    tf32: float | None
    bf16: float | None
    fp16: float | None
    fp8: float | None
    bandwidth_tbps: float | None
    source: str

    def tflops(self, dtype: str) -> float | None:
        """Dense peak TFLOP/s for a PEAK_DTYPES key, or None."""
        return getattr(self, dtype) if dtype in PEAK_DTYPES else None

    def numbers(self) -> tuple[float | None, ...]:
        """The peak numbers only (rows with equal numbers are interchangeable for a roofline)."""
        return (self.fp32, self.tf32, self.bf16, self.fp16, self.fp8, self.bandwidth_tbps)


_A100 = "NVIDIA A100 Tensor Core GPU datasheet (dense; sparsity figures halved)"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (dense = the starred sparsity figures halved)"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (dense = the starred sparsity figures halved)"
_B200 = "NVIDIA DGX B200 / HGX B200 datasheet, 8-GPU totals / 8 (dense)"
_GB200 = "NVIDIA GB200 NVL72 datasheet, 72-GPU totals / 72 (dense = sparsity figures halved)"
_MI300 = "AMD Instinct MI300X / MI325X data sheets (peak theoretical, dense; FP32 = matrix)"
_MI350 = "AMD Instinct MI350 series (MI350X / MI355X) product pages (peak theoretical, dense; FP32 = matrix)"
_MI200 = "AMD Instinct MI250 / MI250X data sheets, package figures / 2 (ROCm shows each GCD as one device)"

# Every device the engine knows. A trace's device is matched by name first (first row that
# matches), then, for blank or generic names ("AMD Radeon Graphics"), by compute capability,
# SM/CU count and memory size.
PEAK_TABLE: tuple[DevicePeak, ...] = (
    DevicePeak(
        "A100 SXM4 80GB", "NVIDIA", r"A100.*SXM4?.*80\s*GB", (8, 0), 108, 80, 19.5, 156, 312, 312, None, 2.039, _A100
    ),
    DevicePeak(
        "A100 PCIe 80GB",
        "NVIDIA",
        r"A100.*80\s*GB.*PCIe|A100.*PCIe.*80\s*GB",
        (8, 0),
        108,
        80,
        19.5,
        156,
        312,
        312,
        None,
        1.935,
        _A100,
    ),
    DevicePeak(
        "A100 SXM4 40GB",
        "NVIDIA",
        r"A100.*SXM4?.*40\s*GB|A100-SXM4?$",
        (8, 0),
        108,
        40,
        19.5,
        156,
        312,
        312,
        None,
        1.555,
        _A100,
    ),
    DevicePeak(
        "A100 PCIe 40GB", "NVIDIA", r"A100.*PCIe(?!.*80)", (8, 0), 108, 40, 19.5, 156, 312, 312, None, 1.555, _A100
    ),
    DevicePeak("H100 NVL", "NVIDIA", r"H100\s*NVL", (9, 0), 132, 94, 60, 417.5, 835.5, 835.5, 1670.5, 3.9, _H100),
    DevicePeak("H100 PCIe", "NVIDIA", r"H100.*PCIe", (9, 0), 114, 80, 51, 378, 756.5, 756.5, 1513, 2.0, _H100),
    DevicePeak(
        "H100 SXM5 80GB", "NVIDIA", r"H100.*(SXM|HBM3)", (9, 0), 132, 80, 67, 494.5, 989.5, 989.5, 1979, 3.35, _H100
    ),
    DevicePeak("H200 NVL", "NVIDIA", r"H200\s*NVL", (9, 0), 132, 141, 60, 417.5, 835.5, 835.5, 1670.5, 4.8, _H200),
    DevicePeak("H200 SXM", "NVIDIA", r"H200", (9, 0), 132, 141, 67, 494.5, 989.5, 989.5, 1979, 4.8, _H200),
    DevicePeak("GB200 (one B200 GPU)", "NVIDIA", r"GB200", (10, 0), None, 186, 80, 1250, 2500, 2500, 5000, 8.0, _GB200),
    DevicePeak("B200", "NVIDIA", r"(?<!G)B200", (10, 0), None, 180, 75, 1100, 2250, 2250, 4500, 8.0, _B200),
    DevicePeak(
        "L40S",
        "NVIDIA",
        r"L40S",
        (8, 9),
        142,
        48,
        91.6,
        183,
        362.05,
        362.05,
        733,
        0.864,
        "NVIDIA L40S GPU datasheet (dense = the starred sparsity figures halved)",
    ),
    DevicePeak(
        "L4",
        "NVIDIA",
        r"\bL4\b",
        (8, 9),
        58,
        24,
        30.3,
        60,
        121,
        121,
        242.5,
        0.3,
        "NVIDIA L4 Tensor Core GPU datasheet (dense = the starred sparsity figures halved)",
    ),
    DevicePeak(
        "A10",
        "NVIDIA",
        r"\bA10\b",
        (8, 6),
        72,
        24,
        31.2,
        62.5,
        125,
        125,
        None,
        0.6,
        "NVIDIA A10 Tensor Core GPU datasheet (dense = the starred sparsity figures halved)",
    ),
    # AWS's variant of the A10: NVIDIA publishes no datasheet for it; only its memory bandwidth is
    # stated (same GDDR6 as the A10). Compute peaks stay unknown: give them with `override`.
    DevicePeak(
        "A10G",
        "NVIDIA",
        r"A10G",
        (8, 6),
        80,
        24,
        None,
        None,
        None,
        None,
        None,
        0.6,
        "AWS EC2 G5 (A10G): 24 GB GDDR6 at 600 GB/s as the A10; no published tensor peaks",
    ),
    DevicePeak(
        "V100 SXM2",
        "NVIDIA",
        r"V100.*SXM2",
        (7, 0),
        80,
        None,
        15.7,
        None,
        None,
        125,
        None,
        0.9,
        "NVIDIA Tesla V100 GPU datasheet, SXM2 column (fp16 = 'Tensor Performance')",
    ),
    DevicePeak(
        "V100S PCIe",
        "NVIDIA",
        r"V100S",
        (7, 0),
        80,
        32,
        16.4,
        None,
        None,
        130,
        None,
        1.134,
        "NVIDIA V100S datasheet (fp16 = 'Tensor Performance')",
    ),
    DevicePeak(
        "V100 PCIe",
        "NVIDIA",
        r"V100.*PCIe",
        (7, 0),
        80,
        None,
        14,
        None,
        None,
        112,
        None,
        0.9,
        "NVIDIA Tesla V100 GPU datasheet, PCIe column (fp16 = 'Tensor Performance')",
    ),
    DevicePeak("MI355X", "AMD", r"MI355X", (9, 5), 256, 288, 157.3, None, 2516.6, 2516.6, 5033.2, 8.0, _MI350),
    DevicePeak("MI350X", "AMD", r"MI350X", (9, 5), 256, 288, 144.2, None, 2306.9, 2306.9, 4613.8, 8.0, _MI350),
    DevicePeak("MI325X", "AMD", r"MI325X", (9, 4), 304, 256, 163.4, 653.7, 1307.4, 1307.4, 2614.9, 6.0, _MI300),
    DevicePeak("MI300X", "AMD", r"MI300X", (9, 4), 304, 192, 163.4, 653.7, 1307.4, 1307.4, 2614.9, 5.3, _MI300),
    DevicePeak("MI250X (one GCD)", "AMD", r"MI250X", (9, 0), 110, 64, 47.85, None, 191.5, 191.5, None, 1.6384, _MI200),
    DevicePeak(
        "MI250 (one GCD)", "AMD", r"MI250(?!X)", (9, 0), 104, 64, 45.25, None, 181.05, 181.05, None, 1.6384, _MI200
    ),
)


@dataclass(frozen=True)
class DeviceMatch:
    """What match_device found: peak (None when no row fits), matched_by ('name', 'properties',
    'override' or None), device (the deviceProperties entry, or {}), reason (why there is no peak)."""

    peak: DevicePeak | None
    matched_by: str | None
    device: dict[str, Any]
    reason: str | None = None


def device_properties(meta: Mapping[str, Any], device_id: int | None = None) -> dict[str, Any]:
    """The deviceProperties entry of one device id (the first entry when device_id is None or not
    listed), or {} when the trace has none (CPU traces)."""
    listed = meta.get("deviceProperties")
    props = [p for p in listed if isinstance(p, dict)] if isinstance(listed, list) else []
    if not props:
        return {}
    return next((p for p in props if p.get("id") == device_id), props[0])


def _by_properties(props: Mapping[str, Any]) -> list[DevicePeak]:
    """Rows whose compute capability, unit count and memory size (within 12%) agree with props."""
    major, minor = props.get("computeMajor"), props.get("computeMinor")
    units, memory = props.get("numSms"), props.get("totalGlobalMem")
    found = []
    for row in PEAK_TABLE:
        if row.compute is None or (major, minor) != row.compute:
            continue
        if row.units is not None and units != row.units:
            continue
        if (
            row.memory_gb is not None
            and isinstance(memory, (int, float))
            and not (0.88 <= memory / 1e9 / row.memory_gb <= 1.12)
        ):
            continue
        found.append(row)
    return found


def match_device(props: Mapping[str, Any]) -> DeviceMatch:
    """The PEAK_TABLE row of one deviceProperties entry: by name, else by properties when every
    row those properties allow has the same peaks (A100-PG509-200 is a 40 GB A100; SXM and PCIe
    40 GB share their numbers), else no peak with the reason."""
    props = dict(props)
    if not props:
        return DeviceMatch(
            None, None, props, "no deviceProperties: a CPU trace or a profiler that did not record the device"
        )
    name = str(props.get("name") or "")
    for row in PEAK_TABLE:
        if name and re.search(row.pattern, name, re.IGNORECASE):
            return DeviceMatch(row, "name", props)
    candidates = _by_properties(props)
    if candidates and all(c.numbers() == candidates[0].numbers() for c in candidates):
        return DeviceMatch(candidates[0], "properties", props)
    described = f"{name or 'unnamed device'} (compute {props.get('computeMajor')}.{props.get('computeMinor')}, {props.get('numSms')} SMs/CUs)"
    if candidates:
        options = ", ".join(c.name for c in candidates)
        return DeviceMatch(
            None, None, props, f"{described} fits several devices with different peaks ({options}): give the peak"
        )
    return DeviceMatch(None, None, props, f"{described} is not in the peaks table: give its peak")


def with_override(match: DeviceMatch, override: DevicePeak | Mapping[str, float] | None) -> DeviceMatch:
    """Apply a user-given peak: a whole DevicePeak, or a mapping of PEAK_DTYPES keys (TFLOP/s) and
    'bandwidth_tbps' (TB/s) laid over the matched row (or over an empty row for unknown devices)."""
    if override is None:
        return match
    if isinstance(override, DevicePeak):
        return DeviceMatch(override, "override", match.device)
    allowed = {f.name for f in fields(DevicePeak)} & (set(PEAK_DTYPES) | {"bandwidth_tbps"})
    unknown = set(override) - allowed
    if unknown:
        raise ValueError(f"unknown peak keys {sorted(unknown)}; use {sorted(allowed)}")
    base = match.peak or DevicePeak(
        str(match.device.get("name") or "given device"),
        "",
        "",
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        "",
    )
    peak = replace(base, **{k: float(v) for k, v in override.items()}, source="given by the user")
    return DeviceMatch(peak, "override", match.device)


DEPENDENT_LAUNCH_MAJOR = 9
"""NVIDIA compute capability from which a kernel may start before its predecessor on the stream
ends (programmatic dependent launch: cudaLaunchAttributeProgrammaticStreamSerialization, Hopper
sm_90 and Blackwell sm_100/sm_120; CUDA C++ Programming Guide, 'Programmatic Dependent Launch and
Synchronization'). AMD devices report computeMajor 9 too (gfx9xx) and have no such launch."""


def dependent_launch(props: Mapping[str, Any]) -> bool:
    """True when one deviceProperties entry is an NVIDIA device that can launch dependents early
    (DEPENDENT_LAUNCH_MAJOR): by its computeMajor, else by the compute capability of the
    PEAK_TABLE row its name matches. AMD devices (by the matched row's vendor, a gcnArchName, or
    a name without NVIDIA) never."""
    if not props or props.get("gcnArchName"):
        return False
    match = match_device(props)
    nvidia = match.peak.vendor == "NVIDIA" if match.peak is not None else "NVIDIA" in str(props.get("name") or "")
    major = props.get("computeMajor")
    if not isinstance(major, int) and match.peak is not None and match.peak.compute is not None:
        major = match.peak.compute[0]
    return nvidia and isinstance(major, int) and major >= DEPENDENT_LAUNCH_MAJOR

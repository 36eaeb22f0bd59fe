"""`python -m collectors e2e --out DIR`: attention inside a model. A small decoder
(collectors/decoder.py) runs a prefill of a prompt batch and decode steps with a KV cache, once per
attention variant; how much faster is the whole step, against what Amdahl's law predicts from
attention's share of naive's step?

    python -m collectors e2e --out e2e/h100                  # GPU defaults: 8 layers, d_model 2048, ...
    python -m collectors e2e --device cpu --variants naive sdpa --out /tmp/e2e

Per variant and phase (prefill: one forward of the prompt batch, filling the cache; decode: one
new token per sequence attending to every cached position, the variant bound non-causal with q
length 1):
- step_ms: median of >= 10 timed, unprofiled steps (decode: per decode step, over the positions
  prompt .. prompt + decode_steps - 1). CUDA: CUDA events around each step (device time); CPU:
  time.perf_counter_ns.
- attention_ms: attention's time in one profiled step, summed over the `attention::<variant>`
  ranges (one per layer): on CUDA the device time of the kernels launched under them, on the CPU
  the ranges' CPU time. profiled_step_ms: that step's ProfilerStep span (ends with a device
  synchronize on CUDA). attention_share = attention_ms / profiled_step_ms.
- against naive (same phase): attention_speedup_vs_naive = naive attention_ms / attention_ms,
  speedup_vs_naive = naive step_ms / step_ms, amdahl_predicted_speedup = 1 / ((1 - s) + s / a)
  with s = naive's attention_share and a = attention_speedup_vs_naive. naive is always measured.
- parity_max_abs: max |logits - fp32 reference logits|; the reference is the same weights in fp32
  with explicit fp32 attention (collectors.parity.reference). Prefill: every prompt position;
  decode: every decode step, both fed the same fixed random tokens (no sampling), each from its
  own prefill's cache.
A variant that cannot run is a row with status unavailable, refused or oom and the reason; one that
fails for any other reason is an error row (collectors.measure.outcome).

Writes DIR/e2e.csv (collectors.tables.E2E, rows by phase (prefill first) then variant order),
DIR/e2e.<variant>.<phase>.json.gz (torch.profiler Chrome trace of the profiled step, with shapes,
[memory] events and the "attnscope" metadata block) and DIR/e2e.json (provenance).
Exit status: 0 when the run finished, 2 for bad input (one error line, no traceback).
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import polars as pl
import torch
from torch import Tensor
from torch.profiler import ProfilerActivity, profile, schedule

from collectors import hub, measure, mode
from collectors.decoder import Core, Decoder, DecoderConfig, build
from collectors.options import DTYPE_NAMES, DTYPES, PROG, Parser, UsageError, at_least, device, out_dir, positive
from collectors.parity import reference
from collectors.profile import METADATA_KEY, check_metadata, device_name
from collectors.tables import E2E
from collectors.variants import VARIANTS, Unavailable, Variant

MODE = f"{PROG} e2e"
BASELINE = "naive"
DEFAULT_VARIANTS = ("naive", "naive_inplace", "sdpa", "sdpa-math", "flex")
PHASES = ("prefill", "decode")
MIN_REPS = 10
WARMUP = 2
"""Untimed prefills before timing (compilation, allocator warm-up); decode's warm-up is the parity run."""


@dataclass(frozen=True)
class Scale:
    """Default model and workload size on one kind of device."""

    layers: int
    d_model: int
    heads: int
    prompt_len: int
    batch: int
    decode_steps: int


CPU_SCALE = Scale(layers=2, d_model=256, heads=4, prompt_len=128, batch=4, decode_steps=16)
GPU_SCALE = Scale(layers=8, d_model=2048, heads=16, prompt_len=2048, batch=8, decode_steps=64)


@dataclass(frozen=True)
class Config:
    """What to run and where."""

    device: torch.device
    dtype: torch.dtype
    model: DecoderConfig
    prompt_len: int
    batch: int
    decode_steps: int
    variants: tuple[str, ...]
    reps: int
    seed: int
    hub_kernel: str | None
    out: Path
    command: str


# ---------------------------------------------------------------- command line


def parser() -> Parser:
    p = mode.parser(MODE, __doc__)
    p.add_argument("--dtype", choices=tuple(DTYPES), help="default bf16 on CUDA, fp32 on CPU")
    for name, help_text in (
        ("layers", "decoder layers"),
        ("d_model", "model width"),
        ("heads", "attention heads"),
        ("prompt_len", "prompt tokens per sequence"),
        ("batch", "sequences"),
        ("decode_steps", "decode steps after the prefill"),
    ):
        gpu, cpu = getattr(GPU_SCALE, name), getattr(CPU_SCALE, name)
        p.add_argument(
            "--" + name.replace("_", "-"), type=positive, help=f"{help_text} (default {gpu} on GPU, {cpu} on CPU)"
        )
    p.add_argument(
        "--variants",
        nargs="+",
        default=list(DEFAULT_VARIANTS),
        metavar="NAME",
        help=f"any of: {', '.join(VARIANTS)} (default {' '.join(DEFAULT_VARIANTS)}; commas also "
        "separate; naive is always run, it is the baseline)",
    )
    p.add_argument(
        "--reps",
        type=at_least(MIN_REPS),
        default=MIN_REPS,
        help=f"timed steps per phase and variant (default and minimum {MIN_REPS})",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and tokens (default 0)")
    p.add_argument(
        "--hub-kernel",
        metavar="REPO_OR_PATH",
        help="where the hub variant's FlashAttention comes from: a repo id or a kernel folder (see collectors/hub.py)",
    )
    return p


def build_config(argv: list[str]) -> Config:
    """Parse argv and resolve device-dependent defaults; raise UsageError for bad input."""
    args = parser().parse_args(argv)
    dev = device(args.device)
    base = GPU_SCALE if dev.type == "cuda" else CPU_SCALE
    size = {name: getattr(args, name) or getattr(base, name) for name in vars(base)}
    if size["d_model"] % size["heads"]:
        raise UsageError(f"--d-model {size['d_model']} is not a multiple of --heads {size['heads']}")
    names = mode.variant_names(args.variants)
    if args.hub_kernel is not None and not args.hub_kernel.strip():
        raise UsageError("--hub-kernel: empty; give a repo id or a folder")
    model = DecoderConfig(
        layers=size["layers"],
        d_model=size["d_model"],
        heads=size["heads"],
        max_len=size["prompt_len"] + size["decode_steps"],
    )
    return Config(
        device=dev,
        dtype=DTYPES[args.dtype or ("bf16" if dev.type == "cuda" else "fp32")],
        model=model,
        prompt_len=size["prompt_len"],
        batch=size["batch"],
        decode_steps=size["decode_steps"],
        variants=tuple(dict.fromkeys([BASELINE, *names])),
        reps=args.reps,
        seed=args.seed,
        hub_kernel=args.hub_kernel,
        out=out_dir(args.out),
        command=shlex.join([*MODE.split(), *argv]),
    )


# ---------------------------------------------------------------- workload


@dataclass
class Workload:
    """The model, its inputs and the fp32 reference logits every variant is compared with."""

    model: Decoder
    prompt: Tensor  # [batch, prompt_len] token ids
    new_tokens: Tensor  # [batch, decode_steps] token ids fed to the decode steps
    ref_prefill: Tensor  # [batch, prompt_len, vocab] fp32
    ref_decode: list[Tensor]  # decode_steps x [batch, 1, vocab] fp32


def make_workload(cfg: Config) -> Workload:
    """Weights from cfg.seed; tokens from cfg.seed + 1 (drawn on the CPU, same on every device)."""
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    tokens = torch.randint(0, cfg.model.vocab, (cfg.batch, cfg.prompt_len + cfg.decode_steps), generator=gen)
    tokens = tokens.to(cfg.device)
    prompt, new_tokens = tokens[:, : cfg.prompt_len], tokens[:, cfg.prompt_len :]
    ref_model = build(cfg.model, cfg.seed, cfg.device, torch.float32)
    pre = Core(lambda q, k, v: reference(q, k, v, causal=True), "reference")
    dec = Core(lambda q, k, v: reference(q, k, v, causal=False), "reference")
    ref_prefill, ref_decode = _generate(ref_model, cfg, prompt, new_tokens, pre, dec)
    del ref_model
    mode.release(cfg.device)
    model = build(cfg.model, cfg.seed, cfg.device, cfg.dtype)
    return Workload(model, prompt, new_tokens, ref_prefill, ref_decode)


@torch.no_grad()
def _generate(
    model: Decoder, cfg: Config, prompt: Tensor, new_tokens: Tensor, pre: Core, dec: Core
) -> tuple[Tensor, list[Tensor]]:
    """Prefill logits of every position and each decode step's logits, as fp32."""
    cache = model.new_cache(cfg.batch)
    logits = model.prefill(prompt, pre, cache, all_logits=True).float()
    steps = [
        model.decode(new_tokens[:, i : i + 1], dec, cache, cfg.prompt_len + i).float() for i in range(cfg.decode_steps)
    ]
    return logits, steps


def _example_q(cfg: Config, seq: int) -> Tensor:
    """A q-shaped tensor [batch, heads, seq, head_dim] for Variant.bind (only its shape, device
    and dtype are read)."""
    return torch.zeros(cfg.batch, cfg.model.heads, seq, cfg.model.head_dim, device=cfg.device, dtype=cfg.dtype)


# ---------------------------------------------------------------- one variant


def run_variant(cfg: Config, work: Workload, variant: Variant) -> dict[str, dict[str, Any]]:
    """Both phases of one variant: phase -> row (E2E's columns; the relative columns still null)."""
    rows = {phase: _row(cfg, variant.name, phase) for phase in PHASES}
    prefill_core: Core | None = None
    try:
        prefill_core = Core(variant.bind(_example_q(cfg, cfg.prompt_len), causal=True), variant.name)
        _measure_prefill(cfg, work, prefill_core, rows["prefill"])
    except Exception as exc:  # noqa: BLE001 - every outcome is a row
        prefill_core = None
        _fail(cfg, rows["prefill"], *mode.failed_call(exc, variant))
    try:
        decode_core = Core(variant.bind(_example_q(cfg, 1), causal=False), variant.name)
        _measure_decode(cfg, work, prefill_core, decode_core, rows["decode"])
    except Exception as exc:  # noqa: BLE001
        _fail(cfg, rows["decode"], *mode.failed_call(exc, variant))
    mode.release(cfg.device)
    return rows


def _measure_prefill(cfg: Config, work: Workload, core: Core, row: dict[str, Any]) -> None:
    model = work.model
    cache = model.new_cache(cfg.batch)
    with measure.catching_warnings() as caught, torch.no_grad():
        try:
            logits = model.prefill(work.prompt, core, cache, all_logits=True)
        except RuntimeError as exc:
            _note(exc, caught)
            raise
    row["parity_max_abs"] = _max_abs(logits, work.ref_prefill)
    del logits

    def step(_: int) -> None:
        model.prefill(work.prompt, core, cache)

    samples = measure.time_calls(step, cfg.device.type == "cuda", warmup=WARMUP, reps=cfg.reps)
    _fill_times(cfg, row, samples)
    _profile(cfg, row, core.label, step, "prefill", meta_extra={"positions": [0, cfg.prompt_len]})


def _measure_decode(cfg: Config, work: Workload, prefill_core: Core | None, core: Core, row: dict[str, Any]) -> None:
    """The cache is filled by the variant's own prefill, or by plain SDPA when that prefill
    could not run (untimed either way)."""
    model, first = work.model, cfg.prompt_len
    cache = model.new_cache(cfg.batch)
    filler = prefill_core or Core(VARIANTS["sdpa"].bind(_example_q(cfg, cfg.prompt_len)), "sdpa")
    diffs = []
    with measure.catching_warnings() as caught, torch.no_grad():
        model.prefill(work.prompt, filler, cache)
        try:
            for i in range(cfg.decode_steps):  # the parity run doubles as decode's warm-up
                logits = model.decode(work.new_tokens[:, i : i + 1], core, cache, first + i)
                diffs.append(_max_abs(logits, work.ref_decode[i]))
        except RuntimeError as exc:
            _note(exc, caught)
            raise
    row["parity_max_abs"] = max(diffs)
    if prefill_core is None:
        row["reason"] = "cache filled by plain sdpa: this variant's prefill did not run"

    def step(i: int) -> None:
        pos = i % cfg.decode_steps
        model.decode(work.new_tokens[:, pos : pos + 1], core, cache, first + pos)

    generations = math.ceil(cfg.reps / cfg.decode_steps)
    samples = measure.time_calls(step, cfg.device.type == "cuda", warmup=0, reps=generations * cfg.decode_steps)
    _fill_times(cfg, row, samples)
    middle = cfg.decode_steps // 2  # profile a step in the middle of the decode (warm-up step just before)
    _profile(
        cfg,
        row,
        core.label,
        lambda i: step(max(0, middle - 1 + i)),
        "decode",
        meta_extra={"positions": [first + middle, first + middle + 1]},
    )


def _fill_times(cfg: Config, row: dict[str, Any], samples: list[float]) -> None:
    timing = measure.summarize_times(samples)
    row["step_ms"] = timing.median_ms
    row["step_ms_p10"], row["step_ms_p90"] = timing.p10_ms, timing.p90_ms
    row["reps"] = len(samples)
    row["tokens_per_s"] = row["tokens"] / (row["step_ms"] / 1e3) if row["step_ms"] > 0 else None


def _profile(
    cfg: Config, row: dict[str, Any], label: str, step: Callable[[int], None], phase: str, meta_extra: dict[str, Any]
) -> None:
    """Profile one step (schedule: one warm-up step, one active step) with shapes and memory;
    write the trace and fill attention_ms, profiled_step_ms and attention_share."""
    cuda = cfg.device.type == "cuda"
    name = f"e2e.{row['variant']}.{phase}.json.gz"
    path = cfg.out / name
    found: dict[str, float] = {}

    def ready(prof: profile) -> None:
        prof.export_chrome_trace(str(path))  # gzip'd by torch for a .gz path
        found.update(attention_times(prof.events(), label, cuda))

    meta = _metadata(cfg, row, phase, meta_extra)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    plan = schedule(wait=0, warmup=1, active=1, repeat=1)
    with profile(
        activities=activities, schedule=plan, record_shapes=True, profile_memory=True, on_trace_ready=ready
    ) as prof:
        for i in range(2):
            if i == 1:  # the active step: the profiler records, so the metadata sticks
                prof.add_metadata_json(METADATA_KEY, json.dumps(meta))
            with torch.no_grad():
                step(i)
            if cuda:
                torch.cuda.synchronize()
            prof.step()
    check_metadata(path)
    row["trace"] = name
    row["attention_ms"] = found.get("attention_ms")
    row["profiled_step_ms"] = found.get("step_ms")
    if row["attention_ms"] is not None and row["profiled_step_ms"]:
        row["attention_share"] = row["attention_ms"] / row["profiled_step_ms"]


def attention_times(events: Any, label: str, cuda: bool) -> dict[str, float]:
    """From a profiler's events: attention_ms (sum over the `attention::<label>` ranges: device
    time of their kernels on CUDA, their CPU span on the CPU) and step_ms (the ProfilerStep span),
    both in ms; a key is absent when its events are."""
    from torch.autograd import DeviceType

    name = f"attention::{label}"
    # the CPU-side ranges only: on CUDA each range also appears as a gpu_user_annotation event
    cpu = [e for e in events if getattr(e, "device_type", DeviceType.CPU) == DeviceType.CPU]
    ranges = [e for e in cpu if e.name == name]
    steps = [e for e in cpu if e.name.startswith("ProfilerStep")]  # "ProfilerStep*" in events(), "#1" in the trace
    out: dict[str, float] = {}
    if ranges:
        if cuda:
            us = sum(getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0) for e in ranges)
        else:
            us = sum(e.cpu_time_total for e in ranges)
        out["attention_ms"] = us / 1e3
    if steps:
        out["step_ms"] = max(e.cpu_time_total for e in steps) / 1e3
    return out


def _metadata(cfg: Config, row: dict[str, Any], phase: str, extra: dict[str, Any]) -> dict[str, Any]:
    """The trace's "attnscope" block: the fields collectors.profile.describe gives, plus the model."""
    variant = VARIANTS[row["variant"]]
    return {
        "mode": "e2e",
        "variant": variant.name,
        "backend_requested": variant.backend,
        "phase": phase,
        "model": cfg.model.as_dict(),
        "batch": cfg.batch,
        "prompt_len": cfg.prompt_len,
        "decode_steps": cfg.decode_steps,
        "dtype": str(cfg.dtype).removeprefix("torch."),
        "device": cfg.device.type,
        "device_name": device_name(cfg.device),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "seed": cfg.seed,
        "tokens_per_step": row["tokens"],
        "compiled": variant.backend == "flex",
        "attention_ranges": f"attention::{variant.name}, one per layer",
        **extra,
    }


def _row(cfg: Config, variant: str, phase: str) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(E2E.columns)
    row.update(
        variant=variant, phase=phase, status="ok", tokens=cfg.batch * (cfg.prompt_len if phase == "prefill" else 1)
    )
    return row


def _fail(cfg: Config, row: dict[str, Any], status: str, reason: str) -> None:
    mode.release(cfg.device)
    keep = {k: row[k] for k in ("variant", "phase", "tokens")}
    row.update(dict.fromkeys(E2E.columns), **keep, status=status, reason=reason)


def _note(exc: BaseException, caught: list) -> None:
    """Attach the warnings PyTorch raised during a failed call (they say why a backend declined)."""
    said = " / ".join(measure.one_line(str(w.message)) for w in caught)
    if said:
        exc.__notes__ = [*getattr(exc, "__notes__", []), said]


def _max_abs(out: Tensor, ref: Tensor) -> float:
    """max |out - ref| in fp32; inf when out is not finite or the shapes differ."""
    if out.shape != ref.shape or not bool(torch.isfinite(out).all()):
        return math.inf
    return float((out.float() - ref).abs().max())


# ---------------------------------------------------------------- the run


def relative(rows: list[dict[str, Any]]) -> None:
    """Fill attention_speedup_vs_naive, speedup_vs_naive and amdahl_predicted_speedup in place,
    per phase, against the naive row (left null where naive or the row lacks a number)."""
    for phase in PHASES:
        base = next((r for r in rows if r["variant"] == BASELINE and r["phase"] == phase and r["status"] == "ok"), None)
        if base is None:
            continue
        share = base["attention_share"]
        for r in rows:
            if r["phase"] != phase or r["status"] != "ok":
                continue
            if base["step_ms"] and r["step_ms"]:
                r["speedup_vs_naive"] = base["step_ms"] / r["step_ms"]
            if base["attention_ms"] and r["attention_ms"]:
                a = base["attention_ms"] / r["attention_ms"]
                r["attention_speedup_vs_naive"] = a
                if share is not None:
                    r["amdahl_predicted_speedup"] = 1.0 / ((1.0 - share) + share / a)


def run(cfg: Config, echo: Callable[[str], None] = print) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Every variant, both phases; the table (E2E's columns, row order: phase, then variant order) and
    what e2e.json records beside the provenance (the hub kernel's description when asked for)."""
    hub.select(cfg.hub_kernel)
    extra: dict[str, Any] = {}
    if "hub" in cfg.variants:
        try:
            extra["hub_kernel"] = hub.load_kernel(cfg.device).describe()
        except Unavailable as exc:
            extra["hub_kernel"] = {"source": hub.selected(), "unavailable": str(exc)}
    work = make_workload(cfg)
    by_variant = {}
    for name in cfg.variants:
        by_variant[name] = run_variant(cfg, work, VARIANTS[name])
        for phase in PHASES:
            echo(_line(by_variant[name][phase]))
    rows = [by_variant[name][phase] for phase in PHASES for name in cfg.variants]
    relative(rows)
    return E2E.frame(rows), extra


ATTENTION_TIME_SOURCE = {
    "cuda": "device time: the durations of the GPU kernels launched under the attention::<variant> ranges "
    "(torch.profiler FunctionEvent.device_time_total, summed over the layers' ranges)",
    "cpu": "CPU time: the spans of the attention::<variant> record_function ranges (summed over the layers)",
}


def write(cfg: Config, frame: pl.DataFrame, extra: dict[str, Any]) -> None:
    """DIR/e2e.csv and DIR/e2e.json."""
    cuda = cfg.device.type == "cuda"
    fields = {
        "model": cfg.model.as_dict(),
        "model_description": "collectors/decoder.py: embedding + learned positions, N x (RMSNorm, attention with "
        "q/k/v/o projections, RMSNorm, SiLU-gated MLP), RMSNorm, LM head; weights from the seed",
        "dtype": DTYPE_NAMES[cfg.dtype],
        "batch": cfg.batch,
        "prompt_len": cfg.prompt_len,
        "decode_steps": cfg.decode_steps,
        "variants": list(cfg.variants),
        "reps": cfg.reps,
        "seed": cfg.seed,
        "step_timing": (
            "CUDA events around each step (device time)" if cuda else "time.perf_counter_ns around each step"
        )
        + f"; median; prefill after {WARMUP} untimed steps, decode after one untimed (parity) pass over the "
        "decode positions, timed over ceil(reps / decode_steps) passes",
        "attention_time_source": ATTENTION_TIME_SOURCE["cuda" if cuda else "cpu"],
        "profiled_step": "torch.profiler schedule(wait=0, warmup=1, active=1), record_shapes=True, "
        "profile_memory=True; the ProfilerStep span of the active step"
        + (" (ends with torch.cuda.synchronize)" if cuda else ""),
        "amdahl": "1 / ((1 - s) + s / a), s = naive's attention_share in the phase, a = attention_speedup_vs_naive",
        "parity_reference": "the same weights in fp32 with explicit fp32 attention (collectors.parity.reference); "
        "prefill: logits of every prompt position; decode: logits of every decode step, fed "
        "the same fixed tokens",
        "quantile_method": measure.QUANTILE_METHOD,
        **extra,
    }
    mode.write(
        E2E,
        frame,
        cfg.out,
        measure.provenance(cfg.device, cfg.command),
        fields,
        row_order="phase (prefill, decode), then variant order (naive first)",
        counts={"statuses": E2E.status_counts(frame)},
    )


_TABLE = (
    "{phase:<8} {variant:<15} {status:<11} {step:>10} {attn:>10} {share:>6} {aspd:>8} {spd:>8} {amdahl:>8} "
    "{tps:>12} {parity:>9}  {reason}"
)


def table_header() -> str:
    return _TABLE.format(
        phase="phase",
        variant="variant",
        status="status",
        step="step ms",
        attn="attn ms",
        share="share",
        aspd="attn x",
        spd="step x",
        amdahl="amdahl x",
        tps="tokens/s",
        parity="parity",
        reason="reason",
    )


def _line(row: dict[str, Any]) -> str:
    return _TABLE.format(
        phase=row["phase"],
        variant=row["variant"],
        status=row["status"],
        step=mode.number(row["step_ms"], ".3f"),
        attn=mode.number(row["attention_ms"], ".3f"),
        share=mode.number(row["attention_share"], ".3f"),
        aspd=mode.number(row["attention_speedup_vs_naive"], ".2f"),
        spd=mode.number(row["speedup_vs_naive"], ".2f"),
        amdahl=mode.number(row["amdahl_predicted_speedup"], ".2f"),
        tps=mode.number(row["tokens_per_s"], ",.0f"),
        parity=mode.number(row["parity_max_abs"], ".2e"),
        reason=(row["reason"] or "")[:70],
    ).rstrip()


def main(argv: list[str]) -> int:
    """Run the end-to-end measurement; 0 when it ran, 1 when a row is an error, 2 for bad input (one error line)."""
    return mode.main(MODE, argv, build_config, _run)


def _run(cfg: Config) -> int:
    print(
        f"model {cfg.model.as_dict()}, batch {cfg.batch}, prompt {cfg.prompt_len}, "
        f"{cfg.decode_steps} decode steps, {DTYPE_NAMES[cfg.dtype]} on {cfg.device.type}",
        flush=True,
    )
    frame, extra = run(cfg, echo=lambda line: None)
    write(cfg, frame, extra)
    print(table_header())
    for row in frame.iter_rows(named=True):
        print(_line(row))
    traces = f"{frame['trace'].drop_nulls().len()} traces"
    print(mode.closing_line(E2E, frame, cfg.out, "e2e.json", traces), flush=True)
    return mode.exit_status(E2E, frame, MODE, cfg.out)

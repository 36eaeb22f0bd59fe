"""The regression gate behind `attnscope check`: does a candidate run hold against its baseline?

The defaults catch the three regressions this field fears: a new copy, SDPA running on the
unfused math path, and more kernels per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from dashboard.engine.backends import detect_backends
from dashboard.engine.copies import copies_in_steps
from dashboard.engine.efficiency import efficiency_block
from dashboard.engine.kernels import per_step, step_count, work_unit
from dashboard.engine.model import Trace
from dashboard.engine.review import backend_check, parity
from dashboard.engine.speed import step_time


@dataclass(frozen=True)
class Rules:
    """max_kernel_increase_pct: allowed growth of device work per step (median), in percent.
    no_new_copies: fail on more hidden copies per step, or a hidden copy from an op chain the
        baseline lacks (copies the op asked for, autograd's and communication's never fail it).
    require_backend: an attention backend the candidate must show (e.g. 'flash').
    forbid_math: fail when the candidate runs SDPA's math path and the baseline does not.
    min_speedup: baseline median step time / candidate's must be at least this.
    require_parity: the candidate must carry a passing parity record (a recorded failure always fails).
    min_attention_efficiency: the candidate's attention must reach this % of the device's roofline
        (efficiency_block's pct_of_roofline); a trace where it cannot be measured fails, with why."""

    max_kernel_increase_pct: float = 0.0
    no_new_copies: bool = True
    require_backend: str | None = None
    forbid_math: bool = True
    min_speedup: float | None = None
    require_parity: bool = False
    min_attention_efficiency: float | None = None


class IncomparableError(ValueError):
    """The two traces cannot be compared (e.g. a CPU-only trace against a GPU trace)."""


def _work_per_step(trace: Trace) -> float:
    table = per_step(trace)
    return float(table["work"].median()) if table.height else 0.0


def _hidden_copy_chains(trace: Trace) -> tuple[float, set[tuple[str, str]]]:
    """Hidden copies per step and their (kind, op chain) pairs: only hidden copies are alarms
    (a requested, autograd or communication copy is the op's or the engine's job)."""
    table = copies_in_steps(trace).filter(pl.col("hidden"))
    steps = step_count(trace)
    chains = {(kind, " > ".join(chain)) for kind, chain in zip(table["kind"].to_list(), table["op_chain"].to_list())}
    return table.height / steps, chains


def check(base: Trace, candidate: Trace, rules: Rules = Rules()) -> list[str]:
    """One line per violated rule; an empty list when the candidate holds."""
    if work_unit(base) != work_unit(candidate):
        raise IncomparableError(
            f"the baseline, {base.source}, counts {work_unit(base)}s and the candidate, {candidate.source}, counts "
            f"{work_unit(candidate)}s: "
            "compare a GPU trace with a GPU trace, a CPU-only trace with a CPU-only trace"
        )
    problems: list[str] = []
    unit = "kernels, memcpys and memsets" if work_unit(candidate) == "kernel" else "leaf cpu_ops"
    base_work, cand_work = _work_per_step(base), _work_per_step(candidate)
    allowed = base_work * (1 + rules.max_kernel_increase_pct / 100.0)
    if cand_work > allowed + 1e-9:
        growth = (cand_work / base_work - 1) * 100 if base_work else float("inf")
        problems.append(
            f"more device work: {cand_work:g} {unit} per step against {base_work:g} in the baseline "
            f"(+{growth:.1f}%, allowed +{rules.max_kernel_increase_pct:g}%)"
        )
    if rules.no_new_copies:
        base_rate, base_chains = _hidden_copy_chains(base)
        cand_rate, cand_chains = _hidden_copy_chains(candidate)
        new = sorted(cand_chains - base_chains)
        if new:
            shown = "; ".join(f"{kind} from {chain}" for kind, chain in new[:3])
            more = f" and {len(new) - 3} more" if len(new) > 3 else ""
            problems.append(f"new copies: {shown}{more}")
        elif cand_rate > base_rate + 1e-9:
            problems.append(f"more copies: {cand_rate:g} hidden per step against {base_rate:g} in the baseline")
    detected = detect_backends(candidate).backends
    if rules.require_backend and rules.require_backend not in detected:
        problems.append(
            f"attention backend '{rules.require_backend}' required, the candidate shows {', '.join(detected) or 'none'}"
        )
    if rules.forbid_math and "math" in detected and "math" not in detect_backends(base).backends:
        problems.append("SDPA runs on the unfused math path in the candidate (not in the baseline)")
    verdict = backend_check(candidate)
    if verdict["verdict"] == "FALLBACK":
        problems.append(
            f"backend fallback: '{verdict['requested']}' was requested, the trace shows {', '.join(verdict['detected'])}"
        )
    if rules.min_speedup is not None:
        b, c = step_time(base).median_us, step_time(candidate).median_us
        speedup = b / c if c > 0 else float("nan")
        if not speedup >= rules.min_speedup:
            problems.append(f"speedup {speedup:.3f}x is below the required {rules.min_speedup:g}x ({c:.1f} us against {b:.1f} us per step)")
    if rules.min_attention_efficiency is not None:
        block = efficiency_block(candidate)
        pct = block["pct_of_roofline"]
        if pct is None:
            why = "; ".join(block["reasons"][:2]) or block["device"]["reason"] or "no attention op with shapes"
            problems.append(f"attention efficiency required, but it cannot be measured on the candidate: {why}")
        elif pct < rules.min_attention_efficiency:
            problems.append(
                f"attention reaches {pct:.1f}% of the roofline ({block['tflops']:.1f} TFLOP/s), "
                f"below the required {rules.min_attention_efficiency:g}%"
            )
    record = parity(candidate)
    if record is not None and record.get("passed") is False:
        problems.append(f"parity failure: max abs error {record.get('max_abs')} against the fp32 reference")
    elif rules.require_parity and record is None:
        problems.append("parity required, but the candidate trace carries no parity record (not written by the collectors)")
    return problems



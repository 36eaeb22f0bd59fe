"""The review's frames, computed once for every format (Review, build_review), and the words and
rows every format shares: how each run relates to its baseline, the changed rows shown, the groups."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from dashboard.engine.compare import review
from dashboard.engine.compare.fingerprint import CROSS_DEVICE
from dashboard.engine.compare.speed import (
    DEFAULT_USD_PER_GPU_HOUR,
    GROUP_CPU,
    GROUP_GPU,
    NO_SPEEDUP,
    Group,
    device_groups,
    speed_table,
)
from dashboard.engine.model.trace import Trace

KERNEL_CHANGES_SHOWN = review.TOP_EXPLAINED  # rows of each kernel and op diff shown (the rows 'explained' counts)
NAMES_LISTED = 60  # op names listed as only in one run, at most (then 'and N more')


@dataclass
class Review:
    """The frames of one comparison, computed once for both report formats."""

    runs: dict[str, Trace]
    baseline: str
    overview: pl.DataFrame
    findings: pl.DataFrame
    families: pl.DataFrame
    copies: pl.DataFrame
    backends: pl.DataFrame
    speed: pl.DataFrame
    changes: list[review.Change]  # each run against its group's baseline (kernels ranked by time, ops, readings)
    groups: list[Group] = field(default_factory=list)  # device groups, each with its baseline
    efficiency: pl.DataFrame | None = None  # review.attention_efficiency
    roofline: pl.DataFrame | None = None  # review.roofline_points
    roofline_left_out: pl.DataFrame | None = None  # review.roofline_left_out
    by: str = "base"  # kernels by full 'name' or by 'base' name
    usd_per_gpu_hour: float | None = None
    usd_per_cpu_hour: float | None = None
    colors: dict[str, str] = field(default_factory=dict)  # run -> colour (the dashboard's), else by position

    def against(self, label: str) -> str:
        """The baseline `label` is measured against (its device group's)."""
        return next((g.baseline for g in self.groups if label in g.runs), self.baseline)


def build_review(
    runs: dict[str, Trace],
    baseline: str,
    usd_per_gpu_hour: float | None = DEFAULT_USD_PER_GPU_HOUR,
    usd_per_cpu_hour: float | None = None,
    colors: dict[str, str] | None = None,
    by: str = "base",
    steps: dict[str, int | None] | None = None,
    copy_alarm_share: float = review.COPY_ALARM_SHARE,
    copy_alarm_bytes: float = review.COPY_ALARM_BYTES,
) -> Review:
    """Compute every table of the comparison of `runs` (label -> Trace) against `baseline`; GPU
    and CPU-only runs are compared within their own group (speed.device_groups). Cost uses
    `usd_per_gpu_hour` for GPU runs and `usd_per_cpu_hour` for CPU-only runs (None: no cost).
    Kernel changes are over all steps (`steps`: run label -> one step instead), by base name
    (template instances folded; by='name' for full names), as the dashboard shows them by default.
    A hidden copy is an alarm from `copy_alarm_share` of the step or `copy_alarm_bytes` a step."""
    if baseline not in runs:
        raise KeyError(f"baseline {baseline!r} is not among the runs")
    overview = review.overview(runs, baseline)
    groups = review.copy_groups(runs, copy_alarm_share, copy_alarm_bytes)
    split = device_groups(runs, baseline)
    return Review(
        runs=runs,
        baseline=baseline,
        overview=overview,
        findings=review.findings(
            runs,
            baseline,
            overview_table=overview,
            groups=groups,
            alarm_share=copy_alarm_share,
            alarm_bytes=copy_alarm_bytes,
        ),
        families=review.families(runs),
        copies=groups,
        backends=review.backend_table(runs),
        speed=speed_table(runs, baseline, usd_per_gpu_hour, usd_per_cpu_hour),
        changes=review.changes(runs, baseline, steps=steps, by=by),
        groups=split,
        efficiency=review.attention_efficiency(runs),
        roofline=review.roofline_points(runs),
        roofline_left_out=review.roofline_left_out(runs),
        by=by,
        usd_per_gpu_hour=usd_per_gpu_hour,
        usd_per_cpu_hour=usd_per_cpu_hour,
        colors=dict(colors or {}),
    )


def _price_line(rv: Review) -> str:
    """Which prices the cost column uses, in words (plain text)."""
    names = {g.name for g in rv.groups}
    parts = []
    if GROUP_GPU in names:
        parts.append(
            f"${rv.usd_per_gpu_hour:.2f} per GPU-hour for GPU runs"
            if rv.usd_per_gpu_hour
            else "no GPU-hour price given"
        )
    if GROUP_CPU in names:
        parts.append(
            f"${rv.usd_per_cpu_hour:.2f} per CPU-hour for CPU-only runs"
            if rv.usd_per_cpu_hour
            else "no CPU-hour price given, so no cost for CPU-only runs"
        )
    return "Cost per million tokens at " + "; ".join(parts) + "."


def _group_rows(frame: pl.DataFrame, group: Group) -> pl.DataFrame:
    return frame.filter(pl.col("run").is_in(group.runs))


def _group_title(group: Group) -> str:
    return f"{group.name} runs, against {group.baseline}"


def _shown(frame: pl.DataFrame) -> pl.DataFrame:
    """The first KERNEL_CHANGES_SHOWN changed rows of a kernel_diff or op_diff frame (ranked by
    time), with µs columns for the report."""
    return (
        frame.filter(pl.col("change") != "same")
        .head(KERNEL_CHANGES_SHOWN)
        .with_columns(
            *[
                (pl.col(f"{side}_ns_per_step") / 1000.0).alias(f"{side}_us_per_step")
                for side in ("base", "other", "delta")
            ]
        )
    )


def _only(ops: pl.DataFrame, change: str) -> tuple[list[str], int]:
    """The op names of one change ('added' or 'removed'), sorted, at most NAMES_LISTED; and how many in all."""
    names = sorted(ops.filter(pl.col("change") == change)["name"].to_list())
    return names[:NAMES_LISTED], len(names)


def _steps_words(change: review.Change) -> str:
    if change.step_run is None and change.step_base is None:
        return "Over all steps (per-step figures are totals / steps)"
    word = lambda step: "all steps" if step is None else f"step {step}"  # noqa: E731
    return f"The run's {word(change.step_run)} against the baseline's {word(change.step_base)}"


# ---------- How each run relates to its baseline: said before anything else ----------

NOT_SAME_WORK = "Not the same work as its baseline"
NOT_SAME_WORK_WHY = (
    "no speedup is set between different work, and what differs between them is a difference, not a change"
)
ANOTHER_DEVICE = "The same work on another device"
ANOTHER_DEVICE_WHY = "its speedup and its differences compare the devices as well as the code"
RELATION_FINDINGS = ("different workload", "cross-device")
"""review.findings' kinds that the relation block states first: not repeated among the findings."""
# A kernel or op diff between different work is no change: each kind of row in words that say how the two differ.
DIFFERENCE_WORDS = {
    "added": "only in the run",
    "removed": "only in the baseline",
    "more": "more per step",
    "fewer": "fewer per step",
    "slower": "longer mean",
    "faster": "shorter mean",
    "same": "alike",
}


def relations(speed: pl.DataFrame) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The runs of a speed.speed_table that do other work than their baseline, and those that do
    the same work on another device: each {run, baseline, why}, in run order."""

    def rows(kind: str) -> list[dict[str, str]]:
        found = speed.filter(pl.col("relation") == kind)
        return [
            {"run": r["run"], "baseline": r["baseline"], "why": r["relation_why"] or ""}
            for r in found.iter_rows(named=True)
        ]

    return rows(NO_SPEEDUP), rows(CROSS_DEVICE)


NO_ATTENTION = "no attention found"


def backend_check_words(frame: pl.DataFrame, verdict: str = "verdict", detected: str = "detected") -> pl.DataFrame:
    """`frame` (review.backend_table, or the overview with verdict='backend_verdict' and
    detected='backends') with 'not forced' read as NO_ATTENTION where no backend was detected: a
    trace without attention was not 'not forced', there is nothing to force."""
    empty = pl.col(detected).is_null() | (pl.col(detected) == "")
    return frame.with_columns(
        pl.when(empty & (pl.col(verdict) == review.VERDICT_NOT_FORCED))
        .then(pl.lit(NO_ATTENTION))
        .otherwise(pl.col(verdict))
        .alias(verdict)
    )


def said_findings(findings: pl.DataFrame) -> pl.DataFrame:
    """The findings less those the relation block already says (RELATION_FINDINGS)."""
    return findings.filter(~pl.col("kind").is_in(RELATION_FINDINGS))


def as_differences(frame: pl.DataFrame) -> pl.DataFrame:
    """A kernel or op diff between different work, its change column in DIFFERENCE_WORDS."""
    return frame.with_columns(pl.col("change").replace(DIFFERENCE_WORDS))


GRAPH_INPUT_COPY_OP = "aten::_foreach_copy_"  # where torch.compile's CUDA graphs copy inputs into their static buffers


def graph_input_copies(groups: pl.DataFrame) -> pl.DataFrame:
    """Per run, the CUDA graph's static-input copies: the requested copies made under
    GRAPH_INPUT_COPY_OP (torch.compile's mode='reduce-overhead' copies every input into the graph's
    fixed buffers before each replay). `groups`: review.copy_groups. Columns: run, per_step
    (copies), us_per_step (µs), bytes_per_step; runs without such copies are absent."""
    if groups.height == 0:
        return pl.DataFrame(
            schema={"run": pl.String, "per_step": pl.Float64, "us_per_step": pl.Float64, "bytes_per_step": pl.Float64}
        )
    return (
        groups.filter(
            (pl.col("copy_class") == "requested") & pl.col("op_chain").str.contains(GRAPH_INPUT_COPY_OP, literal=True)
        )
        .group_by("run", maintain_order=True)
        .agg(pl.col("per_step").sum(), pl.col("us_per_step").sum(), pl.col("bytes_per_step").sum())
    )


def _with_device_label(frame: pl.DataFrame) -> pl.DataFrame:
    """The overview with a `device_label` column: 'cuda · NVIDIA H100 80GB HBM3', 'cpu · AMD EPYC', 'cpu';
    a cut accelerator trace whose device events were lost: 'cuda trace, cut: device events lost · <name>'.
    Its backend check in words (backend_check_words)."""
    return backend_check_words(frame, "backend_verdict", "backends").with_columns(
        pl.struct("device", "device_name", "cut")
        .map_elements(lambda r: review.device_label(r["device"], r["device_name"], r["cut"]), return_dtype=pl.String)
        .alias("device_label")
    )

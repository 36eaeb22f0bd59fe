"""Kernels tab: counts and time per step by kernel family (grouped bars), every kernel of every
run with count, total, mean and share of device time, and what changed against the baseline: the
plain readings first (compiled, CUDA graphs, backend, copy class), then the kernels ranked by their
effect on step time and the CPU-side ops beside them, over the steps the user picks."""

from __future__ import annotations

import re

import polars as pl
import streamlit as st

from dashboard import charts, report
from dashboard.engine import comparison as facade
from dashboard.engine.comparison import NOISE_NS
from dashboard.runs import Selection
from dashboard.views import figures, graph_ops, link, literal, relation, tables
from dashboard.views.folded import folded

CHANGE_WORDS = {
    "added": "only in this run",
    "removed": "only in the baseline",
    "more": "launched more often",
    "fewer": "launched less often",
    "slower": f"slower (mean > +{facade.MEAN_CHANGE}, ≥ {NOISE_NS / 1000:g} µs a step)",
    "faster": f"faster (mean < -{facade.MEAN_CHANGE}, ≥ {NOISE_NS / 1000:g} µs a step)",
}
OP_CHANGE_WORDS = {**CHANGE_WORDS, "more": "called more often", "fewer": "called less often"}
# red = slower, yellow = more launches, green = fewer launches or faster (the 'better' direction)
CHANGE_STYLE = {
    "slower": tables.ALARM_BG,
    "added": tables.NOTE_BG,
    "more": tables.NOTE_BG,
    "removed": tables.ADDED_BG,
    "fewer": tables.ADDED_BG,
    "faster": tables.ADDED_BG,
}
# The cells a diff row's colour goes on: its change and the kernel or op it is about (a diff of 21
# runs has hundreds of rows, and each coloured cell costs the browser's grid on every draw).
CHANGE_PAINT = ("change", "name")


def render(sel: Selection) -> None:
    runs, cmp = sel.runs, sel.comparison
    apart = relation.say(sel)
    units = {label: cmp.work_unit(label) for label in runs}
    if "leaf cpu_op" in units.values():
        st.info(
            "CPU-only traces have no kernels: their unit of work is the leaf CPU op (an op that does work — not a view, "
            "an allocation or torch.compile bookkeeping — and holds no other such op). "
            "Runs counted that way: "
            + ", ".join(literal.md(label) for label, u in units.items() if u == "leaf cpu_op")
            + ".",
            icon=":material/memory:",
        )
    split = cmp.groups
    if len(split) > 1:
        st.info(literal.md(facade.MIXED_DEVICES_WHY), icon=":material/call_split:")
    fam = cmp.families
    for group in split:
        suffix = "" if len(split) == 1 else f"_{tables.group_key(group)}"
        mine = fam.filter(pl.col("run").is_in(group.runs))
        if len(split) > 1:
            st.markdown(tables.group_heading(group))
        with st.container(key=f"chart_kernels_count{suffix}"):
            st.plotly_chart(
                figures.once(
                    sel,
                    ("kernels_count", suffix),
                    lambda: charts.family_grouped(mine, group.runs, "count", modes=sel.modes),
                ),
                key=f"fig_kernels_count{suffix}",
            )
        with st.container(key=f"chart_kernels_time{suffix}"):
            st.plotly_chart(
                figures.once(
                    sel,
                    ("kernels_time", suffix),
                    lambda: charts.family_grouped(mine, group.runs, "time", modes=sel.modes),
                ),
                key=f"fig_kernels_time{suffix}",
            )

    st.subheader("Every kernel, per run")
    st.caption(
        "Over all profiled steps. Share is the kernel's part of the run's total device work time. Sort by any column; "
        "type in the table's search to filter."
    )
    tables.show(
        cmp.kernels,
        "tbl_kernels",
        {
            "run": tables.text("run"),
            "name": tables.text("kernel (or leaf op)", width=260),
            "family": tables.text("family"),
            "count": tables.hidden(tables.count("count")),
            "per_step": tables.count("per step"),
            "total_us": tables.hidden(tables.us("total (µs)")),
            "mean_us": tables.us("mean (µs)", digits=2),
            "share": tables.share("share of device time"),
        },
        height=420,
    )
    graph_ops.show(sel)  # runs whose kernels a CUDA graph replayed: by op, through the compiled twin

    show_changes(sel, split, apart)


def show_explained(changes: list[facade.Change], split: list[facade.Group]) -> None:
    """How much of each run's change in summed kernel time its top changed rows account for."""
    explained = facade.explained_by_run(changes).with_columns(
        _no_negative_zero(pl.col("top_us"), 1), _no_negative_zero(pl.col("total_us"), 1)
    )
    tables.show(
        explained,
        "tbl_kernels_explained",
        {
            "run": tables.text("run"),
            "baseline": tables.text("against") if len(split) > 1 else None,
            "rows": tables.count("top changed rows"),
            "top_us": st.column_config.NumberColumn("they account for (µs / step)", format="%+.1f"),
            "total_us": st.column_config.NumberColumn("change in summed kernel time (µs / step)", format="%+.1f"),
        },
        height=tables.fit(explained.height, 420),
    )


ALL_STEPS = (
    "all"  # the step choice that means every step (per-step figures = totals / steps); a selectbox shows None as empty
)
STEPS_PER_ROW = 4


def show_changes(sel: Selection, split: list[facade.Group], apart: set[str] = frozenset()) -> None:
    """Each run against its group's baseline: the readings, how much the top kernels explain,
    the kernel diff ranked by time, and the CPU-side op diff, over the steps the user picks. The
    runs in `apart` do other work than their baseline: how they differ is shown on its own, in
    words and colours that call nothing a change (show_differences)."""
    runs = sel.runs
    against = {label: g.baseline for g in split for label in g.runs}
    others = [label for label in runs if label != against[label]]
    heading = (
        f"Against the baseline: {sel.baseline}"
        if len(split) == 1
        else "Against each group's baseline: " + ", ".join(f"{g.baseline} ({g.name})" for g in split)
    )
    st.subheader(heading, anchor=False)
    if sel.baseline is None or not others:
        st.info("Select at least two runs of the same kind (GPU or CPU-only) to compare kernels against the baseline.")
        return
    if "kd_base" not in st.session_state:  # seeded from the link whenever the widget has no state
        st.session_state["kd_base"] = st.query_params.get("names") != "full"
    left, right = st.columns(2)
    with left:
        by_base = st.toggle(
            "Group template instances by base name",
            key="kd_base",
            help="On: one row per kernel (namespace::function), its template instances and signatures folded together, so "
            "a kernel whose template arguments changed is one row that got slower or faster, not a 'removed' and an 'added' "
            "row that cancel. Off: every full kernel name, as the rest of the dashboard shows them.",
        )
    with right:
        only_changes = st.toggle(
            "Show only kernels and ops that changed" + (" or differ" if apart else ""),
            value=True,
            key="kernels_only_changes",
        )
    link.publish("names", None if by_base else "full")
    steps = pick_steps(sel, [label for label in runs if label in others or label in against.values()])
    by = "base" if by_base else "name"
    every = sel.comparison.changes_at(steps, by)
    changes = [c for c in every if c.run not in apart]
    if changes:  # the coloured tables kept for this selection and these choices (tables.show's `keep`)
        show_changed(
            changes, [c.run for c in changes], split, only_changes, (sel, (by, tuple(steps.items()), only_changes))
        )
    else:
        st.info(
            "No selected run does the same work as its baseline, so nothing here is a change: how each one differs "
            "from its baseline is below.",
            icon=":material/block:",
        )
    differing = [c for c in every if c.run in apart]
    if differing:
        show_differences(differing, only_changes, len(split) > 1)


def show_changed(
    changes: list[facade.Change],
    others: list[str],
    split: list[facade.Group],
    only_changes: bool,
    keep: tuple[Selection, tuple] | None = None,
) -> None:
    """The runs that do their baseline's work: readings, what the top rows explain, the kernel and op diffs,
    coloured by the direction of each change (kept for the next reruns under `keep`: tables.show's)."""
    with st.container(key="kernels_readings"):
        show_all_readings(changes)

    kernels = facade.diffs_by_run(changes, "kernels")
    summary = facade.kernel_change_counts(kernels, others)
    present = [c for c in summary.columns if c != "run"]
    st.caption(
        "How many distinct kernels changed, by kind of change ('more'/'fewer': launches per step; 'slower'/'faster': mean "
        f"duration off by more than {facade.MEAN_CHANGE} and the kernel's time per step by at least {NOISE_NS / 1000:g} µs; a smaller move, such "
        "as a sub-µs memset's jitter, is 'same'). Below, each kernel ranked by its effect on step time: the change of its total time "
        "per step, largest first, either sign. The change and the kernel are coloured: red = slower, yellow = more or new, green = fewer, gone or faster."
    )
    tables.show(
        summary,
        "tbl_kernels_change_summary",
        {"run": tables.text("run"), **{c: tables.count(CHANGE_WORDS.get(c, c)) for c in present}},
        height=tables.fit(summary.height),
    )
    with st.container(key="kernels_explained"):
        if len(changes) == 1:
            st.markdown(explained_line(changes[0], False))
        else:
            st.caption(EXPLAINED_WHY)
            folded(
                f"How much the top rows explain, for each of the {len(changes)} runs",
                "fold_kernels_explained",
                lambda: show_explained(changes, split),
            )
    shown = (kernels.filter(pl.col("change") != "same") if only_changes else kernels).with_columns(
        _no_negative_zero(pl.col("delta_us_per_step"), 2)
    )  # shown at 2 decimals
    tables.show(
        shown,
        "tbl_kernels_delta",
        {
            "run": tables.text("run") if len(changes) > 1 else None,
            "baseline": tables.text("against") if len(split) > 1 else None,
            "change": tables.text("change"),
            "name": tables.text("kernel (or leaf op)", width=220),
            "family": tables.text("family", width="small"),
            "delta_us_per_step": st.column_config.NumberColumn(
                "Δ µs / step", format="%+.2f", help="Change of the kernel's total time per step: run − baseline"
            ),
            "base_us_per_step": tables.us("baseline µs / step"),
            "other_us_per_step": tables.us("run µs / step"),
            # the counts and means one click away (the table's column menu)
            "delta_per_step": tables.hidden(st.column_config.NumberColumn("Δ count / step", format="%+.4g")),
            "base_per_step": tables.hidden(tables.count("baseline count / step")),
            "other_per_step": tables.hidden(tables.count("run count / step")),
            "base_mean_us": tables.hidden(tables.us("baseline mean (µs)", digits=2)),
            "other_mean_us": tables.hidden(tables.us("run mean (µs)", digits=2)),
        },
        highlight=lambda row: CHANGE_STYLE.get(row["change"], ""),
        paint=CHANGE_PAINT,
        height=tables.fit(shown.height, 420),
        keep=keep,
    )
    show_ops(changes, others, only_changes, len(split) > 1, keep)


def pick_steps(sel: Selection, labels: list[str]) -> dict[str, int | None]:
    """One step picker for every run: all steps (the default), or the n-th profiled step of each
    run (a run with fewer steps: its last). The choice is kept in the link as kstep=<run id>=<step>
    per run, which the reports read; a link whose runs name different positions opens on the first."""
    traces = {label: sel.runs[label] for label in labels}
    counts = {label: t.steps.height for label, t in traces.items()}
    most = max(counts.values(), default=0)
    options: list[int | str] = [ALL_STEPS] + list(range(most))
    if "kd_step" not in st.session_state:  # seeded from the link: the position of the first run's kstep
        st.session_state["kd_step"] = _linked_position(sel, traces)
    if st.session_state["kd_step"] not in options:
        st.session_state["kd_step"] = ALL_STEPS
    words = {
        ALL_STEPS: "all profiled steps (per-step mean)",
        **{n: f"the {_ordinal(n + 1)} profiled step of each run" for n in range(most)},
    }
    position = st.selectbox(
        "Steps compared",
        options,
        key="kd_step",
        format_func=words.get,
        help="Every step (each figure is then its total over the steps / their number), or one step of each run: the "
        "first, second, ... step the profiler recorded (ProfilerStep names differ between runs).",
    )
    chosen: dict[str, int | None] = {}
    for label, trace in traces.items():
        steps = trace.steps["step"].to_list()
        chosen[label] = None if position == ALL_STEPS or not steps else steps[min(int(position), len(steps) - 1)]
    link.publish_keyed(
        "kstep",
        {sel.ids.get(label, label): (ALL_STEPS if step is None else step) for label, step in chosen.items()},
        ALL_STEPS,
    )
    if position != ALL_STEPS:
        st.caption("Compared: " + ", ".join(f"{literal.md(label)} step {step}" for label, step in chosen.items()) + ".")
    return chosen


def _linked_position(sel: Selection, traces: dict) -> int | str:
    """The step position a link's kstep=<run id>=<step> names for the first run it names that is shown."""
    for label, trace in traces.items():
        ident = sel.ids.get(label, label)
        for raw in st.query_params.get_all("kstep"):
            if raw.startswith(ident + "="):
                try:
                    step = int(raw[len(ident) + 1 :])
                except ValueError:
                    continue
                steps = trace.steps["step"].to_list()
                if step in steps:
                    return steps.index(step)
    return ALL_STEPS


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _steps_words(step: int | None) -> str:
    return "all steps" if step is None else f"step {step}"


def show_readings(change: facade.Change, named: bool) -> None:
    """The one-line readings of a run against its baseline (compiled, CUDA graphs, backend, copy class)."""
    if not change.readings:
        st.markdown(readings_text(change, named))
        return
    st.info(readings_text(change, named), icon=":material/lightbulb:")


def readings_text(change: facade.Change, named: bool) -> str:
    """show_readings' Markdown: the run's readings as a list under a line naming it (when `named`)."""
    who = f"**{literal.md(change.run)}** against **{literal.md(change.baseline)}**: " if named else ""
    if not change.readings:
        return f"{who}no compile, CUDA-graph, attention-backend or copy-class change."
    lines = "\n".join(f"- {literal.md(_grammar(line))}" for line in change.readings)
    return f"{who}what the trace shows plainly\n\n{lines}"


EXPLAINED_WHY = (
    "Each run's top changed rows (ranked by their effect on step time) against the whole change in summed kernel time per "
    f"step; the rest comes from the rows below them and those within {facade.MEAN_CHANGE} ('same'). Summed kernel time counts overlapping "
    "kernels twice, so it is not the step time."
)


def show_all_readings(changes: list[facade.Change]) -> None:
    """The plain readings of every run against its baseline, once: each distinct line with the runs
    it holds for (a line twenty runs share is one line naming them), the per-run view on demand."""
    if len(changes) == 1:
        show_readings(changes[0], False)
        return
    shared: dict[str, list[tuple[str, str]]] = {}
    for change in changes:
        for line in change.readings:
            shared.setdefault(_generic(_grammar(line)), []).append((change.run, _grammar(line)))
    quiet = [c.run for c in changes if not c.readings]
    lines = []
    for generic, found in shared.items():
        exact = len({line for _, line in found}) == 1
        lines.append(
            f"- {literal.md(found[0][1] if exact else generic)} ({_runs_words([r for r, _ in found], len(changes))}"
            + ("" if exact else "; each run's numbers below")
            + ")"
        )
    if quiet:
        lines.append(
            f"- no compile, CUDA-graph, attention-backend or copy-class change ({_runs_words(quiet, len(changes))})"
        )
    st.info("What the traces show plainly against the baseline\n\n" + "\n".join(lines), icon=":material/lightbulb:")
    folded(
        "Each run's readings, with its own numbers",
        "fold_kernels_readings",
        lambda: st.markdown("\n\n".join(readings_text(change, True) for change in changes)),  # one element for all runs
    )


NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")


def _generic(line: str) -> str:
    """A reading with its numbers as '…': the same reading of two runs, whatever their numbers."""
    return NUMBER.sub("…", line)


def _runs_words(runs: list[str], total: int) -> str:
    if len(runs) == total:
        return "every run"
    return ", ".join(literal.md(r) for r in runs)


def _grammar(line: str) -> str:
    """The engine's readings say '1 graph launches': one launch is singular."""
    return re.sub(r"\b1 graph launches\b", "1 graph launch", line)


def explained_line(change: facade.Change, named: bool) -> str:
    """How much of the change in summed kernel time per step the top rows account for
    (facade.explained_sentence, the reports' sentence in the tab's words)."""
    steps = (
        "over all steps"
        if change.step_run is None and change.step_base is None
        else f"{_steps_words(change.step_run)} against the baseline's {_steps_words(change.step_base)}"
    )
    who = (
        f"**{literal.md(change.run)}** against **{literal.md(change.baseline)}**, {steps}: "
        if named
        else f"{steps.capitalize()}: "
    )
    return facade.explained_sentence(change, "tab", lead=who)


def show_differences(differing: list[facade.Change], only_changes: bool, grouped: bool) -> None:
    """The runs that do other work than their baseline: their kernel and op diffs as differences
    (report.as_differences: 'only in the run', 'longer mean'...), uncoloured, under their own heading."""
    st.subheader("Different work, side by side", anchor=False)
    st.caption(
        "These runs do other work than their baseline (the note at the top of the tab says why), so no row below is a "
        "change and none is coloured better or worse: each says how the two programs differ, the largest difference of "
        "time per step first."
    )
    for table, key, name, digits in (
        ("kernels", "tbl_kernels_apart", "kernel (or leaf op)", 2),
        ("ops", "tbl_ops_apart", "op or call", 1),
    ):
        if table == "ops":
            st.caption("The CPU side: ops, annotations and launch calls, the same way.")
        rows = report.as_differences(facade.diffs_by_run(differing, table))
        shown = (
            rows.filter(pl.col("change") != report.DIFFERENCE_WORDS["same"]) if only_changes else rows
        ).with_columns(_no_negative_zero(pl.col("delta_us_per_step"), digits))
        tables.show(
            shown,
            key,
            {
                "run": tables.text("run") if len(differing) > 1 else None,
                "baseline": tables.text("against") if grouped else None,
                "change": tables.text("how they differ"),
                "name": tables.text(name, width=220),
                "family": tables.text("family", width="small") if table == "kernels" else None,
                "cat": tables.text("kind") if table == "ops" else None,
                "delta_us_per_step": st.column_config.NumberColumn(
                    "run − baseline µs / step", format=f"%+.{digits}f", help="A difference between two programs"
                ),
                "base_us_per_step": tables.us("baseline µs / step"),
                "other_us_per_step": tables.us("run µs / step"),
                "base_per_step": tables.hidden(tables.count("baseline count / step")),
                "other_per_step": tables.hidden(tables.count("run count / step")),
            },
            height=tables.fit(shown.height, 420),
        )


OP_CATEGORY_WORDS = {"cpu_op": "op", "user_annotation": "annotation"}


def show_ops(
    changes: list[facade.Change],
    others: list[str],
    only_changes: bool,
    grouped: bool,
    keep: tuple[Selection, tuple] | None = None,
) -> None:
    """The CPU side: ops, annotations and runtime calls per step, ranked like the kernels (`keep`:
    as show_changed's)."""
    st.subheader("CPU side: ops, annotations and launch calls", anchor=False)
    st.caption(
        "The same comparison for what runs on the host: CPU ops, record_function annotations and runtime calls "
        "(cudaLaunchKernel, cudaGraphLaunch, ...), ranked by the change of their time per step. Ops nest, so their times add up "
        "to more than the step."
    )
    ops = facade.diffs_by_run(changes, "ops")
    summary = facade.kernel_change_counts(ops, others)
    present = [c for c in summary.columns if c != "run"]
    tables.show(
        summary,
        "tbl_ops_change_summary",
        {"run": tables.text("run"), **{c: tables.count(OP_CHANGE_WORDS.get(c, c)) for c in present}},
        height=tables.fit(summary.height),
    )
    shown = (ops.filter(pl.col("change") != "same") if only_changes else ops).with_columns(
        _no_negative_zero(pl.col("delta_us_per_step"), 1)
    )  # shown at 1 decimal
    tables.show(
        shown,
        "tbl_ops_delta",
        {
            "run": tables.text("run") if len(changes) > 1 else None,
            "baseline": tables.text("against") if grouped else None,
            "change": tables.text("change"),
            "name": tables.text("op or call", width=240),
            "cat": tables.text("kind"),
            "delta_us_per_step": st.column_config.NumberColumn("Δ µs / step", format="%+.1f"),
            "base_us_per_step": tables.us("baseline µs / step"),
            "other_us_per_step": tables.us("run µs / step"),
            "delta_per_step": tables.hidden(st.column_config.NumberColumn("Δ count / step", format="%+.4g")),
            "base_per_step": tables.hidden(tables.count("baseline count / step")),
            "other_per_step": tables.hidden(tables.count("run count / step")),
        },
        highlight=lambda row: CHANGE_STYLE.get(row["change"], ""),
        paint=CHANGE_PAINT,
        height=tables.fit(shown.height, 420),
        keep=keep,
    )


def _no_negative_zero(value: pl.Expr, digits: int) -> pl.Expr:
    """`value`, but 0.0 where it rounds to zero at `digits` decimals: a table's '%+.2f' writes
    -0.001 as '-0.00'."""
    return pl.when(value.abs() < 0.5 * 10**-digits).then(0.0).otherwise(value).alias(value.meta.output_name())

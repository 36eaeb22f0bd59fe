"""Overview tab: what must not be missed (alarms first), then one row per run, then the two
pictures that tell the story: work per step by kernel family, and time per step. GPU and CPU-only
runs are shown as separate groups, each against its own baseline."""

from __future__ import annotations

import re

import polars as pl
import streamlit as st

from dashboard import charts, report
from dashboard.engine import comparison as facade
from dashboard.engine.comparison import WAITING_CHECKS, format_bytes, format_us
from dashboard.catalog_sources import STORY, story_coverage
from dashboard.runs import Collection, Selection
from dashboard.views import figures, literal, painted, relation, tables
from dashboard.views.folded import folded

ICONS = {
    "cut trace": ":material/content_cut:",
    "hidden copy": ":material/content_copy:",
    "small hidden copy": ":material/content_copy:",
    "backend fallback": ":material/swap_horiz:",
    "parity failure": ":material/rule:",
}
UNIT_WORDS = {"kernel": "kernels", "leaf cpu_op": "leaf CPU ops"}


def render(sel: Selection) -> None:
    cmp = sel.comparison
    table = cmp.overview
    groups = cmp.copies
    found = cmp.findings
    alarmed = set(groups.filter(pl.col("alarm"))["run"].to_list())
    split = cmp.groups
    findings = cmp.health
    relation.say(sel)  # first: which runs are not the same work as their baseline (the findings do not repeat it)
    show_health(findings)
    show_findings(report.said_findings(found))
    show_waiting(findings)
    if len(split) > 1:
        show_split(split)

    st.subheader("Runs side by side")
    st.caption(
        "Step time is the median over the profiled steps: device busy time (union of GPU work) on GPU traces, "
        "the CPU ProfilerStep span on CPU-only traces (the Speedups tab has the spread). Work per step counts kernels + GPU memcpy + memset on GPU "
        "traces and leaf CPU ops (ops that do work and hold no other such op; views and allocations do not count) "
        "on CPU-only traces; the *counted as* column says which."
    )
    fam = cmp.families
    shown = cmp.overview_shown
    any_cut = table["cut"].is_not_null().any()
    order = overview_columns(table)
    tables.show_by_group(
        shown,
        "tbl_overview",
        _overview_config(shown, any_cut),
        split,
        highlight=lambda row: _row_style(row, alarmed),
        order=order,
        keep=(sel, ()),  # its rows, columns and colours all come from the selection's Comparison
    )

    show_graph_copies(sel, table)
    show_phases(cmp.phases)  # serving runs only: prefill, decode, mixed steps
    # after the table is drawn on a session's first page (plotly's code would delay it: views/painted.py)
    painted.after_paint(
        lambda: _overview_charts(sel, table, fam, split),
        key="overview_painted",
        after="[class*='st-key-tbl_overview'] [role=row]",  # a row of the table (of each group's: the first)
    )

    show_collections(sel.collections)


def _overview_config(shown: pl.DataFrame, any_cut: bool) -> dict:
    """The overview table's columns: names, help and widths (the cut column only when a file is cut;
    the device and 'compared as' as wide as their longest value)."""
    return {
        "run": st.column_config.TextColumn("run", pinned=True),
        "device_label": tables.text("device", width=tables.text_width(shown["device_label"], "device", most=400)),
        "steps": tables.count("steps", width="small"),
        "median_step_us": tables.us("median µs", "Median over steps; 'time from' says which time", width="small"),
        "speedup": tables.ratio(
            "speedup",
            "The group baseline's median / this run's median; > 1 is faster. Never across GPU and CPU-only runs, nor between different workloads",
            width="small",
        ),
        "relation": tables.text(
            "compared as",
            "same workload (same attention shapes and dtype, or the same model's ops); "
            "cross-device: the same workload on another device; 'different workload: no speedup' "
            "when the runs do different work",
            width=tables.text_width(shown["relation"], "compared as"),
        ),
        "work_per_step": tables.count(
            "work / step", "Median over steps of the units named in 'counted as'", width="small"
        ),
        "memsets_per_step": tables.count(
            "memsets",
            "Of work / step, the Memset (Device) per step: a buffer zeroed "
            "on the device before a kernel writes into it, not a second kernel. sdpa on cuDNN is one "
            "fused kernel and one memset.",
            width="small",
        ),
        "work_unit": tables.text("counted as", "kernel: kernels + GPU memcpy + memset; leaf cpu_op: CPU-only trace"),
        "copies_per_step": tables.count("copies/step"),
        "hidden_copies_per_step": tables.count(
            "hidden/step", "Copies made inside another op (e.g. masked_fill's clone), per step"
        ),
        "backends": tables.text("backend", "Attention backend detected from op and kernel names"),
        "backend_requested": tables.text(
            "requested",
            "The backend the collectors forced ('default': SDPA picks); empty for traces from elsewhere",
        ),
        "backend_verdict": tables.text(
            "check", "FALLBACK: another backend ran than the one forced; compiled: torch.compile replaced it"
        ),
        "parity_passed": st.column_config.CheckboxColumn(
            "parity ok", help="Against an fp32 reference, from the collector's metadata", width="small"
        ),
        "cut": tables.text(
            "file cut off", "The profiler was killed mid-write: what was lost (see the alarm above)", width="medium"
        )
        if any_cut
        else None,
    }


def _overview_charts(sel: Selection, table: pl.DataFrame, fam: pl.DataFrame, split: list) -> None:
    """Per device group, work per step by kernel family beside the median time per step."""
    # the overview already holds speed.step_time's numbers: the chart reads them under speed_table's names
    step_times = table.select(
        "run",
        pl.col("median_step_us").alias("median_us"),
        pl.col("p10_step_us").alias("p10_us"),
        pl.col("p90_step_us").alias("p90_us"),
        "time_source",
        "relation",  # the chart marks the runs that do other work than their baseline
    )
    for group in split:
        suffix = "" if len(split) == 1 else f"_{tables.group_key(group)}"
        units = set(table.filter(pl.col("run").is_in(group.runs))["work_unit"].to_list())
        unit = " or ".join(UNIT_WORDS.get(u, u) for u in sorted(units))
        title = "" if len(split) == 1 else f"{group.name} runs: median time per step"
        left, right = st.columns(2)
        with left, st.container(key=f"chart_overview_work{suffix}"):
            st.plotly_chart(
                figures.once(
                    sel,
                    ("overview_work", suffix),
                    lambda: charts.work_by_family_stacked(
                        fam.filter(pl.col("run").is_in(group.runs)), group.runs, unit, modes=sel.modes
                    ),
                ),
                key=f"fig_overview_work{suffix}",
            )
        with right, st.container(key=f"chart_overview_time{suffix}"):
            st.plotly_chart(
                figures.once(
                    sel,
                    ("overview_time", suffix),
                    lambda: charts.step_time_bars(
                        step_times.filter(pl.col("run").is_in(group.runs)),
                        title=title,
                        modes=sel.modes,
                        baseline=group.baseline,
                    ),
                ),
                key=f"fig_overview_time{suffix}",
            )


def show_phases(phases: pl.DataFrame) -> None:
    """The serving runs' steps by phase (analyses/phases.py); nothing when no run is a serving trace."""
    if phases.height == 0:
        return
    st.subheader("Serving steps by phase")
    st.caption(
        "Each serving step is prefill, decode or mixed by its step annotation (vLLM, SGLang), else by its "
        "attention kernels. Decode attention is bandwidth-bound: its KV-cache reads (2 x KV heads x head dim x "
        "bytes x layers per key) are set against the device's memory bandwidth, not its TFLOP/s."
    )
    tables.show(
        phases,
        "tbl_overview_phases",
        {
            "run": st.column_config.TextColumn("run", pinned=True),
            "phase": tables.text("phase", width="small"),
            "steps": tables.count("steps", width="small"),
            "device_us": tables.us("device µs", "Summed durations of the device work the steps launched"),
            "attention_us": tables.us("attention µs", "Of that, the attention kernels' time"),
            "attention_share": tables.share("share of attention", "Of the run's attention device time"),
            "tokens": st.column_config.NumberColumn(
                "tokens", help="New query tokens, from the annotations", format="%d"
            ),
            "us_per_token": tables.us("attention µs / token", digits=2),
            "decode_keys": st.column_config.NumberColumn(
                "decode keys", help="Keys the decode requests read", format="%d"
            ),
            "kv_gb": st.column_config.NumberColumn("KV read GB", format="%.3f"),
            "kv_tbps": st.column_config.NumberColumn("KV TB/s", format="%.2f"),
            "pct_of_bandwidth": st.column_config.NumberColumn("% of bandwidth", format="%.1f%%"),
            "note": tables.text("why a number is missing", width="large"),
        },
    )


# The columns that tell the story, first and always; the rest one click away (More columns).
STORY_COLUMNS = [
    "run",
    "device_label",
    "median_step_us",
    "speedup",
    "work_per_step",
    "memsets_per_step",
    "hidden_copies_per_step",
    "backends",
]
MORE_COLUMNS = {
    "relation": "compared as",
    "steps": "steps",
    "work_unit": "counted as",
    "copies_per_step": "copies/step",
    "backend_requested": "requested",
    "backend_verdict": "check",
    "parity_passed": "parity ok",
}


def overview_columns(table: pl.DataFrame) -> list[str]:
    """The Overview table's columns in order: STORY_COLUMNS, then those the user adds from
    MORE_COLUMNS, and always those that carry an alarm or a caveat here (a backend check other than
    as-requested one: a fallback or an unverified backend, a failed parity, a comparison other than the same workload, a cut file)."""
    always = []
    if (
        "backend_verdict" in table.columns
        and table["backend_verdict"].is_in([facade.VERDICT_FALLBACK, facade.VERDICT_UNVERIFIED]).any()
    ):
        always.append("backend_verdict")
    if "parity_passed" in table.columns and (table["parity_passed"] == False).any():  # noqa: E712 - a column
        always.append("parity_passed")
    if "relation" in table.columns and table["relation"].drop_nulls().is_in(["same workload", "baseline"]).not_().any():
        always.append("relation")
    extra = (
        st.pills(
            "More columns",
            list(MORE_COLUMNS),
            format_func=MORE_COLUMNS.get,
            selection_mode="multi",
            key="overview_more",
            help="The table opens on run, device, median time, speedup, work per step, hidden copies and backend; "
            "add the others here. A column that holds an alarm (a backend fallback, a failed parity, a run that is not "
            "the same workload) is shown whatever is picked.",
        )
        or []
    )
    picked = [c for c in MORE_COLUMNS if c in extra or c in always]
    story = list(STORY_COLUMNS)
    if "relation" in picked:  # beside the speedup it explains (an empty one between different work)
        picked.remove("relation")
        story.insert(story.index("speedup") + 1, "relation")
    return story + picked + (["cut"] if table["cut"].is_not_null().any() else [])


def show_graph_copies(sel: Selection, table: pl.DataFrame) -> None:
    """Why a CUDA-graph run can be slower than eager: its static-input copies, timed from the trace
    (the requested copies under aten::_foreach_copy_), against the eager run of the same variant
    when it is selected."""
    graphs = [label for label, mode in sel.modes.items() if mode == "CUDA graphs"]
    if not graphs:
        return
    found_copies = sel.comparison.graph_input_copies.filter(pl.col("run").is_in(graphs))
    copies = {r["run"]: r for r in found_copies.iter_rows(named=True)}
    median = dict(zip(table["run"].to_list(), table["median_step_us"].to_list()))
    variant = {label: (t.collector or {}).get("variant") for label, t in sel.runs.items()}
    eager = {variant[label]: label for label, mode in sel.modes.items() if mode == "eager"}
    lines = []
    for label in graphs:
        found = copies.get(label)
        if found is None or not found["us_per_step"]:
            continue
        twin = eager.get(variant[label])
        own = median.get(label)
        against = f" against {format_us(median[twin])} for **{literal.md(twin)}**" if twin and median.get(twin) else ""
        slower = bool(twin and own and median.get(twin) and own > median[twin])
        lines.append(
            f"- **{literal.md(label)}**: {format_us(own)} per step{against}; "
            f"**{format_us(found['us_per_step'])}** of it are the graph's static-input copies "
            f"({found['per_step']:.3g} per step, under {literal.md(facade.GRAPH_INPUT_COPY_OP)})"
            + (
                (
                    ": the whole difference and more."
                    if found["us_per_step"] >= own - median[twin]
                    else f": most of the {format_us(own - median[twin])} difference."
                    if 2 * found["us_per_step"] >= own - median[twin]
                    else "."
                )
                if slower
                else "."
            )
        )
    if not lines:
        return
    with st.container(key="graph_copies"):
        st.info(
            "**Why CUDA-graph runs can be slower than eager.** torch.compile's mode='reduce-overhead' replays a CUDA graph "
            "whose inputs live at fixed addresses, so before every replay it copies each input into the graph's static "
            "buffers (requested copies, not hidden ones). A graph saves launch overhead per kernel; with one attention call "
            "per graph there are too few kernels to save on, and the copies cost more than the launches they spare.\n\n"
            + "\n".join(lines),
            icon=":material/replay:",
        )


def show_split(split: list[facade.Group]) -> None:
    """The one line that says why GPU and CPU-only runs are apart, naming each group's baseline."""
    named = "; ".join(f"{g.name} runs against {literal.md(g.baseline)}" for g in split)
    with st.container(key="device_groups"):
        st.info(f"{literal.md(facade.MIXED_DEVICES_WHY)} ({named}.)", icon=":material/call_split:")


HEALTH_SHOWN = 6  # health lines shown open; the rest behind an expander


def _lines(findings: dict[str, list[dict]], waiting: bool) -> list[str]:
    return [
        f"**{literal.md(label)}**: {h['check'].replace('_', ' ')} ×{h['count']:,} — {literal.md(h['example'])}"
        for label, found in findings.items()
        for h in found
        if (h["check"] in WAITING_CHECKS) == waiting
    ]


def show_health(findings: dict[str, list[dict]]) -> None:
    """The trace health check (engine.health), before any number: one line per integrity finding
    of each run (events lost, overlapping, skewed, overflowed), in yellow; nothing when every trace
    is sound. Where the device waits (idle gaps, collectives) is no fault: show_waiting."""
    lines = _lines(findings, waiting=False)
    if not lines:
        return
    with st.container(key="health"):
        st.warning(
            "**Trace health: read these numbers with care.**  \n" + "  \n".join(lines[:HEALTH_SHOWN]),
            icon=":material/health_and_safety:",
        )
        if len(lines) > HEALTH_SHOWN:
            folded(
                f"{len(lines) - HEALTH_SHOWN} more health findings",
                "fold_health",
                lambda: st.markdown("  \n".join(lines[HEALTH_SHOWN:])),
            )


def show_waiting(findings: dict[str, list[dict]]) -> None:
    """The health findings about how the device ran (engine.health.WAITING_CHECKS), folded,
    after the alarms: the numbers stand, but a step's time is then not the device's work."""
    lines = _lines(findings, waiting=True)
    if not lines:
        return
    with st.expander(
        f"How the device ran: {len(lines)} finding{'s' if len(lines) != 1 else ''} "
        "(where it waits, overlaps the hardware allows)",
        icon=":material/hourglass_empty:",
    ):
        with st.container(key="waiting"):
            st.markdown(
                "A long idle stretch means the host, a sync or the data loader set the step's pace, not "
                "the device: a fused kernel that runs in tens of µs finishes long before the host has "
                "launched the next step's work. Kernels that overlap on a stream of a Hopper or Blackwell "
                "GPU may be programmatic dependent launch: the next kernel starts under its predecessor's "
                "tail. Facts of the run, not faults of the trace: the device times stand.  \n" + "  \n".join(lines)
            )


SMALL_COPY = "small hidden copy"  # Comparison.findings' kind for hidden copies under the alarm's threshold
BELOW_THRESHOLD = re.compile(r"; below the alarm's [^;]*$")  # its message's tail, which the green line says once


def show_findings(found: pl.DataFrame) -> None:
    """Alarms as red boxes, warnings (a cut file whose events were all read) as yellow ones, both
    always open; notes folded below; a green line when there is no alarm, which also says, once,
    that no hidden copy reaches the alarm's threshold and which ones stay under it, with their size
    (then not repeated among the notes). Run labels and messages quote trace strings, shown literally."""
    alarms = found.filter(pl.col("severity") == facade.SEVERITY_ALARM)
    warnings = found.filter(pl.col("severity") == facade.SEVERITY_WARNING)
    notes = found.filter(pl.col("severity") == facade.SEVERITY_NOTE)
    with st.container(key="findings"):
        if alarms.height == 0:
            small = notes.filter(pl.col("kind") == SMALL_COPY)
            notes = notes.filter(pl.col("kind") != SMALL_COPY)
            threshold = f"{facade.COPY_ALARM_SHARE:.0%} of the step or {format_bytes(facade.COPY_ALARM_BYTES)} a step"
            text = (
                "No cut-off file, backend fallback or parity failure in the selected runs, and no hidden copy at or "
                f"above the alarm's threshold ({threshold})."
            )
            if small.height:
                text += (
                    f" Below it, {small.height} {'run makes' if small.height == 1 else 'runs make'} hidden copies:\n"
                    + "\n".join(
                        f"- **{literal.md(row['run'])}**: {literal.md(BELOW_THRESHOLD.sub('', row['message']))}"
                        for row in small.iter_rows(named=True)
                    )
                )
            st.success(text, icon=":material/check_circle:")
        for row in alarms.iter_rows(named=True):
            st.error(
                f"**{literal.md(row['run'])}: {row['kind']}.** {literal.md(row['message'])}",
                icon=ICONS.get(row["kind"], ":material/error:"),
            )
        for row in warnings.iter_rows(named=True):
            st.warning(
                f"**{literal.md(row['run'])}: {row['kind']}.** {literal.md(row['message'])}",
                icon=ICONS.get(row["kind"], ":material/warning:"),
            )
        if notes.height:
            with st.expander(
                f"{notes.height} {'note' if notes.height == 1 else 'notes'} worth knowing", expanded=notes.height <= 3
            ):
                for row in notes.iter_rows(named=True):
                    st.warning(
                        f"**{literal.md(row['run'])}: {row['kind']}.** {literal.md(row['message'])}",
                        icon=":material/info:",
                    )


def _row_style(row: dict, alarmed: set[str]) -> str:
    """Red for a run with an alarm: a costly hidden copy (Comparison.copies' alarm), a backend
    fallback, a parity failure or a cut that lost events."""
    bad = (
        row.get("run") in alarmed
        or row.get("backend_verdict") == facade.VERDICT_FALLBACK
        or row.get("parity_passed") is False
        or (row.get("cut") is not None and row.get("cut") != facade.CUT_METADATA_LOST)
    )
    return tables.ALARM_BG if bad else ""


def _story_line(c: Collection) -> str | None:
    """Which of the story's steps a collection's runs tell, and how to add the ones it lacks; None for
    a collection that tells none of them (traces from elsewhere)."""
    runs = c.manifest.get("runs")
    variants = {r.get("variant") for r in runs if isinstance(r, dict)} if isinstance(runs, list) else set()
    steps = story_coverage({v for v in variants if isinstance(v, str)})
    if not any(told for _, told in steps):
        return None
    told = ", ".join(f"{i}. {literal.md(step)}" for i, (step, yes) in enumerate(steps, 1) if yes)
    line = f"**{literal.md(c.name)}** tells the story's steps {told}"
    for i, (step, yes) in enumerate(steps, 1):
        if not yes:
            _, _, commands, when = STORY[i - 1]
            how = " or ".join(literal.code(cmd) for cmd in commands)
            line += f"; step {i}, {literal.md(step)}, is not in it: collect it with {how}" + (
                f" ({literal.md(when)})" if when else ""
            )
    return line + "."


def show_collections(collections: list[Collection]) -> None:
    """What each bundled collection is, which of the story's steps its runs tell, and which variants it
    could not run (and why). Only the facts its manifest states are listed."""
    for c in collections:
        story = _story_line(c)
        if story:
            st.caption(story)
        m = c.manifest
        shape = m.get("shape") if isinstance(m.get("shape"), dict) else {}
        facts = []
        if m.get("about"):
            facts.append(literal.md(m["about"]))
        if m.get("device") or m.get("device_name"):
            facts.append(f"device: **{literal.md(m.get('device') or '')}** {literal.md(m.get('device_name') or '')}")
        if m.get("dtype") or shape:
            dims = "×".join(str(shape.get(k, "?")) for k in ("batch", "heads", "seq", "head_dim"))
            facts.append(
                f"dtype **{literal.md(m.get('dtype', '?'))}**"
                + (f", shape batch×heads×seq×head\\_dim = **{literal.md(dims)}**" if shape else "")
            )
        if m.get("created") or m.get("torch_version"):
            facts.append(
                f"created {literal.md(m.get('created', '?'))} with torch {literal.md(m.get('torch_version', '?'))}"
            )
        where = f"folder `{c.folder.name}/`"
        if m.get("command"):
            where += f", command `{m['command']}`"
        facts.append(where)
        skipped = f", {len(c.skipped)} skipped" if c.skipped else ""
        with st.expander(
            f"Collection '{literal.label(c.name)}': {len(c.sources)} {'run' if len(c.sources) == 1 else 'runs'}{skipped}"
        ):
            st.markdown("\n".join(f"- {fact}" for fact in facts))
            for skip in c.skipped:
                st.markdown(
                    f"- skipped **{literal.md(skip.get('variant'))}**{_how(skip)}: {literal.md(skip.get('reason'))}"
                )


def _how(skip: dict) -> str:
    """' (CUDA graphs)' or ' (compiled)' for a skip of the collectors' manifest, as the run labels say."""
    return " (CUDA graphs)" if skip.get("cuda_graphs") is True else " (compiled)" if skip.get("compiled") else ""

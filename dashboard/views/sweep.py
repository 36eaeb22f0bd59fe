"""Sweep tab: the article's measurements (`python -m collectors sweep|dispatch|e2e|serve`, or
`article` for all four) found in the bundled sample_traces and the folders given on the command
line. Time, TFLOP/s and memory against sequence length with the crossover and out-of-memory
points, the dispatch map with the math cells flagged, the end-to-end gain beside Amdahl's
prediction, and the serving mix. Draws what dashboard.engine.analyses.article computes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import streamlit as st

from dashboard import article_charts, article_report
from dashboard.engine.analyses import article as art
from dashboard import catalog
from dashboard.runs import Selection
from dashboard.views import figures, literal, tables
from dashboard.views.folded import folded

MATH_STYLE = "background-color: #fde0dc; color: #8b0000; font-weight: 600"
HOW_TO = (
    "No folder of the article's measurements is open. Make one with `python -m collectors article --out DIR` "
    "(sweep, dispatch map, end to end and serving mix; `--device cpu` runs in minutes) and open it with "
    "`streamlit run dashboard/app.py -- DIR`."
)


@st.cache_data(show_spinner=False, max_entries=16)
def _read(folder: str, stamp: tuple[float, ...]) -> art.Article:
    """One folder's tables, read again when a file's modification time changes."""
    return art.read_article(Path(folder))


def _stamp(folder: Path) -> tuple[float, ...]:
    return tuple((folder / name).stat().st_mtime if (folder / name).is_file() else 0.0 for name in art.FILES)


def folders() -> list[Path]:
    """Article folders: those among the paths given at start first (what the user asked to see),
    then the bundled ones, each once."""
    given = art.find_folders(list(catalog.extra_paths()))
    bundled = [f for f in art.find_folders([catalog.SAMPLE_ROOT]) if f not in given]
    return given + bundled


def shown_path(folder: Path) -> str:
    """The folder as the reader knows it: relative to the working folder when under it (the
    bundled sample_traces/article-cpu, not a machine's absolute checkout path), else absolute."""
    try:
        return str(folder.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(folder)


def labels(found: list[Path]) -> list[str]:
    """One label per folder, its name, with its parent folder added where two share a name (a
    folder given at start may be named like a bundled one): "bundled" for a bundled one."""
    names = [f.name for f in found]
    return [
        f"{f.name} ({'bundled' if _bundled(f) else f.parent})" if names.count(f.name) > 1 else f.name for f in found
    ]


def render(sel: Selection | None = None) -> None:
    found = folders()
    if not found:
        st.info(HOW_TO, icon=":material/info:")
        return
    names = labels(found)
    pick = st.selectbox(
        "Measurements",
        names,
        index=_default(found),
        key="sweep_folder",
        help="A folder holding sweep.csv, dispatch.csv, e2e.csv or serve.csv",
    )
    folder = found[names.index(pick)]
    source = (str(folder), _stamp(folder))  # what the figures are kept by (beside the curve picked)
    try:
        a = _read(*source)
    except art.ArticleError as exc:
        st.error(literal.md(str(exc)), icon=":material/error:")
        return
    st.caption(
        f"{literal.code(shown_path(folder))}" + (f" · measured on {literal.md(a.device_name)}" if a.device_name else "")
    )
    if a.sweep is not None:
        _sweep(a, sel, source)
    if a.dispatch is not None:
        _dispatch(a.dispatch, sel, source)
    if a.e2e is not None:
        _e2e(a.e2e, sel, source)
    if a.serve is not None:
        _serve(a.serve)


def _default(found: list[Path]) -> int:
    """A folder given at start first (it is listed first), else the bundled GPU measurements
    (the article's scale), else the first."""
    if catalog.extra_paths() and found and not _bundled(found[0]):
        return 0
    for i, folder in enumerate(found):
        if "cpu" not in folder.name:
            return i
    return 0


def _bundled(folder: Path) -> bool:
    return Path(catalog.SAMPLE_ROOT).resolve() in folder.resolve().parents


def _sweep(a: art.Article, sel: Selection | None, source: tuple) -> None:
    sweep = a.sweep
    assert sweep is not None
    st.subheader("Time, throughput and memory against sequence length")
    keys = art.groups(sweep)
    dtype, head_dim, causal = _pick_curve(keys)
    part = sweep.filter(pl.col("dtype") == dtype, pl.col("head_dim") == head_dim, pl.col("causal") == causal)
    colors = article_charts.variant_colors(sweep["variant"].to_list())
    where = f"{dtype}, head_dim {head_dim}, {'causal' if causal else 'not causal'}"
    cross = art.crossovers(part)
    grow = art.memory_growth(part)
    _sweep_words(cross, grow)
    left, right = st.columns(2)
    with left:
        st.plotly_chart(
            figures.once(
                sel,
                ("sweep_time", source, where),
                lambda: article_charts.time_vs_seq(part, colors, f"Time per forward ({where})"),
            ),
            key="chart_sweep_time",
            width="stretch",
        )
    with right:
        peak = art.device_peak_tflops(a, dtype)
        st.plotly_chart(
            figures.once(
                sel,
                ("sweep_tflops", source, where),
                lambda: article_charts.tflops_vs_seq(part, colors, f"Achieved TFLOP/s ({where})", peak),
            ),
            key="chart_sweep_tflops",
            width="stretch",
        )
    flops = a.provenance.get("sweep", {}).get("flop_convention")
    no_peak = (
        ""
        if peak is not None
        else " No device peak is drawn: "
        + (
            "a CPU has none in the peaks table."
            if set(part["device"]) == {"cpu"}
            else "the device is not in the peaks table."
        )
    )
    st.caption(
        "FLOPs: "
        + (literal.md(str(flops)) if flops else "4·B·H·S²·D for a dense forward, half of it when causal")
        + "."
        + no_peak
    )
    st.plotly_chart(
        figures.once(
            sel,
            ("sweep_memory", source, where),
            lambda: article_charts.memory_vs_seq(
                part, colors, f"Peak memory the call added, per sequence of the batch ({where})"
            ),
        ),
        key="chart_sweep_memory",
        width="stretch",
    )
    _sweep_points(part)


def _pick_curve(keys: pl.DataFrame) -> tuple:
    """The curve to draw: its dtype, head_dim and mask, each among what the one before leaves."""
    dtypes = sorted(
        set(keys["dtype"].to_list()),
        key=lambda d: ("bf16", "fp16", "fp32").index(d) if d in ("bf16", "fp16", "fp32") else 9,
    )
    c1, c2, c3 = st.columns(3)
    dtype = c1.selectbox("dtype", dtypes, key="sweep_dtype")
    dims = sorted(set(keys.filter(pl.col("dtype") == dtype)["head_dim"].to_list()))
    head_dim = c2.selectbox("head_dim", dims, key="sweep_head_dim")
    causal_options = sorted(
        set(keys.filter(pl.col("dtype") == dtype, pl.col("head_dim") == head_dim)["causal"]), reverse=True
    )
    causal = c3.selectbox(
        "mask", causal_options, key="sweep_causal", format_func=lambda c: "causal" if c else "not causal"
    )
    return dtype, head_dim, causal


def _sweep_words(cross: pl.DataFrame, grow: pl.DataFrame) -> None:
    """Where each variant overtakes naive, beside how its peak memory grows."""
    with st.container(key="sweep_crossovers"):
        left, right = st.columns(2)
        left.markdown(
            "**Where each variant overtakes naive**\n\n"
            + (
                "\n".join(f"- {literal.md(article_report.crossover_words(r))}" for r in cross.iter_rows(named=True))
                or "No variant ran beside naive at a common sequence length."
            )
        )
        right.markdown(
            "**How peak memory grows with the sequence**\n\n"
            + (
                "\n".join(f"- {literal.md(article_report.memory_words(r))}" for r in grow.iter_rows(named=True))
                or "No peak memory was recorded."
            )
        )


def _sweep_points(part: pl.DataFrame) -> None:
    """Every point of the curve, in a table under an expander."""

    def points_table() -> None:
        tables.show(
            part.sort(["variant", "seq"]),
            "tbl_sweep_points",
            {
                "variant": tables.text("variant"),
                "seq": tables.count("seq"),
                "batch": tables.count("batch"),
                "heads": tables.count("heads"),
                "status": tables.text("status"),
                "backend_ran": tables.text("backend ran"),
                "time_ms": tables.us("ms (median)", digits=4),
                "time_ms_p10": tables.us("p10 ms", digits=4),
                "time_ms_p90": tables.us("p90 ms", digits=4),
                "tflops": tables.us("TFLOP/s", digits=3),
                "peak_mem_bytes": tables.count("peak bytes"),
                "reason": tables.text("reason", width="large"),
            },
        )

    folded("Every point of this curve", "fold_sweep_points", points_table)


def _dispatch(dispatch: pl.DataFrame, sel: Selection | None, source: tuple) -> None:
    """Which backend each cell's dispatch ran, as a map and cell by cell; the coloured tables kept by
    `source` (the folder read) for this selection's reruns (figures.once, tables.show's `keep`)."""
    st.subheader("Which backend SDPA's default dispatch ran")
    math_cells = art.fallback_cells(dispatch)
    if math_cells.height:
        st.warning(
            f"Math ran in {math_cells.height} of {dispatch.height} cells: SDPA fell back to the unfused path there "
            "without a word. The cells are marked; each forced backend's refusal is in the table below.",
            icon=":material/warning:",
        )
    else:
        st.success(f"A fused backend ran in all {dispatch.height} cells.", icon=":material/check_circle:")
    with st.container(key="tbl_dispatch_map"):
        st.dataframe(figures.once(sel, ("dispatch_map", source), lambda: _math_map(dispatch)), hide_index=True)

    def cells_table() -> None:
        tables.show(
            dispatch,
            "tbl_dispatch_cells",
            {c: tables.text(c, width="large" if c in ("refusals", "kernel") else None) for c in dispatch.columns},
            highlight=lambda row: MATH_STYLE if row["backend_ran"] == "math" else "",
            paint=("backend_ran",),  # the cell that says math: each painted cell costs the grid on every draw
            keep=(sel, source),
        )

    folded(
        "Every cell, with the kernel that proves it and each forced backend's refusal",
        "fold_dispatch_cells",
        cells_table,
    )


def _math_map(dispatch: pl.DataFrame) -> Any:
    """The dispatch map, its math cells red, under a fixed name (tables.same_name: drawn again, it
    is the same message)."""
    matrix = art.dispatch_matrix(dispatch).to_pandas()
    return tables.same_name(matrix.style.map(lambda v: MATH_STYLE if v == "math" else ""), "tbl_dispatch_map")


def _e2e(e2e: pl.DataFrame, sel: Selection | None, source: tuple) -> None:
    st.subheader("End to end: a small decoder, prefill and decode")
    lines = [
        line
        for line in article_report.findings(art.Article(folder=Path("."), e2e=e2e))
        if line.startswith("end to end")
    ]
    if lines:
        with st.container(key="e2e_findings"):
            st.markdown("\n".join(f"- {literal.md(line.removeprefix('end to end, '))}" for line in lines))
    st.plotly_chart(
        figures.once(sel, ("e2e", source), lambda: article_charts.e2e_bars(e2e)), key="chart_e2e", width="stretch"
    )
    st.caption(
        "Amdahl's prediction: 1 / ((1 - s) + s / a), with s attention's share of naive's step and a the "
        "variant's attention-only speedup. A measured gain below it means the rest of the step changed too."
    )
    tables.show(
        art.e2e_table(e2e),
        "tbl_e2e",
        {
            "phase": tables.text("phase"),
            "variant": tables.text("variant"),
            "status": tables.text("status"),
            "step_ms": tables.us("step ms", digits=3),
            "step_ms_p10": tables.us("p10 ms", "10th percentile of the timed steps", digits=3),
            "step_ms_p90": tables.us("p90 ms", "90th percentile of the timed steps", digits=3),
            "in_noise": tables.flag(
                "inside noise", "its p10-p90 step times overlap naive's: the measured gain is inside the noise"
            ),
            "attention_ms": tables.us("attention ms", digits=3),
            "attention_share": tables.share("attention share"),
            "speedup_vs_naive": tables.ratio("measured"),
            "amdahl_predicted_speedup": tables.ratio("Amdahl"),
            "reason": tables.text("reason"),
        },
    )


def _serve(serve: pl.DataFrame) -> None:
    st.subheader("Serving mix: padded, packed and per request")
    tables.show(
        serve,
        "tbl_serve",
        {
            "variant": tables.text("batching"),
            "status": tables.text("status"),
            "tokens_per_s": tables.count("tokens/s"),
            "padding_waste": tables.share("padding waste"),
            "tokens": tables.count("tokens"),
            "computed_tokens": tables.count("computed tokens"),
            "time_s": tables.us("time s", digits=4),
            "usd_per_1m_tokens": tables.us("$ per 1M tokens", digits=4),
            "usd_per_gpu_hour": tables.us("$ per hour", digits=2),
            "reason": tables.text("reason"),
        },
    )

"""The article's measurements as words and tables: `attnscope sweep DIR` (text) and the Sweep
section of `attnscope compare`'s Markdown and HTML reports. Computes nothing itself: every number
comes from dashboard.engine.analyses.article."""

from __future__ import annotations

import html
from typing import Any, Callable

import polars as pl

from dashboard.engine.analyses import article as art
from dashboard.engine.model.formatting import bytes_cell as _bytes, ms_cell as _ms, signed_change, times_cell as _x

Table = tuple[list[str], list[list[str]]]
"""A table as headers and rows of cell text."""


def _group_name(row: dict[str, Any]) -> str:
    causal = "causal" if row["causal"] else "not causal"
    return f"{row['dtype']}, head_dim {row['head_dim']}, {causal}"


def crossover_words(row: dict[str, Any]) -> str:
    """One variant's crossover against naive, in words (see article.crossovers), with the seqs where
    the difference is inside the two runs' p10-p90 noise."""
    name = row["variant"]
    if row["faster_from_seq"] is None:
        said = f"{name}: not faster than naive at seq {row['max_seq']} ({_x(row['speedup_at_max_seq'])})"
    elif row["crossover_seq"] is None:
        said = (
            f"{name}: faster than naive at every seq measured, from {row['faster_from_seq']} "
            f"({_x(row['speedup_at_min_seq'])}) to {row['max_seq']} ({_x(row['speedup_at_max_seq'])})"
        )
    else:
        said = (
            f"{name}: overtakes naive at seq ~{row['crossover_seq']:.0f} (faster from {row['faster_from_seq']}), "
            f"{_x(row['speedup_at_max_seq'])} at {row['max_seq']}"
        )
    noise = row.get("noise_seqs") or []
    if noise:
        said += f"; inside the p10-p90 noise at seq {', '.join(str(q) for q in noise)} (the runs' bands overlap)"
    return said


def memory_words(row: dict[str, Any]) -> str:
    """One variant's memory growth, in words (see article.memory_growth)."""
    grow = "-" if row["exponent"] is None else f"~S^{row['exponent']:.2f}"
    text = f"{row['variant']}: peak per sequence grows {grow}, {_bytes(row['peak_at_max_seq'])} at seq {row['max_seq']}"
    if row["variant"] != art.BASELINE and row["naive_ratio"] is not None:
        text += f" (naive needs {row['naive_ratio']:.1f}x this)"
    if row["oom_from_seq"] is not None:
        text += f"; out of memory from seq {row['oom_from_seq']}"
    return text


def sweep_tables(sweep: pl.DataFrame) -> list[tuple[str, Table]]:
    """Per (dtype, head_dim, causal) group: time per forward (ms, median) by variant and seq; a
    point that did not run shows its status."""
    out = []
    for key, part in sweep.sort([*art.GROUP, "seq"]).group_by(art.GROUP, maintain_order=True):
        seqs = sorted(set(part["seq"].to_list()))
        variants = list(dict.fromkeys(part["variant"].to_list()))
        cells = {(r["variant"], r["seq"]): r for r in part.iter_rows(named=True)}
        rows = []
        for v in variants:
            row = [v]
            for s in seqs:
                r = cells.get((v, s))
                row.append("" if r is None else _ms(r["time_ms"]) if r["status"] == art.STATUS_OK else r["status"])
            rows.append(row)
        title = f"{key[0]}: {_group_name(dict(zip(art.GROUP, key)))} — time per forward, ms (median)"
        out.append((title, (["variant", *[f"seq {s}" for s in seqs]], rows)))
    return out


def e2e_rows(e2e: pl.DataFrame) -> Table:
    frame = art.e2e_table(e2e)
    status = "status" in frame.columns
    rows = []
    for r in frame.sort(["phase", "variant"], descending=[True, False]).iter_rows(named=True):
        if status and r["status"] not in (None, art.STATUS_OK):
            rows.append([r["phase"], r["variant"], r["status"], "-", "-", "-", "-", "-"])
            continue
        share = "-" if r["attention_share"] is None else f"{r['attention_share'] * 100:.1f}%"
        band = "-" if r.get("step_ms_p10") is None else f"{_ms(r['step_ms_p10'])}-{_ms(r['step_ms_p90'])}"
        rows.append(
            [
                r["phase"],
                r["variant"],
                _ms(r["step_ms"]),
                band,
                _ms(r["attention_ms"]),
                share,
                _x(r["speedup_vs_naive"]),
                _x(r["amdahl_predicted_speedup"]),
            ]
        )
    return (
        [
            "phase",
            "variant",
            "step ms",
            "p10-p90 ms",
            "attention ms",
            "attention share",
            "measured speedup",
            "Amdahl prediction",
        ],
        rows,
    )


def serve_rows(serve: pl.DataFrame) -> Table:
    status = "status" in serve.columns
    rows = []
    for r in serve.iter_rows(named=True):
        if status and r["status"] not in (None, art.STATUS_OK):
            rows.append([r["variant"], r["status"], "-", "-", "-"])
            continue
        cost = "-" if r["usd_per_1m_tokens"] is None else f"${r['usd_per_1m_tokens']:.4f}"
        rows.append(
            [
                r["variant"],
                f"{r['tokens_per_s']:,.0f}",
                f"{r['padding_waste'] * 100:.1f}%",
                f"{int(r['tokens']):,}",
                cost,
            ]
        )
    return (["batching", "tokens/s", "padding waste", "tokens", "$ per 1M tokens"], rows)


def dispatch_rows(dispatch: pl.DataFrame) -> Table:
    matrix = art.dispatch_matrix(dispatch)
    headers = ["dtype", "mask", "GQA", *[c.replace("d=", "head_dim ") for c in matrix.columns[3:]]]
    rows = []
    for r in matrix.iter_rows():
        rows.append([r[0], r[1], "yes" if r[2] else "no", *[("MATH" if v == "math" else (v or "-")) for v in r[3:]]])
    return headers, rows


def findings(a: art.Article) -> list[str]:
    """The article's answers, one line each, in the order the article asks."""
    lines: list[str] = []
    if a.sweep is not None:
        for row in art.crossovers(a.sweep).iter_rows(named=True):
            lines.append(f"[{_group_name(row)}] {crossover_words(row)}")
        for row in art.memory_growth(a.sweep).iter_rows(named=True):
            if row["variant"] == art.BASELINE or row["naive_ratio"] is not None:
                lines.append(f"[{_group_name(row)}] {memory_words(row)}")
    if a.dispatch is not None:
        math_cells = art.fallback_cells(a.dispatch)
        lines.append(
            f"dispatch: math ran in {math_cells.height} of {a.dispatch.height} cells "
            f"(the silent fallback){':' if math_cells.height else ''}"
            + ", ".join(
                f" {r['dtype']} head_dim {r['head_dim']} {r['mask']}{' GQA' if r['gqa'] else ''}"
                for r in math_cells.head(8).iter_rows(named=True)
            )
            + (f" and {math_cells.height - 8} more" if math_cells.height > 8 else "")
        )
    if a.e2e is not None:
        for r in art.e2e_table(a.e2e).sort(["phase", "variant"], descending=[True, False]).iter_rows(named=True):
            if r["variant"] == art.BASELINE or r["speedup_vs_naive"] is None:
                continue
            if "status" in r and r["status"] not in (None, art.STATUS_OK):
                continue
            noise = {
                True: " (inside the noise: its p10-p90 step times overlap naive's)",
                False: " (outside the noise: its p10-p90 step times and naive's do not overlap)",
            }.get(r.get("in_noise"), "")
            lines.append(
                f"end to end, {r['phase']}: {r['variant']} {signed_change(r['gain_pct'])}% measured{noise}, "
                f"{signed_change(r['predicted_pct'])}% predicted by Amdahl from attention's share"
            )
    return lines


def _text_table(table: Table, indent: str = "    ") -> list[str]:
    headers, rows = table
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]
    fmt: Callable[[list[str]], str] = lambda cells: (
        indent
        + "  ".join(  # noqa: E731
            str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()
    )
    return [fmt(headers), *[fmt(r) for r in rows]]


def render_text(a: art.Article) -> str:
    """`attnscope sweep DIR`: the findings, then each table."""
    lines = [f"{a.folder}: the article's measurements" + (f" on {a.device_name}" if a.device_name else "")]
    found = findings(a)
    if found:
        lines.append("findings:")
        lines += [f"  {line}" for line in found]
    if a.sweep is not None:
        counts = a.sweep.group_by("status").agg(pl.len()).sort("status")
        lines.append("sweep: " + ", ".join(f"{n} {s}" for s, n in counts.iter_rows()) + " (points x variants)")
        for title, table in sweep_tables(a.sweep):
            lines.append(f"  {title}")
            lines += _text_table(table)
    if a.dispatch is not None:
        lines.append("dispatch map (backend SDPA's default dispatch ran; MATH = the silent fallback):")
        lines += _text_table(dispatch_rows(a.dispatch))
    if a.e2e is not None:
        lines.append("end to end (a small decoder; speedups against naive):")
        lines += _text_table(e2e_rows(a.e2e))
    if a.serve is not None:
        lines.append("serving mix:")
        lines += _text_table(serve_rows(a.serve))
    return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(table: Table) -> list[str]:
    headers, rows = table
    out = ["| " + " | ".join(_md_cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return out


def render_markdown(a: art.Article) -> str:
    """The Sweep section of a Markdown report."""
    out = [
        f"## The article's measurements: {_md_cell(a.name)}"
        + (f" ({_md_cell(a.device_name)})" if a.device_name else ""),
        "",
    ]
    out += [f"- {_md_cell(line)}" for line in findings(a)]
    if a.sweep is not None:
        for title, table in sweep_tables(a.sweep):
            out += ["", f"**{_md_cell(title)}**", "", *_md_table(table)]
    if a.dispatch is not None:
        out += ["", "**Dispatch map** (MATH: the silent fallback)", "", *_md_table(dispatch_rows(a.dispatch))]
    if a.e2e is not None:
        out += ["", "**End to end**", "", *_md_table(e2e_rows(a.e2e))]
    if a.serve is not None:
        out += ["", "**Serving mix**", "", *_md_table(serve_rows(a.serve))]
    return "\n".join(out) + "\n"


def _html_table(table: Table) -> str:
    headers, rows = table
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="math">{html.escape(str(c))}</td>' if c == "MATH" else f"<td>{html.escape(str(c))}</td>"
            for c in r
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(a: art.Article) -> str:
    """The Sweep section of an HTML report (tables only: no script, no figure)."""
    parts = [
        f"<h2>The article's measurements: {html.escape(a.name)}"
        + (f" ({html.escape(a.device_name)})" if a.device_name else "")
        + "</h2>"
    ]
    found = findings(a)
    if found:
        parts.append("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in found) + "</ul>")
    if a.sweep is not None:
        for title, table in sweep_tables(a.sweep):
            parts.append(f"<h3>{html.escape(title)}</h3>{_html_table(table)}")
    if a.dispatch is not None:
        parts.append(f"<h3>Dispatch map (MATH: the silent fallback)</h3>{_html_table(dispatch_rows(a.dispatch))}")
    if a.e2e is not None:
        parts.append(f"<h3>End to end</h3>{_html_table(e2e_rows(a.e2e))}")
    if a.serve is not None:
        parts.append(f"<h3>Serving mix</h3>{_html_table(serve_rows(a.serve))}")
    return "\n".join(parts) + "\n"

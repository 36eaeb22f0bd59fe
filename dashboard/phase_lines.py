"""Text and Markdown lines for serving phases (the summary's "phases", analyses/phases.py): what
`attnscope summary` prints for a serving trace and `attnscope compare` adds when every run is one."""

from __future__ import annotations

from typing import Any, Mapping

FOUND_BY = {
    "annotation": "by the step annotations",
    "kernels": "by their attention kernels (no step annotation)",
}


def _ms(us: float) -> str:
    return f"{us / 1000:,.2f} ms"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _counts(entry: Mapping[str, Any]) -> str:
    """Requests, tokens and keys of one phase, or why the trace does not give them."""
    if entry.get("tokens") is None:
        return f"tokens unknown ({entry.get('tokens_reason', 'not in the trace')})"
    parts = [_plural(entry["requests"], "request"), _plural(entry["tokens"], "token")]
    if entry["phase"] == "mixed" and entry.get("prefill_tokens") is not None:
        parts[-1] += f" ({entry['prefill_tokens']:,} prefill, {entry['decode_tokens']:,} decode)"
    if "decode_keys" in entry:
        keys = entry["decode_keys"]
        parts.append(f"{keys:,} decode keys" if keys is not None else "decode keys unknown")
    return ", ".join(parts)


def _kv(entry: Mapping[str, Any]) -> str | None:
    """The decode attention's KV-cache reads against the bandwidth peak, or why not; None off decode."""
    if entry["phase"] != "decode":
        return None
    if entry.get("kv_bytes") is None:
        return f"KV-cache reads: unknown ({entry.get('kv_reason')})"
    text = f"KV-cache reads: {entry['kv_bytes'] / 1e9:,.3f} GB"
    if entry.get("kv_tbps") is not None:
        text += f" at {entry['kv_tbps']:.2f} TB/s"
    if entry.get("pct_of_bandwidth") is not None:
        text += f", {entry['pct_of_bandwidth']:.1f}% of the {entry['peak_tbps']:g} TB/s peak"
    elif entry.get("kv_reason"):
        text += f" ({entry['kv_reason']})"
    return text


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """`attnscope summary`'s lines for a serving trace's phases (none for other traces)."""
    block = summary.get("phases")
    if not block:
        return []
    lines = [f"  serving phases, steps split {FOUND_BY.get(block['found_by'], block['found_by'])}:"]
    for entry in block["by_phase"]:
        share = entry.get("attention_share")
        share_text = f" ({share:.0%} of attention)" if share is not None else ""
        lines.append(
            f"    {entry['phase']:<7} {_plural(entry['steps'], 'step')}, device {_ms(entry['device_us'])}, "
            f"attention {_ms(entry['attention_us'])}{share_text}; {_counts(entry)}"
        )
        kv = _kv(entry)
        if kv:
            lines.append(f"            {kv}")
    if block.get("empty_steps"):
        lines.append(f"    {_plural(block['empty_steps'], 'step')} with no request")
    return lines


def _md(text: str) -> str:
    """A run's label as Markdown text: underscores and pipes escaped (file names are full of them)."""
    return text.replace("\\", "\\\\").replace("_", "\\_").replace("|", "\\|")


def _per_token(entry: Mapping[str, Any]) -> float | None:
    tokens = entry.get("tokens")
    return entry["attention_us"] / tokens if tokens else None


def _cell(entry: Mapping[str, Any] | None, base: Mapping[str, Any] | None) -> str:
    """One run's reading of one phase, against the baseline's time per token where both have it (base:
    the baseline's entry of the phase; None for the baseline's own cell, or where it has none)."""
    if entry is None:
        return "no such step"
    text = f"{_plural(entry['steps'], 'step')}, attention {_ms(entry['attention_us'])}"
    per_token, base_per_token = _per_token(entry), _per_token(base) if base else None
    if per_token is not None:
        text += f", {entry['tokens']:,} tokens ({per_token:,.1f} µs a token"
        if base_per_token:
            text += f", {per_token / base_per_token:.2f}x the baseline's"
        text += ")"
    if entry.get("pct_of_bandwidth") is not None:
        text += f", KV reads {entry['pct_of_bandwidth']:.1f}% of peak bandwidth"
    return text


def compare_lines(summaries: Mapping[str, Mapping[str, Any]], markdown: bool = False) -> list[str]:
    """`attnscope compare`'s lines: one per phase, every run's steps, attention time and time per
    token (the first run is the baseline); none unless every run is a serving trace."""
    blocks = {label: s.get("phases") for label, s in summaries.items()}
    if len(blocks) < 2 or not all(blocks.values()):
        return []
    by_run = {label: {e["phase"]: e for e in block["by_phase"]} for label, block in blocks.items()}
    phases = [p for p in ("prefill", "decode", "mixed") if any(p in runs for runs in by_run.values())]
    base = next(iter(by_run.values()))
    if markdown:
        lines = [
            "",
            "## Serving phases",
            "",
            "| phase | " + " | ".join(_md(label) for label in by_run) + " |",
            "|---" * (len(by_run) + 1) + "|",
        ]
        for phase in phases:
            cells = [_cell(runs.get(phase), base.get(phase) if i else None) for i, runs in enumerate(by_run.values())]
            lines.append(f"| {phase} | " + " | ".join(cells) + " |")
        return lines
    lines = ["", "Serving phases (first run is the baseline):"]
    for phase in phases:
        cells = [
            f"{label}: {_cell(runs.get(phase), base.get(phase) if i else None)}"
            for i, (label, runs) in enumerate(by_run.items())
        ]
        lines.append(f"  {phase}: " + " | ".join(cells))
    return lines


def with_phases(runs: Mapping[str, Any], markdown: str, text: str) -> tuple[str, str]:
    """A comparison's Markdown and text with the serving phases' lines added (compare_lines; runs:
    label -> Trace, the first the baseline); unchanged unless every run is a serving trace."""
    from dashboard.engine.analyses.summary import summarize

    summaries = {label: summarize(trace) for label, trace in runs.items()}
    md, plain = compare_lines(summaries, markdown=True), compare_lines(summaries)
    if not md:
        return markdown, text
    return _before_footer(markdown, md, "<sub>attnscope "), _before_footer(text, plain, "attnscope ")


def _before_footer(body: str, lines: list[str], footer: str) -> str:
    """`body` with `lines` put before its last line when that is the report's footer (it starts
    with `footer`: the version and the traces), else after it."""
    kept = body.rstrip("\n").split("\n")
    if kept and kept[-1].startswith(footer):
        return "\n".join(kept[:-1] + lines[1:] + ["", kept[-1]]) + body[len(body.rstrip("\n")) :]
    return body + "\n".join(lines) + "\n"

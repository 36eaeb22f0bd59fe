"""Reviews outside the dashboard: `attnscope compare` reports and the `attnscope check` gate."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

import oracle

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces" / "cpu"
DATA = oracle.DATA


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dashboard", *args], capture_output=True, text=True, timeout=300, cwd=ROOT
    )


def raw_sample(name: str) -> dict:
    return json.loads(gzip.decompress((SAMPLES / name).read_bytes()))


def raw_step_spans_us(doc: dict) -> list[float]:
    return sorted(
        float(e["dur"])
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    )


def median(values: list[float]) -> float:
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def hidden_clone_copies(doc: dict) -> int:
    """aten::copy_ events held by an aten::clone held by an aten::masked_fill (json oracle)."""
    ops = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]

    def holds(o, i):
        return o is not i and o["tid"] == i["tid"] and o["ts"] <= i["ts"] and o["ts"] + o["dur"] >= i["ts"] + i["dur"]

    return sum(
        1
        for c in ops
        if c["name"] == "aten::copy_"
        and any(
            o["name"] == "aten::clone"
            and holds(o, c)
            and any(m["name"] == "aten::masked_fill" and holds(m, o) for m in ops)
            for o in ops
        )
    )


class _Refs(HTMLParser):
    """Collects external references: <script src>, <link href>, <img src>, @import and url(http...)."""

    def __init__(self) -> None:
        super().__init__()
        self.external: list[str] = []
        self.data_block: str | None = None
        self._in_data = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("src", "href"):
            if tag in ("script", "link", "img", "iframe") and attrs.get(key):
                self.external.append(f"<{tag} {key}={attrs[key]}>")
        self._in_data = tag == "script" and attrs.get("id") == "attnscope-data"

    def handle_data(self, data):
        if self._in_data:
            self.data_block = (self.data_block or "") + data

    def handle_endtag(self, tag):
        self._in_data = False


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("reports")
    html, md = out / "review.html", out / "review.md"
    result = run(
        "compare",
        str(SAMPLES / "naive_inplace.json.gz"),
        str(SAMPLES / "naive.json.gz"),
        str(SAMPLES / "sdpa.json.gz"),
        "--html",
        str(html),
        "--markdown",
        str(md),
    )
    assert result.returncode == 0, result.stderr
    return {"html": html.read_text(), "md": md.read_text()}


def literal(text: str) -> str:
    """What a Markdown reader sees: CommonMark's backslash escapes of ASCII punctuation removed."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)


def _text_rows(text: str, heading: str) -> list[dict[str, str]]:
    """The rows of the first plain-text table after `heading` (what `compare` prints), as {header:
    cell}: the columns are where the rule of dashes under the headers puts them."""
    lines = text.splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith(heading)) :]
    rule_at = next(i for i, line in enumerate(lines) if i > 1 and re.fullmatch(r"-+( +-+)*", line))
    spans = [m.span() for m in re.finditer(r"-+", lines[rule_at])]

    def cells(line: str) -> list[str]:
        return [line[a : (spans[k + 1][0] if k + 1 < len(spans) else None)].strip() for k, (a, _) in enumerate(spans)]

    header = cells(lines[rule_at - 1])
    rows = []
    for line in lines[rule_at + 1 :]:
        if not line.strip():
            break
        rows.append(dict(zip(header, cells(line))))
    return rows


def _md_rows(markdown: str, heading: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table after `heading`, as {header: cell as a reader sees it}.
    Cells are split on unescaped pipes only."""
    lines = markdown.splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if literal(line).startswith(heading)) :]
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip()[1:-1])
        rows.append(dict(zip(header, [literal(c.strip()) for c in cells])))
    return rows


class _Figures(HTMLParser):
    """The report's figures as data: each <script type="application/json" class="attnscope-figure">
    block parsed with the json module, by its data-name."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, dict] = {}
        self._name: str | None = None
        self._text = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if (
            tag == "script"
            and attrs.get("type") == "application/json"
            and "attnscope-figure" in (attrs.get("class") or "")
        ):
            self._name, self._text = attrs.get("data-name"), ""

    def handle_data(self, data):
        if self._name is not None:
            self._text += data

    def handle_endtag(self, tag):
        if self._name is not None and tag == "script":
            self.figures[self._name] = json.loads(self._text)
            self._name = None


def figures(page: str) -> dict[str, dict]:
    parser = _Figures()
    parser.feed(page)
    return parser.figures


def test_the_markdown_puts_the_hidden_copy_alarm_first(compared):
    md = compared["md"]
    assert md.index("### Findings") < md.index("### Overview")
    findings = literal(md[md.index("### Findings") : md.index("### Overview")])
    assert "**ALARM** **naive** hidden copy" in findings
    assert "aten::masked_fill > aten::clone > aten::copy_" in findings
    alarms = [line for line in findings.splitlines() if line.startswith("- **ALARM**")]
    assert len(alarms) == 1 and alarms[0].startswith("- **ALARM** **naive** hidden copy")


def test_the_markdown_overview_carries_the_traces_numbers(compared):
    rows = {r["run"]: r for r in _md_rows(compared["md"], "### Overview")}
    assert set(rows) == {"naive_inplace", "naive", "sdpa"}
    for run, name in (("naive_inplace", "naive_inplace.json.gz"), ("naive", "naive.json.gz"), ("sdpa", "sdpa.json.gz")):
        doc = raw_sample(name)
        spans = raw_step_spans_us(doc)
        assert rows[run]["steps"] == str(len(spans))
        assert float(rows[run]["median step (µs)"]) == pytest.approx(median(spans), abs=0.001)
        assert float(rows[run]["hidden copies per step"]) == pytest.approx(hidden_clone_copies(doc) / len(spans))
    base = median(raw_step_spans_us(raw_sample("naive_inplace.json.gz")))
    sdpa = median(raw_step_spans_us(raw_sample("sdpa.json.gz")))
    assert float(rows["sdpa"]["speedup vs baseline"]) == pytest.approx(base / sdpa, rel=1e-3)
    assert rows["sdpa"]["backend detected"] == "cpu_flash"
    # CPU-only traces count leaf ops, and say so
    assert {r["unit"] for r in rows.values()} == {"leaf cpu_op"}


def test_the_markdown_copies_table_names_the_op_chain(compared):
    rows = _md_rows(compared["md"], "### Copies")
    hidden = [r for r in rows if r["hidden"] == "yes"]
    assert [(r["run"], r["op chain"]) for r in hidden] == [("naive", "aten::masked_fill > aten::clone > aten::copy_")]
    dims = [e for e in raw_sample("naive.json.gz")["traceEvents"] if e.get("name") == "aten::clone"][0]["args"][
        "Input Dims"
    ][0]
    assert float(hidden[0]["bytes per step"].replace(",", "")) == 4 * dims[0] * dims[1] * dims[2] * dims[3]
    assert hidden[0]["share of step"].endswith("%")


def test_the_html_is_self_contained_and_embeds_the_same_numbers(compared):
    page = compared["html"]
    refs = _Refs()
    refs.feed(page)
    assert refs.external == []
    assert not re.search(r"@import|url\(\s*['\"]?https?:", page[: page.index("<script>")])  # the stylesheet
    assert "Plotly" in page and page.count("<script>") >= 1
    data = json.loads(refs.data_block)
    assert data["baseline"] == "naive_inplace"
    by_run = {r["run"]: r for r in data["overview"]}
    for run, name in (("naive", "naive.json.gz"), ("sdpa", "sdpa.json.gz")):
        spans = raw_step_spans_us(raw_sample(name))
        assert by_run[run]["median_step_us"] == pytest.approx(median(spans), abs=0.001)
    hidden = [c for c in data["copies"] if c["hidden"]]
    assert [c["op_chain"] for c in hidden] == ["aten::masked_fill > aten::clone > aten::copy_"]
    assert [f["kind"] for f in data["findings"] if f["severity"] == "alarm"] == ["hidden copy"]
    # one step's timeline of each compared run against the baseline's: two timeline figures here,
    # read as data (plotly may write µ as \\u00b5 in its JSON: the text of the page is no oracle)
    drawn = figures(page)
    timelines = [
        f
        for f in drawn.values()
        if f["layout"].get("xaxis2", {}).get("title", {}).get("text") == "µs since the start of the step"
    ]
    assert len(timelines) == 2
    assert any(name.startswith("step-time") for name in drawn) and any(name.startswith("speedup") for name in drawn)


def test_compare_on_gpu_traces_reports_their_memcpy_and_kernels(tmp_path):
    md = tmp_path / "gpu.md"
    result = run(
        "compare", str(DATA / "hta_a100_control.json.gz"), str(DATA / "hta_v100_test.json.gz"), "--markdown", str(md)
    )
    assert result.returncode == 0, result.stderr
    rows = {r["run"]: r for r in _md_rows(md.read_text(), "### Overview")}
    for name in ("hta_a100_control.json.gz", "hta_v100_test.json.gz"):
        per_step = oracle.gpu_per_step(oracle.raw(DATA / name))
        work = sorted(sum(c.values()) for c in per_step.values())
        assert float(rows[name]["work per step"]) == median(work)
        assert rows[name]["unit"] == "kernel"


def test_compare_with_a_bad_file_exits_2_naming_it(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{")
    result = run("compare", str(SAMPLES / "naive.json.gz"), str(bad))
    assert result.returncode == 2 and "broken.json" in result.stderr and "Traceback" not in result.stderr


# ---------- the gate ----------


def check(*args: str) -> subprocess.CompletedProcess:
    return run("check", *args)


def test_an_honest_pair_holds():
    out = check(
        str(SAMPLES / "naive.json.gz"), str(SAMPLES / "naive.json.gz"), "--require-parity", "--min-speedup", "1"
    )
    assert out.returncode == 0, out.stdout + out.stderr
    out = check(str(DATA / "hta_a100_control.json.gz"), str(DATA / "hta_a100_control.json.gz"), "--min-speedup", "1")
    assert out.returncode == 0, out.stdout


def test_a_new_copy_fails_by_default():
    out = check(str(SAMPLES / "naive_inplace.json.gz"), str(SAMPLES / "naive.json.gz"), "--max-kernel-increase", "100")
    assert out.returncode == 1
    assert out.stdout.strip().splitlines() == [
        "naive.json.gz: new copies: cpu from aten::masked_fill > aten::clone > aten::copy_"
    ]
    assert (
        check(
            str(SAMPLES / "naive_inplace.json.gz"),
            str(SAMPLES / "naive.json.gz"),
            "--max-kernel-increase",
            "100",
            "--allow-new-copies",
        ).returncode
        == 0
    )


def test_more_kernels_per_step_fails_by_default_and_the_threshold_is_a_percentage():
    # HTA's pair is one job on an A100 and a V100: gated as asked, the relation said first
    out = check(
        str(DATA / "hta_a100_control.json.gz"),
        str(DATA / "hta_v100_test.json.gz"),
        "--allow-new-copies",
        "--allow-different-workload",
    )
    assert out.returncode == 1
    assert out.stdout.splitlines()[0].startswith("hta_v100_test.json.gz: the same work on another device (")
    base = median(
        [sum(c.values()) for c in oracle.gpu_per_step(oracle.raw(DATA / "hta_a100_control.json.gz")).values()]
    )
    cand = median([sum(c.values()) for c in oracle.gpu_per_step(oracle.raw(DATA / "hta_v100_test.json.gz")).values()])
    assert (
        out.stdout.count("\n") == 2 and f"{cand:g} kernels, memcpys and memsets per step against {base:g}" in out.stdout
    )
    growth = (cand / base - 1) * 100
    assert (
        check(
            str(DATA / "hta_a100_control.json.gz"),
            str(DATA / "hta_v100_test.json.gz"),
            "--allow-new-copies",
            "--allow-different-workload",
            "--max-kernel-increase",
            f"{growth + 0.1:.2f}",
        ).returncode
        == 0
    )


def test_sdpa_on_the_math_path_fails_by_default():
    out = check(
        str(SAMPLES / "sdpa.json.gz"),
        str(SAMPLES / "sdpa-math.json.gz"),
        "--max-kernel-increase",
        "10000",
        "--allow-new-copies",
    )
    assert out.returncode == 1 and "math path" in out.stdout
    assert (
        check(
            str(SAMPLES / "sdpa.json.gz"),
            str(SAMPLES / "sdpa-math.json.gz"),
            "--max-kernel-increase",
            "10000",
            "--allow-new-copies",
            "--allow-math",
        ).returncode
        == 0
    )


def test_require_backend_and_min_speedup():
    out = check(
        str(SAMPLES / "naive.json.gz"), str(SAMPLES / "naive_inplace.json.gz"), "--require-backend", "cpu_flash"
    )
    assert out.returncode == 1 and "'cpu_flash' required" in out.stdout
    assert (
        check(
            str(SAMPLES / "naive.json.gz"), str(SAMPLES / "sdpa.json.gz"), "--require-backend", "cpu_flash"
        ).returncode
        == 0
    )
    # sdpa against itself has speedup exactly 1: a minimum of 1.01 must fail, 1.0 must hold
    assert check(str(SAMPLES / "sdpa.json.gz"), str(SAMPLES / "sdpa.json.gz"), "--min-speedup", "1.01").returncode == 1
    assert check(str(SAMPLES / "sdpa.json.gz"), str(SAMPLES / "sdpa.json.gz"), "--min-speedup", "1.0").returncode == 0


def test_a_recorded_parity_failure_fails_and_require_parity_needs_a_record(tmp_path):
    doc = raw_sample("sdpa.json.gz")
    doc["attnscope"]["parity"]["passed"] = False
    doc["attnscope"]["parity"]["max_abs"] = 0.5
    broken = tmp_path / "sdpa_wrong.json"
    broken.write_text(json.dumps(doc))
    out = check(str(SAMPLES / "sdpa.json.gz"), str(broken))
    assert out.returncode == 1 and "parity failure" in out.stdout
    foreign = tmp_path / "foreign.json"
    del doc["attnscope"]
    foreign.write_text(json.dumps(doc))
    assert check(str(SAMPLES / "sdpa.json.gz"), str(foreign)).returncode == 0
    out = check(str(SAMPLES / "sdpa.json.gz"), str(foreign), "--require-parity")
    assert out.returncode == 1 and "no parity record" in out.stdout


def test_unusable_input_exits_2():
    out = check(str(DATA / "hta_a100_control.json.gz"), str(SAMPLES / "sdpa.json.gz"))
    assert out.returncode == 2 and "not comparable: sdpa.json.gz is not the same work" in out.stderr
    out = check(str(DATA / "hta_a100_control.json.gz"), str(SAMPLES / "sdpa.json.gz"), "--allow-different-workload")
    assert out.returncode == 2 and "compare a GPU trace with a GPU trace" in out.stderr
    # two files of one name: which is which (it said 'naive.json.gz counts kernels and naive.json.gz counts leaf cpu_ops')
    out = check(
        str(ROOT / "sample_traces" / "h200" / "naive.json.gz"),
        str(SAMPLES / "naive.json.gz"),
        "--allow-different-workload",
    )
    assert out.returncode == 2
    assert (
        "the baseline, naive.json.gz, counts kernels and the candidate, naive.json.gz, counts leaf cpu_ops"
        in out.stderr
    )
    out = check(str(SAMPLES / "sdpa.json.gz"), str(ROOT / "missing.json"))
    assert out.returncode == 2 and "missing.json: no such file" in out.stderr


def test_a_backend_fallback_fails_the_gate(tmp_path):
    doc = raw_sample("sdpa-math.json.gz")
    doc["attnscope"]["backend_requested"] = "flash"  # asked for flash, the trace shows the math path
    lied = tmp_path / "sdpa_flash_fell_back.json"
    lied.write_text(json.dumps(doc))
    out = check(str(SAMPLES / "sdpa-math.json.gz"), str(lied))
    assert out.returncode == 1
    assert out.stdout.strip().splitlines() == [
        "sdpa_flash_fell_back.json: backend fallback: 'flash' was requested, the trace shows math"
    ]


def test_more_copies_of_a_known_chain_fail_the_gate(tmp_path):
    # a baseline whose hidden copy happens in one step of three: the candidate (the real naive
    # trace) has the same chain, no new one, but three times as many copies per step
    doc = raw_sample("naive.json.gz")
    events = doc["traceEvents"]
    spans = sorted(
        (e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )
    clones = [e for e in events if e.get("ph") == "X" and e.get("name") == "aten::clone"]
    later = [s for s in spans[1:]]
    drop = {
        id(c)
        for c in events
        if c.get("ph") == "X"
        and c.get("name") == "aten::copy_"
        and any(k["ts"] <= c["ts"] and c["ts"] + c["dur"] <= k["ts"] + k["dur"] for k in clones)
        and any(s["ts"] <= c["ts"] < s["ts"] + s["dur"] for s in later)
    }
    assert len(drop) == len(later) == 2
    doc["traceEvents"] = [e for e in events if id(e) not in drop]
    base = tmp_path / "naive_one_copy.json"
    base.write_text(json.dumps(doc))
    out = check(str(base), str(SAMPLES / "naive.json.gz"), "--max-kernel-increase", "1000")
    assert out.returncode == 1
    assert out.stdout.strip().splitlines() == [
        "naive.json.gz: more copies: 1 hidden per step against 0.333333 in the baseline (chains past the alarm's 1% "
        "of the step or 1.0 MB a step)"
    ]


def test_check_flags_are_validated():
    out = check(str(SAMPLES / "sdpa.json.gz"), str(SAMPLES / "sdpa.json.gz"), "--require-backend", "Flash")
    assert out.returncode == 2 and "invalid choice" in out.stderr
    out = check(str(SAMPLES / "sdpa.json.gz"), str(SAMPLES / "sdpa.json.gz"), "--no-new-copies", "--allow-new-copies")
    assert out.returncode == 2 and "not allowed with" in out.stderr


def test_compare_that_cannot_write_its_report_exits_2(tmp_path):
    out = run(
        "compare",
        str(SAMPLES / "naive.json.gz"),
        str(SAMPLES / "sdpa.json.gz"),
        "--markdown",
        str(tmp_path / "no" / "such" / "dir.md"),
    )
    assert out.returncode == 2 and "cannot write" in out.stderr


# ---------- GPU and CPU-only runs side by side ----------

H100 = DATA / "tracelens_h100_bert_sdpa_flash.json.gz"


def test_compare_and_check_both_refuse_a_cpu_and_gpu_pair_unless_grouping_is_asked_for(tmp_path):
    pair = (str(SAMPLES / "naive.json.gz"), str(H100))
    out = run("compare", *pair)
    assert out.returncode == 2 and "--group-by-device" in out.stderr and "Traceback" not in out.stderr
    assert check(*pair).returncode == 2
    md = tmp_path / "grouped.md"
    html = tmp_path / "grouped.html"
    out = run(
        "compare",
        *pair,
        str(SAMPLES / "sdpa.json.gz"),
        str(DATA / "hta_mi250_rocm_minitoy.json.gz"),
        "--group-by-device",
        "--markdown",
        str(md),
        "--html",
        str(html),
    )
    assert out.returncode == 0, out.stderr
    text = md.read_text()
    assert "measured differently" in literal(text)
    cpu = {r["run"]: r for r in _md_rows(text, "#### CPU-only runs, against naive")}
    gpu = {r["run"]: r for r in _md_rows(text, "#### GPU runs, against tracelens_h100_bert_sdpa_flash.json.gz")}
    assert set(cpu) == {"naive", "sdpa"} and set(gpu) == {
        "tracelens_h100_bert_sdpa_flash.json.gz",
        "hta_mi250_rocm_minitoy.json.gz",
    }
    naive = median(raw_step_spans_us(raw_sample("naive.json.gz")))
    sdpa = median(raw_step_spans_us(raw_sample("sdpa.json.gz")))
    assert float(cpu["sdpa"]["speedup vs baseline"]) == pytest.approx(
        naive / sdpa, rel=1e-3
    )  # against naive, never the GPU run
    assert float(gpu["tracelens_h100_bert_sdpa_flash.json.gz"]["speedup vs baseline"]) == 1.0
    findings = literal(text[text.index("### Findings") : text.index("### Overview")])
    for line in findings.splitlines():
        if "more copies" in line:  # a note only ever against the run's own group's baseline
            gpu_run = "minitoy" in line or "h100" in line.split("more copies")[0]
            assert ("naive" in line.split("baseline")[-1]) != gpu_run
    data = json.loads(_data_block(html.read_text()))
    assert [(g["name"], g["baseline"]) for g in data["groups"]] == [
        ("CPU-only", "naive"),
        ("GPU", "tracelens_h100_bert_sdpa_flash.json.gz"),
    ]
    drawn = figures(html.read_text())
    assert {"speedup-CPU-only", "speedup-GPU"} <= set(drawn)
    assert drawn["speedup-GPU"]["data"][0]["orientation"] == "h"  # flat bars, one per run, at any count
    assert sorted(drawn["speedup-GPU"]["data"][0]["y"]) == [
        "hta_mi250_rocm_minitoy.json.gz",
        "tracelens_h100_bert_sdpa_flash.json.gz",
    ]


def _data_block(page: str) -> str:
    refs = _Refs()
    refs.feed(page)
    return refs.data_block


def test_reports_show_the_device_of_cpu_runs_and_the_cost_the_app_shows(tmp_path):
    md = tmp_path / "cpu.md"
    out = run(
        "compare",
        str(SAMPLES / "naive.json.gz"),
        str(SAMPLES / "sdpa.json.gz"),
        "--markdown",
        str(md),
        "--usd-per-cpu-hour",
        "0.5",
    )
    assert out.returncode == 0, out.stderr
    text = md.read_text()
    rows = {r["run"]: r for r in _md_rows(text, "### Overview")}
    manifest = json.loads((SAMPLES / "runs.json").read_text())
    assert rows["naive"]["device"] == f"cpu · {manifest['device_name']}"
    speed = {r["run"]: r for r in _md_rows(text, "### Speed")}
    doc = raw_sample("sdpa.json.gz")
    tokens_per_s = doc["attnscope"]["tokens_per_step"] / (median(raw_step_spans_us(doc)) / 1e6)
    assert float(speed["sdpa"]["$ per M tokens"]) == pytest.approx(0.5 / 3600 / tokens_per_s * 1e6, rel=1e-3)
    assert "0.50 per CPU-hour" in literal(text)
    out = run("compare", str(H100), str(DATA / "hta_mi250_rocm_minitoy.json.gz"), "--markdown", str(md))
    assert "$2.00 per GPU-hour" in literal(md.read_text())  # the dashboard's default price, said out loud


def test_trace_strings_are_literal_in_both_reports(tmp_path):
    doc = raw_sample("naive.json.gz")
    doc["attnscope"]["variant"] = "a|b `c` [x](http://e.example) *em* _u_ <script>alert(1)</script>"
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(doc))
    md, html = tmp_path / "odd.md", tmp_path / "odd.html"
    out = run("compare", str(SAMPLES / "sdpa.json.gz"), str(odd), "--markdown", str(md), "--html", str(html))
    assert out.returncode == 0, out.stderr
    text = md.read_text()
    label = doc["attnscope"]["variant"]
    rows = {r["run"]: r for r in _md_rows(text, "### Overview")}
    assert label in rows  # the pipe did not split the cell, and the reader sees the label as written
    for raw in ("`c`", "[x](", "*em*", "_u_", "<script>", "a|b"):
        assert raw not in text  # each one escaped
    hidden = [r for r in _md_rows(text, "### Copies") if r["hidden"] == "yes"]
    assert hidden[0]["op chain"] == "aten::masked_fill > aten::clone > aten::copy_"
    page = html.read_text()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_compiled_math_run_says_inductor_replaced_the_math_path():
    out = run("compare", str(SAMPLES / "sdpa-math.json.gz"), str(SAMPLES / "sdpa-math.compiled.json.gz"))
    assert out.returncode == 0, out.stderr
    rows = {r["run"]: r for r in _text_rows(out.stdout, "Attention backend")}
    doc = raw_sample("sdpa-math.compiled.json.gz")
    names = {e["name"] for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"}
    assert doc["attnscope"]["backend_requested"] == "math"
    assert not any(n.startswith("aten::_scaled_dot_product_attention_math") for n in names)  # the math op never ran
    assert rows["sdpa-math (compiled)"]["check"] == "compiled: inductor replaced the math path"
    assert rows["sdpa-math"]["check"] == "as requested"


def test_runs_replayed_from_cuda_graphs_are_named_so_and_their_generated_math_path_is_recognised():
    h200 = ROOT / "sample_traces" / "h200"
    out = run("compare", *(str(h200 / f"sdpa-math{kind}.json.gz") for kind in ("", ".compiled", ".graphs")))
    assert out.returncode == 0, out.stderr
    rows = {r["run"]: r for r in _text_rows(out.stdout, "Attention backend")}
    assert list(rows) == ["sdpa-math", "sdpa-math (compiled)", "sdpa-math (CUDA graphs)"]
    graphs = oracle.raw(h200 / "sdpa-math.graphs.json.gz")
    assert graphs["attnscope"]["cuda_graphs"] is True and graphs["attnscope"]["backend_requested"] == "math"
    assert not any(
        e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::bmm") for e in graphs["traceEvents"]
    )  # replayed: no matmul op
    assert (
        rows["sdpa-math (CUDA graphs)"]["check"]
        == rows["sdpa-math (compiled)"]["check"]
        == "compiled: inductor replaced the math path"
    )


def test_one_copy_is_one_copy_not_one_copies():
    from dashboard.engine import load_trace
    from dashboard.engine.compare import review

    runs = {
        "naive_inplace": load_trace(SAMPLES / "naive_inplace.json.gz"),
        "naive": load_trace(SAMPLES / "naive.json.gz"),
    }
    doc = raw_sample("naive.json.gz")
    per_step = hidden_clone_copies(doc) / len(raw_step_spans_us(doc))
    assert per_step == 1
    notes = review.findings(runs, "naive_inplace")
    messages = notes.filter(notes["run"] == "naive")["message"].to_list()
    assert any(m.startswith("1 hidden copy per step") for m in messages)
    assert not any(" 1 copies" in f" {m}" or "1 hidden copies" in m for m in messages)


def test_dense_timeline_lanes_never_overlap_their_labels():
    import polars as pl

    from dashboard import charts

    lanes = [f"CPU {t} depth {d}" for t in range(100) for d in range(4)]  # 400 lanes: many threads
    tl = pl.DataFrame(
        {
            "lane": lanes,
            "lane_kind": ["cpu"] * len(lanes),
            "start_us": [0.0] * len(lanes),
            "end_us": [1.0] * len(lanes),
            "dur_us": [1.0] * len(lanes),
            "name": ["op"] * len(lanes),
            "family": ["other"] * len(lanes),
            "cat": ["cpu_op"] * len(lanes),
            "id": list(range(len(lanes))),
        }
    )
    fig = charts.timeline_pair(tl, tl.head(4), "A", "B").to_plotly_json()
    height = fig["layout"]["height"]
    top = fig["layout"]["yaxis"]
    domain = top["domain"][1] - top["domain"][0]
    px_per_label = domain * (height - 60) / len(top["ticktext"])  # 60 px: the top and bottom margins
    assert px_per_label >= 12  # font 12: one label per at least 12 px of axis
    assert len(top["ticktext"]) < len(lanes) and set(top["ticktext"]) <= set(lanes)


# ---------- the diff that explains, and attention efficiency ----------


def _gpu_time_per_step(doc: dict) -> dict[str, float]:
    """json oracle: kernel/memcpy/memset name -> µs per step over every ProfilerStep (by its launch)."""
    events = oracle.complete(doc)
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in oracle.LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    spans = oracle.step_spans(doc)
    total: dict[str, float] = {}
    for e in events:
        call = launches.get(e.get("args", {}).get("correlation")) if e.get("cat") in oracle.GPU_CATS else None
        if call is not None and any(start <= call["ts"] < end for _, start, end in spans):
            total[e["name"]] = total.get(e["name"], 0.0) + e.get("dur", 0)
    return {name: us / len(spans) for name, us in total.items()}


def _ops_over_steps(doc: dict) -> set[str]:
    """json oracle: names of CPU ops, annotations and runtime calls that start inside a ProfilerStep."""
    spans = oracle.step_spans(doc)
    return {
        e["name"]
        for e in oracle.complete(doc)
        if e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
        and not e["name"].startswith("ProfilerStep#")
        and any(start <= e["ts"] < end for _, start, end in spans)
    }


@pytest.fixture(scope="module")
def hta_pair(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("hta")
    md, page = out / "hta.md", out / "hta.html"
    result = run(
        "compare",
        str(DATA / "hta_a100_control.json.gz"),
        str(DATA / "hta_v100_test.json.gz"),
        "--markdown",
        str(md),
        "--html",
        str(page),
    )
    assert result.returncode == 0, result.stderr
    return {"md": md.read_text(), "html": page.read_text()}


def test_the_markdown_ranks_kernel_changes_by_time_with_nccl_near_the_top(hta_pair):
    text = hta_pair["md"]
    before, after = (
        _gpu_time_per_step(oracle.raw(DATA / n)) for n in ("hta_a100_control.json.gz", "hta_v100_test.json.gz")
    )
    rows = _md_rows(text, "#### What changed: hta_v100_test.json.gz against hta_a100_control.json.gz")
    assert len(rows) == 12
    deltas = [float(r["Δ µs per step"]) for r in rows]
    assert [abs(d) for d in deltas] == sorted((abs(d) for d in deltas), reverse=True)  # time first
    names = [r["kernel"] for r in rows]
    for family in ("ncclKernel_SendRecv", "ncclKernel_AllReduce"):
        (row,) = [r for r in rows if r["kernel"].startswith(family)]  # both in the top 12
        (full,) = [
            n for n in set(before) | set(after) if n.startswith(family)
        ]  # one instance: its base row is its numbers
        assert float(row["baseline µs per step"]) == pytest.approx(before[full], abs=0.001)
        assert float(row["run µs per step"]) == pytest.approx(after[full], abs=0.001)
        assert row["what changed"] == "slower" and float(row["Δ count per step"]) == 0
    assert names[1].startswith("ncclKernel_AllReduce")
    # the line that says how much the top rows explain: the whole change is summed kernel time, whatever the grouping
    total = sum(after.values()) - sum(before.values())
    line = next(
        literal(l) for l in text.splitlines() if literal(l).startswith("The 12 changed kernels below account for")
    )
    assert f"of the {total:+,.1f} µs change in summed kernel time per step" in line
    assert f"account for {sum(deltas):+,.1f} µs" in line


def test_the_markdown_gives_the_readings_and_the_op_names_only_one_run_has(hta_pair):
    text = literal(hta_pair["md"])
    cdoc, tdoc = oracle.raw(DATA / "hta_a100_control.json.gz"), oracle.raw(DATA / "hta_v100_test.json.gz")
    before, after = _ops_over_steps(cdoc), _ops_over_steps(tdoc)
    steps = len(oracle.step_spans(tdoc))
    graphs = sum(
        1
        for e in oracle.complete(tdoc)
        if e["name"] == "cudaGraphLaunch" and any(a <= e["ts"] < b for _, a, b in oracle.step_spans(tdoc))
    )
    assert (
        f"- compiled: CompiledFunction, CompiledFunctionBackward appear (torch.compile); {len(before - after)} op names of the baseline are gone"
        in text
    )
    assert f"- CUDA graphs: {graphs / steps:.4g} graph launches per step replay kernels" in text
    assert text.index("Readings:") < text.index("The 12 changed kernels below account for")  # readings above the tables
    added = text.split(f"{len(after - before)} op names only in the run</summary>")[1].split("</details>")[0].strip()
    assert added.split(", ") == sorted(after - before)
    removed = (
        text.split(f"{len(before - after)} op names only in the baseline</summary>")[1].split("</details>")[0].strip()
    )
    listed = removed.split(", and ")[0].split(", ")
    assert set(listed) <= before - after and len(listed) == min(60, len(before - after))


def test_the_html_report_shows_the_same_diff_and_embeds_it(hta_pair):
    page = hta_pair["html"]
    data = json.loads(_data_block(page))
    (change,) = data["changes"]
    assert change["run"] == "hta_v100_test.json.gz" and change["baseline"] == "hta_a100_control.json.gz"
    # HTA's control/test pair is an A100 against a V100 (deviceProperties of each file): the first
    # reading says so, before any code change is read into it
    names = [
        oracle.raw(DATA / f)["deviceProperties"][0]["name"]
        for f in ("hta_a100_control.json.gz", "hta_v100_test.json.gz")
    ]
    assert change["readings"][0] == f"besides the code: device cuda: {names[0]} -> cuda: {names[1]}"
    assert change["readings"][1].startswith("compiled: CompiledFunction, CompiledFunctionBackward appear")
    assert "What changed: hta_v100_test.json.gz against hta_a100_control.json.gz" in page
    assert "CUDA graphs: 2 graph launches per step" in page and "cudaGraphLaunch" in page


def test_attention_efficiency_in_both_reports_with_the_roofline_in_html(tmp_path):
    md, page = tmp_path / "eff.md", tmp_path / "eff.html"
    qwen = DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"
    out = run("compare", str(H100), str(qwen), "--markdown", str(md), "--html", str(page))
    assert out.returncode == 0, out.stderr
    rows = {r["run"]: r for r in _md_rows(md.read_text(), "### Attention efficiency")}
    # the flash kernels of the BERT trace: 4 calls of B=1 H=8 S=141 D=64, not causal, read from the json
    doc = oracle.raw(H100)
    kernels = [e for e in oracle.complete(doc) if e.get("cat") == "kernel" and "flash_fwd_kernel" in e["name"]]
    ops = [e for e in oracle.complete(doc) if e.get("name") == "aten::_flash_attention_forward"]
    ((b, s, h, d),) = {tuple(o["args"]["Input Dims"][0]) for o in ops}
    flops = 4 * b * h * s * s * d
    achieved = flops * len(kernels) / (sum(k["dur"] for k in kernels) * 1e-6) / 1e12
    bert = rows[H100.name]
    assert float(bert["achieved TFLOP/s"]) == pytest.approx(achieved, rel=1e-3)
    assert bert["measured over"] == "attention ops" and bert["device"] == "H100 SXM5 80GB"
    assert float(bert["% of roofline"]) > 0 and bert["why no number"] == ""
    assert "10 of 34 calls not measured" in rows[qwen.name]["why no number"]
    drawn = figures(page.read_text())["roofline"]
    assert drawn["layout"]["xaxis"]["type"] == "log" and drawn["layout"]["yaxis"]["type"] == "log"
    # the points (a legend entry that only explains a marker's shape has no coordinates)
    points = [t for t in drawn["data"] if t["mode"] == "markers" and t["x"] != [None]]
    assert {t["name"] for t in points} == {f"{H100.name} (attention ops)", f"{qwen.name} (attention ops)"}
    bert_point = next(t for t in points if t["name"].startswith(H100.name))
    assert bert_point["y"][0] == pytest.approx(achieved, rel=1e-3)
    roofs = [t for t in drawn["data"] if t["mode"] == "lines"]
    assert len(roofs) == 1 and max(roofs[0]["y"]) == pytest.approx(989.5)  # H100 SXM bf16 dense peak, drawn once


def test_a_cpu_run_gives_its_reason_never_a_percentage(compared):
    rows = _md_rows(compared["md"], "### Attention efficiency")
    for row in rows:
        assert row["% of roofline"] == "" and row["why no number"].startswith("CPU trace")
    whole = {r["run"]: r for r in rows if r["measured over"] == "whole step"}
    assert set(whole) == {"naive_inplace", "naive", "sdpa"} and all(
        float(r["achieved TFLOP/s"]) > 0 for r in whole.values()
    )
    # only sdpa has attention calls of its own (aten::scaled_dot_product_attention): its second row
    assert [(r["run"], r["measured over"]) for r in rows if r["measured over"] != "whole step"] == [
        ("sdpa", "attention ops")
    ]


H200 = ROOT / "sample_traces" / "h200"


def test_every_command_gives_a_collectors_trace_the_same_attention_efficiency(tmp_path):
    """One trace, one answer: the CUDA-graph sdpa run measured over its attention ops is 30.6% in
    summary, check and compare, and over the whole step (its graph's input copies included) 17.6%
    in summary and compare, each labelled. compare once showed only the whole step, so a reviewer
    read 17.6% there and 30.6% in summary for the same file."""
    graphs, naive = H200 / "sdpa.graphs.json.gz", H200 / "naive.json.gz"
    out = run("summary", str(graphs), str(naive), "--json", "--no-store")
    assert out.returncode == 0, out.stderr
    blocks = {Path(s["source"]).name: s["efficiency"] for s in json.loads(out.stdout)}
    ops, step = blocks[graphs.name]["pct_of_roofline"], blocks[graphs.name]["per_step"][0]["pct_of_roofline"]
    assert ops > step + 5  # the step also holds the graph's input copies: far apart, so a mix-up shows
    text = run("summary", str(graphs), str(naive), "--no-store").stdout
    assert f"attention efficiency: {ops:.1f}% of the H200 SXM roofline" in text
    assert f"attention efficiency over the whole step: {step:.1f}% of the H200 SXM roofline" in text
    naive_step = blocks[naive.name]["per_step"][0]["pct_of_roofline"]
    assert f"attention efficiency over the whole step: {naive_step:.1f}% of the H200 SXM roofline" in text
    md = tmp_path / "eff.md"
    assert run("compare", str(graphs), str(naive), "--markdown", str(md), "--no-store").returncode == 0
    rows = {(r["run"], r["measured over"]): r for r in _md_rows(md.read_text(), "### Attention efficiency")}
    assert set(rows) == {
        ("sdpa (CUDA graphs)", "whole step"),
        ("sdpa (CUDA graphs)", "attention ops"),
        ("naive", "whole step"),
    }
    assert float(rows["sdpa (CUDA graphs)", "attention ops"]["% of roofline"]) == pytest.approx(ops, abs=0.05)
    assert float(rows["sdpa (CUDA graphs)", "whole step"]["% of roofline"]) == pytest.approx(step, abs=0.05)
    assert float(rows["naive", "whole step"]["% of roofline"]) == pytest.approx(naive_step, abs=0.05)
    gate = run(
        "check",
        str(naive),
        str(graphs),
        "--min-attention-efficiency",
        f"{ops + 0.1:.1f}",
        "--max-kernel-increase",
        "100",
        "--no-store",
    )
    assert gate.returncode == 1 and f"attention reaches {ops:.1f}% of the roofline" in gate.stdout + gate.stderr


def test_the_html_report_is_the_same_bytes_on_every_run_and_dated_only_by_source_date_epoch(tmp_path):
    """No clock in the page: two runs a minute apart gave different bytes when it said when it was
    written. $SOURCE_DATE_EPOCH (the reproducible-builds convention) dates it on purpose."""
    pages = []
    for i, epoch in enumerate((None, None, "1764763200")):
        out = tmp_path / f"r{i}.html"
        env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}
        if epoch:
            env["SOURCE_DATE_EPOCH"] = epoch
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "dashboard.cli",
                "compare",
                str(SAMPLES / "naive_inplace.json.gz"),
                str(SAMPLES / "naive.json.gz"),
                "--no-store",
                "--html",
                str(out),
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr
        pages.append(out.read_bytes())
    assert pages[0] == pages[1]
    assert b"Generated by attnscope " in pages[0] and b"UTC" not in pages[0].split(b"Generated by")[1][:40]
    assert b"Generated 2025-12-03 12:00 UTC by attnscope " in pages[2]  # date -u -d @1764763200


@pytest.mark.parametrize("run_name", ["sdpa-math", "naive_inplace"])
def test_the_explained_line_sums_the_kernel_rows_the_report_lists(run_name, tmp_path):
    """'The N changed kernels below account for X µs': N is the number of rows listed and X their sum.
    It summed the first 12 rows before the 'same' ones (within 5%) were dropped from the table: naive
    against sdpa-math said 12 kernels and +1,552.6 µs under 12 rows that add to +1,555.6 (softmax,
    -3.7 µs and 'same', counted but not listed), and naive against naive_inplace said 7 over 2 rows."""
    md = tmp_path / "r.md"
    out = run(
        "compare", str(H200 / "naive.json.gz"), str(H200 / f"{run_name}.json.gz"), "--markdown", str(md), "--no-store"
    )
    assert out.returncode == 0, out.stderr
    text = md.read_text()
    section = text[text.index("#### What changed") :]
    rows = _md_rows(section, "#### What changed")
    line = next(ln for ln in section.splitlines() if "account" in ln)
    found = re.search(r"The (\d+) changed kernels? below accounts? for ([+-][\d,.]+) µs", line.replace("\\", ""))
    assert found, line
    assert int(found[1]) == len(rows) and all(r["what changed"] != "same" for r in rows)
    assert float(found[2].replace(",", "")) == pytest.approx(sum(float(r["Δ µs per step"]) for r in rows), abs=0.06)


# ---------- what the terminal gets, and what is said first (issue 40) ----------


def test_compare_prints_plain_text_and_writes_markdown_only_where_asked(tmp_path):
    pair = [str(H200 / "naive.json.gz"), str(H200 / "sdpa.json.gz"), "--no-store"]
    printed = run("compare", *pair)
    assert printed.returncode == 0, printed.stderr
    text = printed.stdout
    # the naive run's hidden clone, as the trace names it (the oracle: the DtoD copy's bytes in the JSON)
    doc = oracle.raw(H200 / "naive.json.gz")
    dtod = {e["args"]["bytes"] for e in oracle.complete(doc) if "Memcpy DtoD" in str(e.get("name"))}
    assert len(dtod) == 1 and f"({next(iter(dtod)) / 1e6:.1f} MB per step" in text
    assert "aten::masked_fill > aten::clone > aten::copy_" in text
    assert "\\" not in text and "**" not in text and "|---" not in text and "<sub>" not in text
    assert text.splitlines()[:2] == ["attnscope review: sdpa against baseline naive", "=" * 45]
    rows = {r["run"]: r for r in _text_rows(text, "Overview")}
    assert rows["sdpa"]["compared as"] == "same workload" and rows["naive"]["compared as"] == "baseline"
    md = tmp_path / "review.md"
    assert run("compare", *pair, "--markdown", str(md)).returncode == 0
    written = md.read_text()
    assert "aten::masked\\_fill \\> aten::clone \\> aten::copy\\_" in written  # Markdown keeps its escapes
    assert literal(written).count("hidden copy") == text.count("hidden copy")


def test_a_review_of_different_work_says_so_first_and_calls_no_difference_a_change(tmp_path):
    """H200 naive attention against TraceLens' H100 BERT: other shapes (the oracle below), other device."""
    bert = DATA / "tracelens_h100_bert_sdpa_flash.json.gz"
    sdpa_dims = {
        json.dumps(e["args"]["Input Dims"][0])
        for e in oracle.complete(oracle.raw(bert))
        if e.get("name") == "aten::scaled_dot_product_attention"
    }
    assert sdpa_dims and "[8, 16, 1024, 64]" not in sdpa_dims  # the collectors' 8x16x1024x64 is not BERT's
    md, page = tmp_path / "r.md", tmp_path / "r.html"
    args = [str(H200 / "naive.json.gz"), str(bert), "--no-store"]
    printed = run("compare", *args)
    assert run("compare", *args, "--markdown", str(md), "--html", str(page)).returncode == 0
    for text in (printed.stdout, literal(md.read_text())):
        head = text[: text.index("Findings")].replace("**", "")  # (Markdown's bold)
        assert "Not the same work as its baseline:" in head and "no speedup is set" in head
        assert "tracelens_h100_bert_sdpa_flash.json.gz against naive: attention shapes differ" in head
        findings = text[text.index("Findings") : text.index("Overview")]
        assert "different workload" not in findings  # said once, first
        assert "What changed" not in text and "Different work, side by side: tracelens_h100_bert" in text
        assert "how they differ" in text and "only in the baseline" in text
        kinds = re.findall(r"^(?:\| )?(added|removed|more|fewer|slower|faster)(?: \|| {2,})", text, flags=re.MULTILINE)
        assert kinds == []  # no row of the diff reads as a change
    html = page.read_text()
    assert html.index('class="warning relation"') < html.index("<h2>Findings</h2>")
    assert "What changed" not in re.sub(r"<script\b.*?</script>", "", html, flags=re.DOTALL)


def test_a_review_of_the_same_work_on_another_device_says_that_first():
    out = run("compare", str(DATA / "hta_a100_control.json.gz"), str(DATA / "hta_v100_test.json.gz"), "--no-store")
    head = out.stdout[: out.stdout.index("Findings")]
    assert "The same work on another device:" in head and "Tesla V100-SXM2-16GB" in head
    assert "What changed: hta_v100_test.json.gz against hta_a100_control.json.gz" in out.stdout  # still a change

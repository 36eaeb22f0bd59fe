"""The article's measurements read back (dashboard.engine.analyses.article), `attnscope sweep`, the Sweep
section of `attnscope compare`, and the Sweep tab, on folders written here with the csv module.

The numbers are chosen so that every answer is a hand computation: naive's time doubles with the
sequence, so sdpa's speedup goes 0.5x, 1x, 8x, 8x (it is faster from 256, and 1x at 128 puts the
log-log crossing at 128 itself); naive's peak memory is 1000*S^2 bytes and sdpa's 1000*S, so their
growth exponents are 2 and 1 and at S=512 naive needs 512x sdpa's memory.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import polars as pl
import pytest

from collectors import tables
from dashboard import article_report
from dashboard.cli import main as cli
from dashboard.engine.analyses import article as art

SEQS = (64, 128, 256, 512)
SWEEP_COLUMNS = list(tables.SWEEP.read)


def sweep_rows() -> list[dict]:
    rows = []
    for seq in SEQS:
        base = dict(
            device="cpu",
            dtype="fp32",
            batch=1,
            heads=4,
            head_dim=64,
            causal="true",
            reason="",
            time_ms_p10="",
            time_ms_p90="",
            tflops="",
        )
        naive_ms = seq / 128  # 0.5, 1, 2, 4 ms
        rows.append(
            {
                **base,
                "variant": "naive",
                "backend_ran": "eager",
                "seq": seq,
                "status": "ok",
                "time_ms": naive_ms,
                "peak_mem_bytes": 1000 * seq * seq,
            }
        )
        rows.append(
            {
                **base,
                "variant": "sdpa",
                "backend_ran": "cpu_flash",
                "seq": seq,
                "status": "ok",
                "time_ms": 1.0 if seq < 256 else 0.25 if seq == 256 else 0.5,
                "peak_mem_bytes": 1000 * seq,
            }
        )
        rows.append(
            {
                **base,
                "variant": "sdpa-efficient",
                "backend_ran": "",
                "seq": seq,
                "status": "refused",
                "reason": "No available kernel. Aborting execution.",
                "time_ms": "",
                "peak_mem_bytes": "",
            }
        )
        # math: always slower than naive
        rows.append(
            {
                **base,
                "variant": "sdpa-math",
                "backend_ran": "math",
                "seq": seq,
                "status": "ok",
                "time_ms": naive_ms * 2,
                "peak_mem_bytes": 2000 * seq * seq,
            }
        )
    rows.append(
        {
            **rows[0],
            "variant": "naive",
            "seq": 1024,
            "status": "oom",
            "time_ms": "",
            "peak_mem_bytes": "",
            "reason": "DefaultCPUAllocator: can't allocate memory: you tried to allocate 4194304000 bytes",
        }
    )
    return rows


def write_csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


DISPATCH = [
    # dtype, head_dim, mask, gqa, backend_ran
    ("fp32", 64, "causal", False, "cpu_flash"),
    ("fp32", 64, "dropout", False, "math"),
    ("fp32", 512, "causal", False, "cpu_flash"),
    ("fp32", 512, "dropout", False, "math"),
    ("bf16", 64, "causal", True, "cpu_flash"),
]
E2E = [
    # variant, phase, step_ms, attention_ms, share, speedup, amdahl
    ("naive", "prefill", 10.0, 4.0, 0.4, 1.0, 1.0),
    ("sdpa", "prefill", 8.0, 2.0, 0.25, 1.25, 1 / (0.6 + 0.4 / 2)),
    ("naive", "decode", 2.0, 0.5, 0.25, 1.0, 1.0),
    ("sdpa", "decode", 2.0, 0.5, 0.25, 1.0, 1.0),
]
SERVE = [
    # variant, tokens, padding_waste, tokens_per_s, usd_per_1m_tokens
    ("padded_sdpa", 1000, 0.5, 10000.0, 0.0556),
    ("packed_njt_sdpa", 1000, 0.0, 20000.0, 0.0278),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("article") / "article-cpu"
    out.mkdir()
    write_csv(out / "sweep.csv", sweep_rows(), SWEEP_COLUMNS)
    (out / "sweep.json").write_text(
        json.dumps({"device_name": "AMD EPYC", "flop_convention": "4*B*H*S^2*D, causal half"})
    )
    write_csv(
        out / "dispatch.csv",
        [
            dict(dtype=d, head_dim=h, mask=m, gqa=str(g).lower(), backend_ran=b, kernel="aten::x", refusals="")
            for d, h, m, g, b in DISPATCH
        ],
        list(tables.DISPATCH.read),
    )
    write_csv(
        out / "e2e.csv",
        [
            dict(
                variant=v,
                phase=p,
                step_ms=s,
                attention_ms=a,
                attention_share=sh,
                speedup_vs_naive=sp,
                amdahl_predicted_speedup=am,
            )
            for v, p, s, a, sh, sp, am in E2E
        ],
        list(tables.E2E.read),
    )
    write_csv(
        out / "serve.csv",
        [dict(variant=v, tokens=t, padding_waste=w, tokens_per_s=r, usd_per_1m_tokens=c) for v, t, w, r, c in SERVE],
        list(tables.SERVE.read),
    )
    return out


def test_sdpa_overtakes_naive_where_the_log_log_line_between_its_last_slower_and_first_faster_point_crosses_1(folder):
    a = art.read_article(folder)
    cross = {r["variant"]: r for r in art.crossovers(a.sweep).iter_rows(named=True)}
    sdpa = cross["sdpa"]
    # speedups 0.5 (64), 1.0 (128: not faster), 8 (256), 8 (512): faster from 256; the crossing lies
    # between 128 (log r = 0) and 256, at 128 itself
    assert sdpa["faster_from_seq"] == 256
    assert sdpa["crossover_seq"] == pytest.approx(128.0)
    assert sdpa["speedup_at_max_seq"] == pytest.approx(4.0 / 0.5)
    assert sdpa["speedup_at_min_seq"] == pytest.approx(0.5 / 1.0)
    # math is 2x slower everywhere: never overtakes; refused points are not compared at all
    assert cross["sdpa-math"]["faster_from_seq"] is None and cross["sdpa-math"]["crossover_seq"] is None
    assert "sdpa-efficient" not in cross


def test_a_crossing_between_a_half_and_a_double_speedup_lies_at_the_geometric_mean_of_the_two_lengths():
    frame = pl.DataFrame(
        {
            "device": ["cpu"] * 4,
            "dtype": ["fp32"] * 4,
            "head_dim": [64] * 4,
            "causal": [True] * 4,
            "variant": ["naive", "flex", "naive", "flex"],
            "seq": [128, 128, 256, 256],
            "status": ["ok"] * 4,
            "time_ms": [1.0, 2.0, 4.0, 2.0],  # flex: 0.5x at 128, 2x at 256
        }
    )
    (row,) = art.crossovers(frame).iter_rows(named=True)
    assert row["faster_from_seq"] == 256
    assert row["crossover_seq"] == pytest.approx(math.sqrt(128 * 256))


def test_naive_memory_grows_as_the_square_of_the_sequence_and_sdpa_linearly_and_naive_runs_out_first(folder):
    a = art.read_article(folder)
    grow = {r["variant"]: r for r in art.memory_growth(a.sweep).iter_rows(named=True)}
    assert grow["naive"]["exponent"] == pytest.approx(2.0)
    assert grow["sdpa"]["exponent"] == pytest.approx(1.0)
    assert grow["sdpa"]["naive_ratio"] == pytest.approx(1000 * 512 * 512 / (1000 * 512))
    assert grow["naive"]["oom_from_seq"] == 1024 and grow["sdpa"]["oom_from_seq"] is None
    assert grow["naive"]["peak_at_max_seq"] == 1000 * 512 * 512


def test_the_dispatch_map_flags_exactly_the_cells_where_math_ran(folder):
    a = art.read_article(folder)
    flagged = art.fallback_cells(a.dispatch)
    assert sorted(zip(flagged["head_dim"].to_list(), flagged["mask"].to_list())) == [(64, "dropout"), (512, "dropout")]
    matrix = art.dispatch_matrix(a.dispatch)
    assert matrix.columns == ["dtype", "mask", "gqa", "d=64", "d=512"]
    fp32_dropout = matrix.filter(pl.col("dtype") == "fp32", pl.col("mask") == "dropout").row(0, named=True)
    assert fp32_dropout["d=64"] == "math" and fp32_dropout["d=512"] == "math"


def test_the_end_to_end_gain_is_shown_beside_amdahls_prediction(folder):
    rows = {(r["variant"], r["phase"]): r for r in art.e2e_table(art.read_article(folder).e2e).iter_rows(named=True)}
    sdpa = rows[("sdpa", "prefill")]
    assert sdpa["gain_pct"] == pytest.approx(25.0)
    assert sdpa["predicted_pct"] == pytest.approx((1 / 0.8 - 1) * 100)  # s = 0.4, a = 2: 1 / (0.6 + 0.2)
    assert sdpa["gap_pct"] == pytest.approx(0.0)


def test_attnscope_sweep_prints_the_articles_answers(folder, capsys):
    assert cli(["sweep", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "sdpa: overtakes naive at seq ~128 (faster from 256), 8.00x at 512" in out
    assert "naive: peak per sequence grows ~S^2.00" in out and "out of memory from seq 1024" in out
    assert "sdpa: peak per sequence grows ~S^1.00" in out and "naive needs 512.0x this" in out
    assert "math ran in 2 of 5 cells" in out
    assert "end to end, prefill: sdpa +25.0% measured, +25.0% predicted" in out
    assert "packed_njt_sdpa" in out and "50.0%" in out  # padded's waste


def test_a_sweep_file_missing_a_column_is_one_error_line_naming_the_file_and_the_column(tmp_path, capsys):
    write_csv(tmp_path / "sweep.csv", [{"variant": "naive"}], ["variant", "seq"])
    assert cli(["sweep", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path / "sweep.csv") in err[0] and "missing columns" in err[0]
    assert "backend_ran" in err[0] and "Traceback" not in err[0]


def test_a_folder_without_the_articles_files_is_an_error(tmp_path, capsys):
    assert cli(["sweep", str(tmp_path)]) == 2
    assert "none of sweep.csv" in capsys.readouterr().err


def test_compare_on_an_article_folder_writes_its_sweep_section_with_the_math_cells_marked(folder, tmp_path, capsys):
    page, notes = tmp_path / "r.html", tmp_path / "r.md"
    assert cli(["compare", str(folder), "--html", str(page), "--markdown", str(notes)]) == 0
    html = page.read_text()
    assert html.count('<td class="math">MATH</td>') == 2 and "<script" not in html
    md = notes.read_text()
    assert "## The article's measurements: article-cpu (AMD EPYC)" in md
    assert "| fp32 | dropout | no | MATH | MATH |" in md


def test_compare_with_one_trace_and_nothing_else_says_what_it_needs(capsys):
    trace = Path(__file__).parent / "data" / "hta_triton_example.json.gz"
    assert cli(["compare", str(trace)]) == 2
    assert "needs a baseline and at least one other trace" in capsys.readouterr().err


def test_reports_are_byte_identical_on_a_second_run(folder, capsys):
    assert cli(["sweep", str(folder), "--markdown"]) == 0
    first = capsys.readouterr().out
    assert cli(["sweep", str(folder), "--markdown"]) == 0
    assert capsys.readouterr().out == first


def test_the_sweep_tab_draws_the_folder_given_at_start(folder, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from dashboard.runs import ENV_TRACES

    monkeypatch.setenv(ENV_TRACES, str(folder))
    at = AppTest.from_file(str(Path(__file__).parent.parent / "dashboard" / "app.py"), default_timeout=120)
    at.query_params["tab"] = "Sweep"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    # named like the bundled folder: both listed, told apart by their parent, the one given at start open
    assert at.selectbox(key="sweep_folder").value == f"article-cpu ({folder.parent.resolve()})"
    assert "article-cpu (bundled)" in at.selectbox(key="sweep_folder").options
    # an article folder is no folder of rank traces: nothing about it in the sidebar's errors
    assert not [e.value for e in at.sidebar.error if "article-cpu" in e.value]
    findings = re.sub(
        r"\\([!-/:-@\[-`{-~])", r"\1", " ".join(m.value for m in at.get_by_key("sweep_crossovers").markdown)
    )
    assert "overtakes naive at seq ~128" in findings and "naive: peak per sequence grows ~S^2.00" in findings
    e2e = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", " ".join(m.value for m in at.get_by_key("e2e_findings").markdown))
    assert "prefill: sdpa +25.0% measured, +25.0% predicted" in e2e and "end to end," not in e2e  # under its heading
    assert any("Math ran in 2 of 5 cells" in w.value for w in at.warning)
    shown = at.get_by_key("tbl_dispatch_map").dataframe[0].value
    assert list(shown.columns) == ["dtype", "mask", "gqa", "d=64", "d=512"]
    charts = [json.loads(c.proto.spec) for c in at.main.get("plotly_chart")]
    (time_chart,) = [c for c in charts if "Time per forward" in c["layout"]["title"]["text"]]
    stars = [t for t in time_chart["data"] if t.get("name") == "overtakes naive"]
    assert stars and stars[0]["x"] == [256]
    assert article_report  # the tab's words come from the same module as the CLI's


def test_memory_growth_is_per_sequence_when_the_batch_shrinks_as_the_sequence_grows():
    """The sweep's default keeps batch * seq constant: naive's total peak (B*H*S*S*4 bytes) then
    grows as S, but per sequence (peak / B) as S^2; sdpa's per-sequence peak (H*S*D*4*k) as S."""
    seqs = [64, 128, 256, 512]
    rows = []
    for s in seqs:
        b = 1024 // s
        rows.append({"variant": "naive", "seq": s, "batch": b, "peak_mem_bytes": float(b * 4 * s * s * 4)})
        rows.append({"variant": "sdpa", "seq": s, "batch": b, "peak_mem_bytes": float(b * 4 * s * 64 * 4 * 3)})
    frame = pl.DataFrame(rows).with_columns(
        device=pl.lit("cpu"), dtype=pl.lit("fp32"), head_dim=pl.lit(64), causal=pl.lit(True), status=pl.lit("ok")
    )
    grow = {r["variant"]: r for r in art.memory_growth(frame).iter_rows(named=True)}
    assert grow["naive"]["exponent"] == pytest.approx(2.0)
    assert grow["sdpa"]["exponent"] == pytest.approx(1.0)
    # at seq 512 (batch 2): naive 2*4*512*512*4, sdpa 2*4*512*64*4*3 -> 512 / 192
    assert grow["sdpa"]["naive_ratio"] == pytest.approx(512 / 192)


def test_the_sweep_tab_names_a_folder_under_the_working_folder_by_its_relative_path(tmp_path, monkeypatch):
    from dashboard.views.sweep import shown_path

    (tmp_path / "sample_traces" / "article-cpu").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert shown_path(tmp_path / "sample_traces" / "article-cpu") == "sample_traces/article-cpu"
    assert shown_path(Path("/elsewhere/article-gpu")) == "/elsewhere/article-gpu"


def test_the_tflops_axis_reads_plain_decimals_not_si_prefixes(folder):
    from dashboard import article_charts

    a = art.read_article(folder)
    fig = article_charts.tflops_vs_seq(a.sweep, article_charts.variant_colors(a.sweep["variant"].to_list()), "t", None)
    assert fig.layout.yaxis.tickformat == "~g"  # 0.1 TFLOP/s reads 0.1, not "100m"


def test_error_rows_read_and_show_as_errors_not_as_unavailable(tmp_path, capsys):
    """The collectors' `error` status (a variant that failed, collectors.measure.outcome): every
    table shows the row's own status, and no answer is drawn from it."""
    failed = {**sweep_rows()[1], "variant": "flex", "backend_ran": "", "status": "error", "time_ms": ""}
    failed["reason"] = "TypeError: flex_attention() got an unexpected keyword argument 'scale'"
    write_csv(tmp_path / "sweep.csv", [*sweep_rows(), failed], SWEEP_COLUMNS)
    e2e_columns = [*tables.E2E.read, "status", "reason"]
    e2e = [
        dict(zip(("variant", "phase", "step_ms", "attention_ms", "attention_share"), r[:5]), status="ok") for r in E2E
    ]
    e2e.append(dict(variant="flex", phase="prefill", status="error", reason=failed["reason"]))
    write_csv(tmp_path / "e2e.csv", e2e, e2e_columns)
    write_csv(
        tmp_path / "serve.csv",
        [dict(variant="packed_flex", tokens=1000, status="error", reason="TypeError: x")],
        [*tables.SERVE.read, "status", "reason"],
    )
    assert cli(["sweep", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "sweep: 1 error, 12 ok, 1 oom, 4 refused (points x variants)" in out
    assert re.search(r"^\s+flex\s+error\s*$", out, re.M)  # the seq-64 cell of the time table
    assert re.search(r"^\s+prefill\s+flex\s+error\s", out, re.M) and re.search(r"^\s+packed_flex\s+error\s", out, re.M)
    assert "unavailable" not in out


BUNDLED = Path(__file__).resolve().parent.parent / "sample_traces" / "article-cpu"


@pytest.mark.parametrize("table", list(tables.TABLES.values()), ids=lambda t: t.name)
def test_the_bundled_article_folder_keeps_the_collectors_column_contract(table):
    """Each file `python -m collectors article` wrote has the columns of its collectors.tables.Table in
    order, its .json gives them the Table's types (the meanings have grown since it was written), and the
    dashboard reads the columns it needs with those types."""
    with open(BUNDLED / table.csv, newline="") as fh:
        assert next(csv.reader(fh)) == list(table.columns)
    described = json.loads((BUNDLED / f"{table.name}.json").read_text())["columns"]
    assert {c: d["type"] for c, d in described.items()} == {c: str(kind) for c, kind in table.schema.items()}
    frame = getattr(art.read_article(BUNDLED), table.name)
    for column in table.read:
        kind = table.columns[column][0]
        assert frame.schema[column].is_numeric() if kind.is_numeric() else frame.schema[column] == kind, column


def test_the_seqs_where_a_difference_is_inside_the_noise_are_those_where_the_p10_p90_bands_overlap():
    """On the bundled CPU sweep, read with the csv module: at each seq a variant and naive both ran,
    the bands [p10, p90] overlap or they do not; the crossover rows and their words name exactly those."""
    with open(BUNDLED / "sweep.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    ok = [r for r in rows if r["status"] == "ok" and float(r["time_ms"]) > 0]
    key = lambda r: (r["device"], r["dtype"], int(r["head_dim"]), r["causal"] == "true")  # noqa: E731
    naive = {(key(r), int(r["seq"])): r for r in ok if r["variant"] == "naive"}
    want: dict[tuple, list[int]] = {}
    for r in sorted(ok, key=lambda r: int(r["seq"])):
        base = naive.get((key(r), int(r["seq"])))
        if r["variant"] == "naive" or base is None:
            continue
        inside = float(r["time_ms_p10"]) <= float(base["time_ms_p90"]) and float(base["time_ms_p10"]) <= float(
            r["time_ms_p90"]
        )
        want.setdefault((*key(r), r["variant"]), [])
        if inside:
            want[(*key(r), r["variant"])].append(int(r["seq"]))
    a = art.read_article(BUNDLED)
    got = {
        (r["device"], r["dtype"], r["head_dim"], r["causal"], r["variant"]): r["noise_seqs"]
        for r in art.crossovers(a.sweep).iter_rows(named=True)
    }
    assert got == want
    compared = sum(1 for r in ok if r["variant"] != "naive" and (key(r), int(r["seq"])) in naive)
    assert 0 < sum(map(len, want.values())) < compared  # the CPU sweep has differences inside the noise and outside
    from dashboard.article_report import crossover_words

    for row in art.crossovers(a.sweep).iter_rows(named=True):
        said = crossover_words(row)
        assert ("inside the p10-p90 noise" in said) == bool(row["noise_seqs"])


def test_an_end_to_end_gain_is_inside_the_noise_exactly_where_its_p10_p90_step_times_overlap_naives():
    """On the bundled CPU e2e.csv, read with the csv module: each variant's [p10, p90] step times
    against naive's in the same phase overlap or they do not; the table's in_noise and the findings'
    words say exactly that."""
    with open(BUNDLED / "e2e.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["status"] == "ok"]
    naive = {r["phase"]: r for r in rows if r["variant"] == "naive"}
    want = {
        (r["variant"], r["phase"]): float(r["step_ms_p10"]) <= float(naive[r["phase"]]["step_ms_p90"])
        and float(naive[r["phase"]]["step_ms_p10"]) <= float(r["step_ms_p90"])
        for r in rows
        if r["variant"] != "naive"
    }
    assert want
    a = art.read_article(BUNDLED)
    got = {(r["variant"], r["phase"]): r["in_noise"] for r in art.e2e_table(a.e2e).iter_rows(named=True)}
    assert {k: v for k, v in got.items() if k[0] != "naive"} == want
    assert all(v is None for k, v in got.items() if k[0] == "naive")
    lines = [line for line in article_report.findings(a) if line.startswith("end to end")]
    for (variant, phase), inside in want.items():
        line = next(line for line in lines if line.startswith(f"end to end, {phase}: {variant} "))
        assert ("inside the noise" in line) == inside and ("outside the noise" in line) == (not inside)


def test_an_e2e_csv_without_bands_never_calls_a_gain_noise():
    frame = pl.DataFrame(
        {
            "variant": ["naive", "sdpa"],
            "phase": ["prefill", "prefill"],
            "speedup_vs_naive": [1.0, 1.25],
            "amdahl_predicted_speedup": [1.0, 1.25],
        }
    )
    assert art.e2e_table(frame)["in_noise"].to_list() == [None, None]
    banded = frame.with_columns(
        pl.Series("step_ms_p10", [10.0, 9.0]), pl.Series("step_ms_p90", [12.0, 9.9])
    )  # by hand: [9.0, 9.9] and [10.0, 12.0] do not overlap
    assert art.e2e_table(banded)["in_noise"].to_list() == [None, False]
    touching = banded.with_columns(pl.Series("step_ms_p90", [12.0, 10.0]))  # [9.0, 10.0] touches 10.0: overlap
    assert art.e2e_table(touching)["in_noise"].to_list() == [None, True]

"""`python -m collectors sweep` on the CPU: the table's columns against hand computation, peak memory
that grows like the scores matrix for naive attention only, refusals and out-of-memory points as
rows, determinism, and the one-line error for bad input.

The sweep runs once per module (two sequence lengths, fp32, head_dim 64, batch 1, 4 heads, both
causal settings, every variant but flex); the CSV is read back with the csv module."""

from __future__ import annotations

import contextlib
import csv
import importlib
import io
import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Callable

import polars as pl
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from collectors import measure
from collectors.sweep import main
from collectors.tables import SWEEP
from collectors.variants import VARIANTS as ALL_VARIANTS
from collectors.variants import Unavailable, Variant

VARIANTS = ["naive", "naive_inplace", "sdpa", "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "hub"]
ARGS = [
    "--device",
    "cpu",
    "--seq",
    "64",
    "256",
    "--head-dim",
    "64",
    "--dtype",
    "fp32",
    "--batch",
    "1",
    "--heads",
    "4",
    "--variants",
    ",".join(VARIANTS),
    "--warmup",
    "1",
]
B, H, D = 1, 4, 64
EXPECTED_COLUMNS = list(SWEEP.columns)  # the contract (collectors.tables), read by the dashboard
TIMING = {"time_ms", "time_ms_p10", "time_ms_p90", "tflops"}


def run(argv: list[str]) -> tuple[int, str, str]:
    """main(argv) in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("sweep")
    status, stdout, _ = run([*ARGS, "--out", str(out)])
    assert status == 0
    return out, stdout


@pytest.fixture(scope="module")
def rows(swept: tuple[Path, str]) -> list[dict[str, str]]:
    return read_csv(swept[0] / "sweep.csv")[1]


def cell(rows: list[dict[str, str]], variant: str, seq: int, causal: bool) -> dict[str, str]:
    (hit,) = [
        r for r in rows if r["variant"] == variant and r["seq"] == str(seq) and r["causal"] == str(causal).lower()
    ]
    return hit


def test_csv_has_the_columns_in_order_and_one_row_per_point_and_variant_sorted(swept):
    header, rows = read_csv(swept[0] / "sweep.csv")
    assert header == EXPECTED_COLUMNS
    expected_order = [(c, s, v) for c in ("false", "true") for s in ("64", "256") for v in VARIANTS]
    assert [(r["causal"], r["seq"], r["variant"]) for r in rows] == expected_order
    assert {(r["device"], r["dtype"], r["batch"], r["heads"], r["head_dim"]) for r in rows} == {
        ("cpu", "fp32", "1", "4", "64")
    }


def test_flops_and_scores_bytes_match_hand_computation(rows):
    for r in rows:
        s = int(r["seq"])
        dense = 4 * B * H * s * s * D
        assert int(r["flops"]) == (dense // 2 if r["causal"] == "true" else dense)
        assert int(r["scores_bytes"]) == B * H * s * s * 4  # fp32: 4 bytes per score
    assert int(cell(rows, "sdpa", 256, False)["flops"]) == 67_108_864  # 4*1*4*256*256*64
    assert int(cell(rows, "sdpa", 256, True)["flops"]) == 33_554_432


def test_tflops_come_from_the_median_time_and_quantiles_are_ordered(rows):
    ran = [r for r in rows if r["status"] == "ok"]
    assert len(ran) == 2 * 2 * 5  # naive, naive_inplace, sdpa, sdpa-math, sdpa-flash at 4 points
    for r in ran:
        t = float(r["time_ms"])
        assert 0 < float(r["time_ms_p10"]) <= t <= float(r["time_ms_p90"])
        assert int(r["reps"]) == 10
        assert float(r["tflops"]) == pytest.approx(int(r["flops"]) / (t / 1000) / 1e12, rel=1e-9)


def test_naive_peak_memory_holds_the_scores_twice_and_grows_like_seq_squared_sdpa_does_not(rows):
    for causal in (False, True):
        for s in (64, 256):
            naive = cell(rows, "naive", s, causal)
            # `scores * scale` allocates a second [B, H, S, S] tensor while the first is alive
            assert int(naive["peak_mem_bytes"]) >= 2 * B * H * s * s * 4
        naive_growth = int(cell(rows, "naive", 256, causal)["peak_mem_bytes"]) / int(
            cell(rows, "naive", 64, causal)["peak_mem_bytes"]
        )
        sdpa_growth = int(cell(rows, "sdpa", 256, causal)["peak_mem_bytes"]) / int(
            cell(rows, "sdpa", 64, causal)["peak_mem_bytes"]
        )
        assert naive_growth >= 8  # (256/64)^2 = 16 for the scores, diluted by the S-linear output
        assert sdpa_growth < naive_growth / 2
        assert int(cell(rows, "sdpa", 256, causal)["peak_mem_bytes"]) < B * H * 256 * 256 * 4  # never the scores


def test_backend_ran_is_what_the_profiler_saw(rows):
    expected = {
        "naive": "eager",
        "naive_inplace": "eager",
        "sdpa": "cpu_flash",
        "sdpa-math": "math",
        "sdpa-flash": "cpu_flash",
    }
    for r in rows:
        if r["variant"] in expected:
            assert r["backend_ran"] == expected[r["variant"]], r
    q = torch.randn(B, H, 64, D)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
    ops = {e.name for e in prof.events() if e.name.startswith("aten::_scaled_dot_product")}
    assert cell(rows, "sdpa", 64, True)["evidence"] in ops


def test_forced_backends_cpu_cannot_run_are_refused_with_pytorchs_text(rows):
    q = torch.randn(B, H, 64, D)
    with pytest.raises(RuntimeError) as raised, sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        F.scaled_dot_product_attention(q, q, q)
    pytorch_says = str(raised.value).strip()
    for variant in ("sdpa-efficient", "sdpa-cudnn"):
        for r in (x for x in rows if x["variant"] == variant):
            assert r["status"] == "refused"
            assert pytorch_says in r["reason"]
            assert r["time_ms"] == "" and r["backend_ran"] == ""


def test_hub_on_cpu_is_unavailable_with_its_reason(rows):
    for r in (x for x in rows if x["variant"] == "hub"):
        assert r["status"] == "unavailable"
        assert "CUDA" in r["reason"]


def test_every_variant_that_ran_agrees_with_fp32(rows):
    for r in rows:
        if r["status"] == "ok":
            assert float(r["parity_max_abs"]) < 1e-4


def test_stdout_prints_a_table_of_what_ran(swept):
    lines = swept[1].splitlines()
    assert lines[0].split()[:2] == ["variant", "dtype"]
    assert len(lines) == 1 + 2 * 2 * len(VARIANTS) + 1
    assert "32 rows" in lines[-1]


def test_parquet_and_json_describe_the_same_table(swept, rows):
    out = swept[0]
    frame = pl.read_parquet(out / "sweep.parquet")
    assert frame.columns == EXPECTED_COLUMNS
    assert frame["status"].to_list() == [r["status"] for r in rows]
    assert frame.schema["flops"] == pl.Int64 and frame.schema["causal"] == pl.Boolean
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["torch_version"] == torch.__version__
    assert meta["device"] == "cpu" and meta["reps"] == 10
    assert meta["grid"]["seq"] == [64, 256] and meta["grid"]["causal"] == [False, True]
    assert list(meta["columns"]) == EXPECTED_COLUMNS
    assert "4 * batch * heads * seq^2 * head_dim" in meta["flop_convention"] and "half" in meta["flop_convention"]
    assert "linear" in meta["quantile_method"]
    assert meta["command"].startswith("python -m collectors sweep")
    assert meta["statuses"] == {"ok": 20, "refused": 8, "oom": 0, "parity_failed": 0, "unavailable": 4, "error": 0}


def test_a_rerun_gives_the_same_rows_except_the_timing(swept, rows, tmp_path):
    assert run([*ARGS, "--out", str(tmp_path)])[0] == 0
    again = read_csv(tmp_path / "sweep.csv")[1]
    strip = lambda rs: [{k: v for k, v in r.items() if k not in TIMING} for r in rs]  # noqa: E731
    assert strip(again) == strip(rows)


def test_out_of_memory_under_a_cap_is_a_row_and_the_sweep_goes_on(tmp_path):
    limit_before = resource.getrlimit(resource.RLIMIT_AS)
    cap = 4 * 2**20  # 4 MiB: naive's 1024x1024 scores (16 MiB) cannot fit, seq 64 can
    # in a process of its own: this test process's allocator may hold freed arenas from earlier tests,
    # and an allocation served from them never meets the address-space cap
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "collectors",
            "sweep",
            "--device",
            "cpu",
            "--seq",
            "64",
            "1024",
            "--head-dim",
            "64",
            "--dtype",
            "fp32",
            "--batch",
            "1",
            "--heads",
            "4",
            "--variants",
            "naive",
            "sdpa",
            "--warmup",
            "1",
            "--memory-cap",
            str(cap),
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert resource.getrlimit(resource.RLIMIT_AS) == limit_before
    _, got = read_csv(tmp_path / "sweep.csv")
    by_key = {(r["causal"], r["seq"], r["variant"]): r for r in got}
    for causal in ("false", "true"):
        oom = by_key[(causal, "1024", "naive")]
        assert oom["status"] == "oom"
        assert str(1 * 4 * 1024 * 1024 * 4) in oom["reason"]  # the scores matrix Q·Kᵀ asks for, in bytes
        assert oom["time_ms"] == ""
    # in run order, the point after the first oom (sdpa at 1024, then naive at 64 causal) still ran
    assert by_key[("false", "1024", "sdpa")]["status"] == "ok"
    assert by_key[("true", "64", "naive")]["status"] == "ok"


def test_default_batch_and_heads_follow_flashattentions_convention(tmp_path):
    status, _, _ = run(
        [
            "--device",
            "cpu",
            "--seq",
            "128",
            "--head-dim",
            "64",
            "--dtype",
            "fp32",
            "--variants",
            "sdpa",
            "--causal",
            "--out",
            str(tmp_path),
        ]
    )
    assert status == 0
    (row,) = read_csv(tmp_path / "sweep.csv")[1]
    assert (row["batch"], row["heads"], row["causal"]) == (str(1024 // 128), str(256 // 64), "true")
    meta = json.loads((tmp_path / "sweep.json").read_text())
    assert meta["grid"]["batch"] == "max(1, 1024 // seq)" and meta["grid"]["heads"] == "max(1, 256 // head_dim)"


def test_help_states_the_batch_heads_convention():
    status, out, _ = run(["--help"])
    assert status == 0
    assert "max(1, T // seq)" in out and "--memory-cap" in out and "--no-causal" in out


@pytest.mark.parametrize(
    "bad",
    [
        ["--seq", "0"],
        ["--dtype", "fp8"],
        ["--variants", "bogus"],
        ["--reps", "9"],
        ["--memory-cap", "-1"],
        ["--device", "cuda"] if not torch.cuda.is_available() else ["--head-dim", "x"],
        [],
    ],
)
def test_bad_input_exits_2_with_one_line(bad, tmp_path):
    argv = [*bad, "--out", str(tmp_path)] if bad else []
    status, out, err = run(argv)
    assert status == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("python -m collectors sweep: error: ")


def test_bad_input_from_the_command_line_has_no_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "collectors", "sweep", "--reps", "5", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if not line.startswith(("USDT:", "STAGE:"))]
    assert lines == ["python -m collectors sweep: error: argument --reps: must be at least 10: 5"]


TINY_FLEX = [
    "--device",
    "cpu",
    "--seq",
    "32",
    "--head-dim",
    "16",
    "--dtype",
    "fp32",
    "--batch",
    "1",
    "--heads",
    "1",
    "--variants",
    "flex",
    "--causal",
    "--warmup",
    "1",
]


def skip_only_if_known_unavailable(row: dict[str, str]) -> None:
    """Skip on a named, known unavailability (measure.KNOWN_UNAVAILABLE, e.g. no C++ compiler for
    inductor here); any other status but ok fails the test with the row's reason."""
    if row["status"] == "unavailable" and row["reason"].startswith(tuple(k.what for k in measure.KNOWN_UNAVAILABLE)):
        pytest.skip(row["reason"])
    assert row["status"] == "ok", row["reason"]


def test_flex_runs_one_tiny_point(tmp_path):
    status, _, _ = run([*TINY_FLEX, "--out", str(tmp_path)])
    assert status == 0
    (row,) = read_csv(tmp_path / "sweep.csv")[1]
    skip_only_if_known_unavailable(row)
    assert (row["status"], row["backend_ran"]) == ("ok", "flex")
    assert float(row["parity_max_abs"]) < 1e-4


# ---------- a failing variant fails: error rows, and unavailable only for a known reason


def _failing(error: Callable[[], Exception]) -> Variant:
    """A flex variant whose call raises error() (its bind succeeds, as flex's does)."""

    def bind(q, causal=True):
        def call(q, k, v):
            raise error()

        return call

    return Variant("flex", "flex", bind)


def _missing_package() -> Exception:
    try:
        importlib.import_module("attnscope_no_such_package")
    except ImportError as exc:
        return exc
    raise AssertionError("attnscope_no_such_package imported")


def test_a_variant_that_raises_a_type_error_is_an_error_row_not_unavailable(tmp_path, monkeypatch):
    monkeypatch.setitem(ALL_VARIANTS, "flex", _failing(lambda: TypeError("flex_attention() got an unexpected keyword")))
    status, stdout, _ = run([*TINY_FLEX, "--out", str(tmp_path)])
    assert status == 1  # the table is written, and the run fails: an error is a bug, not a skip
    (row,) = read_csv(tmp_path / "sweep.csv")[1]
    assert (row["status"], row["reason"]) == ("error", "TypeError: flex_attention() got an unexpected keyword")
    assert row["time_ms"] == "" and row["backend_ran"] == ""
    assert json.loads((tmp_path / "sweep.json").read_text())["statuses"]["error"] == 1
    assert "(error 1)" in stdout.splitlines()[-1]


def test_a_missing_package_is_unavailable_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setitem(ALL_VARIANTS, "flex", _failing(_missing_package))
    assert run([*TINY_FLEX, "--out", str(tmp_path)])[0] == 0
    (row,) = read_csv(tmp_path / "sweep.csv")[1]
    assert row["status"] == "unavailable"
    assert row["reason"] == "a package is missing: ModuleNotFoundError: No module named 'attnscope_no_such_package'"


@pytest.mark.parametrize(
    ("exc", "forced", "status", "reason"),
    [
        (TypeError("bad"), False, "error", "TypeError: bad"),
        (ValueError("bad"), True, "error", "ValueError: bad"),
        (RuntimeError("shape mismatch"), False, "error", "RuntimeError: shape mismatch"),
        (Unavailable("ships CUDA builds only"), False, "unavailable", "ships CUDA builds only"),
        (ImportError("cannot import name 'x'"), False, "unavailable", "a package is missing: ImportError: "),
        (
            RuntimeError("No viable backend for scaled_dot_product_attention was found."),
            False,
            "unavailable",
            "no attention backend for this device, dtype or input: RuntimeError: No viable backend",
        ),
        (RuntimeError("No available kernel.  Aborting execution."), False, "unavailable", "no attention backend"),
        (RuntimeError("No viable backend for scaled_dot_product_attention was found."), True, "refused", "No viable"),
        (RuntimeError("Python 3.15+ not yet supported for torch.compile"), False, "unavailable", "torch.compile: "),
        (
            RuntimeError(
                "out of resource: shared memory, Required: 262144, Hardware limit: 232448. "
                "Reducing block sizes or `num_stages` may help."
            ),
            False,
            "unavailable",
            "torch.compile: the generated kernel needs more",
        ),
        (MemoryError(), False, "oom", "out of memory"),
    ],
)
def test_outcome_names_only_known_unavailability(exc, forced, status, reason):
    got = measure.outcome(exc, forced=forced)
    assert got[0] == status and got[1].startswith(reason)


def test_a_compiler_failure_is_unavailable_only_when_the_compiler_is_missing():
    from torch._dynamo.exc import BackendCompilerFailed
    from torch._inductor.exc import InvalidCxxCompiler

    missing = BackendCompilerFailed(lambda: None, InvalidCxxCompiler(), None)
    assert measure.outcome(missing)[0] == "unavailable"
    assert measure.outcome(missing)[1].startswith("torch.compile: no working C++ compiler: BackendCompilerFailed")
    bug = BackendCompilerFailed(lambda: None, TypeError("lowering got a str"), None)
    assert measure.outcome(bug)[0] == "error"
    # an error raised while handling an ImportError is still an error (__context__ is not followed)
    try:
        try:
            raise _missing_package()
        except ImportError:
            raise TypeError("fallback broke") from None
    except TypeError as exc:
        assert measure.outcome(exc) == ("error", "TypeError: fallback broke")

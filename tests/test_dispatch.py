"""`python -m collectors dispatch` on the CPU: which backend SDPA's default dispatch ran per cell,
checked against an independent profile, the silent fallback to math, the forced backends'
refusals in PyTorch's words, and the one-line error for bad input. The map runs once per module
(fp32 and bf16, head_dim 64 and 512, every mask kind, GQA off and on); the CSV is read back with
the csv module."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from collectors import measure
from collectors.dispatch import main
from collectors.tables import DISPATCH

ARGS = ["--device", "cpu", "--dtype", "fp32", "bf16", "--head-dim", "64", "512"]
MASKS = ["causal", "none", "bool", "additive", "dropout"]
EXPECTED_COLUMNS = list(DISPATCH.columns)  # the contract (collectors.tables), read by the dashboard
REFUSALS = re.compile(r"^flash: (?P<flash>.*); efficient: (?P<efficient>.*); cudnn: (?P<cudnn>.*)$")


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


@pytest.fixture(scope="module")
def mapped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dispatch")
    assert run([*ARGS, "--out", str(out)])[0] == 0
    return out


@pytest.fixture(scope="module")
def rows(mapped: Path) -> list[dict[str, str]]:
    return read_csv(mapped / "dispatch.csv")[1]


def cell(rows, dtype: str, head_dim: int, mask: str, gqa: bool) -> dict[str, str]:
    (hit,) = [
        r
        for r in rows
        if (r["dtype"], r["head_dim"], r["mask"], r["gqa"]) == (dtype, str(head_dim), mask, str(gqa).lower())
    ]
    return hit


def sdpa_ops(q, k, v, **kwargs) -> set[str]:
    """The aten::_scaled_dot_product_* ops one profiled call ran (the public entry point left out)."""
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        F.scaled_dot_product_attention(q, k, v, **kwargs)
    return {e.name for e in prof.events() if e.name.startswith("aten::_scaled_dot_product")}


def test_csv_has_the_columns_and_one_row_per_cell_in_order(mapped):
    header, got = read_csv(mapped / "dispatch.csv")
    assert header == EXPECTED_COLUMNS
    order = [(d, h, m, g) for d in ("bf16", "fp32") for h in ("64", "512") for m in MASKS for g in ("false", "true")]
    assert [(r["dtype"], r["head_dim"], r["mask"], r["gqa"]) for r in got] == order


def test_the_map_agrees_with_an_independent_profile_of_the_same_cell(rows):
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 128, 64, generator=gen)
    kv = torch.randn(1, 2, 128, 64, generator=gen)
    causal_ops = sdpa_ops(q, kv, kv, is_causal=True, enable_gqa=True)
    assert causal_ops == {"aten::_scaled_dot_product_flash_attention_for_cpu"}
    row = cell(rows, "fp32", 64, "causal", True)
    assert (row["backend_ran"], row["kernel"]) == ("cpu_flash", *causal_ops)
    dropout_ops = sdpa_ops(q, q, q, dropout_p=0.1)
    assert dropout_ops == {"aten::_scaled_dot_product_attention_math"}
    row = cell(rows, "fp32", 64, "dropout", False)
    assert (row["backend_ran"], row["kernel"], row["fallback"]) == ("math", *dropout_ops, "true")


def test_fallback_marks_exactly_the_cells_where_math_ran(rows):
    for r in rows:
        assert r["fallback"] == ("true" if r["backend_ran"] == "math" else "false")
        assert r["backend_ran"] in {"cpu_flash", "math"} and r["error"] == ""
    # on the CPU only dropout pushes SDPA off its fused kernel
    assert {r["mask"] for r in rows if r["fallback"] == "true"} == {"dropout"}


def test_refusals_are_pytorchs_text_in_a_fixed_order(rows):
    q = torch.randn(1, 4, 128, 64)
    said = {}
    for name, backend in (("efficient", SDPBackend.EFFICIENT_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        with pytest.raises(RuntimeError) as raised, sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, q, q)
        said[name] = str(raised.value).strip()
    for r in rows:
        parts = REFUSALS.match(r["refusals"])
        assert parts, r["refusals"]
        assert parts["efficient"].startswith(said["efficient"])
        assert parts["cudnn"].startswith(said["cudnn"])
        if r["mask"] == "dropout":  # forced flash cannot take dropout on the CPU, and says why
            assert "dropout" in parts["flash"]
        else:
            assert parts["flash"] == ""


def test_json_has_the_provenance(mapped):
    meta = json.loads((mapped / "dispatch.json").read_text())
    assert meta["torch_version"] == torch.__version__ and meta["device"] == "cpu"
    assert meta["shape"] == {"batch": 1, "heads": 4, "kv_heads_gqa": 2, "seq": 128}
    assert meta["grid"] == {"dtype": ["bf16", "fp32"], "head_dim": [64, 512], "mask": MASKS, "gqa": [False, True]}
    assert list(meta["columns"]) == EXPECTED_COLUMNS
    assert meta["forced_order"] == ["flash", "efficient", "cudnn"]
    assert meta["rows"] == 2 * 2 * 5 * 2 and meta["fallbacks"] == 2 * 2 * 2


def test_a_rerun_gives_the_same_rows(rows, tmp_path):
    assert run(["--device", "cpu", "--dtype", "fp32", "--head-dim", "512", "--out", str(tmp_path)])[0] == 0
    again = read_csv(tmp_path / "dispatch.csv")[1]
    assert again == [r for r in rows if r["dtype"] == "fp32" and r["head_dim"] == "512"]


def test_the_backend_names_are_the_dashboards():
    from dashboard.engine.analyses.backends import attention_backend

    names = [
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_scaled_dot_product_attention_math",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false, false, "
        "cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 64, 4, cutlass::bfloat16_t> >, false, true>"
        "(pytorch_flash::Flash_fwd_params)",
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
        "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
        "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x64_4x1x1_kernel0_0",
    ]
    for name in names:
        assert measure.backend_ran([name], "default") == (attention_backend(name).name, name)


@pytest.mark.parametrize(
    "bad",
    [
        ["--kv-heads", "3"],
        ["--mask", "sliding"],
        ["--head-dim", "0"],
        ["--gqa", "maybe"],
        ["--dtype", "int8"],
        [],
    ],
)
def test_bad_input_exits_2_with_one_line(bad, tmp_path):
    status, out, err = run([*bad, "--out", str(tmp_path)] if bad else [])
    assert status == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("python -m collectors dispatch: error: ")


def test_bad_input_from_the_command_line_has_no_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "collectors", "dispatch", "--heads", "4", "--kv-heads", "3", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["python -m collectors dispatch: error: --kv-heads 3 must divide --heads 4"]

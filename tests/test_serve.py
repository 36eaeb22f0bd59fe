"""`python -m collectors serve`: a mix of known request lengths on the CPU; padding waste, cost and
parity checked against hand computations, serve.csv read back with the csv module."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from collectors import serve
from collectors.__main__ import main
from collectors.tables import SERVE
from dashboard.engine.compare.speed import DEFAULT_USD_PER_GPU_HOUR

LENGTHS = [5, 3, 8, 2, 7]  # batches of 2: [5, 3] [8, 2] [7]
PADDED = 2 * 5 + 2 * 8 + 1 * 7  # 33 positions computed when each batch is padded to its longest
TOKENS = 25
COLUMNS = list(SERVE.columns)  # the contract (collectors.tables), read by the dashboard


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One serve run over LENGTHS (the only FlexAttention compile in these tests)."""
    root = tmp_path_factory.mktemp("serve")
    lengths = root / "lengths.csv"
    lengths.write_text("request,length\n" + "".join(f"r{i},{n}\n" for i, n in enumerate(LENGTHS)))
    out = root / "out"
    assert (
        main(
            [
                "serve",
                "--device",
                "cpu",
                "--lengths-csv",
                str(lengths),
                "--batch",
                "2",
                "--heads",
                "2",
                "--head-dim",
                "8",
                "--reps",
                "3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


def rows(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "serve.csv", newline="") as fh:
        return {r["variant"]: r for r in csv.DictReader(fh)}


def test_columns_and_rows_in_order(run: Path) -> None:
    with open(run / "serve.csv", newline="") as fh:
        table = list(csv.reader(fh))
    assert table[0] == COLUMNS
    assert [r[0] for r in table[1:]] == ["padded_sdpa", "packed_njt_sdpa", "packed_flex", "per_request_sdpa"]


def test_padding_waste_by_hand(run: Path) -> None:
    got = rows(run)
    for variant, r in got.items():
        assert int(r["requests"]) == 5 and int(r["tokens"]) == TOKENS
    assert int(got["padded_sdpa"]["computed_tokens"]) == PADDED
    assert float(got["padded_sdpa"]["padding_waste"]) == pytest.approx(1 - 25 / 33)  # 8 padded of 33
    for packed in ("packed_njt_sdpa", "packed_flex", "per_request_sdpa"):
        assert int(got[packed]["computed_tokens"]) == TOKENS and float(got[packed]["padding_waste"]) == 0
    assert int(got["padded_sdpa"]["batches"]) == 3 and int(got["per_request_sdpa"]["batches"]) == 5


def test_cost_and_throughput_recomputed(run: Path) -> None:
    for variant, r in rows(run).items():
        assert float(r["usd_per_gpu_hour"]) == DEFAULT_USD_PER_GPU_HOUR == 2.0
        if r["status"] != "ok":
            continue
        t = float(r["time_s"])
        assert 0 < t < 60 and int(r["reps"]) == 3
        assert float(r["tokens_per_s"]) == pytest.approx(TOKENS / t, rel=1e-9)
        assert float(r["usd_per_1m_tokens"]) == pytest.approx(2.0 / 3600 * t / TOKENS * 1e6, rel=1e-9)


def test_padded_and_packed_agree_with_per_request(run: Path) -> None:
    got = rows(run)
    for variant in ("padded_sdpa", "packed_flex", "per_request_sdpa"):
        assert got[variant]["status"] == "ok", got[variant]
        assert float(got[variant]["parity_max_abs"]) <= 1e-5
    njt = got["packed_njt_sdpa"]  # PyTorch has no causal nested-tensor SDPA on the CPU: a known unavailability
    assert njt["status"] == "unavailable" and "is_causal=True" in njt["reason"]
    assert njt["reason"].startswith("no attention backend for this device, dtype or input: RuntimeError: No viable")
    assert njt["time_s"] == njt["usd_per_1m_tokens"] == ""


def test_provenance_lists_the_lengths(run: Path) -> None:
    info = json.loads((run / "serve.json").read_text())
    assert info["lengths"] == LENGTHS and info["lengths_source"]["kind"] == "csv"
    assert info["lengths_summary"]["tokens"] == TOKENS and info["lengths_summary"]["max"] == 8
    assert (
        info["device"] == "cpu"
        and info["usd_per_gpu_hour"] == 2.0
        and info["command"].startswith("python -m collectors serve ")
    )


def test_padded_outputs_are_each_requests_own_attention() -> None:
    """An independent oracle: softmax(q k^T / sqrt(d), causal) v per request, written out here."""
    lengths = (4, 1, 6)
    cfg_reqs = []
    gen = torch.Generator().manual_seed(1)
    for n in lengths:
        cfg_reqs.append(tuple(torch.randn(3, n, 4, generator=gen) for _ in range(3)))
    prepared = serve.prepare_padded(cfg_reqs, lengths, batch=2)
    outs = prepared.split(prepared.run())
    for (q, k, v), out in zip(cfg_reqs, outs):
        n = q.shape[1]
        scores = q @ k.transpose(-2, -1) / 2.0  # sqrt(4)
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        assert torch.allclose(out, torch.softmax(scores, -1) @ v, atol=1e-6)


def test_a_disagreeing_output_fails_parity() -> None:
    ref = [torch.zeros(2, 3, 4)]
    assert serve.parity([torch.zeros(2, 3, 4)], ref, torch.float32) == (0.0, True)
    off, passed = serve.parity([torch.full((2, 3, 4), 0.01)], ref, torch.float32)
    assert off == pytest.approx(0.01) and not passed


def test_lengths_files_and_the_lognormal_draw(tmp_path: Path) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text("12\n7\n\n30\n")
    assert serve.read_lengths(plain) == [12, 7, 30]
    drawn = serve.lognormal_lengths(200, mean=64, sigma=0.8, lo=8, hi=256, seed=5)
    assert drawn == serve.lognormal_lengths(200, mean=64, sigma=0.8, lo=8, hi=256, seed=5)
    assert len(drawn) == 200 and min(drawn) >= 8 and max(drawn) <= 256
    assert 40 < sum(drawn) / len(drawn) < 90  # mean 64 before clipping
    assert serve.computed_tokens("padded_sdpa", (5, 3, 8, 2, 7), 2) == PADDED
    assert serve.computed_tokens("packed_flex", (5, 3, 8, 2, 7), 2) == TOKENS
    assert math.isclose(serve.summary([1, 2, 3, 10])["p90"], 3 + 0.7 * 7)


@pytest.mark.parametrize(
    "content, extra, says",
    [
        ("length\n5\nabc\n", [], "row 3: not an integer length: 'abc'"),
        ("size\n5\n", [], "no `length` column"),
        ("5\n0\n", [], "at least 1"),
        ("5\n", ["--requests", "3"], "drop --requests"),
        (None, ["--min-len", "50", "--max-len", "10"], "--min-len 50 is above --max-len 10"),
        (None, ["--reps", "2"], "--reps"),
        (None, ["--usd-per-gpu-hour", "-1"], "--usd-per-gpu-hour"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    content: str | None, extra: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--device", "cpu", *extra, "--out", str(tmp_path / "out")]
    if content is not None:
        (tmp_path / "l.csv").write_text(content)
        argv += ["--lengths-csv", str(tmp_path / "l.csv")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m collectors serve: error: ") and says in err[0]


def test_a_batching_that_fails_is_an_error_row_not_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A TypeError in a batching is a bug: status error with 'TypeName: message', never unavailable."""

    def broken(reqs, lengths, batch):
        raise TypeError("create_block_mask() missing 1 required positional argument: 'KV_LEN'")

    monkeypatch.setitem(serve.PREPARE, "packed_flex", broken)
    cfg = serve.build_config(["--device", "cpu", "--requests", "3", "--reps", "3", "--out", str(tmp_path)])
    row, outs = serve.run_batching(cfg, "packed_flex", serve.make_requests(cfg), None)
    assert outs is None and row["time_s"] is None
    assert (row["status"], row["reason"]) == (
        "error",
        "TypeError: create_block_mask() missing 1 required positional argument: 'KV_LEN'",
    )
    assert "error" in SERVE.statuses

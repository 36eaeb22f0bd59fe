"""The command line over the trace store: summary/compare/check reopen stored traces without
parsing (--no-store opts out), ingest adds files and folders of ranks, ls lists the catalog, a
folder's summary names the slowest rank of each step, and check gates attention efficiency."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import oracle
from dashboard import cli
from dashboard.engine.store import store as store_module

SOURCE = oracle.DATA / "hta_mi250_rocm_minitoy.json.gz"
QWEN = oracle.DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"
SLOW = {0: 1, 1: 2, 2: 3}  # kernel durations scaled per rank: rank 2 is the straggler


@pytest.fixture()
def job(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    for rank, factor in SLOW.items():
        doc = oracle.raw(SOURCE)
        doc["distributedInfo"] = {"rank": rank, "world_size": len(SLOW)}
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel":
                e["dur"] = e["dur"] * factor
        (folder / f"rank{rank}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return folder


# a collectors' trace too: its "attnscope" block's keys are not in alphabetical order
@pytest.mark.parametrize(
    "path",
    [QWEN, Path(__file__).resolve().parent.parent / "sample_traces" / "h200" / "naive.json.gz"],
    ids=["qwen", "h200-naive"],
)
def test_a_second_summary_reopens_from_the_store_without_parsing(tmp_path, capsys, monkeypatch, path):
    store = str(tmp_path / "store")
    assert cli.main(["summary", "--json", "--store", store, str(path)]) == 0
    first = capsys.readouterr().out

    def refuse(*args, **kwargs):
        raise AssertionError("parsed again")

    monkeypatch.setattr(store_module, "load_trace", refuse)
    assert cli.main(["summary", "--json", "--store", store, str(path)]) == 0
    assert capsys.readouterr().out == first  # byte-identical, from Parquet


def test_no_store_leaves_no_trace_behind(tmp_path, capsys):
    store = tmp_path / "store"
    assert cli.main(["summary", "--no-store", "--store", str(store), str(SOURCE)]) == 0
    assert not store.exists()


def test_ingest_a_folder_of_ranks_then_list_it_and_name_the_straggler(job, tmp_path, capsys):
    store = str(tmp_path / "store")
    assert cli.main(["ingest", "--store", store, str(job)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].split()[1:] == ["job", "(3", "ranks)"]
    assert cli.main(["ls", "--store", store]) == 0
    listing = capsys.readouterr().out.strip().splitlines()
    assert len(listing) == 1 and "  job  [cli; 3 ranks; AMD Radeon Graphics; " in listing[0]
    assert cli.main(["summary", "--store", store, str(job)]) == 0
    text = capsys.readouterr().out
    assert "3 ranks (0, 1, 2); the slowest rank of each step:" in text
    lines = text.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if "the slowest rank of each step" in line) + 2 :]
    first_step = oracle.step_spans(oracle.raw(SOURCE))[0][0].split("#")[1]  # the step with device work
    assert table[0].split()[:2] == [first_step, "2"]


def test_a_folder_holding_ranks_of_two_jobs_gets_no_rank_table(job, tmp_path, capsys):
    doc = json.loads(gzip.decompress((job / "rank2.json.gz").read_bytes()))
    doc["distributedInfo"] = {"rank": 2, "world_size": 8}  # rank 2 of another, 8-rank job
    (job / "rank2.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert cli.main(["summary", "--no-store", str(job)]) == 0
    assert "the slowest rank of each step" not in capsys.readouterr().out


def test_a_step_without_device_work_on_any_rank_has_no_spread(job, capsys):
    assert cli.main(["summary", "--no-store", str(job)]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if "the slowest rank of each step" in line) + 2 :]
    table = table[: next((i for i, line in enumerate(table) if not line.startswith("  ")), len(table))]
    idle = [row.split() for row in table if float(row.split()[2]) == 0.0]
    assert idle and all(row[4] == "-" for row in idle) and "nan" not in "\n".join(table)


def test_ingest_reports_an_unreadable_file_and_keeps_the_others(job, tmp_path, capsys):
    (job / "broken.json").write_text("{")
    assert cli.main(["ingest", "--store", str(tmp_path / "store"), str(job)]) == 2
    captured = capsys.readouterr()
    assert "broken.json" in captured.err and len(captured.out.strip().splitlines()) == 1


def test_check_gates_the_share_of_the_roofline(tmp_path, capsys):
    args = ["check", "--store", str(tmp_path / "store"), str(QWEN), str(QWEN)]
    assert cli.main([*args, "--min-attention-efficiency", "10"]) == 0
    capsys.readouterr()
    assert cli.main([*args, "--min-attention-efficiency", "30"]) == 1
    assert "attention reaches 19.4% of the roofline" in capsys.readouterr().out

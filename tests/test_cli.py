"""`attnscope summary` as CI and tools call it: a subprocess, JSON out, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import oracle

DATA = oracle.DATA


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dashboard", *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_summary_json_has_the_documented_keys_and_the_trace_numbers():
    names = ["tracelens_h100_bert_sdpa_flash.json.gz", "kineto_legacy_resnet50_v100.pt.trace.json.gz"]
    out = run("summary", "--json", *(str(DATA / n) for n in names))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert [r["source"] for r in result] == names
    for record, name in zip(result, names):
        doc = oracle.raw(DATA / name)
        assert {"source", "device", "events", "counts", "memcpy", "steps", "attention", "copies"} <= set(record)
        assert record["device"] == {"type": "cuda", "name": doc["deviceProperties"][0]["name"]}
        assert record["events"] == len(oracle.complete(doc))
        assert record["memcpy"] == dict(oracle.memcpy_kinds(doc))
        per_step = oracle.gpu_per_step(doc)
        assert [(s["name"], s["kernel"], s["gpu_memcpy"], s["gpu_memset"]) for s in record["steps"]] == [
            (n, c["kernel"], c["gpu_memcpy"], c["gpu_memset"]) for n, c in per_step.items()
        ]
        spans = {n: (end - start) for n, start, end in oracle.step_spans(doc)}
        for step in record["steps"]:
            assert abs(step["dur_us"] - spans[step["name"]]) < 0.01
        for copy in record["copies"]:
            assert {"kind", "op_chain", "count", "bytes"} <= set(copy)
    assert result[0]["attention"]["backends"] == ["flash"]
    assert "pytorch_flash::flash_fwd_kernel" in " ".join(result[0]["attention"]["evidence"])


def test_summary_human_form_names_each_file_and_its_steps():
    out = run("summary", str(DATA / "hta_mi250_rocm_minitoy.json.gz"))
    assert out.returncode == 0
    assert "hta_mi250_rocm_minitoy.json.gz" in out.stdout and "rocm" in out.stdout
    assert "ProfilerStep#1" in out.stdout and "ProfilerStep#2" in out.stdout


def test_bad_files_get_one_line_each_and_exit_2_while_good_files_still_print(tmp_path):
    (tmp_path / "notjson.json").write_text("hello")
    (tmp_path / "empty.json.gz").write_bytes(b"")
    (tmp_path / "other.json").write_text('{"rows": [1, 2]}')
    good = DATA / "hta_triton_example.json.gz"
    out = run("summary", "--json", str(tmp_path / "notjson.json"), str(good), str(tmp_path / "empty.json.gz"),
              str(tmp_path / "other.json"), str(tmp_path / "missing.json"))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 4
    for name in ("notjson.json", "empty.json.gz", "other.json", "missing.json"):
        assert sum(name in line for line in lines) == 1
    assert [r["source"] for r in json.loads(out.stdout)] == ["hta_triton_example.json.gz"]


def test_the_console_script_and_module_share_one_entry_point():
    out = run("--help")
    assert out.returncode == 0 and "summary" in out.stdout

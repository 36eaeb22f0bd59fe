"""The prepared GPU run (`python -m collectors gpu-run`): its article plan fits the device machine's
8 minutes and asks for what the issue lists (every variant eager, compiled and from CUDA graphs,
the third-party ones, the article's four modes), the wheel it installs is carried, and the same
parts at a tiny scale run through on the CPU, writing both folders."""

from __future__ import annotations

import json
import sys
import time
import zipfile
from pathlib import Path

import pytest

from collectors import gpu_run
from collectors.__main__ import main
from collectors.manifest import read_manifest
from collectors.variants import VARIANTS


@pytest.mark.parametrize(
    "name, label",
    [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA A100-SXM4-80GB", "a100"), ("cpu", "cpu")],
)
def test_the_folder_is_named_for_the_gpu_model(name, label):
    assert gpu_run.gpu_label(name) == label


def test_the_article_plan_fits_eight_minutes_and_runs_every_part():
    parts = gpu_run.plan("article", "cuda", Path("sample_traces"), "h100")
    assert [p.name for p in parts] == ["install", "thirdparty", "collection", "sweep", "dispatch", "e2e", "serve"]
    assert sum(p.budget_s for p in parts) <= gpu_run.BUDGET_S < 8 * 60
    by = {p.name: p.argv for p in parts}
    for name in ("thirdparty", "collection"):
        assert {"--compile", "--cuda-graphs"} <= set(by[name])
    asked = [v for name in ("thirdparty", "collection") for v in by[name] if v in VARIANTS]
    assert sorted(asked) == sorted(VARIANTS)  # every variant, once
    assert by["collection"][-1] == "sample_traces/h100" and by["thirdparty"][-1] == "sample_traces/h100-thirdparty"
    assert set(by["thirdparty"]) >= {"thirdparty-sage", "thirdparty-fa4", "thirdparty-flashinfer"}
    assert all(by[m][-1] == "sample_traces/h100-article" for m in ("sweep", "dispatch", "e2e", "serve"))
    assert "--no-index" in by["install"] and by["install"][-1] == "sageattention"


def test_the_carried_wheel_is_sageattention_1_0_6_and_the_folder_fits():
    wheels = sorted(gpu_run.WHEELS.glob("*.whl"))
    assert [w.name for w in wheels] == ["sageattention-1.0.6-py3-none-any.whl"]
    with zipfile.ZipFile(wheels[0]) as whl:
        assert "sageattention/core.py" in whl.namelist()
    assert sum(f.stat().st_size for f in gpu_run.WHEELS.iterdir()) < 1 << 20


def test_the_dry_run_prints_every_command_with_its_budget(capsys):
    assert main(["gpu-run", "--dry", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "collection (150 s):" in out and "--cuda-graphs" in out and out.strip().endswith("s")


def test_the_article_scale_without_a_gpu_is_a_usage_error(capsys):
    assert main(["gpu-run", "--device", "cpu"]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err


def test_a_cpu_rehearsal_never_writes_over_the_bundled_cpu_collection(capsys):
    assert main(["gpu-run", "--scale", "tiny", "--device", "cpu", "--no-install"]) == 2
    assert "--root DIR" in capsys.readouterr().err


def test_the_tiny_rehearsal_runs_every_part_on_the_cpu(tmp_path):
    status = main(["gpu-run", "--scale", "tiny", "--device", "cpu", "--root", str(tmp_path), "--no-install"])
    summary = json.loads((tmp_path / "cpu-article" / "gpu_run.json").read_text())
    assert {p["part"]: p["status"] for p in summary["parts"]} == dict.fromkeys(
        ["thirdparty", "collection", "sweep", "dispatch", "e2e", "serve"], 0
    )
    assert status == 0
    manifest = read_manifest(tmp_path / "cpu")
    assert {r["variant"] for r in manifest["runs"]} >= {"naive", "sdpa"}
    skipped = {s["variant"]: s["reason"] for s in read_manifest(tmp_path / "cpu-thirdparty")["skipped"]}
    assert all(
        "runs on CUDA only" in skipped[v] for v in ("thirdparty-sage", "thirdparty-fa4", "thirdparty-flashinfer")
    )
    for table in ("sweep.csv", "dispatch.csv", "e2e.csv", "serve.csv"):
        assert (tmp_path / "cpu-article" / table).is_file(), table


def test_the_install_part_installs_the_carried_wheel_offline_into_its_own_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_run, "SITE", tmp_path / "site")
    (install,) = [p for p in gpu_run.plan("tiny", "cpu", tmp_path, "cpu") if p.name == "install"]
    assert gpu_run.run_part(install)["status"] == 0
    assert (tmp_path / "site" / "sageattention" / "core.py").is_file()


def test_a_part_past_its_budget_is_stopped_with_its_children_and_the_run_goes_on(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    child = (
        "import pathlib, subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"pathlib.Path({str(pid_file)!r}).write_text(str(p.pid)); time.sleep(60)"
    )
    slow = gpu_run.Part("slow", (sys.executable, "-c", child), 3)
    started = time.monotonic()
    assert gpu_run.run_part(slow)["status"] == gpu_run.TIMEOUT_STATUS
    assert time.monotonic() - started < 30
    time.sleep(0.5)
    status = Path(f"/proc/{pid_file.read_text()}/status")
    assert not status.exists() or "State:\tZ" in status.read_text()  # gone (or a zombie awaiting its reaper)

"""`attnscope check` as a pull request's gate: noise-aware time verdicts on pairs whose answer is
known, every rule's result against hand computation, the CI outputs (JSON, JUnit, Markdown) and
the repository's own [tool.attnscope.check] settings."""

from __future__ import annotations

import gzip
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from dashboard import cli
from dashboard.engine import load_trace
from dashboard.engine.compare.alignment import describe, op_changes
from dashboard.engine.compare.bootstrap import MIN_STEPS, ratio_interval, time_verdict
from dashboard.engine.compare.gate import RULES, Rules, evaluate

ROOT = Path(__file__).resolve().parents[1]
H200, CPU, DATA = ROOT / "sample_traces" / "h200", ROOT / "sample_traces" / "cpu", ROOT / "tests" / "data"
V100 = DATA / "hta_v100_test.json.gz"
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}


def _doc(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def _write(doc: dict, path: Path) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _step_spans(doc: dict) -> list[tuple[float, float]]:
    return sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    )


def stretched(path: Path, out: Path, factor: float = 1.1) -> Path:
    """A copy whose every device event (kernel, memcpy, memset) lasts `factor` times as long and
    starts `factor` times as far from the first device event: each step's device work is the same
    work, `factor` times slower."""
    doc = _doc(path)
    device = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    t0 = min(e["ts"] for e in device)
    for e in device:
        e["ts"] = t0 + (e["ts"] - t0) * factor
        e["dur"] = e["dur"] * factor
    return _write(doc, out)


def resampled(path: Path, out: Path, seed: int) -> Path:
    """A copy whose steps are the original's steps drawn with replacement: step k's events are
    those of a randomly chosen step, moved to step k's place (names kept, so steps stay in order)."""
    doc = _doc(path)
    spans = _step_spans(doc)
    rng = random.Random(seed)
    picks = [rng.randrange(len(spans)) for _ in spans]
    device_of: dict = {}
    events = doc["traceEvents"]
    corr = {}
    for e in events:
        c = (e.get("args") or {}).get("correlation")
        if c is not None and e.get("cat") in ("cuda_runtime", "cuda_driver", "Runtime"):
            corr[c] = e["ts"]

    def home(e: dict) -> int | None:
        ts = e["ts"]
        if e.get("cat") in GPU_CATS:
            ts = corr.get((e.get("args") or {}).get("correlation"), ts)
        return next((i for i, (a, b) in enumerate(spans) if a <= ts < b), None)

    kept = [e for e in events if not (e.get("ph") == "X" and home(e) is not None)]
    for k, src in enumerate(picks):
        shift = spans[k][0] - spans[src][0]
        for e in events:
            if e.get("ph") == "X" and home(e) == src:
                copy = dict(e)
                copy["ts"] = e["ts"] + shift
                if str(copy.get("name", "")).startswith("ProfilerStep#"):
                    copy["name"] = f"ProfilerStep#{k + 100}"
                args = dict(copy.get("args") or {})
                if "correlation" in args:
                    args["correlation"] = args["correlation"] * 10 + k  # keep each launch paired with its own kernel
                    copy["args"] = args
                kept.append(copy)
    doc["traceEvents"] = [e for e in kept if e.get("ph") != "f" and e.get("ph") != "s"]
    del device_of
    return _write(doc, out)


def _busy_per_step(path: Path) -> list[float]:
    return list(load_trace(path).steps["dur_ns"].to_list())


# ---------- the bootstrap itself ----------


def test_three_steps_give_the_range_of_the_ratio_as_the_95_percent_interval():
    base, cand = np.array([10.0, 11.0, 12.0]), np.array([13.0, 14.0, 16.0])
    iv = ratio_interval(base, cand)
    assert iv.ratio == pytest.approx(14 / 11)
    assert (iv.low, iv.high) == (pytest.approx(13 / 12), pytest.approx(16 / 10))  # min(c)/max(b), max(c)/min(b)
    assert time_verdict(base, cand, 5).outcome == "regression"  # 13/12 = 1.083 > 1.05: every step slower
    assert time_verdict(base, cand, 10).outcome == "inconclusive"


def test_fewer_than_min_steps_is_inconclusive_and_says_how_many_are_needed():
    v = time_verdict(np.array([10.0, 10.5]), np.array([20.0, 21.0]), 5)
    assert MIN_STEPS == 3 and v.outcome == "inconclusive" and v.steps_needed >= MIN_STEPS and "at least 3" in v.why


def test_a_clear_change_under_the_noise_floor_is_unchanged():
    """The H200 memset: 0.736 -> 0.779 µs a step, steady, is a 'regression' by its interval alone
    (every resample lies past 1) but 0.043 µs a step is below the 0.1 µs that counts as a change."""
    base = np.array([736.0, 735.0, 737.0])
    cand = np.array([779.0, 778.0, 780.0])
    assert time_verdict(base, cand).outcome == "regression"
    quiet = time_verdict(base, cand, noise_ns=100.0)
    assert quiet.outcome == "unchanged" and "differ by 0.043 us a step, under the 0.1 us" in quiet.why
    assert time_verdict(cand, base, noise_ns=100.0).outcome == "unchanged"  # nor an improvement
    assert time_verdict(base, cand + 100.0, noise_ns=100.0).outcome == "regression"  # 0.143 us: a change
    same = np.array([736.0, 900.0, 600.0])
    assert time_verdict(same, same, noise_ns=100.0).outcome == "inconclusive"  # no floor over the interval's doubt


def test_the_same_seed_gives_the_same_interval_and_another_seed_may_not():
    rng = np.random.default_rng(0)
    base, cand = rng.normal(100, 8, 30), rng.normal(104, 8, 30)
    assert ratio_interval(base, cand) == ratio_interval(base, cand)
    assert ratio_interval(base, cand, seed=1) != ratio_interval(base, cand, seed=2)


# ---------- pairs whose answer is known ----------


def test_a_trace_against_its_own_resampled_steps_is_never_a_regression(tmp_path):
    for seed in range(4):
        copy = resampled(V100, tmp_path / f"v100_resampled_{seed}.json", seed)
        base, cand = load_trace(V100), load_trace(copy)
        assert cand.steps.height == base.steps.height == 6
        [time] = [r for r in evaluate(base, cand, Rules(max_slowdown_pct=5)) if r.rule == "step_time"]
        assert time.details["outcome"] != "regression" and time.status != "fail", time.message


def test_every_device_event_stretched_10_percent_is_always_a_regression(tmp_path):
    for path in (V100, H200 / "naive.json.gz", H200 / "sdpa-flash.json.gz"):
        slow = stretched(path, tmp_path / f"{path.name}.slow.json")
        base, cand = load_trace(path), load_trace(slow)
        [time] = [r for r in evaluate(base, cand, Rules(max_slowdown_pct=5)) if r.rule == "step_time"]
        # busy time is the union of device intervals: stretching them all by 1.1 multiplies it by 1.1 exactly
        assert time.details["ratio"] == pytest.approx(1.1, rel=1e-3)
        assert time.details["outcome"] == "regression" and time.status == "fail", time.message
        # the runs are resampled apart (not paired): the interval's low end is no more than 1.1, and past 1.05
        assert 1.05 < time.details["low"] <= 1.1 + 1e-6


def test_the_bundled_naive_sdpa_pairs_go_the_known_way():
    naive, sdpa = load_trace(H200 / "naive.json.gz"), load_trace(H200 / "sdpa.json.gz")
    forward = {r.rule: r for r in evaluate(naive, sdpa, Rules(max_slowdown_pct=5))}
    backward = {r.rule: r for r in evaluate(sdpa, naive, Rules(max_slowdown_pct=5))}
    assert forward["step_time"].details["outcome"] == "improvement"
    assert backward["step_time"].details["outcome"] == "regression" and backward["step_time"].status == "fail"
    # 3 steps each: the interval is [min(c)/max(b), max(c)/min(b)], by hand from the busy times
    from dashboard.engine.analyses.kernels import per_step

    b, c = per_step(naive)["busy_ns"].to_list(), per_step(sdpa)["busy_ns"].to_list()
    assert forward["step_time"].details["low"] == pytest.approx(min(c) / max(b), rel=1e-5)
    assert forward["step_time"].details["high"] == pytest.approx(max(c) / min(b), rel=1e-5)
    assert forward["step_time"].details["ratio"] == pytest.approx(statistics.median(c) / statistics.median(b), rel=1e-5)


def test_cpu_naive_against_naive_inplace_judges_the_step_spans():
    naive, inplace = load_trace(CPU / "naive.json.gz"), load_trace(CPU / "naive_inplace.json.gz")
    [time] = [r for r in evaluate(naive, inplace, Rules(max_slowdown_pct=5)) if r.rule == "step_time"]
    spans_b, spans_c = naive.steps["dur_ns"].to_list(), inplace.steps["dur_ns"].to_list()
    assert time.details["ratio"] == pytest.approx(statistics.median(spans_c) / statistics.median(spans_b), rel=1e-5)
    assert time.details["outcome"] == ("improvement" if max(spans_c) < min(spans_b) else "inconclusive")


# ---------- the other rules against hand computation ----------


def test_each_rule_on_the_h200_naive_and_sdpa_pair():
    naive, sdpa = load_trace(H200 / "naive.json.gz"), load_trace(H200 / "sdpa.json.gz")
    results = {r.rule: r for r in evaluate(naive, sdpa)}
    assert list(results) == list(RULES)
    doc_b, doc_c = _doc(H200 / "naive.json.gz"), _doc(H200 / "sdpa.json.gz")
    per_step = lambda doc: (
        len([e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU_CATS]) / len(_step_spans(doc))
    )  # noqa: E731
    assert results["kernel_count"].base == per_step(doc_b) and results["kernel_count"].candidate == per_step(doc_c)
    assert results["kernel_count"].status == "pass"
    assert results["hidden_copies"].base == 1 and results["hidden_copies"].candidate == 0
    assert results["backend_change"].status == "warn" and "eager -> cudnn" in results["backend_change"].message
    assert results["new_families"].details["new"] == ["fused attention"]
    # a skip by design: these traces were collected without profile_memory, they hold no [memory] events
    assert not any(e.get("name") == "[memory]" for doc in (doc_b, doc_c) for e in doc["traceEvents"])
    assert results["memory_peak"].status == "skip" and "profile_memory" in results["memory_peak"].message
    # sdpa's device runs a memset and one kernel a step with a gap under half their span: no fault, no idle_gap
    assert results["health"].status == "pass" and results["health"].candidate == []
    # idle share by hand, on the device's own timeline: per step, the work its launches queued,
    # 1 - union / (last end - first start), median over steps
    launch_ts = {
        e["args"]["correlation"]: float(e["ts"])
        for e in doc_c["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    shares = []
    cpu_steps = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in doc_c["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#")
    )
    for start, end in cpu_steps:
        work = sorted(
            (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
            for e in doc_c["traceEvents"]
            if e.get("ph") == "X"
            and e.get("cat") in GPU_CATS
            and start <= launch_ts.get(e["args"].get("correlation"), -1.0) < end
        )
        busy, reach = 0.0, work[0][0]
        for a, b in work:
            busy += max(b - max(a, reach), 0.0)
            reach = max(reach, b)
        shares.append(1 - busy / (max(b for _, b in work) - work[0][0]))
    assert results["idle_share"].candidate == pytest.approx(statistics.median(shares), abs=1e-4)  # ns rounding of µs
    # the reverse: naive after sdpa adds a hidden copy and more kernels, both fail by default
    back = {r.rule: r for r in evaluate(sdpa, naive)}
    assert back["hidden_copies"].status == back["kernel_count"].status == "fail"
    assert back["copy_growth"].status == "warn" and "hidden 0 -> 1 per step" in back["copy_growth"].message


def test_a_flash_to_math_change_fails_and_the_change_is_named():
    flash, math_ = load_trace(H200 / "sdpa-flash.json.gz"), load_trace(H200 / "sdpa-math.json.gz")
    results = {r.rule: r for r in evaluate(flash, math_, Rules(max_kernel_increase_pct=10_000))}
    assert results["math_fallback"].status == "fail"
    assert results["backend_change"].message == "attention backend changed: flash -> math"


def test_rule_levels_turn_warnings_into_failures_and_rules_off():
    naive, sdpa = load_trace(H200 / "naive.json.gz"), load_trace(H200 / "sdpa.json.gz")
    rules = Rules(levels={"new_families": "fail", "health": "off"})
    results = {r.rule: r for r in evaluate(naive, sdpa, rules)}
    assert results["new_families"].status == "fail" and results["health"].status == "skip"


def test_memory_peak_compares_the_recorded_peaks(tmp_path):
    """A constructed pair with profile_memory events: 100 MB then 130 MB allocated at the peak."""

    def trace(peak: int) -> dict:
        events = [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{i}",
                "pid": 1,
                "tid": 1,
                "ts": 100 * i,
                "dur": 90,
            }
            for i in range(3)
        ]
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 100 * i + 10, "dur": 5}
            for i in range(3)
        ]
        events += [
            {
                "ph": "i",
                "s": "t",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": 1,
                "tid": 1,
                "ts": 100 * i + 11,
                "args": {
                    "Device Type": 0,
                    "Device Id": -1,
                    "Addr": 1,
                    "Bytes": peak,
                    "Total Allocated": peak,
                    "Total Reserved": peak,
                },
            }
            for i in range(3)
        ]
        return {"traceEvents": events}

    base, cand = _write(trace(100_000_000), tmp_path / "a.json"), _write(trace(130_000_000), tmp_path / "b.json")
    [mem] = [r for r in evaluate(load_trace(base), load_trace(cand)) if r.rule == "memory_peak"]
    # the traces hold [memory] events: a skip here means the loader lost them, a failure, not a skip
    assert mem.status != "skip", f"the loader lost the traces' memory events: {mem.message}"
    assert (mem.base, mem.candidate) == (100_000_000, 130_000_000) and mem.status == "warn" and "+30.0%" in mem.message


# ---------- the op-aligned diff ----------


def test_masked_fill_replaced_by_masked_fill_inplace_reads_as_in_the_article():
    [change, *_] = op_changes(load_trace(H200 / "naive.json.gz"), load_trace(H200 / "naive_inplace.json.gz"))
    doc = _doc(H200 / "naive.json.gz")
    memcpy = [e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy" and "DtoD" in e["name"]]
    assert change.base_ops == ("aten::masked_fill",) and change.candidate_ops == ("aten::masked_fill_",)
    assert change.work == {"DtoD memcpy": -1.0}
    assert change.base_copies == {"clone + copy_": memcpy[0]["args"]["bytes"]}
    text = describe(change)
    assert text.startswith(
        "under `attention::naive_inplace`: `aten::masked_fill` (clone + copy_, 268 MB) replaced by "
        "`aten::masked_fill_`; -1 DtoD memcpy, -0.1"
    )


# ---------- the CI outputs ----------


def _check(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dashboard", "check", "--no-store", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd or ROOT,
    )


def test_the_json_is_byte_identical_on_two_runs_and_the_junit_reads_back(tmp_path):
    base, cand = str(H200 / "sdpa.json.gz"), str(H200 / "naive.json.gz")
    outs = []
    for i in range(2):
        out = _check(
            base,
            cand,
            "--max-slowdown",
            "5",
            "--json",
            str(tmp_path / f"{i}.json"),
            "--junit",
            str(tmp_path / f"{i}.xml"),
            "--markdown",
            str(tmp_path / f"{i}.md"),
        )
        assert out.returncode == 1, out.stderr
        outs.append(out)
    assert (tmp_path / "0.json").read_bytes() == (tmp_path / "1.json").read_bytes()
    record = json.loads((tmp_path / "0.json").read_text())
    assert record["verdict"] == "fail" and [r["rule"] for r in record["rules"]] == list(RULES)
    failed = {r["rule"] for r in record["rules"] if r["status"] == "fail"}
    assert failed == {"step_time", "kernel_count", "hidden_copies"}
    assert len(outs[0].stdout.strip().splitlines()) == len(failed)
    suite = ET.parse(tmp_path / "0.xml").getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == list(RULES)
    assert {c.get("name") for c in cases if c.find("failure") is not None} == failed
    assert int(suite.get("failures")) == len(failed) and int(suite.get("tests")) == len(RULES)
    assert int(suite.get("skipped")) == sum(c.find("skipped") is not None for c in cases)
    md = (tmp_path / "0.md").read_text()
    assert md.startswith("**attnscope check: FAIL**") and "http" not in md
    assert "1. step time regression" in md and "| step_time | FAIL |" in md


def test_pyproject_settings_apply_and_flags_override_them(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        "[tool.attnscope.check]\nmax-slowdown = 5\nallow-new-copies = true\nmax-kernel-increase = 300\n"
        'rules = { new_families = "fail" }\n'
    )
    sub = tmp_path / "deep" / "er"
    sub.mkdir(parents=True)
    base, cand = str(H200 / "sdpa.json.gz"), str(H200 / "naive.json.gz")
    out = _check(base, cand, "--json", str(tmp_path / "a.json"), cwd=sub)  # found by walking up
    record = json.loads((tmp_path / "a.json").read_text())
    failed = {r["rule"] for r in record["rules"] if r["status"] == "fail"}
    assert out.returncode == 1 and failed == {"step_time", "new_families"}, out.stdout
    assert record["config"] == str(tmp_path / "pyproject.toml")
    out = _check(
        base, cand, "--rule", "new_families=warn", "--max-slowdown", "2000", "--json", str(tmp_path / "b.json"), cwd=sub
    )
    assert out.returncode == 0, out.stdout
    elsewhere = tmp_path / "gate.toml"
    elsewhere.write_text('[tool.attnscope.check]\nrules = { hidden_copies = "off", kernel_count = "off" }\n')
    assert _check(base, cand, "--config", str(elsewhere)).returncode == 0
    elsewhere.write_text("[tool.attnscope.check]\nmax-slowdwn = 5\n")
    out = _check(base, cand, "--config", str(elsewhere))
    assert out.returncode == 2 and "unknown key 'max-slowdwn'" in out.stderr


def test_inconclusive_fail_fails_a_three_step_pair_that_does_not_separate(tmp_path):
    base = H200 / "naive.json.gz"
    assert _check(str(base), str(base), "--max-slowdown", "0", "--inconclusive", "fail").returncode == 1
    assert _check(str(base), str(base), "--max-slowdown", "0").returncode == 0


def test_a_stored_run_is_the_baseline(tmp_path, capsys):
    store = str(tmp_path / "store")
    assert cli.main(["ingest", "--store", store, str(CPU / "naive_inplace.json.gz")]) == 0
    run_id = capsys.readouterr().out.split()[0]
    assert (
        cli.main(
            [
                "check",
                "--store",
                store,
                "--baseline",
                f"store:{run_id}",
                str(CPU / "naive.json.gz"),
                "--max-kernel-increase",
                "100",
            ]
        )
        == 1
    )
    assert "new copies: cpu from aten::masked_fill > aten::clone > aten::copy_" in capsys.readouterr().out
    assert (
        cli.main(
            ["check", "--store", store, "--baseline", "store:naive_inplace.json.gz", str(CPU / "naive_inplace.json.gz")]
        )
        == 0
    )
    assert cli.main(["check", "--store", store, "--baseline", "store:nope", str(CPU / "naive.json.gz")]) == 2

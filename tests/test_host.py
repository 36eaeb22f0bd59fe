"""The host side of each variant (analyses/host.py), every number against a reading of the raw JSON
with the json module: host ops with ts/dur per thread, launch calls by args.correlation, device
events by args.correlation, steps by ProfilerStep (oracle.step_windows, oracle.step_device_work)."""

from __future__ import annotations

import json

import statistics
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

import oracle
from dashboard.engine import load_trace
from dashboard.engine.analyses.host import call_host, host_block, host_line, launch_latency, step_host

H200 = Path(__file__).resolve().parent.parent / "sample_traces" / "h200"
# every run of the collection (eager, compiled, CUDA graphs): each has a stored golden summary
H200_RUNS = [r["trace"].removesuffix(".json.gz") for r in json.loads((H200 / "runs.json").read_text())["runs"]]
REAL = [
    "tracelens_h100_bert_sdpa_flash.json.gz",
    "hta_a100_control.json.gz",
    "hta_v100_test.json.gz",
    "tracelens_h100_qwen_chat_sdpa_flash.json.gz",
    "tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz",
    "tracelens_vllm_decode_graph_unified_attention.json.gz",
    "kineto_legacy_resnet50_v100.pt.trace.json.gz",
    "hta_mi250_rocm_minitoy.json.gz",
    "hta_triton_example.json.gz",
    "hta_v100_ns_resolution.pt.trace.json.gz",
]
PATHS = [H200 / f"{run}.json.gz" for run in H200_RUNS] + [oracle.DATA / name for name in REAL]
# scaled_dot_product*, _flash_attention_*, _efficient_attention_*, ...; AMD aiter's multi-head attention ops
# (aiter::mha_batch_prefill under SGLang on the MI300X)
ATTENTION_OPS = (*oracle.SDPA_OP_WORDS, "aiter::mha_")


def _p90(values: list[int]) -> float:
    """The 90th percentile, linear between the two nearest ranks (numpy's default)."""
    values = sorted(values)
    pos = 0.9 * (len(values) - 1)
    low = int(pos)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (pos - low)


def _reading(path: Path) -> dict:
    """What a person reads off the raw events: the attention calls' host time and launches, each
    launch's latency, each step's waiting on the host, all in ns."""
    events = oracle.events_ns(oracle.raw(path, parse_float=Decimal))  # epoch µs with ns digits: exact
    device = [e for e in events if oracle.is_device(e) and "correlation" in e["args"]]
    first_on_device: dict = {}
    for e in device:
        c = e["args"]["correlation"]
        first_on_device[c] = min(first_on_device.get(c, e["ts"]), e["ts"])
    launch_of = oracle.launches(events)
    launch_calls = [launch_of[c] for c in first_on_device if c in launch_of]
    by_thread = defaultdict(list)
    for e in events:
        if not oracle.is_device(e):
            by_thread[(e["pid"], e["tid"])].append(e)
    windows = oracle.step_windows(events)
    work = oracle.step_device_work(events, windows)
    calls = _calls(by_thread, launch_calls)
    return {
        "calls": [(host, n) for _, host, n in calls],
        "call_steps": _call_steps(calls, windows),
        "latency": _latency(launch_calls, first_on_device, work),
        "steps": _steps(windows, work, launch_of),
    }


def _calls(by_thread: dict, launch_calls: list[dict]) -> list[tuple[int, int]]:
    """(host ns, launches) of each outermost attention op (a cpu_op named like SDPA's ops, inside no
    other such op on its thread), in start order."""
    out = []
    for lane, evs in by_thread.items():
        ops = [e for e in evs if e["cat"] == "cpu_op" and any(w in e["name"] for w in ATTENTION_OPS)]
        for op in ops:
            if any(
                o is not op
                and o["ts"] <= op["ts"]
                and op["end"] <= o["end"]
                and o["end"] - o["ts"] > op["end"] - op["ts"]
                for o in ops
            ):
                continue  # held by another attention op
            inside = [e for e in evs if op["ts"] <= e["ts"] < op["end"] or e is op]
            host = max(e["end"] for e in inside) - op["ts"]
            n = sum(1 for c in launch_calls if (c["pid"], c["tid"]) == lane and op["ts"] <= c["ts"] < op["end"])
            out.append((op["ts"], host, n))
    return sorted(out)


def _call_steps(calls: list[tuple[int, int, int]], windows: list[dict]) -> dict[str, list[tuple[int, int]]]:
    """Step name -> (host ns, launches) of the calls whose op starts inside the step's span."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for ts, host, n in calls:
        held = [w for w in windows if w["start"] <= ts < w["stop"]]
        if held:
            out[held[0]["name"]].append((host, n))
    return out


def _latency(launch_calls: list[dict], first_on_device: dict, work: dict) -> dict[str, list[int]]:
    """Step name -> the latency (first device start - launch start, ns) of each launch call whose
    device work is the step's."""
    in_step = {e["args"]["correlation"]: name for name, evs in work.items() for e in evs if "correlation" in e["args"]}
    out: dict[str, list[int]] = defaultdict(list)
    for c in launch_calls:
        corr = c["args"]["correlation"]
        if corr in in_step:
            out[in_step[corr]].append(first_on_device[corr] - c["ts"])
    return out


def _steps(windows: list[dict], work: dict, launch_of: dict) -> dict[str, dict]:
    """Step name -> busy, span and waiting (ns) on the step's busiest device: the window opens at the
    step's start, or later where the earlier steps' work on that device ends later; a gap before a
    device event waits on the host when its launch started once all earlier work had ended."""
    out = {}
    ended: dict = {}  # device -> end of the earlier steps' work there
    for w in windows:
        per_device = defaultdict(list)
        for e in work[w["name"]]:
            per_device[oracle.device_of(e)].append(e)
        rows = {}
        for dev, evs in per_device.items():
            evs.sort(key=lambda e: (e["ts"], e["i"]))
            busy = sum(b - a for a, b in oracle.merged([(e["ts"], e["end"]) for e in evs]))
            before = ended.get(dev)
            opened = min(evs[0]["ts"], max(w["start"], before if before is not None else w["start"]))
            covered, waiting = before if before is not None else opened, 0
            for k, e in enumerate(evs):
                launch = launch_of.get(e["args"].get("correlation"))
                if launch is not None and launch["ts"] >= covered:
                    waiting += max(e["ts"] - (covered if k else opened), 0)
                covered = max(covered, e["end"]) if k else e["end"]
            end = max(e["end"] for e in evs)
            rows[dev] = {"busy": busy, "span": end - opened, "waiting": waiting}
        for dev, evs in per_device.items():
            ended[dev] = max(ended.get(dev, 0), max(e["end"] for e in evs))
        if rows:
            out[w["name"]] = max(sorted(rows.items()), key=lambda kv: kv[1]["busy"])[1]
    return out


@pytest.fixture(scope="module", params=PATHS, ids=lambda p: p.name.removesuffix(".json.gz"))
def read(request):
    path = request.param
    return load_trace(str(path)), _reading(path)


def test_each_attention_call_costs_the_host_its_ops_span_and_launches_what_runs_under_it(read):
    trace, want = read
    got = call_host(trace).sort("call")
    # one row per outermost attention op, in start order (calls are numbered in start order per thread)
    got = sorted(zip(got["host_ns"].to_list(), got["launches"].to_list(), strict=True))
    want_calls = sorted(want["calls"])
    assert [n for _, n in got] == [n for _, n in want_calls]
    assert [ns for ns, _ in got] == pytest.approx([ns for ns, _ in want_calls], abs=2)


def test_launch_latency_per_step_is_the_wait_from_each_launch_to_its_first_device_event(read):
    trace, want = read
    lat = launch_latency(trace)
    steps = dict(zip(trace.steps["step"].to_list(), trace.steps["name"].to_list()))
    got = defaultdict(list)
    for step, ns in lat.filter(lat["step"].is_not_null()).select("step", "latency_ns").iter_rows():
        got[steps[step]].append(ns)
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in want["latency"].items()}
    rows = step_host(trace)
    for step, median, p90 in rows.select("step", "latency_median_ns", "latency_p90_ns").iter_rows():
        if want["latency"].get(steps[step]):
            assert median == pytest.approx(statistics.median(want["latency"][steps[step]]), abs=1)
            assert p90 == pytest.approx(_p90(want["latency"][steps[step]]), abs=1)


def test_a_step_waits_on_the_host_where_its_launch_came_after_the_device_ran_dry(read):
    trace, want = read
    block = host_block(trace)
    names = dict(zip(trace.steps["step"].to_list(), trace.steps["name"].to_list()))
    got = {names[s["step"]]: s for s in block["steps"]}
    assert set(got) == set(want["steps"])
    for name, w in want["steps"].items():
        s = got[name]
        assert s["busy_us"] == pytest.approx(w["busy"] / 1e3, abs=0.002)
        assert s["span_us"] == pytest.approx(w["span"] / 1e3, abs=0.002)
        assert s["waiting_us"] == pytest.approx(w["waiting"] / 1e3, abs=0.002), name
        assert s["host_bound"] == (w["waiting"] > w["busy"])


def test_each_step_gives_its_calls_mean_host_time_and_launches(read):
    trace, want = read
    names = dict(zip(trace.steps["step"].to_list(), trace.steps["name"].to_list()))
    for s in host_block(trace)["steps"]:
        calls = want["call_steps"].get(names[s["step"]], [])
        assert s["calls"] == len(calls)
        if calls:
            assert s["call_host_us"] == pytest.approx(statistics.mean(h for h, _ in calls) / 1e3, abs=0.002)
            assert s["call_launches"] == pytest.approx(statistics.mean(n for _, n in calls))


def test_the_fused_sdpa_steps_on_the_h200_are_host_bound_and_the_naive_ones_are_not():
    bound = {run: host_block(load_trace(str(H200 / f"{run}.json.gz"))) for run in ("sdpa-flash", "sdpa-cudnn", "naive")}
    assert bound["sdpa-flash"]["host_bound_steps"] == 3 and bound["sdpa-cudnn"]["host_bound_steps"] == 3
    assert bound["naive"]["host_bound_steps"] == 0
    line = host_line(bound["sdpa-cudnn"])
    assert line.startswith("host-bound: the device waits on launches") and "2 launches" in line


def test_a_cpu_only_trace_has_no_host_block():
    assert host_block(load_trace(str(oracle.DATA / "cpu_naive_profile_memory.json.gz"))) is None


def _slower_host(trace, extra_ns: int):
    """The trace with every scaled_dot_product_attention op (and what follows on its thread's nest)
    lasting extra_ns longer: an injected host increase, the device side untouched."""
    import dataclasses

    import polars as pl

    sdpa = (pl.col("cat") == "cpu_op") & (pl.col("name").cast(pl.String) == "aten::scaled_dot_product_attention")
    events = trace.events.with_columns(
        pl.when(sdpa).then(pl.col("dur_ns") + extra_ns).otherwise(pl.col("dur_ns")).alias("dur_ns")
    )
    return dataclasses.replace(trace, events=events, _analyses={})


def test_the_gate_passes_a_run_against_itself_and_fails_an_injected_host_increase():
    from dashboard.engine.compare.gate import Rules, evaluate

    base = load_trace(str(H200 / "sdpa-flash.json.gz"))
    rules = Rules(max_host_increase_pct=150.0, max_kernel_increase_pct=100.0)
    same = {r.rule: r for r in evaluate(base, load_trace(str(H200 / "sdpa-flash.json.gz")), rules)}["host_time"]
    assert same.status == "pass" and same.details["outcome"] == "unchanged"
    slower = _slower_host(base, 1_000_000)  # +1 ms on each call's op
    want = [h + 1_000_000 for h, _ in _reading(H200 / "sdpa-flash.json.gz")["calls"]]
    assert sorted(call_host(slower)["host_ns"].to_list()) == pytest.approx(sorted(want), abs=2)
    hit = {r.rule: r for r in evaluate(base, slower, rules)}["host_time"]
    assert hit.status == "fail" and hit.details["outcome"] == "regression"
    assert hit.message.startswith("host time per attention call +")
    # without a threshold the rule measures and never fails
    free = {r.rule: r for r in evaluate(base, slower, Rules(max_kernel_increase_pct=100.0))}["host_time"]
    assert free.status == "pass" and "not gated" in free.message


def test_check_takes_max_host_increase_from_the_command_line(tmp_path):
    import json

    from dashboard.cli import main

    run = str(H200 / "sdpa-flash.json.gz")
    out = tmp_path / "check.json"
    assert main(["check", run, run, "--max-host-increase", "150", "--json", str(out)]) == 0
    rules = {r["rule"]: r for r in json.loads(out.read_text())["rules"]}
    assert rules["host_time"]["threshold"] == 150 and rules["host_time"]["status"] == "pass"


def test_compare_says_which_backend_costs_the_host_more_per_call_with_the_oracles_medians():
    from dashboard.engine.compare.host_diff import host_reading

    flash, cudnn = H200 / "sdpa-flash.json.gz", H200 / "sdpa-cudnn.json.gz"
    (line,) = host_reading(load_trace(str(flash)), load_trace(str(cudnn)))
    a = statistics.median(ns for ns, _ in _reading(flash)["calls"]) / 1e3
    b = statistics.median(ns for ns, _ in _reading(cudnn)["calls"]) / 1e3
    word = "more" if b >= a else "less"
    assert line.startswith(f"host: cudnn costs {abs(b - a):,.1f} µs {word} host time per attention call than flash")
    assert f"({b:,.1f} µs against {a:,.1f}; 2 launches a call against 1)" in line


def test_the_backends_tab_shows_each_runs_host_time_per_call_and_launch_latency(monkeypatch):
    import os

    from streamlit.testing.v1 import AppTest

    from dashboard.runs import ENV_TRACES

    runs = [H200 / "sdpa-flash.json.gz", H200 / "sdpa-cudnn.json.gz"]
    monkeypatch.setenv(ENV_TRACES, os.pathsep.join(str(p) for p in runs))
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py"), default_timeout=120)
    at.query_params["tab"] = "Backends"
    at.query_params["run"] = ["file/" + p.name for p in runs]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = at.get_by_key("tbl_host").dataframe[0].value
    assert len(shown) == 2
    for (_, row), path in zip(shown.iterrows(), runs, strict=True):
        want = _reading(path)
        assert row["host_us"] == pytest.approx(statistics.median(ns for ns, _ in want["calls"]) / 1e3, abs=0.002)
        lat = [ns for values in want["latency"].values() for ns in values]
        assert row["latency_median_us"] == pytest.approx(statistics.median(lat) / 1e3, abs=0.002)
        assert row["latency_p90_us"] == pytest.approx(_p90(lat) / 1e3, abs=0.002)


def test_the_check_comment_tables_the_host_time_per_call_beside_the_step_time(tmp_path):
    from dashboard.cli import main

    flash, cudnn = H200 / "sdpa-flash.json.gz", H200 / "sdpa-cudnn.json.gz"
    out = tmp_path / "check.md"
    main(["check", str(flash), str(cudnn), "--max-kernel-increase", "100", "--markdown", str(out)])
    (row,) = [line for line in out.read_text().splitlines() if line.startswith("| host time per attention call |")]

    def per_step_median(path: Path) -> float:
        steps = _reading(path)["call_steps"]
        return statistics.median(statistics.mean(h for h, _ in calls) for calls in steps.values()) / 1e3

    assert row.split(" | ")[1:3] == [f"{per_step_median(flash):,.1f}", f"{per_step_median(cudnn):,.1f}"]

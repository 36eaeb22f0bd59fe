"""`attnscope summary` as CI and tools call it: a subprocess, JSON out, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import oracle

DATA = oracle.DATA


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dashboard", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


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
    out = run(
        "summary",
        "--json",
        str(tmp_path / "notjson.json"),
        str(good),
        str(tmp_path / "empty.json.gz"),
        str(tmp_path / "other.json"),
        str(tmp_path / "missing.json"),
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 4
    for name in ("notjson.json", "empty.json.gz", "other.json", "missing.json"):
        assert sum(name in line for line in lines) == 1
    assert [r["source"] for r in json.loads(out.stdout)] == ["hta_triton_example.json.gz"]


def test_the_console_script_and_module_share_one_entry_point():
    import shutil

    out = run("--help")
    assert out.returncode == 0 and "summary" in out.stdout
    script = shutil.which("attnscope") or str(Path(sys.executable).parent / "attnscope")
    console = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=120)
    assert console.returncode == 0 and console.stdout == out.stdout.replace("__main__.py", "attnscope")


def _trace_file(tmp_path: Path, name: str, events: list[dict], **top) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events, **top}))
    return path


STEP = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100}


def test_strange_but_readable_traces_are_summarized_or_named_never_a_traceback(tmp_path):
    odd = [
        _trace_file(tmp_path, "no_ts.json", [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": "abc", "dur": 1}]),
        _trace_file(
            tmp_path,
            "huge_corr.json",
            [
                STEP,
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "k",
                    "pid": 0,
                    "tid": 7,
                    "ts": 5,
                    "dur": 1,
                    "args": {"correlation": 2**70},
                },
            ],
        ),
        _trace_file(
            tmp_path,
            "odd_shapes.json",
            [
                STEP,
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::copy_",
                    "pid": 1,
                    "tid": 1,
                    "ts": 5,
                    "dur": 1,
                    "args": {"Input Dims": 5, "Input type": {"a": 1}},
                },
            ],
        ),
        _trace_file(
            tmp_path,
            "odd_meta.json",
            [STEP],
            attnscope={"variant": 3, "parity": {"max_abs": "big", "passed": "yes"}, "tokens_per_step": "many"},
        ),
        _trace_file(
            tmp_path,
            "float_ids.json",
            [
                STEP,
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::mm",
                    "pid": 1.0,
                    "tid": 1,
                    "ts": 5,
                    "dur": -3,
                    "args": {"correlation": 12.0, "External id": "7"},
                },
            ],
        ),
        _trace_file(
            tmp_path,
            "args_list.json",
            [STEP, {"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": [1, 2]}],
        ),
    ]
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps({"traceEvents": [STEP]}).encode())
    out = run("summary", "--json", *map(str, odd), str(bom))
    assert "Traceback" not in out.stderr
    assert out.returncode == 2  # no_ts.json cannot be read
    errors = out.stderr.strip().splitlines()
    assert [line for line in errors if "error" in line] == [
        "attnscope: error: no_ts.json: no complete event has a readable timestamp"
    ]
    result = {r["source"]: r for r in json.loads(out.stdout)}
    assert set(result) == {
        "huge_corr.json",
        "odd_shapes.json",
        "odd_meta.json",
        "float_ids.json",
        "args_list.json",
        "bom.json",
    }
    assert result["huge_corr.json"]["steps"][0]["kernel"] == 0  # its correlation cannot tie it to a launch
    assert result["odd_meta.json"]["collector"]["parity"] == {
        "max_abs": None,
        "max_rel": None,
        "atol": None,
        "rtol": None,
        "passed": None,
    }
    assert result["float_ids.json"]["counts"] == {"cpu_op": 1, "user_annotation": 1}
    assert any("negative duration" in w for w in result["float_ids.json"]["warnings"])
    assert result["args_list.json"]["counts"] == {"cpu_op": 1, "user_annotation": 1}


def test_each_warning_is_printed_once(tmp_path):
    negative = _trace_file(
        tmp_path,
        "negative.json",
        [STEP, {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": -3}],
    )
    for args in (("summary", str(negative)), ("summary", "--json", str(negative))):
        out = run(*args)
        assert out.returncode == 0, out.stderr
        printed = [
            line for line in (out.stdout + out.stderr).splitlines() if "negative duration" in line and "warning" in line
        ]
        assert len(printed) == 1, printed
        assert printed[0] in out.stderr.splitlines()


def test_check_explains_base_and_candidate():
    out = run("check", "--help")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    for name in ("BASE", "CANDIDATE"):
        line = next(i for i, text in enumerate(lines) if text.strip().startswith(name))
        assert len(lines[line].strip()) > len(name) + 5 or lines[line + 1].startswith(" " * 10)  # a help text beside it


def _steps_running_past_their_span(name: str) -> tuple[int, int]:
    """(steps whose device work ends after their CPU span ends, steps), read with the json module:
    each GPU event in the step whose span holds its launch."""
    from decimal import Decimal

    doc = oracle.raw(DATA / name, parse_float=Decimal)
    launch_ts = {
        e["args"]["correlation"]: e["ts"]
        for e in oracle.complete(doc)
        if e.get("cat") in oracle.LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    gpu = [e for e in oracle.complete(doc) if e.get("cat") in oracle.GPU_CATS]
    spans = oracle.step_spans(doc)
    ahead = 0
    for _, start, end in spans:
        in_step = [e for e in gpu if start <= launch_ts.get(e.get("args", {}).get("correlation"), -1) < end]
        ahead += any(e["ts"] + e.get("dur", 0) > end for e in in_step)
    return ahead, len(spans)


def test_the_summary_says_when_the_cpu_ran_ahead_of_the_device():
    """Device work that ends after its step's CPU span reads like a bug unless the summary says why:
    the CPU ran ahead of the device (busy and idle are then read on the device's own timeline)."""
    for name in ("hta_v100_ns_resolution.pt.trace.json.gz", "hta_v100_test.json.gz", "hta_a100_control.json.gz"):
        ahead, steps = _steps_running_past_their_span(name)
        result = run("summary", "--no-store", str(DATA / name))
        assert result.returncode == 0, result.stderr
        line = [l for l in result.stdout.splitlines() if l.startswith("  the CPU ran ahead")]
        if ahead:
            assert line == [
                f"  the CPU ran ahead in {ahead} of {steps} steps: the device finished work they launched after "
                "their CPU span ended (a kernel counts in the step that launched it; busy and idle are measured on "
                "the device's own timeline)"
            ], name
        else:
            assert line == [], name
    # by hand: every V100 step's last kernels end 66-90 ms after its CPU span (35.1 to 95.7 ms spans)
    assert _steps_running_past_their_span("hta_v100_ns_resolution.pt.trace.json.gz") == (5, 5)


def test_a_folder_without_a_trace_file_is_an_error_naming_it(tmp_path):
    """It printed a blank line (or [] with --json) and exited 0, as if the folder had been read."""
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    (empty / "notes.txt").write_text("not a trace")
    out = run("summary", str(empty), "--no-store")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == f"attnscope: error: {empty}: no trace files (.json, .json.gz) in this folder"
    both = run(
        "summary",
        str(empty),
        str(DATA.parent.parent / "sample_traces" / "cpu" / "sdpa.json.gz"),
        "--json",
        "--no-store",
    )
    assert both.returncode == 2 and [s["source"] for s in json.loads(both.stdout)] == ["sdpa.json.gz"]
    assert f"{empty}: no trace files" in both.stderr


def test_every_warning_of_the_summary_is_printed_once_on_stderr():
    """The vLLM CUDA-graph trace's 'replayed ... sit under no CPU op' was in --json's warnings only:
    the text mode printed the loader's warnings and not the analyses'."""
    path = DATA / "tracelens_vllm_decode_graph_unified_attention.json.gz"
    (record,) = json.loads(run("summary", str(path), "--json", "--no-store").stdout)
    assert any("sit under no CPU op" in w for w in record["warnings"])
    for mode in ([], ["--json"]):
        out = run("summary", str(path), "--no-store", *mode)
        lines = [line for line in out.stderr.splitlines() if line.startswith("attnscope: warning: ")]
        assert lines == [f"attnscope: warning: {w}" for w in record["warnings"]]


def test_an_event_that_is_not_an_object_is_named_in_plain_words(tmp_path):
    """msgspec's 'Expected `object`, got `int` - at ``' (the batch index cut out of it) reached the user."""
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2, 3]")
    out = run("summary", str(listed), "--no-store")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "attnscope: error: list.json: no event could be read: 3 events could not be read and were "
        "skipped; the first: an event is a JSON integer, not an object"
    )
    mixed = tmp_path / "mixed.json"
    mixed.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2},'
        ' {"ph": ["X"], "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 3, "dur": 1}, 7]}'
    )
    out = run("summary", str(mixed), "--no-store")
    assert out.returncode == 0
    assert (
        "mixed.json: 2 events could not be read and were skipped; the first: the field 'ph' of an event is a JSON "
        "array, not a string"
    ) in out.stderr

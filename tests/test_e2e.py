"""`python -m collectors e2e`: a tiny decoder on the CPU, every number in e2e.csv checked against a
hand computation from the row's own inputs, the traces read back with gzip + json alone."""

from __future__ import annotations

import csv
import gzip
import json
import math
from pathlib import Path

import pytest
import torch

from collectors.__main__ import main
from collectors.decoder import Core, DecoderConfig, build
from collectors.tables import E2E
from collectors.variants import VARIANTS, Variant

LAYERS, BATCH, PROMPT, DECODE = 2, 2, 16, 3
TINY = [
    "--device",
    "cpu",
    "--layers",
    str(LAYERS),
    "--d-model",
    "32",
    "--heads",
    "2",
    "--prompt-len",
    str(PROMPT),
    "--batch",
    str(BATCH),
    "--decode-steps",
    str(DECODE),
    "--reps",
    "10",
]
RAN = ["naive", "naive_inplace", "sdpa", "sdpa-math", "hub"]
COLUMNS = list(E2E.columns)  # the contract (collectors.tables), read by the dashboard
FAKE_KERNEL = """
import math
import torch

def flash_attn_func(q, k, v, causal=False):
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(s, -1) @ v).transpose(1, 2)
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One e2e run: four variants that run on CPU, sdpa-efficient (refused on CPU), and the hub
    variant from a kernel folder written here."""
    root = tmp_path_factory.mktemp("e2e")
    (root / "kernel" / "fake_flash_e2e").mkdir(parents=True)
    (root / "kernel" / "fake_flash_e2e" / "__init__.py").write_text(FAKE_KERNEL)
    out = root / "out"
    argv = [
        "e2e",
        *TINY,
        "--variants",
        "naive_inplace",
        "sdpa,sdpa-math",
        "sdpa-efficient",
        "hub",
        "--hub-kernel",
        str(root / "kernel"),
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    return out


def rows(out: Path) -> list[dict[str, str]]:
    with open(out / "e2e.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def num(text: str) -> float:
    return float(text)


def by(out: Path, variant: str, phase: str) -> dict[str, str]:
    return next(r for r in rows(out) if r["variant"] == variant and r["phase"] == phase)


def test_columns_and_row_order(run: Path) -> None:
    with open(run / "e2e.csv", newline="") as fh:
        header = next(csv.reader(fh))
    assert header == COLUMNS
    order = ["naive", "naive_inplace", "sdpa", "sdpa-math", "sdpa-efficient", "hub"]  # naive first, then as given
    assert [(r["phase"], r["variant"]) for r in rows(run)] == [(p, v) for p in ("prefill", "decode") for v in order]


def test_every_ok_row_adds_up_by_hand(run: Path) -> None:
    for phase, tokens in (("prefill", BATCH * PROMPT), ("decode", BATCH)):
        naive = by(run, "naive", phase)
        s = num(naive["attention_ms"]) / num(naive["profiled_step_ms"])
        for variant in RAN:
            r = by(run, variant, phase)
            assert r["status"] == "ok", r
            assert int(r["tokens"]) == tokens
            assert num(r["tokens_per_s"]) == pytest.approx(tokens / (num(r["step_ms"]) / 1000), rel=1e-9)
            assert num(r["attention_share"]) == pytest.approx(
                num(r["attention_ms"]) / num(r["profiled_step_ms"]), rel=1e-9
            )
            assert 0 < num(r["attention_share"]) < 1
            a = num(naive["attention_ms"]) / num(r["attention_ms"])
            assert num(r["attention_speedup_vs_naive"]) == pytest.approx(a, rel=1e-9)
            assert num(r["speedup_vs_naive"]) == pytest.approx(num(naive["step_ms"]) / num(r["step_ms"]), rel=1e-9)
            assert num(r["amdahl_predicted_speedup"]) == pytest.approx(1 / ((1 - s) + s / a), rel=1e-9)
            assert int(r["reps"]) >= 10
        assert num(naive["amdahl_predicted_speedup"]) == pytest.approx(1.0)
    # decode: ceil(10 / 3) passes over the 3 decode positions
    assert int(by(run, "sdpa", "decode")["reps"]) == math.ceil(10 / DECODE) * DECODE


def test_a_variant_that_cannot_run_is_a_row_with_its_reason(run: Path) -> None:
    for phase in ("prefill", "decode"):
        r = by(run, "sdpa-efficient", phase)
        assert r["status"] == "refused" and r["reason"]
        assert r["step_ms"] == r["attention_ms"] == r["amdahl_predicted_speedup"] == r["trace"] == ""
        assert not (run / f"e2e.sdpa-efficient.{phase}.json.gz").exists()


def test_each_step_trace_holds_the_attention_ranges_and_memory_events(run: Path) -> None:
    for variant in RAN:
        for phase in ("prefill", "decode"):
            r = by(run, variant, phase)
            path = run / f"e2e.{variant}.{phase}.json.gz"
            assert r["trace"] == path.name
            with gzip.open(path, "rt") as fh:
                doc = json.load(fh)
            events = doc["traceEvents"]
            ranges = [e for e in events if e.get("ph") == "X" and e.get("name") == f"attention::{variant}"]
            steps = [e for e in events if e.get("ph") == "X" and str(e.get("name")).startswith("ProfilerStep#")]
            assert len(ranges) == LAYERS and len(steps) == 1  # one profiled step, one range per layer
            assert any(e.get("name") == "[memory]" for e in events)
            assert any("Input Dims" in e.get("args", {}) for e in events)  # record_shapes
            # the row's CPU times are the trace's spans (us -> ms)
            assert num(r["attention_ms"]) == pytest.approx(
                sum(float(e["dur"]) for e in ranges) / 1000, rel=1e-3, abs=2e-3
            )
            assert num(r["profiled_step_ms"]) == pytest.approx(float(steps[0]["dur"]) / 1000, rel=1e-3, abs=2e-3)
            meta = doc["attnscope"]
            assert (meta["variant"], meta["phase"], meta["tokens_per_step"]) == (variant, phase, int(r["tokens"]))
            assert meta["model"]["layers"] == LAYERS


def test_the_outputs_agree_with_the_fp32_reference(run: Path) -> None:
    for variant in RAN:
        for phase in ("prefill", "decode"):
            assert num(by(run, variant, phase)["parity_max_abs"]) < 1e-4


def test_provenance_says_what_was_measured(run: Path) -> None:
    info = json.loads((run / "e2e.json").read_text())
    assert info["device"] == "cpu" and info["dtype"] == "fp32" and "time_utc" in info and "torch_version" in info
    assert info["command"].startswith("python -m collectors e2e ")
    assert info["attention_time_source"].startswith("CPU time")
    assert info["model"]["layers"] == LAYERS and info["model"]["d_model"] == 32 and info["model"]["heads"] == 2
    assert info["hub_kernel"]["kind"] == "path" and info["hub_kernel"]["module_file"].endswith("__init__.py")
    assert info["statuses"] == {"ok": 10, "refused": 2, "unavailable": 0, "oom": 0, "error": 0}


def test_the_decoder_gives_the_same_logits_with_every_variant() -> None:
    """Same weights, fp32: prefill and a cached decode step agree across variants, and the decode
    step with the cache equals the last position of a prefill over the longer sequence."""
    cfg = DecoderConfig(layers=2, d_model=32, heads=4, max_len=12)
    model = build(cfg, seed=3, device=torch.device("cpu"), dtype=torch.float32)
    tokens = torch.randint(0, cfg.vocab, (2, 9), generator=torch.Generator().manual_seed(0))
    prompt, new = tokens[:, :8], tokens[:, 8:]
    outs = {}
    with torch.no_grad():
        for name in ("naive", "naive_inplace", "sdpa", "sdpa-math"):
            pre = Core(VARIANTS[name].bind(torch.zeros(2, 4, 8, 8)), name)
            dec = Core(VARIANTS[name].bind(torch.zeros(2, 4, 1, 8), causal=False), name)
            cache = model.new_cache(2)
            logits = model.prefill(prompt, pre, cache, all_logits=True)
            outs[name] = (logits, model.decode(new, dec, cache, 8))
        full = model.prefill(
            tokens, Core(VARIANTS["naive"].bind(torch.zeros(2, 4, 9, 8)), "naive"), model.new_cache(2), all_logits=True
        )
    base_pre, base_dec = outs["naive"]
    for pre, dec in outs.values():
        assert torch.allclose(pre, base_pre, atol=1e-5) and torch.allclose(dec, base_dec, atol=1e-5)
    assert torch.allclose(base_dec[:, 0], full[:, -1], atol=1e-5)  # the KV cache is exact
    assert torch.allclose(base_pre, full[:, :8], atol=1e-5)  # causal: later tokens change nothing before


@pytest.mark.parametrize(
    "bad, says",
    [
        (["--d-model", "30", "--heads", "4"], "--d-model 30 is not a multiple of --heads 4"),
        (["--reps", "5"], "--reps"),
        (["--variants", "nope"], "unknown variant nope"),
        (["--batch", "0"], "--batch"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    bad: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["e2e", "--device", "cpu", *bad, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m collectors e2e: error: ") and says in err[0]


def _failing_flex(error: type[Exception], message: str) -> Variant:
    """A flex variant whose attention call raises error(message) (its bind succeeds, as flex's does)."""

    def bind(q, causal=True):
        def call(q, k, v):
            if error is ModuleNotFoundError:
                import attnscope_no_such_package  # noqa: F401
            raise error(message)

        return call

    return Variant("flex", "flex", bind)


@pytest.mark.parametrize(
    ("error", "status", "reason"),
    [
        (TypeError, "error", "TypeError: flex_attention() got an unexpected keyword argument 'scale'"),
        (
            ModuleNotFoundError,
            "unavailable",
            "a package is missing: ModuleNotFoundError: No module named 'attnscope_no_such_package'",
        ),
    ],
)
def test_a_failing_variant_is_an_error_row_and_a_missing_package_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: type[Exception], status: str, reason: str
) -> None:
    monkeypatch.setitem(
        VARIANTS, "flex", _failing_flex(error, "flex_attention() got an unexpected keyword argument 'scale'")
    )
    out = tmp_path / "out"
    assert main(["e2e", *TINY, "--variants", "flex", "--out", str(out)]) == (1 if status == "error" else 0)
    for phase in ("prefill", "decode"):
        r = by(out, "flex", phase)
        assert (r["status"], r["reason"]) == (status, reason)
        assert r["step_ms"] == r["trace"] == ""
        assert by(out, "naive", phase)["status"] == "ok"
    assert json.loads((out / "e2e.json").read_text())["statuses"][status] == 2

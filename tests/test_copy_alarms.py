"""A copy is an alarm by what it costs, and a kernel is a copy by its family.

Oracles: the raw JSON read with the json module (tests/oracle.py), hand-written name lists, and
hand arithmetic; never the engine's own tables.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import oracle
from dashboard.engine import load_trace
from dashboard.engine.compare import review
from dashboard.engine.analyses.copies import HIDDEN, REQUESTED, classify_chain, copies
from dashboard.engine.analyses.kernels import family_of

DATA = Path(__file__).parent / "data"
SAMPLES = Path(__file__).parent.parent / "sample_traces"
VLLM = DATA / "tracelens_vllm_decode_graph_unified_attention.json.gz"
H200_NAIVE = SAMPLES / "h200" / "naive.json.gz"
A100 = DATA / "hta_a100_control.json.gz"
SGLANG = DATA / "tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz"


@pytest.fixture(scope="module")
def vllm():
    return load_trace(VLLM)


def test_a_128_byte_index_conversion_is_a_note_not_an_alarm(vllm):
    doc = oracle.raw(VLLM)
    # by hand from the JSON: the one aten::_to_copy converts an int32 index of 32 elements (Input
    # Dims [[32], ...], Input type ['int', ...]) to int64; a cast's copy is counted at its source's
    # size: 32 * 4 = 128 bytes, far under 1 MB
    (to_op,) = [e for e in oracle.complete(doc) if e.get("name") == "aten::_to_copy" and e.get("cat") == "cpu_op"]
    assert to_op["args"]["Input Dims"][0] == [32] and to_op["args"]["Input type"][0] == "int"
    found = review.findings({"vllm": vllm}, "vllm")
    kinds = dict(zip(found["kind"], found["severity"]))
    assert kinds.get("small hidden copy") == review.SEVERITY_NOTE
    assert "hidden copy" not in kinds
    message = found.filter(pl.col("kind") == "small hidden copy")["message"][0]
    assert "128 B per step" in message and "below the alarm's 1% of the step or 1.0 MB a step" in message


def test_the_alarm_thresholds_are_settable(vllm):
    found = review.findings({"vllm": vllm}, "vllm", alarm_bytes=100)
    assert "hidden copy" in found.filter(pl.col("severity") == review.SEVERITY_ALARM)["kind"].to_list()
    groups = review.copy_groups({"vllm": vllm}, alarm_share=1.0, alarm_bytes=100)
    assert groups.filter(pl.col("hidden"))["alarm"].to_list() == [True]


@pytest.mark.skipif(not H200_NAIVE.is_file(), reason="the bundled H200 collection is missing")
def test_naives_masked_fill_clone_stays_an_alarm():
    trace = load_trace(H200_NAIVE)
    doc = oracle.raw(H200_NAIVE)
    # by hand: the clone copies the bf16 scores [8, 16, 1024, 1024]: 8*16*1024*1024*2 = 268,435,456 B a step
    memcpys = [e for e in oracle.complete(doc) if e.get("cat") == "gpu_memcpy" and "DtoD" in e.get("name", "")]
    steps = len(oracle.step_spans(doc))
    assert sum(e["args"]["bytes"] for e in memcpys) / steps == 8 * 16 * 1024 * 1024 * 2
    found = review.findings({"naive": trace}, "naive")
    alarms = found.filter(pl.col("severity") == review.SEVERITY_ALARM)
    assert alarms["kind"].to_list() == ["hidden copy"]
    assert (
        "268.4 MB per step" in alarms["message"][0]
        and "aten::masked_fill > aten::clone > aten::copy_" in alarms["message"][0]
    )


@pytest.mark.parametrize(
    "chain, expected",
    [
        (["aten::type_as", "aten::to", "aten::_to_copy", "aten::copy_"], REQUESTED),
        (["aten::pad", "aten::constant_pad_nd", "aten::copy_"], REQUESTED),
        (["aten::contiguous", "aten::clone", "aten::copy_"], REQUESTED),
        (["aten::permute_copy", "aten::copy_"], REQUESTED),  # functionalization's *_copy ops
        (["aten::flatten_dense_tensors", "aten::cat"], REQUESTED),  # DDP's bucket flattening
        (["aten::layer_norm", "aten::contiguous", "aten::clone", "aten::copy_"], HIDDEN),
        (["aten::masked_fill", "aten::clone", "aten::copy_"], HIDDEN),
        (["aten::reshape", "aten::clone", "aten::copy_"], HIDDEN),
    ],
)
def test_an_explicit_calls_own_copy_is_requested_and_an_ops_inner_copy_is_hidden(chain, expected):
    assert classify_chain(chain)[1] == expected


def test_index_copys_elementwise_kernel_is_not_a_copy_and_every_copy_family_kernel_is_one():
    trace = load_trace(A100)
    doc = oracle.raw(A100)
    kernels = [e["name"] for e in oracle.complete(doc) if e.get("cat") == "kernel"]
    index_copy = [n for n in kernels if "index_copy_kernel_impl" in n]
    cat_copies = [n for n in kernels if "CatArrayBatchedCopy" in n]
    assert index_copy and cat_copies  # the trace has both: the test means something
    found = copies(trace).filter(pl.col("kind") == "kernel")
    names = found["name"].to_list()
    assert not [n for n in names if "index_copy_kernel_impl" in n]
    assert sum("CatArrayBatchedCopy" in n for n in names) == len(cat_copies)
    # one rule: every kernel the copy table lists is of family 'copy', and the other way round
    assert {family_of(n) for n in names} == {"copy"}
    copy_family = [n for n in kernels if family_of(n) == "copy"]
    assert len(copy_family) == len(names)


def test_copies_and_families_agree_on_every_hand_labelled_kernel_name():
    """tests/data/kernel_names.tsv: a person's label of each name. A name labelled 'copy' is a copy
    for the copy analysis (family 'copy'), and no other name is."""
    rows = [
        line.rstrip("\n").split("\t")
        for line in (DATA / "kernel_names.tsv").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    wrong = [(name[:80], label) for name, label, _ in rows if (label == "copy") != (family_of(name) == "copy")]
    assert wrong == []


def test_kv_cache_writes_are_requested_copies_never_hidden():
    trace = load_trace(SGLANG)
    doc = oracle.raw(SGLANG)
    writes = [e for e in oracle.complete(doc) if e.get("cat") == "kernel" and "store_kvcache" in e.get("name", "")]
    assert writes
    found = copies(trace).filter(pl.col("name").str.contains("store_kvcache"))
    assert found.height == len(writes)
    assert set(found["copy_class"].to_list()) == {REQUESTED}


def test_the_design_notes_list_exactly_the_requested_ops_the_engine_uses():
    import re

    from dashboard.engine.analyses.copies import REQUESTED_COPY_OPS

    notes = (Path(__file__).parent.parent / "docs" / "design.md").read_text()
    section = notes.split("## Copies: which are alarms", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(aten::[\w.]+)` \|$", section, re.MULTILINE))
    assert listed == set(REQUESTED_COPY_OPS)


def test_compare_sets_the_thresholds_from_its_flags(capsys):
    from dashboard.cli import main

    qwen = DATA / "tracelens_h100_qwen_chat_sdpa_flash.json.gz"
    assert main(["compare", str(VLLM), str(qwen), "--no-store"]) == 0
    default = capsys.readouterr().out
    assert "small hidden copy" in default and "ALARM tracelens_vllm" not in default
    assert main(["compare", str(VLLM), str(qwen), "--no-store", "--copy-alarm-bytes", "100"]) == 0
    lowered = capsys.readouterr().out
    assert "small hidden copy" not in lowered and "hidden copy: 1 hidden copy per step (128 B" in lowered

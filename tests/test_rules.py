"""The name rules (dashboard/engine/rules/): the tables agree with each other, the analyses read
them and no copy of their own, and a user's rows from ATTNSCOPE_RULES change a classification (or,
from a file that cannot be used, give one line naming the file and the problem)."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import oracle
from dashboard.engine import rules
from dashboard.engine.model import settings
from dashboard.engine.analyses.copies import COMMUNICATION, classify_chain
from dashboard.engine.analyses.kernels import FAMILY_RULES, family_of
from dashboard.engine.model.trace import GPU_CATEGORIES, LAUNCH_CATEGORIES
from dashboard.engine.rules.names import parse

ROOT = Path(__file__).resolve().parent.parent
TSV = oracle.DATA / "kernel_names.tsv"
A100 = oracle.DATA / "hta_a100_control.json.gz"


def _names() -> set[str]:
    """Every name a person judged (kernel_names.tsv) and every event name of the committed traces."""
    with open(TSV, newline="") as fh:
        found = {r[0] for r in csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE) if r and not r[0].startswith("#")}
    for path in sorted([*oracle.DATA.glob("*.gz"), *(ROOT / "sample_traces").glob("*/*.json.gz")]):
        found |= {e.get("name", "") for e in oracle.complete(oracle.raw(path))}
    return found


@pytest.fixture(scope="module")
def names() -> set[str]:
    return _names()


COLLECTIVE_KERNEL = re.compile(rules.COLLECTIVE_KERNELS, re.IGNORECASE)


# ---------------------------------------------------------------- the tables agree


def test_every_row_of_every_table_says_why_and_where_its_names_come_from():
    for table in (rules.COLLECTIVES, rules.KV_CACHE_WRITES, rules.LAUNCH_CALLS, rules.HOST_CATEGORIES):
        assert table and all(row.reason and row.source for row in table), table
    assert all(row.reason for row in FAMILY_RULES)
    assert all(row.kernel or row.op for row in rules.COLLECTIVES)
    assert {c.kind for c in rules.LAUNCH_CALLS} == set(rules.LAUNCH_KINDS)
    from dashboard.engine.rules.op_readers import OP_READERS

    assert all(row.source for row in OP_READERS)  # an op schema's reason is its pattern: the op it reads


def test_one_table_feeds_another_instead_of_a_copy_of_its_patterns():
    communication = [r for r in FAMILY_RULES if r.family == "communication"]
    assert [r.name for r in communication] == [rules.COLLECTIVE_KERNELS]
    assert [r.name for r in FAMILY_RULES if r.family == "copy" and "KV_CACHE_WRITES" in r.reason] == [
        rules.KV_CACHE_WRITE_KERNELS
    ]
    from dashboard.engine.analyses import classes, copies
    from dashboard.engine.compare import diff

    # graphs and the roofline ask the classes table, whose launch column is rules.LAUNCH_CALLS' rows
    assert dict(classes.LAUNCH_KINDS)["graph"].pattern == diff.GRAPH_LAUNCHES == rules.GRAPH_LAUNCH
    assert dict(classes.LAUNCH_KINDS)["kernel"].pattern == rules.KERNEL_LAUNCH
    assert diff.KERNEL_LAUNCHES == rules.KERNEL_LAUNCH
    assert diff.TIMELINE_CPU == diff.OP_CATEGORIES == rules.HOST_SPANS + LAUNCH_CATEGORIES
    assert copies.KV_CACHE_WRITE == "(?i)" + rules.KV_CACHE_WRITE_KERNELS
    assert not hasattr(copies, "COMMUNICATION_OPS")  # the op rows are read through rules.is_collective_op


@pytest.mark.parametrize("row", rules.COLLECTIVES, ids=lambda c: c.pattern[:30])
def test_each_collective_row_takes_its_examples_in_both_tables_it_feeds(row):
    for name in row.examples:
        assert re.search(row.pattern, parse(name).qualname if row.kernel else name, re.IGNORECASE), name
        if row.kernel:
            assert family_of(name) == "communication", name
        if row.op:
            assert rules.is_collective_op(name), name
            assert classify_chain([name, "aten::copy_"])[1] == COMMUNICATION, name


@pytest.mark.parametrize("row", rules.KV_CACHE_WRITES, ids=lambda r: r.pattern)
def test_a_kv_cache_write_is_a_copy_kernel(row):
    assert row.examples
    for name in row.examples:
        assert rules.is_kv_cache_write(name) and family_of(name) == "copy", name


def test_every_name_the_copies_kv_rule_takes_is_in_the_copy_family(names):
    """copies.py only looks at copy kernels: a KV-cache name outside the copy family would be a rule
    that never fires (the old rule's set_kv_buffer and store_kv_cache were such names)."""
    taken = [n for n in names if rules.is_kv_cache_write(n)]
    assert taken and [n for n in taken if family_of(n) != "copy"] == []
    assert not rules.is_kv_cache_write("set_kv_buffer_kernel") and family_of("set_kv_buffer_kernel") != "copy"


def test_no_name_is_in_two_exclusive_categories(names):
    # a collective kernel is communication, never a KV-cache write or attention that hides it
    collective = [n for n in names if COLLECTIVE_KERNEL.search(parse(n).qualname)]
    assert collective and [n for n in collective if family_of(n) != "communication"] == []
    assert [n for n in names if rules.is_kv_cache_write(n) and COLLECTIVE_KERNEL.search(parse(n).qualname)] == []
    # a launch call replays a graph or launches one kernel, not both
    graph, kernel = re.compile(rules.GRAPH_LAUNCH), re.compile(rules.KERNEL_LAUNCH)
    assert [n for n in names if graph.search(n) and kernel.search(n)] == []
    for call in rules.LAUNCH_CALLS:
        assert bool(graph.search(call.name)) == (call.kind == "graph") and bool(kernel.search(call.name)) == (
            call.kind == "kernel"
        )
    assert {"cudaGraphLaunch", "hipGraphLaunch"} <= {n for n in names if graph.search(n)}  # the traces' own calls
    # the host side is neither device work nor a launch call
    assert not set(rules.HOST_SPANS) & (set(GPU_CATEGORIES) | set(LAUNCH_CATEGORIES))
    assert len(set(rules.HOST_SPANS)) == len(rules.HOST_SPANS)


# ---------------------------------------------------------------- a user's rows


GOOD_TOML = """
[[family]]
family = "elementwise"
name = "^ampere_sgemm"
reason = "a test: our GEMM counted as elementwise"

[[backend]]
backend = "flash-attn"
kernel = "^our_flash_fwd$"
reason = "our fork"
source = "our repo"

[[collective]]
pattern = "^fbgemm::permute_sparse_features$"
kernel = false
reason = "a test: treat the permute as communication staging"
"""


def test_a_rules_file_gives_rows_in_order_with_their_defaults(tmp_path):
    toml = tmp_path / "rules.toml"
    toml.write_text(GOOD_TOML)
    more = tmp_path / "more.json"
    more.write_text(
        json.dumps({"family": [{"family": "gemm", "name": "^our_mm", "template": "half", "reason": "ours"}]})
    )
    got = rules.read_rules([str(toml), str(more)])
    assert got.files == (str(toml), str(more))
    assert [(f.family, f.name, f.template, f.source) for f in got.families] == [
        ("elementwise", "^ampere_sgemm", "", str(toml)),
        ("gemm", "^our_mm", "half", str(more)),
    ]
    (backend,) = got.backends
    flash = next(b for b in rules.BACKEND_TABLE if b.name == "flash-attn")
    assert (
        backend.name,
        backend.kernel,
        backend.op,
        backend.fused,
        backend.library,
        backend.source,
        backend.reason,
    ) == ("flash-attn", "^our_flash_fwd$", "", flash.fused, flash.library, "our repo", "our fork")
    (collective,) = got.collectives
    assert (collective.kernel, collective.op) == (False, True)
    assert rules.read_rules([]) == rules.UserRules()


BAD = {
    "missing.toml": (None, "cannot be read"),
    "rules.yaml": ("family: []", "a rules file must be .toml or .json"),
    "broken.toml": ("[[family]\nname = 1", "is not valid TOML"),
    "broken.json": ('{"family": [', "is not valid JSON"),
    "list.json": ("[]", "must hold sections of rows"),
    "section.toml": ("[[families]]\nname = 'x'", "unknown section 'families' (known: backend, family, collective)"),
    "notalist.json": ('{"family": {"name": "x"}}', "'family' must be a list of rows"),
    "key.toml": (
        "[[family]]\nfamily = 'gemm'\nname = 'x'\nreason = 'r'\ncolour = 'red'",
        "family row 1: unknown key 'colour'",
    ),
    "absent.toml": ("[[family]]\nfamily = 'gemm'\nreason = 'r'", "family row 1: 'name' is missing"),
    "regex.toml": (
        "[[family]]\nfamily = 'gemm'\nname = '(unclosed'\nreason = 'r'",
        "family row 1: 'name' is not a regular expression (missing ), unterminated subpattern at position 0)",
    ),
    "family.toml": (
        "[[family]]\nfamily = 'matmul'\nname = 'x'\nreason = 'r'",
        "family row 1: 'matmul' is not a family",
    ),
    "fused.toml": (
        "[[family]]\nfamily = 'fused attention'\nname = 'x'\nreason = 'r'",
        "attention kernels take a [[backend]] row",
    ),
    "backend.json": (
        '{"backend": [{"backend": "fa9", "kernel": "x", "reason": "r"}]}',
        "backend row 1: 'fa9' is not a backend",
    ),
    "nopattern.toml": ("[[backend]]\nbackend = 'flash'\nreason = 'r'", "backend row 1: give 'op' or 'kernel'"),
    "neither.toml": ("[[collective]]\npattern = 'x'\nkernel = false\nop = false\nreason = 'r'", "would match nothing"),
    "flag.json": (
        '{"collective": [{"pattern": "x", "op": "yes", "reason": "r"}]}',
        "collective row 1: 'op' must be true or false",
    ),
    "reason.toml": ("[[collective]]\npattern = 'x'\nreason = ' '", "collective row 1: 'reason' is empty"),
    "second.toml": (
        "[[family]]\nfamily = 'gemm'\nname = 'x'\nreason = 'r'\n[[family]]\nfamily = 'gemm'\nname = 7\nreason = 'r'",
        "family row 2: 'name' must be text",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_file_that_cannot_be_used_is_one_line_naming_it_and_the_problem(tmp_path, name):
    text, problem = BAD[name]
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(rules.RulesError) as caught:
        rules.read_rules([str(path)])
    message = str(caught.value)
    assert message.startswith(f"{settings.RULES.name}: {path}: ") and problem in message, message
    assert "\n" not in message


def test_the_files_are_read_once_per_process(tmp_path, monkeypatch):
    path = tmp_path / "rules.toml"
    path.write_text(GOOD_TOML)
    monkeypatch.setenv(settings.RULES.name, f" {path}{os.pathsep}{os.pathsep}")
    assert rules.rule_files() == [str(path)]
    rules.user_rules.cache_clear()
    try:
        first = rules.user_rules()
        path.write_text("not toml at all [")
        assert rules.user_rules() is first and len(first.families) == 1
    finally:
        monkeypatch.delenv(settings.RULES.name)
        rules.user_rules.cache_clear()
    assert rules.user_rules() == rules.UserRules()


def _python(code: str, env_rules: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != settings.RULES.name}
    if env_rules is not None:
        env[settings.RULES.name] = env_rules
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_users_rows_change_the_classification_and_only_where_they_match(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text(GOOD_TOML)
    code = (
        "from dashboard.engine.analyses.kernels import family_of\n"
        "from dashboard.engine.rules import attention_backend, is_collective_op\n"
        "from dashboard.engine.analyses.copies import classify_chain\n"
        "b = attention_backend('our_flash_fwd')\n"
        "print(family_of('ampere_sgemm_128x64_nn'), family_of('our_flash_fwd'), b.name if b else None, "
        "is_collective_op('fbgemm::permute_sparse_features'), "
        "classify_chain(['fbgemm::permute_sparse_features', 'aten::item', 'aten::_local_scalar_dense'])[1], "
        "family_of('fbgemm::permute_sparse_features'), family_of('ampere_hgemm_64x64_nn'))\n"
    )
    assert _python(code, None).split() == ["gemm", "other", "None", "False", "requested", "embedding", "gemm"]
    assert _python(code, str(path)).split() == [
        "elementwise",
        "fused",
        "attention",
        "flash-attn",
        "True",
        "communication",
        "embedding",
        "gemm",
    ]


def _summary(env_rules: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != settings.RULES.name}
    if env_rules is not None:
        env[settings.RULES.name] = env_rules
    return subprocess.run(
        [sys.executable, "-m", "dashboard", "summary", "--json", "--no-store", str(A100)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_summary_reads_a_users_rows(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(
        json.dumps(
            {
                "family": [{"family": "elementwise", "name": "^ampere_sgemm", "reason": "a test"}],
                "collective": [{"pattern": "^fbgemm::permute_sparse_features$", "kernel": False, "reason": "a test"}],
            }
        )
    )
    plain, mine = _summary(None), _summary(str(path))
    assert plain.returncode == mine.returncode == 0, mine.stderr
    before, after = json.loads(plain.stdout)[0], json.loads(mine.stdout)[0]
    assert before["steps"] != after["steps"]  # the sgemm time moved from gemm to elementwise
    classes = lambda s: {tuple(c["op_chain"]): c["class"] for c in s["copies"]}  # noqa: E731
    moved = {chain for chain, cls in classes(after).items() if classes(before)[chain] != cls}
    assert moved and all(
        chain[0] == "fbgemm::permute_sparse_features" and classes(after)[chain] == COMMUNICATION for chain in moved
    )
    assert {k: v for k, v in before.items() if k not in ("steps", "copies")} == {
        k: v for k, v in after.items() if k not in ("steps", "copies")
    }


def test_the_cli_refuses_a_bad_rules_file_in_one_line(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text("[[family]]\nfamily = 'gemm'\nname = '(unclosed'\nreason = 'r'\n")
    done = _summary(str(path))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"attnscope: error: {settings.RULES.name}: {path}: family row 1: 'name' is not a regular expression "
        "(missing ), unterminated subpattern at position 0)"
    ]


def test_the_dashboard_shows_a_bad_rules_file_in_one_line_and_draws_nothing(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    path = tmp_path / "rules.json"
    path.write_text('{"family": [{"family": "gemm", "name": "x"}]}')
    monkeypatch.setenv(settings.RULES.name, str(path))
    monkeypatch.setenv(settings.TRACES.name, "")
    rules.user_rules.cache_clear()
    try:
        at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=120)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        errors = [re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", e.value) for e in at.main.error]  # the Markdown escapes undone
        assert errors == [f"{settings.RULES.name}: {path}: family row 1: 'reason' is missing"]
        assert len(at.tabs) == 0  # st.stop(): no run picker, no tabs drawn from rules the user did not mean
    finally:
        monkeypatch.delenv(settings.RULES.name)
        rules.user_rules.cache_clear()

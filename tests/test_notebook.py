"""docs/notebook.md cannot go stale: its Python blocks run here in order, in one namespace, from
the repository root, and what each prints (a block whose last statement is an expression shows
that value's repr, as a notebook cell or the REPL does) must be exactly the `text` block that
follows it on the page. `python tests/test_notebook.py --update` rewrites those text blocks from
a run (then read the diff).

Beside it, the facade's numbers against an independent reading of the bundled H200 traces with
the json module alone: kernels and copies per step (a GPU event's step is the ProfilerStep whose
span holds the launch call with its correlation id), the hidden copy's bytes, the step spans.
"""

from __future__ import annotations

import ast
import contextlib
import gzip
import io
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "notebook.md"
H200 = REPO / "sample_traces" / "h200"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.DOTALL | re.MULTILINE)


def blocks(text: str) -> list[tuple[str, str | None, tuple[int, int] | None]]:
    """(code, the text block after it or None, that block's span in `text`) per python block: a
    text block belongs to the python block right before it (nothing but blank lines between)."""
    fences = list(FENCE.finditer(text))
    out = []
    for i, fence in enumerate(fences):
        if fence.group(1) != "python":
            continue
        after = fences[i + 1] if i + 1 < len(fences) else None
        if after is not None and after.group(1) == "text" and not text[fence.end() : after.start()].strip():
            out.append((fence.group(2), after.group(2), after.span(2)))
        else:
            out.append((fence.group(2), None, None))
    return out


def run_cell(code: str, namespace: dict) -> str:
    """What running `code` prints, as a notebook cell shows it: a last expression's value (not
    None) is printed with repr."""
    tree = ast.parse(code)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(tree, "<notebook>", "exec"), namespace)  # noqa: S102 - the page's own code
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<notebook>", "eval"), namespace)
            if value is not None:
                print(repr(value))
    return out.getvalue()


def run_page(text: str) -> list[tuple[str, str | None, tuple[int, int] | None, str]]:
    """Every python block run in order from the repository root with polars' display settings
    restored after: (code, shown, span, printed)."""
    import polars as pl

    namespace: dict = {"__name__": "__notebook__"}
    here = os.getcwd()
    os.chdir(REPO)
    try:
        with pl.Config():  # the page sets display options; they end with it
            return [(code, shown, span, run_cell(code, namespace)) for code, shown, span in blocks(text)]
    finally:
        os.chdir(here)


def test_the_notebook_page_prints_what_it_shows():
    text = PAGE.read_text()
    ran = run_page(text)
    assert len(ran) >= 8, "the page lost its session"
    for code, shown, _, printed in ran:
        first = code.strip().splitlines()[-1]
        if shown is None:
            assert printed == "", f"the block ending {first!r} prints but the page shows nothing after it:\n{printed}"
        else:
            assert printed == shown, (
                f"the block ending {first!r} prints other than the page shows "
                "(run `python tests/test_notebook.py --update`)"
            )


def test_the_notebook_page_is_in_the_site_nav():
    assert re.search(r"^\s*- .*: notebook\.md$", (REPO / "mkdocs.yml").read_text(), re.MULTILINE)


# --- the facade against the json module ---------------------------------------------------------


def read_json(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def gpu_steps(doc: dict) -> list[tuple[int, dict]]:
    """(step number, event) for every kernel and GPU memcpy/memset whose launch call (the
    cuda_runtime or cuda_driver event with its correlation id) starts inside a ProfilerStep."""
    events = doc["traceEvents"]
    spans = [
        (int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    launch = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    out = []
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            ts = launch.get(e["args"].get("correlation"))
            step = next((n for n, start, end in spans if ts is not None and start <= ts < end), None)
            if step is not None:
                out.append((step, e))
    return out


@pytest.fixture(scope="module")
def facade():
    from dashboard.engine import TraceAnalysis

    return {name: TraceAnalysis(H200 / f"{name}.json.gz") for name in ("naive", "sdpa-math")}


def test_masked_fill_kernels_and_the_hidden_memcpy_per_step_match_the_json(facade):
    doc = read_json(H200 / "naive.json.gz")
    found = gpu_steps(doc)
    masked = Counter(step for step, e in found if e["cat"] == "kernel" and "masked_fill" in e["name"])
    memcpy = {}
    for step, e in found:
        if e["cat"] == "gpu_memcpy":
            memcpy[step] = memcpy.get(step, 0) + e["args"]["bytes"]
    assert sorted(masked) == [2, 3, 4] and set(masked.values()) == {1}  # what the page says: one a step
    ta = facade["naive"]
    kernels = ta.kernels()
    rows = kernels.filter(kernels["name"].str.contains("masked_fill", literal=True))
    assert rows["count"].sum() == sum(masked.values())
    assert rows["per_step"].sum() == pytest.approx(sum(masked.values()) / len(masked))
    hidden = ta.copies(hidden=True)
    assert (
        dict(zip(hidden["step"].to_list(), hidden["bytes"].to_list()))
        == memcpy
        == {2: 268435456, 3: 268435456, 4: 268435456}
    )
    steps = ta.steps()
    spans = {
        int(e["name"].split("#")[1]): e["dur"]
        for e in doc["traceEvents"]
        if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"
    }
    assert steps["step"].to_list() == sorted(spans)
    assert steps["dur_ns"].to_list() == [round(spans[s] * 1000) for s in sorted(spans)]
    assert steps["kernel"].to_list() == [
        sum(1 for n, e in found if n == s and e["cat"] == "kernel") for s in sorted(spans)
    ]


def test_copy_kernels_per_step_match_the_json(facade):
    found = gpu_steps(read_json(H200 / "sdpa-math.json.gz"))
    per_step = Counter(step for step, e in found if e["cat"] == "kernel" and "copy" in e["name"].lower())
    assert per_step == {2: 5, 3: 5, 4: 5}
    ta = facade["sdpa-math"]
    copies = ta.copies(in_steps=True)
    assert Counter(copies.filter(copies["kind"] == "kernel")["step"].to_list()) == per_step
    kernels = ta.kernels()
    assert kernels.filter(kernels["name"].str.to_lowercase().str.contains("copy", literal=True))["per_step"].sum() == 5
    assert ta.backends().backends == ["math"] and not ta.fallback()


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit(__doc__)
    sys.path.insert(0, str(REPO))
    text = PAGE.read_text()
    edits = []
    for code, shown, span, printed in run_page(text):
        if span is not None:
            edits.append((span, printed))
        elif printed:
            sys.exit(
                f"the block ending {code.strip().splitlines()[-1]!r} prints, but no text block follows it: add one"
            )
    for (start, end), printed in reversed(edits):
        text = text[:start] + printed + text[end:]
    PAGE.write_text(text)
    print(f"{PAGE.relative_to(REPO)}: {len(edits)} outputs written")

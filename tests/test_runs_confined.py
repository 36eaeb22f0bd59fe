"""Server folders named at start are read only under their root: a runs.json entry naming
../something or an absolute path, or a symbolic link in the folder that leads out of it, is not
read; it is one error naming the entry and why, and the other runs still open. `attnscope ingest
FOLDER` skips a symbolic link out of the folder with a warning."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import oracle
from dashboard.cli import main as cli_main
from dashboard.engine.store.ingest import discover as ingest_discover
from dashboard.engine.store.ingest import ingest
from dashboard.engine.store.store import Store
from dashboard.catalog import ENV_TRACES, discover
from dashboard.runs import trace_cache

APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
H100 = oracle.DATA / "tracelens_h100_bert_sdpa_flash.json.gz"
MINI = oracle.DATA / "hta_mi250_rocm_minitoy.json.gz"
TRITON = oracle.DATA / "hta_triton_example.json.gz"


@pytest.fixture()
def layout(tmp_path) -> dict[str, Path]:
    """A served folder with one good run, and a secret trace beside it (outside the folder)."""
    served = tmp_path / "served"
    served.mkdir()
    shutil.copy(MINI, served / "good.json.gz")
    secret = tmp_path / "secret.json.gz"
    shutil.copy(H100, secret)
    return {"served": served, "secret": secret}


def manifest(folder: Path, traces: list[str]) -> None:
    runs = [{"variant": Path(t).name.split(".")[0], "trace": t} for t in traces]
    (folder / "runs.json").write_text(json.dumps({"collection": "served", "runs": runs}))


@pytest.mark.parametrize("entry", ["../secret.json.gz", "ABSOLUTE"])
def test_a_manifest_entry_naming_a_file_outside_its_folder_is_refused(layout, entry, tmp_path):
    served = layout["served"]
    entry = str(layout["secret"]) if entry == "ABSOLUTE" else entry
    manifest(served, ["good.json.gz", entry])
    [collection], loose, failures = discover(root=tmp_path / "no-bundled", extra=[served])
    assert [s.name for s in collection.sources] == ["good.json.gz"]  # the other run still opens
    assert [f.message for f in failures] == [
        f"{entry} (listed in {served / 'runs.json'}): outside its folder (an absolute path or '..'); not read"
    ]


def test_a_symbolic_link_out_of_a_collection_is_refused_and_one_inside_is_read(layout, tmp_path):
    served = layout["served"]
    (served / "leak.json.gz").symlink_to(layout["secret"])
    (served / "alias.json.gz").symlink_to(served / "good.json.gz")
    manifest(served, ["good.json.gz", "leak.json.gz", "alias.json.gz"])
    [collection], _, failures = discover(root=tmp_path / "no-bundled", extra=[served])
    assert [s.name for s in collection.sources] == ["good.json.gz", "alias.json.gz"]
    assert [f.message for f in failures] == [
        f"leak.json.gz (listed in {served / 'runs.json'}): outside its folder (a symbolic link out of it); not read"
    ]


def test_a_symbolic_link_out_of_a_folder_of_traces_is_refused(layout, tmp_path):
    served = layout["served"]
    (served / "leak.json.gz").symlink_to(layout["secret"])
    _, loose, failures = discover(root=tmp_path / "no-bundled", extra=[served])
    assert [s.name for s in loose] == ["good.json.gz"]
    assert [f.message for f in failures] == [
        f"{served / 'leak.json.gz'}: outside its folder (a symbolic link out of it)"
    ]


def test_the_dashboard_shows_the_refused_entry_and_opens_the_other_runs(layout, tmp_path, monkeypatch):
    served = layout["served"]
    (served / "leak.json.gz").symlink_to(layout["secret"])
    manifest(served, ["good.json.gz", "../secret.json.gz", "leak.json.gz"])
    monkeypatch.setenv("ATTNSCOPE_STORE", str(tmp_path / "store"))
    monkeypatch.setenv(ENV_TRACES, str(served))
    trace_cache.clear()
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    assert not at.exception
    errors = [re.sub(r"\\(.)", r"\1", e.value) for e in at.sidebar.error]
    assert len(errors) == 2
    assert errors[0].startswith("../secret.json.gz (listed in") and "outside its folder" in errors[0]
    assert errors[1].startswith("leak.json.gz (listed in") and "symbolic link out of it" in errors[1]
    assert at.multiselect[0].value == ["served/good"]
    assert at.get_by_key("tbl_overview").dataframe[0].value["run"].tolist() == ["good"]
    assert not any(o.startswith("served/leak") or "secret" in o for o in at.multiselect[0].options)
    trace_cache.clear()


def test_ingest_skips_a_symbolic_link_out_of_the_folder_with_a_warning(layout, tmp_path, capsys):
    served = layout["served"]
    shutil.copy(TRITON, served / "other.json.gz")
    (served / "leak.json.gz").symlink_to(layout["secret"])
    outside_dir = tmp_path / "elsewhere"
    outside_dir.mkdir()
    shutil.copy(H100, outside_dir / "deep.json.gz")
    (served / "linked").symlink_to(outside_dir, target_is_directory=True)
    line = f"{served / 'leak.json.gz'}: outside {served} (a symbolic link out of it); skipped"
    skipped: list[str] = []
    groups = ingest_discover([served], skipped)
    assert groups == [("served", [served / "good.json.gz", served / "other.json.gz"])]
    assert skipped == [line]
    done = ingest([served], Store(tmp_path / "store"))
    assert done.errors == [] and done.warnings == [line]
    assert sorted(label for _, label, _ in done.runs) == ["good.json.gz", "other.json.gz"]
    stored = {t.source for t in Store(tmp_path / "store").traces()}
    assert stored == {"good.json.gz", "other.json.gz"} and not any("secret" in s or "deep" in s for s in stored)
    capsys.readouterr()
    assert cli_main(["ingest", "--store", str(tmp_path / "store2"), str(served)]) == 0
    assert f"attnscope: warning: {line}" in capsys.readouterr().err.splitlines()
    assert cli_main(["summary", "--no-store", str(served)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err.count(f"attnscope: warning: {line}") == 1
    assert os.path.exists(layout["secret"])

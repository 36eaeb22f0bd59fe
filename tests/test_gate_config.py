"""[tool.attnscope.check] read without the standard library's tomllib (Python 3.10): through the
tomli package when it is installed, else a one-line error that names the file (and a
pyproject.toml without the table passed over, as it cannot hold one)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dashboard import cli
from dashboard.engine.compare import verdict

ROOT = Path(__file__).resolve().parents[1]
CPU = ROOT / "sample_traces" / "cpu"
TABLE = '[tool.attnscope.check]\nmax-slowdown = 5\nrules = { new_families = "fail", health = "off" }\n'


@pytest.fixture
def no_tomllib(monkeypatch):
    """Python 3.10 as far as `import tomllib` goes (a None in sys.modules makes the import fail)."""
    monkeypatch.setitem(sys.modules, "tomllib", None)
    with pytest.raises(ImportError):
        import tomllib  # noqa: F401


def test_tomli_reads_the_table_when_tomllib_is_missing(tmp_path, monkeypatch, no_tomllib):
    tomli = pytest.importorskip("tomli")  # the test extra installs it
    read = []
    real_load = tomli.load
    monkeypatch.setattr(tomli, "load", lambda fh: read.append(fh.name) or real_load(fh))
    path = tmp_path / "pyproject.toml"
    path.write_text('[project]\nname = "demo"\n' + TABLE)
    assert verdict.read_config(path) == {"max-slowdown": 5, "rules": {"new_families": "fail", "health": "off"}}
    assert read == [str(path)]
    # tomli's own parse error, named with the file
    path.write_text("[tool.attnscope.check]\nmax-slowdown = = 5\n")
    with pytest.raises(ValueError, match=rf"^{path}: ") as err:
        verdict.read_config(path)
    assert "\n" not in str(err.value)
    assert isinstance(err.value.__context__, tomli.TOMLDecodeError)


def test_the_check_applies_a_config_read_through_tomli(tmp_path, monkeypatch, capsys, no_tomllib):
    pytest.importorskip("tomli")
    (tmp_path / "pyproject.toml").write_text(TABLE)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "check.json"
    # naive_inplace against itself holds; the config turns health off and is recorded
    assert (
        cli.main(
            [
                "check",
                "--no-store",
                str(CPU / "naive_inplace.json.gz"),
                str(CPU / "naive_inplace.json.gz"),
                "--json",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads(out.read_text())
    assert record["config"] == str(tmp_path / "pyproject.toml")
    rules = {r["rule"]: r for r in record["rules"]}
    assert rules["health"]["status"] == "skip" and rules["step_time"]["threshold"] == 5
    assert rules["new_families"]["level"] == "fail"


def test_without_a_toml_reader_a_config_is_one_line_naming_the_file(tmp_path, monkeypatch, capsys, no_tomllib):
    monkeypatch.setitem(sys.modules, "tomli", None)
    path = tmp_path / "pyproject.toml"
    path.write_text('[project]\nname = "attnscope-user"\n' + TABLE)
    with pytest.raises(ValueError) as err:
        verdict.read_config(path)
    assert str(err.value) == (
        f"{path}: reading its [tool.attnscope.check] table needs Python 3.11 or the tomli package (pip install tomli)"
    )
    # the check exits 2 with that one line (found by walking up from a folder below)
    below = tmp_path / "src"
    below.mkdir()
    monkeypatch.chdir(below)
    trace = str(CPU / "naive_inplace.json.gz")
    assert cli.main(["check", "--no-store", trace, trace]) == 2
    assert capsys.readouterr().err.splitlines() == [f"attnscope: error: {err.value}"]
    # the table's other spellings are caught too
    for text in (
        "[tool.attnscope]\ncheck = { max-slowdown = 5 }\n",
        "[tool]\nattnscope.check.max-slowdown = 5\n",
        "tool.attnscope.check.max-slowdown = 5\n",
        '[ tool . "attnscope" . check ]\nmax-slowdown = 5\n',
    ):
        path.write_text(text)
        with pytest.raises(ValueError, match="needs Python 3.11 or the tomli package"):
            verdict.read_config(path)


def test_without_a_toml_reader_a_pyproject_without_the_table_is_passed_over(tmp_path, monkeypatch, capsys, no_tomllib):
    monkeypatch.setitem(sys.modules, "tomli", None)
    path = tmp_path / "pyproject.toml"
    # the project's own name and script say attnscope, but no [tool.attnscope.check]
    path.write_text(
        '[project]\nname = "attnscope"\n[project.scripts]\nattnscope = "dashboard.cli:main"\n[tool.other]\nx = 1\n'
    )
    assert verdict.read_config(path) is None
    monkeypatch.chdir(tmp_path)
    trace = str(CPU / "naive_inplace.json.gz")
    assert cli.main(["check", "--no-store", trace, trace]) == 0
    assert "error" not in capsys.readouterr().err
    # --config names the file: no table there is an error, as with tomllib
    assert cli.main(["check", "--no-store", trace, trace, "--config", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"attnscope: error: {path}: no [tool.attnscope.check] table"]

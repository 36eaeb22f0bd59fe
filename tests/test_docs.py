"""The docs say what the code does: the MkDocs site builds with no warning (every internal link and
anchor resolves), the README's relative links exist, the generated pages (docs/cli.md,
docs/tables.md) are what `python docs/gen_cli.py` writes now, every flag and ATTNSCOPE_ variable the
docs name exists and every one that exists is documented, and the version is one number."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _gen():
    spec = importlib.util.spec_from_file_location("gen_cli", ROOT / "docs" / "gen_cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen():
    pytest.importorskip("torch", reason="the collectors' parsers import torch (pip install -e '.[collectors]')")
    return _gen()


@pytest.fixture(scope="module")
def flags(gen):
    return gen.known_flags()


def _mkdocs_or_skip() -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        if os.environ.get("CI"):
            pytest.fail("mkdocs and mkdocs-material are missing: the test extra installs them")
        pytest.skip("mkdocs and mkdocs-material are not installed (pip install -e '.[test]')")


def test_the_docs_build_with_no_warning(tmp_path):
    _mkdocs_or_skip()
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    warnings = [line for line in run.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert run.returncode == 0 and not warnings, "\n".join(warnings) or run.stderr[-3000:]
    assert (tmp_path / "site" / "cli" / "index.html").exists()
    assert "0.1.0" in (tmp_path / "site" / "changelog" / "index.html").read_text()
    fetched = off_host_fetches(tmp_path / "site")
    assert fetched == [], f"the built site fetches from off the machine: {fetched[:5]}"


# What a page makes the browser fetch by itself: a <link> (stylesheet, preconnect, font), <script>,
# <img> or <iframe> with an address, a CSS @import or url(). An <a href> is a link a reader follows.
FETCHING_TAG = re.compile(r"<(?:link|script|img|iframe|source)\b[^>]*>", re.IGNORECASE)
ADDRESS = re.compile(r"""(?:href|src|srcset)\s*=\s*["']?\s*((?:https?:)?//[^"'\s>]+)""", re.IGNORECASE)
CSS_FETCH = re.compile(r"""(?:@import\s+|url\(\s*)["']?((?:https?:)?//[^"')\s]+)""", re.IGNORECASE)


def off_host_fetches(site: Path) -> list[str]:
    """Every address off this host that a built page or its CSS makes a browser fetch: file: address."""
    found = []
    for path in sorted(site.rglob("*")):
        if path.suffix not in (".html", ".css"):
            continue
        text = path.read_text(errors="replace")
        tags = FETCHING_TAG.findall(text) if path.suffix == ".html" else []
        for address in [a for tag in tags for a in ADDRESS.findall(tag)] + CSS_FETCH.findall(text):
            found.append(f"{path.relative_to(site)}: {address}")
    return found


def test_the_off_host_check_finds_the_theme_fonts_it_is_there_for(tmp_path):
    """The check above, on the page Material writes with its default font: Google's two addresses."""
    (tmp_path / "index.html").write_text(
        '<link rel="preconnect" href="https://fonts.gstatic.com" crossorigin>'
        '<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto:300&display=fallback">'
        '<a href="https://squidfunk.github.io/mkdocs-material/">Material</a><script src="../assets/x.js"></script>'
    )
    (tmp_path / "a.css").write_text('@import url("//fonts.googleapis.com/css?family=Roboto");')
    assert off_host_fetches(tmp_path) == [
        "a.css: //fonts.googleapis.com/css?family=Roboto",
        "index.html: https://fonts.gstatic.com",
        "index.html: https://fonts.googleapis.com/css?family=Roboto:300&display=fallback",
    ]


def test_the_readme_is_short_and_keeps_its_two_commands():
    lines = README.read_text().splitlines()
    assert len(lines) < 200
    assert lines[3].startswith("pip install -e . && streamlit run dashboard/app.py")
    assert lines[4].startswith('pip install torch==2.13.0 && pip install -e ".[collectors,test]" && python -m pytest')


def test_every_relative_link_of_the_readme_exists():
    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    local = [link.split("#")[0] for link in links if not re.match(r"[a-z]+:", link) and not link.startswith("#")]
    assert local, "the README links into docs/"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_generated_pages_are_what_the_generator_writes_now(gen):
    problems = gen.stale()
    assert not problems, "\n".join(problems) + f"\nregenerate: {gen.REGENERATE}"


def test_every_flag_and_variable_the_docs_name_exists_and_every_one_is_documented(gen, flags):
    required = [f for f, owner in flags.items() if owner.startswith(("attnscope", "python -m collectors"))]
    env_code = gen.code_env_vars()
    env_known = env_code | gen.code_env_vars(ROOT, ("tests", "benchmarks"))
    assert {"--version", "--max-slowdown", "--memory-cap"} <= set(required)
    assert "ATTNSCOPE_MAX_JSON_BYTES" in env_code and "_ATTNSCOPE_SLICE_WORKER" not in env_code
    problems = gen.check_names(gen.doc_texts(), flags, env_code, env_known, required)
    assert not problems, "\n".join(problems)


def test_every_command_and_mode_has_a_hand_written_page(gen):
    written = "\n".join(text for name, text in gen.doc_texts().items() if Path(name).name not in gen.GENERATED)
    for name in gen.subcommands(gen.attnscope_parser()):
        assert f"attnscope {name}" in written, name
    for mode in gen.COLLECTOR_MODES:
        assert f"python -m collectors {mode}" in written, mode


def test_the_check_fails_on_a_deliberate_mismatch(gen, flags, tmp_path):
    required = [f for f, owner in flags.items() if owner.startswith(("attnscope", "python -m collectors"))]
    env_code = gen.code_env_vars()
    env_known = env_code | gen.code_env_vars(ROOT, ("tests", "benchmarks"))
    docs = gen.doc_texts()

    # A flag and a variable that nothing defines, named in a page. (The name is put together here:
    # written whole, this file would be a source that names it, and tests/ is searched for names.)
    variable = "ATTNSCOPE_" + "NO_SUCH_VARIABLE"
    wrong = dict(
        docs, **{"docs/limits.md": docs["docs/limits.md"] + f"\nRun with `--no-such-flag` and {variable}=1.\n"}
    )
    problems = gen.check_names(wrong, flags, env_code, env_known, required)
    assert any("--no-such-flag" in p and "docs/limits.md" in p for p in problems), problems
    assert any(variable in p and "no code reads" in p for p in problems), problems

    # A variable the code reads that no hand-written page names any more.
    gone = {name: text.replace("ATTNSCOPE_STORE_MAX_BYTES", "the store's cap") for name, text in docs.items()}
    problems = gen.check_names(gone, flags, env_code, env_known, required)
    assert any("ATTNSCOPE_STORE_MAX_BYTES" in p and "no hand-written page" in p for p in problems), problems

    # A flag the parsers gain (here: pretended) that no page names.
    problems = gen.check_names(
        docs, {**flags, "--brand-new": "attnscope check"}, env_code, env_known, [*required, "--brand-new"]
    )
    assert problems == ["the flag --brand-new exists but no page names it (regenerate: python docs/gen_cli.py)"]

    # A generated page edited by hand, or left behind by a changed parser.
    copy = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", copy)
    (copy / "cli.md").write_text((copy / "cli.md").read_text().replace("print the version and exit", "print it"))
    stale = gen.stale(copy)
    assert len(stale) == 1 and "docs/cli.md" in stale[0] and "print the version and exit" in stale[0]


def test_the_version_is_one_number():
    from dashboard import __version__

    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1) == __version__
    out = subprocess.run([sys.executable, "-m", "dashboard", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == f"attnscope {__version__}"
    first = re.search(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M).group(1)
    assert first == __version__, "the changelog's first entry is this release"

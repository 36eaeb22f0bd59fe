"""docs/ci.md's CI jobs, end to end on this machine: its GitHub Actions workflow and its GitLab job
are parsed from the page and their steps run in order, a main-branch job and then a pull-request
job, each in a fresh checkout, with the cache carried between them as the YAML says. Two CPU
collections stand for two commits (main collects one attention variant, the pull request
another); the gate's exit code, JSON, JUnit, the Markdown comment posted and the HTML report are
read back. `pip`, `gh` and `curl` are stand-ins that record what they were asked; the `uses:`
actions are played here."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

yaml = pytest.importorskip("yaml")  # PyYAML: mkdocs's (the test extra) and streamlit's dependency

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ci.md"
SCRIPT = ROOT / "examples" / "ci" / "attnscope-ci-steps.sh"
CHECKOUT = ("dashboard", "collectors", "examples", "pyproject.toml")  # what the jobs read of the repository


def ci_steps() -> str:
    text = DOC.read_text()
    return next(
        block for block in re.findall(r"```bash\n(.*?)```", text, re.S) if "examples/ci/attnscope-ci-steps.sh" in block
    )


def yaml_blocks() -> list[dict]:
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)]


def github_workflow() -> dict:
    return next(doc for doc in yaml_blocks() if "jobs" in doc)


def gitlab_job() -> dict:
    [job] = [doc["attnscope"] for doc in yaml_blocks() if "attnscope" in doc]
    return job


STANDINS = {
    # records its arguments; the environment already holds what it would install
    "pip": 'printf "%s\\n" "$*" >> "$LOG/pip"\n',
    # `gh pr comment N --body-file F [--edit-last]`: the body posted; --edit-last fails with no comment yet
    "gh": """printf "%s\\n" "$*" >> "$LOG/gh"
body=""; edit=0; prev=""
for arg in "$@"; do
  [ "$prev" = --body-file ] && body=$arg
  [ "$arg" = --edit-last ] && edit=1
  prev=$arg
done
if [ $edit = 1 ] && [ ! -f "$LOG/comment.md" ]; then echo "no comment to edit" >&2; exit 1; fi
cp "$body" "$LOG/comment.md"
""",
    # curl ... --data-urlencode "body@FILE" URL: the note posted and the URL
    "curl": """printf "%s\\n" "$*" >> "$LOG/curl"
for arg in "$@"; do
  case "$arg" in body@*) cp "${arg#body@}" "$LOG/note.md" ;; esac
done
""",
}


def standins(folder: Path) -> Path:
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, body in STANDINS.items():
        path = bin_dir / name
        path.write_text("#!/usr/bin/env bash\nset -eu\n" + body)
        path.chmod(0o755)
    return bin_dir


def checkout(folder: Path) -> Path:
    """actions/checkout or a GitLab runner's clone: the repository's files the jobs read."""
    folder.mkdir(parents=True)
    for name in CHECKOUT:
        (folder / name).symlink_to(ROOT / name)
    return folder


def shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """A `run:` step or a script line as the runners run it: `bash -e`."""
    return subprocess.run(["bash", "-e", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def base_env(tmp: Path, variant: str) -> dict[str, str]:
    log = tmp / "log"
    log.mkdir(exist_ok=True)
    (tmp / "home").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSCOPE_")}
    env.update(
        {
            "PATH": f"{standins(tmp)}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
            "LOG": str(log),
            "VARIANT": variant,  # the commit's code: which attention variant the collectors run
            "HOME": str(tmp / "home"),  # none of the machine's own caches or stores
        }
    )
    return env


def carry(paths: list[str], src: Path, dst: Path) -> None:
    """A cache's paths from one folder to another (restore or save)."""
    for rel in paths:
        if (src / rel).is_dir():
            shutil.copytree(src / rel, dst / rel, dirs_exist_ok=True)
        elif (src / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, dst / rel)


# ---------- GitHub Actions ----------


def github_expr(expr: str, context: dict) -> object:
    """The few GitHub expressions the workflow uses: context lookups (github.event_name, ...),
    'strings', ==, &&, || (JavaScript's: a value, not a bool) and always()."""

    def lookup(path: str) -> object:
        value: object = context
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value

    tokens = re.findall(r"'[^']*'|always\(\)|&&|\|\||==|[A-Za-z_][\w.-]*", expr)
    assert "".join(tokens) == re.sub(r"\s+", "", expr), f"an expression this test cannot read: {expr}"
    python = []
    for tok in tokens:
        python.append(
            {"&&": " and ", "||": " or ", "==": " == ", "always()": " True "}.get(tok)
            or (repr(tok[1:-1]) if tok.startswith("'") else f"lookup({tok!r})")
        )
    return eval("".join(python), {"lookup": lookup})  # noqa: S307 - tokens checked above


def github_subst(text: str, context: dict) -> str:
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(github_expr(m.group(1), context)), text)


def run_github_job(workflow: dict, event: str, workspace: Path, cache: Path, env: dict[str, str], run_id: int) -> dict:
    """Every step of the workflow's one job, in order, as a runner would for `event` ('push' to
    main or 'pull_request'); the job fails at the first failing step, and a later step runs only
    when its `if:` holds (a step without one runs only while the job has not failed)."""
    context = {"github": {"event_name": event, "run_id": run_id, "token": "t0ken", "event": {"number": 7}}}
    [job] = workflow["jobs"].values()
    failed, record = False, {"artifacts": [], "junit": [], "steps": []}
    for step in job["steps"]:
        condition = step.get("if")
        if condition is None:
            if failed:
                continue
        elif not github_expr(condition.removeprefix("${{").removesuffix("}}"), context) or (
            failed and "always()" not in condition
        ):
            continue
        uses, inputs = step.get("uses", ""), step.get("with") or {}
        if uses.startswith("actions/checkout@"):
            checkout(workspace)
        elif uses.startswith("actions/setup-python@"):
            assert str(inputs["python-version"]).startswith("3.")
        elif uses.startswith("actions/cache/restore@"):
            if cache.exists():
                carry(inputs["path"].split(), cache, workspace)
        elif uses.startswith("actions/cache/save@"):
            cache.mkdir(exist_ok=True)
            carry(inputs["path"].split(), workspace, cache)
        elif uses.startswith("actions/upload-artifact@"):
            record["artifacts"] += [workspace / p for p in inputs["path"].split()]
        elif uses.startswith("mikepenz/action-junit-report@"):
            record["junit"].append(workspace / inputs["report_paths"])
        elif uses:
            pytest.fail(f"a step this test does not play: {uses}")
        else:
            step_env = {**env, **{k: github_subst(str(v), context) for k, v in (step.get("env") or {}).items()}}
            done = shell(github_subst(step["run"], context), workspace, step_env)
            record["steps"].append((step.get("name") or step["run"], done))
            failed = failed or done.returncode != 0
    record["failed"] = failed
    return record


# ---------- GitLab CI ----------


def gitlab_if(expr: str, variables: dict[str, str]) -> bool:
    """A rules:if of the form `$A == $B` or `$A == "text"`."""
    left, op, right = re.fullmatch(r"\s*(\S+)\s*(==|!=)\s*(\S+)\s*", expr).groups()
    value = lambda tok: variables.get(tok[1:], "") if tok.startswith("$") else tok.strip("\"'")  # noqa: E731
    return (value(left) == value(right)) == (op == "==")


def run_gitlab_job(job: dict, predefined: dict[str, str], workspace: Path, cache: Path, env: dict[str, str]) -> dict:
    """The job as a runner runs it for a pipeline with these predefined variables: the first
    matching rule (none: the job does not run) adds its variables over the job's, the cache is
    restored, `script:` runs line by line until one fails, `after_script:` always, and the cache
    is saved when its policy (after variable expansion) pushes."""
    rule = next((r for r in job["rules"] if gitlab_if(r["if"], predefined)), None)
    assert rule is not None, "the job would not run in this pipeline"
    variables = {
        **predefined,
        **{k: str(v) for k, v in job.get("variables", {}).items()},
        **{k: str(v) for k, v in (rule.get("variables") or {}).items()},
    }
    expand = lambda text: re.sub(r"\$(\w+)", lambda m: variables.get(m.group(1), m.group(0)), text)  # noqa: E731
    checkout(workspace)
    spec = job["cache"]
    policy = expand(spec.get("policy", "pull-push"))
    assert policy in ("pull", "pull-push", "push") and spec.get("unprotect") is True
    if policy != "push" and cache.exists():
        carry(spec["paths"], cache, workspace)
    job_env = {**env, **variables}
    record = {"steps": [], "failed": False}
    for line in job["script"]:
        done = shell(line, workspace, job_env)
        record["steps"].append((line, done))
        if done.returncode != 0:
            record["failed"] = True
            break
    for line in job.get("after_script", []):
        record["steps"].append((line, shell(line, workspace, job_env)))
    if policy != "pull" and not record["failed"]:
        cache.mkdir(exist_ok=True)
        carry(spec["paths"], workspace, cache)
    artifacts = job["artifacts"]
    assert artifacts["when"] == "always"
    record["artifacts"] = [workspace / p for p in artifacts["paths"]]
    record["junit"] = [workspace / artifacts["reports"]["junit"]]
    return record


# ---------- what a pull request's job leaves ----------


def read_back(out: Path, holds: bool) -> dict:
    """The gate's outputs, read back: the JSON verdict and rules, the JUnit file against them, the
    Markdown's verdict and op-aligned change, and the HTML report."""
    record = json.loads((out / "check.json").read_text())
    assert record["base"] == "store:main.json.gz" and record["verdict"] == ("pass" if holds else "fail")
    rules = {r["rule"]: r for r in record["rules"]}
    assert rules["hidden_copies"]["status"] == ("pass" if holds else "fail")
    assert rules["step_time"]["details"]["base_steps"] == rules["step_time"]["details"]["candidate_steps"] == 10
    cases = ET.parse(out / "check.xml").getroot().find("testsuite").findall("testcase")
    assert {c.get("name") for c in cases if c.find("failure") is not None} == {
        n for n, r in rules.items() if r["status"] == "fail"
    }
    md = (out / "check.md").read_text()
    assert md.startswith("**attnscope check: " + ("pass" if holds else "FAIL"))
    assert (
        "replaced by `aten::masked_fill_`" if holds else "`aten::masked_fill_` replaced by `aten::masked_fill`"
    ) in md
    assert (out / "report.html").read_bytes().startswith(b"<!") and (out / "report.html").stat().st_size > 10_000
    return record


def said(record: dict) -> str:
    return "\n".join(f"$ {name}\n{done.stdout}{done.stderr[-3000:]}" for name, done in record["steps"])


def test_the_shipped_script_is_the_one_the_page_shows():
    assert SCRIPT.read_text() == ci_steps()
    assert os.access(SCRIPT, os.X_OK)
    calls = [step.get("run", "") for step in github_workflow()["jobs"]["gate"]["steps"]] + gitlab_job()["script"]
    assert sum(call == f"bash {SCRIPT.relative_to(ROOT)}" for call in calls) == 2  # one call in each CI's job


def test_the_github_workflow_gates_a_pull_request_against_mains_stored_trace(tmp_path):
    """main collects the out-of-place masked_fill, the pull request masked_fill_: it holds."""
    workflow = github_workflow()
    cache = tmp_path / "cache"
    main = run_github_job(workflow, "push", tmp_path / "main", cache, base_env(tmp_path, "naive"), run_id=1)
    assert not main["failed"], said(main)
    assert "main.json.gz" in said(main)  # `attnscope ls` names the stored run by its label
    assert (cache / ".attnscope-store").is_dir() and (cache / "attnscope-out" / "main.json.gz").is_file()
    assert not (tmp_path / "log" / "comment.md").exists()  # no comment on a push to main

    pr = run_github_job(workflow, "pull_request", tmp_path / "pr", cache, base_env(tmp_path, "naive_inplace"), run_id=2)
    assert not pr["failed"], said(pr)
    out = tmp_path / "pr" / "attnscope-out"
    read_back(out, holds=True)
    pip = (tmp_path / "log" / "pip").read_text().splitlines()
    assert len(pip) == 2 and all(shlex.split(line)[:3] == ["install", "-e", "."] and "torch" in line for line in pip)
    # the comment: --edit-last finds none the first time, the fallback posts the Markdown as it is
    gh = (tmp_path / "log" / "gh").read_text().splitlines()
    assert gh == [
        "pr comment 7 --body-file attnscope-out/check.md --edit-last",
        "pr comment 7 --body-file attnscope-out/check.md",
    ]
    assert (tmp_path / "log" / "comment.md").read_text() == (out / "check.md").read_text()
    assert pr["artifacts"] == [out / "report.html", out / "check.json"] and all(p.is_file() for p in pr["artifacts"])
    [junit] = pr["junit"]
    assert ET.parse(junit).getroot().find("testsuite").get("failures") == "0"


def test_the_gitlab_job_fails_a_merge_request_that_brings_a_copy_back(tmp_path):
    """main collects masked_fill_, the merge request the out-of-place masked_fill: the job fails,
    and its note, artifacts and JUnit report still come out."""
    job = gitlab_job()
    cache = tmp_path / "cache"
    common = {
        "CI_DEFAULT_BRANCH": "main",
        "CI_API_V4_URL": "https://gitlab.example/api/v4",
        "CI_PROJECT_ID": "42",
        "ATTNSCOPE_TOKEN": "t0ken",
    }
    main = run_gitlab_job(
        job,
        {**common, "CI_COMMIT_BRANCH": "main", "CI_PIPELINE_SOURCE": "push"},
        tmp_path / "main",
        cache,
        base_env(tmp_path, "naive_inplace"),
    )
    assert not main["failed"], said(main)
    assert (cache / "attnscope-out" / "main.json.gz").is_file() and not (tmp_path / "log" / "curl").exists()

    mr = run_gitlab_job(
        job,
        {**common, "CI_PIPELINE_SOURCE": "merge_request_event", "CI_MERGE_REQUEST_IID": "5"},
        tmp_path / "mr",
        cache,
        base_env(tmp_path, "naive"),
    )
    assert mr["failed"], said(mr)
    gate = next(done for line, done in mr["steps"] if "attnscope-ci-steps.sh" in line)
    assert gate.returncode == 1, said(mr)
    out = tmp_path / "mr" / "attnscope-out"
    read_back(out, holds=False)
    [curl] = (tmp_path / "log" / "curl").read_text().splitlines()
    assert (
        curl.endswith("https://gitlab.example/api/v4/projects/42/merge_requests/5/notes")
        and "PRIVATE-TOKEN: t0ken" in curl
    )
    assert (tmp_path / "log" / "note.md").read_text() == (out / "check.md").read_text()
    assert all(p.is_file() for p in mr["artifacts"])
    [junit] = mr["junit"]
    assert int(ET.parse(junit).getroot().find("testsuite").get("failures")) >= 1
    # a merge request's job does not write the cache: main's trace is still the baseline
    assert (cache / "attnscope-out" / "main.json.gz").read_bytes() == (
        tmp_path / "main" / "attnscope-out" / "main.json.gz"
    ).read_bytes()

"""--hub-kernel: the hub variant's FlashAttention from a kernel folder on disk.

The folders are written here: a tiny package whose flash_attn_func computes attention with torch
([batch, seq, heads, head_dim], as the hub kernel takes it). On CPU a folder is allowed (a local
build may be a CPU build); the hub repo (CUDA builds only) is still refused on CPU.
"""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path

import pytest
import torch

from collectors import hub
from collectors.__main__ import main
from collectors.manifest import read_manifest
from collectors.variants import VARIANTS, Unavailable

FAKE_KERNEL = '''
import math
import torch

CALLS = []

def flash_attn_func(q, k, v, causal=False):
    """[batch, seq, heads, head_dim] in and out, like FlashAttention-2."""
    CALLS.append(causal)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(scores, -1) @ v).transpose(1, 2)
'''


@pytest.fixture(autouse=True)
def default_source():
    """Every test starts and ends with the default hub source, and without the `kernels` package
    (the folder must load through the direct import path whether or not it is installed here)."""
    hub.select(None)
    saved = sys.modules.get("kernels")
    sys.modules["kernels"] = None  # type: ignore[assignment]
    yield
    hub.select(None)
    if saved is None:
        sys.modules.pop("kernels", None)
    else:
        sys.modules["kernels"] = saved


def write_kernel(folder: Path, package: str = "fake_flash") -> Path:
    (folder / package).mkdir(parents=True)
    (folder / package / "__init__.py").write_text(FAKE_KERNEL)
    return folder


def test_a_kernel_folder_loads_on_cpu_and_says_how(tmp_path: Path) -> None:
    folder = write_kernel(tmp_path / "kernel")
    kernel = hub.load_kernel(torch.device("cpu"), source=str(folder))
    info = kernel.describe()
    assert info["kind"] == "path" and info["source"] == str(folder)
    assert info["loader"].startswith("importlib") and str((folder / "fake_flash").resolve()) in info["loader"]
    assert info["module_file"] == str(folder / "fake_flash" / "__init__.py")
    assert "`kernels` package is not installed" in info["note"]
    # the function is the folder's: it answers like attention
    q, k, v = (torch.randn(1, 5, 2, 4) for _ in range(3))
    out = kernel.func(q, k, v, causal=True)
    assert out.shape == q.shape
    assert torch.allclose(out[0, 0], v[0, 0], atol=1e-6)  # causal: position 0 sees itself only


def test_the_package_folder_itself_loads_too(tmp_path: Path) -> None:
    package = write_kernel(tmp_path) / "fake_flash"
    assert hub.load_kernel(torch.device("cpu"), source=str(package)).module_file == str(package / "__init__.py")


def test_a_missing_folder_is_unavailable_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "flash"
    with pytest.raises(Unavailable, match=f"--hub-kernel {missing}: no such folder"):
        hub.load_kernel(torch.device("cpu"), source=str(missing))


def test_a_folder_without_flash_attn_func_says_so(tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "__init__.py").write_text("def something():\n    return 1\n")
    with pytest.raises(Unavailable, match="has no flash_attn_func"):
        hub.load_kernel(torch.device("cpu"), source=str(tmp_path))
    (tmp_path / "empty").mkdir()
    with pytest.raises(Unavailable, match="no Python package"):
        hub.load_kernel(torch.device("cpu"), source=str(tmp_path / "empty"))


def test_the_hub_repo_is_still_refused_on_cpu() -> None:
    assert not hub.is_path("kernels-community/flash-attn2")
    assert hub.is_path("./kernels-community/flash-attn2") and hub.is_path("/opt/kernels/flash")
    with pytest.raises(Unavailable, match="ships CUDA builds only; this run is on cpu"):
        hub.load_kernel(torch.device("cpu"), source="kernels-community/flash-attn2")


def test_the_kernels_local_loader_is_used_when_the_package_has_one(tmp_path: Path) -> None:
    folder = write_kernel(tmp_path / "kernel")
    seen: list[Path] = []

    def get_local_kernel(repo_path: Path, backend: str | None = None) -> types.ModuleType:
        seen.append(repo_path)
        return types.SimpleNamespace(__name__="from_kernels", flash_attn_func=lambda *a, **k: "ran")

    sys.modules["kernels"] = types.SimpleNamespace(get_local_kernel=get_local_kernel)  # type: ignore[assignment]
    kernel = hub.load_kernel(torch.device("cpu"), source=str(folder))
    assert seen == [folder] and kernel.loader == "kernels.get_local_kernel" and kernel.module == "from_kernels"
    assert kernel.func() == "ran"


def test_a_folder_the_kernels_loader_cannot_read_is_imported_directly_with_the_reason(tmp_path: Path) -> None:
    folder = write_kernel(tmp_path / "kernel")

    def get_local_kernel(repo_path: Path, backend: str | None = None) -> types.ModuleType:
        raise FileNotFoundError(f"{repo_path}/metadata.json")

    sys.modules["kernels"] = types.SimpleNamespace(get_local_kernel=get_local_kernel)  # type: ignore[assignment]
    kernel = hub.load_kernel(torch.device("cpu"), source=str(folder))
    assert kernel.loader.startswith("importlib")
    assert "kernels.get_local_kernel could not load it (FileNotFoundError" in kernel.note


def test_the_collector_runs_the_hub_variant_from_a_folder_on_cpu(tmp_path: Path) -> None:
    """python -m collectors --hub-kernel FOLDER: the hub variant runs (not skipped) through the
    folder's function, and passes parity against the fp32 reference."""
    folder = write_kernel(tmp_path / "kernel", package="fake_flash_main")
    out = tmp_path / "out"
    argv = [
        "--device",
        "cpu",
        "--batch",
        "1",
        "--heads",
        "2",
        "--seq",
        "16",
        "--head-dim",
        "8",
        "--active",
        "1",
        "--variants",
        "hub",
        "--hub-kernel",
        str(folder),
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    manifest = read_manifest(out)
    assert [r["variant"] for r in manifest["runs"]] == ["hub"] and manifest["skipped"] == []
    assert manifest["runs"][0]["parity"]["passed"] is True
    assert f"--hub-kernel {folder}" in manifest["command"]
    loaded = [m for name, m in sys.modules.items() if name.startswith("attnscope_hub_fake_flash_main_")]
    assert loaded and loaded[0].CALLS and all(loaded[0].CALLS)  # the folder's function ran, causal
    # a later run without the option is back on the hub repo (refused on CPU, with that reason)
    assert main(argv[:-4] + ["--out", str(tmp_path / "again")]) == 0
    assert "ships CUDA builds only" in read_manifest(tmp_path / "again")["skipped"][0]["reason"]


def test_a_missing_folder_is_a_skip_with_the_path(tmp_path: Path) -> None:
    out = tmp_path / "out"
    missing = tmp_path / "no-kernel"
    assert (
        main(
            [
                "--device",
                "cpu",
                "--batch",
                "1",
                "--heads",
                "1",
                "--seq",
                "8",
                "--head-dim",
                "8",
                "--active",
                "1",
                "--variants",
                "hub",
                "--hub-kernel",
                str(missing),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    (skip,) = read_manifest(out)["skipped"]
    assert skip["variant"] == "hub" and str(missing) in skip["reason"] and "no such folder" in skip["reason"]


def test_an_empty_hub_kernel_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--device", "cpu", "--hub-kernel", " ", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m collectors: error: --hub-kernel")


def test_hub_binds_through_the_selected_folder(tmp_path: Path) -> None:
    folder = write_kernel(tmp_path / "kernel", package="fake_flash_bind")
    hub.select(str(folder))
    q, k, v = (torch.randn(2, 3, 6, 4) for _ in range(3))
    fn = VARIANTS["hub"].bind(q, causal=False)
    scores = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(4), -1)
    assert torch.allclose(fn(q, k, v), scores @ v, atol=1e-5)
    assert json.dumps(hub.load_kernel(torch.device("cpu")).describe())  # JSON-ready

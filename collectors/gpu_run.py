"""`python -m collectors gpu-run`: the whole prepared GPU run in one command, every part with a
time budget, so that one H100/H200 session of at most 8 minutes brings back the bundled traces.

    python -m collectors gpu-run                       # on the GPU machine, from the repository root
    python -m collectors gpu-run --scale tiny --device cpu --root /tmp/rehearsal --no-install

Parts, in order (each `python -m collectors ...` in a child process, killed at its budget, so a part
that fails or hangs costs only itself; the exit status is the worst part's, 3 for a timeout):
1. install: the wheels carried in collectors/wheels/ (SageAttention 1.0.6), `pip install
   --no-index --no-deps --find-links collectors/wheels --target SITE`: the GPU machine reaches no
   registry, and a folder of its own (put first on the later parts' PYTHONPATH) leaves the
   machine's Python as it was.
2. thirdparty: the third-party variants (collectors.thirdparty) eager, compiled and replayed from
   CUDA graphs at the article's shape (8x16x1024x64, bf16), into ROOT/<gpu>-thirdparty/: a folder
   of their own, so that a library that crashes its first call costs nothing else, and
   --allow-parity-failures (SageAttention's INT8 output is judged by the bf16 tolerance and may
   fail it; the manifest records it).
3. collection: every other variant eager, compiled and replayed from CUDA graphs, into ROOT/<gpu>/.
4. sweep, dispatch, e2e, serve: the article's measurements at its scale, into ROOT/<gpu>-article/
   (the sweep, every variant, on a grid cut to fit its budget: seq 1024 4096 16384, head_dim 64,
   bf16, causal).
<gpu> is the device's name cut to its model (NVIDIA H100 80GB HBM3 -> h100; the CPU -> cpu).
--scale tiny runs the same parts on tiny shapes (the CPU rehearsal the tests run; no torch.compile,
no CUDA graphs, no flex in the collection and the sweep), and --dry prints the commands only.
A summary, gpu_run.json (each part's command, status and seconds), goes to ROOT/<gpu>-article/.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from collectors.options import PROG, Parser, UsageError, device
from collectors.thirdparty import LIBRARIES
from collectors.variants import VARIANTS

THIRD_PARTY = tuple(LIBRARIES)

WHEELS = Path(__file__).parent / "wheels"
SITE = Path(tempfile.gettempdir()) / "attnscope-gpu-run-site"
"""Where the carried wheels are installed (pip --target: no system site-packages touched); every
later part runs with it first on PYTHONPATH."""
BUDGET_S = 470
"""What all parts may take together (seconds): under the device machine's 8 minutes."""
TIMEOUT_STATUS = 3


@dataclass(frozen=True)
class Part:
    """One step of the run: argv (a whole command), its budget in seconds."""

    name: str
    argv: tuple[str, ...]
    budget_s: int


DEFAULT_ROOT = Path("sample_traces")


def gpu_label(name: str) -> str:
    """A folder name for a device: its model (H100, H200, A100, L40S, B200, ...) in lower case,
    else the name as a slug; 'cpu' for the CPU."""
    if not name or name.lower() == "cpu":
        return "cpu"
    found = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", name)
    if found:
        return found.group(1).lower()
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def _collectors(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "collectors", *args)


def plan(scale: str, dev: str, root: Path, label: str, install: bool = True) -> list[Part]:
    """The parts of the run at `scale` ("article" or "tiny") on --device `dev`."""
    traces, article = str(root / label), str(root / f"{label}-article")
    on = ("--device", dev)
    parts = []
    if install:
        pip = (sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--find-links", str(WHEELS))
        parts.append(Part("install", (*pip, "--upgrade", "--target", str(SITE), "sageattention"), 15))
    if scale == "article":
        first_party = tuple(n for n in VARIANTS if n not in THIRD_PARTY)
        graphs = ("--compile", "--cuda-graphs", "--allow-parity-failures")
        sweep = ("--seq", "1024", "4096", "16384", "--head-dim", "64", "--dtype", "bf16", "--causal", "--reps", "10")
        parts += [
            Part(
                "thirdparty", _collectors(*on, *graphs, "--variants", *THIRD_PARTY, "--out", f"{traces}-thirdparty"), 60
            ),
            Part("collection", _collectors(*on, *graphs, "--variants", *first_party, "--out", traces), 150),
            Part("sweep", _collectors("sweep", *on, *sweep, "--warmup", "2", "--out", article), 100),
            Part("dispatch", _collectors("dispatch", *on, "--out", article), 35),
            Part("e2e", _collectors("e2e", *on, "--out", article), 60),
            Part("serve", _collectors("serve", *on, "--out", article), 40),
        ]
        return parts
    quick = ("naive", "naive_inplace", "sdpa", "sdpa-math", "hub")
    shape = ("--batch", "1", "--heads", "2", "--seq", "32", "--head-dim", "64", "--active", "1")
    return parts + [
        Part("thirdparty", _collectors(*on, *shape, "--variants", *THIRD_PARTY, "--out", f"{traces}-thirdparty"), 60),
        Part("collection", _collectors(*on, *shape, "--variants", *quick, "--out", traces), 120),
        Part(
            "sweep",
            _collectors("sweep", *on, "--seq", "32", "--head-dim", "64", "--dtype", "fp32", "--causal", "--reps", "10")
            + ("--warmup", "0", "--variants", "naive", "sdpa", "thirdparty-sage", "--out", article),
            120,
        ),
        Part("dispatch", _collectors("dispatch", *on, "--dtype", "fp32", "--seq", "16", "--out", article), 120),
        Part(
            "e2e",
            _collectors("e2e", *on, "--layers", "1", "--d-model", "64", "--heads", "2", "--prompt-len", "16")
            + ("--batch", "1", "--decode-steps", "2", "--variants", "naive", "sdpa", "--out", article),
            120,
        ),
        Part(
            "serve",
            _collectors("serve", *on, "--requests", "4", "--mean-len", "16", "--min-len", "8", "--max-len", "32")
            + ("--batch", "2", "--heads", "2", "--head-dim", "16", "--reps", "3", "--out", article),
            300,
        ),
    ]


def run_part(part: Part) -> dict[str, object]:
    """Run one part under its budget; its name, command, status (its exit status, TIMEOUT_STATUS
    when killed at the budget) and seconds."""
    start = time.monotonic()
    print(f"== {part.name} (budget {part.budget_s} s): {shlex.join(part.argv)}", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")]))}
    # a session of its own, so that the budget stops the part's own children too (inductor's compile workers)
    proc = subprocess.Popen(part.argv, env=env, start_new_session=True)
    try:
        status = proc.wait(timeout=part.budget_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        status = TIMEOUT_STATUS
        print(f"== {part.name}: stopped at its budget of {part.budget_s} s", flush=True)
    seconds = round(time.monotonic() - start, 1)
    print(f"== {part.name}: exit {status} in {seconds} s", flush=True)
    return {"part": part.name, "command": shlex.join(part.argv), "status": status, "seconds": seconds}


def parser() -> Parser:
    p = Parser(prog=f"{PROG} gpu-run", description=__doc__.split("\n\n")[0].strip())
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="where the run's folders go (default sample_traces)")
    p.add_argument(
        "--scale", choices=("article", "tiny"), default="article", help="article (default) or tiny (a rehearsal)"
    )
    p.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda when available, else cpu"
    )
    p.add_argument("--no-install", action="store_true", help="skip installing the carried wheels")
    p.add_argument("--dry", action="store_true", help="print the parts' commands and budgets, run nothing")
    return p


def main(argv: list[str]) -> int:
    """Run (or with --dry print) every part; the worst exit status."""
    try:
        args = parser().parse_args(argv)
        dev = device(args.device)
    except UsageError as exc:
        print(f"{PROG} gpu-run: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    if args.scale == "article" and dev.type != "cuda" and not args.dry:
        print(
            f"{PROG} gpu-run: error: the article scale needs a CUDA device (--scale tiny rehearses it)", file=sys.stderr
        )
        return 2
    if dev.type != "cuda" and not args.dry and args.root == DEFAULT_ROOT:
        print(
            f"{PROG} gpu-run: error: a rehearsal on the CPU would write over the bundled {DEFAULT_ROOT}/cpu: "
            "give it a folder of its own with --root DIR",
            file=sys.stderr,
        )
        return 2
    label = gpu_label(_device_name(dev))
    parts = plan(args.scale, dev.type, args.root, label, install=not args.no_install)
    if args.dry:
        total = sum(p.budget_s for p in parts)
        print("\n".join(f"{p.name} ({p.budget_s} s): {shlex.join(p.argv)}" for p in parts) + f"\ntotal {total} s")
        return 0
    done = [run_part(p) for p in parts]
    summary = args.root / f"{label}-article"
    summary.mkdir(parents=True, exist_ok=True)
    meta = {"scale": args.scale, "device": dev.type, "label": label, "budget_s": BUDGET_S, "parts": done}
    meta["planned"] = [asdict(p) | {"argv": list(p.argv)} for p in parts]
    (summary / "gpu_run.json").write_text(json.dumps(meta, indent=2) + "\n")
    return max((int(d["status"]) for d in done), default=0)


def _device_name(dev: object) -> str:
    import torch

    return torch.cuda.get_device_name(dev) if getattr(dev, "type", "") == "cuda" else "cpu"

"""`python -m collectors ranks --out DIR`: a small data-parallel attention training job on N CPU
processes (torch.distributed over gloo), every rank profiled: one trace per rank, the kind of run
the dashboard's Ranks tab reads (each step's slowest rank, the straggler the others wait for).

    python -m collectors ranks --out sample_traces/ranks-cpu       # 4 ranks, 4 profiled steps
    python -m collectors ranks --ranks 2 --steps 2 --seq 32 --out /tmp/ranks

Each rank is a process started with torch.multiprocessing.spawn; the process group is initialised
over a file:// store in a temporary folder. Every step of every rank: a seeded batch of
[batch, seq, heads * head_dim] inputs, a QKV projection, the attention variant (causal; sdpa by
default) under record_function("attention::<variant>"), an output projection, a mean-square loss,
backward, then dist.all_reduce of every gradient. The work is uneven, as in a real job fed
variable-length batches: with --lengths rotated (default) the ranks take base, 2x, 3x, ... base
tokens (seq = base * (1 + p), p = 0 .. N-1) in a seeded order that turns by one place each step,
so every step has another straggler and over N steps every rank does the same work; with
--lengths by-rank, rank r takes seq = base * (1 + r) in every step. Each rank uses one thread
(torch.set_num_threads(1)).

Each step's reductions are issued with async_op=True (into buffers of their own) right after the
step boundary, and awaited, the averaged gradients applied (SGD), once the ranks' steps are done
(--wait end, the default): a rank's step then ends when its own work does, so the CPU step span
(what the dashboard reads as a step's time on a CPU-only trace) is that rank's work. Before each
step boundary where the profiler starts, begins recording or stops, a rank awaits the reductions
issued so far (a collective running on gloo's thread while the profiler changes state can crash
the process): in the last profiled step that is the previous step's reductions, which the other
ranks have mostly issued by then. --wait step awaits each step's reductions within the step, as
synchronous data parallelism does: every rank's step then ends together, the step spans are all
alike, and the uneven work shows only as time spent waiting in the reduction. The ranks meet at a
barrier before the first profiled step, and run TAIL unprofiled steps after the last, so that on a
machine with fewer cores than ranks every profiled step shares the CPU alike.

The profiler runs with a schedule (wait=1, warmup=1, active=--steps; ProfilerStep#2 onwards),
record_shapes as the other modes (no profile_memory: the ranks' step times need no allocation events); torch writes the trace's distributedInfo
(rank, world_size) because a process group is initialised. Writes DIR/rank-<r>.json.gz, each with
the collectors' "attnscope" description (variant, every rank's length per step, this rank's,
dtype, device, versions, ...), and DIR/runs.json (collectors/manifest.py's schema, one entry per
rank with its `rank`; the dashboard opens them as one run of N ranks). Exit status: 0 when every
rank wrote its trace, 1 when a rank failed (one line naming it), 2 for bad input.
"""

from __future__ import annotations

import datetime
import gzip
import json
import shlex
import socket
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import Tensor
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from collectors import measure, mode
from collectors.manifest import MANIFEST_NAME, SCHEMA_VERSION
from collectors.options import PROG, UsageError, at_least, out_dir, positive
from collectors.profile import METADATA_KEY, check_metadata, device_name
from collectors.variants import VARIANTS

MODE = f"{PROG} ranks"
WAIT, WARMUP = 1, 1
"""The profiler's schedule before the active steps: the first profiled step is ProfilerStep#2."""
LENGTHS = ("rotated", "by-rank")
TAIL = 2
"""Unprofiled steps after the profiled ones: every rank keeps working while the others finish theirs."""
WAITS = ("end", "step")


@dataclass(frozen=True)
class Config:
    """What to run: `ranks` processes, `steps` profiled steps each, the fixed dims and the base length."""

    ranks: int
    steps: int
    batch: int
    heads: int
    head_dim: int
    seq: int
    variant: str
    lengths: str
    wait: str
    seed: int
    out: Path
    command: str

    @property
    def all_steps(self) -> int:
        """Every step a rank runs: the schedule's wait and warm-up steps, the profiled ones, the tail."""
        return WAIT + WARMUP + self.steps + TAIL


def plan(cfg: Config) -> list[list[int]]:
    """plan[step][rank]: the sequence length rank `rank` takes in step `step` (every step a rank
    runs, the unprofiled ones too): base * (1 + p), p the rank's place. By-rank, rank r's place is r;
    rotated, (order[r] + step) mod ranks with `order` a permutation of the ranks seeded with --seed:
    a Latin square, so over any `ranks` consecutive steps every rank does the same work, and the
    straggler moves every step."""
    if cfg.lengths == "by-rank":
        return [[cfg.seq * (1 + r) for r in range(cfg.ranks)] for _ in range(cfg.all_steps)]
    order = torch.randperm(cfg.ranks, generator=torch.Generator().manual_seed(cfg.seed)).tolist()
    return [[cfg.seq * (1 + (order[r] + step) % cfg.ranks) for r in range(cfg.ranks)] for step in range(cfg.all_steps)]


# ---------------------------------------------------------------- command line


def parser() -> Any:
    p = mode.parser(MODE, __doc__)
    [dev] = [a for a in p._actions if a.dest == "device"]  # the shared --device, said as this mode reads it
    dev.default, dev.help = "cpu", "cpu or auto (the ranks are CPU processes over gloo); cuda is refused"
    p.add_argument("--ranks", type=at_least(2), default=4, help="processes, one rank each (default 4)")
    p.add_argument("--steps", type=positive, default=4, help="profiled steps per rank (default 4)")
    p.add_argument("--batch", type=positive, default=2, help="sequences per rank and step (default 2)")
    p.add_argument("--heads", type=positive, default=4, help="attention heads (default 4)")
    p.add_argument("--head-dim", type=positive, default=16, help="head dimension (default 16)")
    p.add_argument("--seq", type=positive, default=320, help="base sequence length (default 320; see --lengths)")
    p.add_argument(
        "--variant", default="sdpa", help=f"the attention variant, one of {', '.join(VARIANTS)} (default sdpa)"
    )
    p.add_argument(
        "--lengths",
        choices=LENGTHS,
        default="rotated",
        help="rotated: the ranks take base, 2x, 3x, ... base in a seeded order that turns by one place each step "
        "(the straggler moves, every rank does the same work over N steps); by-rank: rank r takes base * (1 + r)",
    )
    p.add_argument(
        "--wait",
        choices=WAITS,
        default="end",
        help="end: the gradients' all_reduce is awaited after the profiled steps, so a rank's step span is its own "
        "work; step: awaited in each step, as synchronous data parallelism (every rank's step ends together)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the inputs, weights and lengths (default 0)")
    return p


def build_config(argv: list[str]) -> Config:
    """Parse argv; raise UsageError for bad input (a CUDA device, an unknown variant)."""
    args = parser().parse_args(argv)
    if args.device == "cuda":  # auto is the CPU here, even where CUDA is available
        raise UsageError("--device cuda: the ranks run as CPU processes over gloo; use --device cpu (or auto)")
    names = mode.variant_names([args.variant])
    if len(names) != 1:
        raise UsageError(f"--variant: one variant, not {len(names)}")
    variant = names[0]
    return Config(
        ranks=args.ranks,
        steps=args.steps,
        batch=args.batch,
        heads=args.heads,
        head_dim=args.head_dim,
        seq=args.seq,
        variant=variant,
        lengths=args.lengths,
        wait=args.wait,
        seed=args.seed,
        out=out_dir(args.out),
        command=shlex.join([*MODE.split(), *argv]),
    )


# ---------------------------------------------------------------- one rank


def trace_name(rank: int) -> str:
    return f"rank-{rank}.json.gz"


def describe(cfg: Config, rank: int, lengths: list[list[int]]) -> dict[str, Any]:
    """The "attnscope" metadata object of one rank's trace."""
    cpu = torch.device("cpu")
    return {
        "mode": "ranks",
        "variant": cfg.variant,
        "backend_requested": VARIANTS[cfg.variant].backend,
        "rank": rank,
        "world_size": cfg.ranks,
        "shape_per_step": [
            {"step": step, "batch": cfg.batch, "heads": cfg.heads, "seq": seqs[rank], "head_dim": cfg.head_dim}
            for step, seqs in enumerate(lengths)
        ],
        "seq_per_rank": {str(r): [seqs[r] for seqs in lengths] for r in range(cfg.ranks)},
        "lengths": cfg.lengths,
        "wait": cfg.wait,
        "causal": True,
        "training": "qkv projection, attention, output projection, mean-square loss, backward, all_reduce of the gradients",
        "dtype": "float32",
        "device": "cpu",
        "device_name": device_name(cpu),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "host": socket.gethostname(),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "seed": cfg.seed,
        "threads": 1,
        "compiled": False,
        "command": cfg.command,
    }


def rank_main(rank: int, cfg: Config, init: str) -> None:
    """One process of the job (torch.multiprocessing.spawn's target): join the group, train and
    profile cfg.all_steps steps, write rank-<rank>.json.gz and check its metadata."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=cfg.ranks)
    try:
        _train(rank, cfg)
        dist.barrier()  # no rank tears its connections down while another still finishes a collective
    finally:
        dist.destroy_process_group()
    check_metadata(cfg.out / trace_name(rank))


def _train(rank: int, cfg: Config) -> None:
    torch.manual_seed(cfg.seed)  # the same weights on every rank, as data parallelism starts
    width = cfg.heads * cfg.head_dim
    qkv_proj, out_proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
    params = [*qkv_proj.parameters(), *out_proj.parameters()]
    lengths = plan(cfg)
    pending: list[tuple[Tensor, Any]] = []
    trace = cfg.out / trace_name(rank)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=WAIT, warmup=WARMUP, active=cfg.steps, repeat=1),
        record_shapes=True,
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(trace)),
    ) as prof:
        for step, seqs in enumerate(lengths):
            if step == WAIT + WARMUP:  # first active step: the profiler records, the metadata sticks
                prof.add_metadata_json(METADATA_KEY, json.dumps(describe(cfg, rank, lengths)))
            seed = cfg.seed * 7919 + step * 101 + rank
            x = torch.randn(cfg.batch, seqs[rank], width, generator=torch.Generator().manual_seed(seed))
            _forward(cfg, qkv_proj, out_proj, x).backward()
            grads = [p.grad.detach().clone() for p in params]
            for p in params:
                p.grad = None
            if cfg.wait == "step":  # synchronous: this step's reductions, awaited within it
                pending.extend(_reduce(grads, wait=True))
                grads = []
            if step in (WAIT - 1, WAIT + WARMUP - 1, WAIT + WARMUP + cfg.steps - 1):
                _quiesce(pending, barrier=step == WAIT + WARMUP - 1)
            prof.step()
            pending.extend(_reduce(grads, wait=False))
    _apply(params, pending, cfg)


def _reduce(grads: list[Tensor], wait: bool) -> list[tuple[Tensor, Any]]:
    """all_reduce of each gradient (a copy of its own), issued asynchronously; awaited when `wait`."""
    reduced = [(buf, dist.all_reduce(buf, async_op=True)) for buf in grads]
    if wait:
        for _, work in reduced:
            work.wait()
    return reduced


def _quiesce(pending: list[tuple[Tensor, Any]], barrier: bool) -> None:
    """Await every reduction issued so far (and meet the other ranks when `barrier`), before a step
    boundary where the profiler starts, begins recording or stops: a gloo thread still running a
    collective while the profiler changes state can crash the process (seen as SIGSEGV, 1 run in 12)."""
    for _, work in pending:
        work.wait()
    if barrier:
        dist.barrier()


def _forward(cfg: Config, qkv_proj: torch.nn.Module, out_proj: torch.nn.Module, x: Tensor) -> Tensor:
    batch, seq, width = x.shape
    q, k, v = qkv_proj(x).view(batch, seq, 3, cfg.heads, cfg.head_dim).permute(2, 0, 3, 1, 4)
    attention = VARIANTS[cfg.variant].bind(q, causal=True)
    with record_function(f"attention::{cfg.variant}"):
        out = attention(q, k, v)
    return out_proj(out.transpose(1, 2).reshape(batch, seq, width)).pow(2).mean()


def _apply(params: list[torch.nn.Parameter], pending: list[tuple[Tensor, Any]], cfg: Config) -> None:
    """Await every reduction and take one SGD step with the gradients averaged over ranks and steps."""
    for _, work in pending:
        work.wait()
    with torch.no_grad():
        for i, p in enumerate(params):
            grads = [buf for buf, _ in pending[i :: len(params)]]
            p -= 1e-3 * torch.stack(grads).sum(0) / (cfg.ranks * len(grads))


# ---------------------------------------------------------------- the job


def check_trace(path: Path, rank: int, world: int) -> str | None:
    """Why a rank's trace is not what the job should have written, or None: it must read as JSON
    and carry distributedInfo naming `rank` of `world` and the "attnscope" block."""
    try:
        with gzip.open(path, "rt") as fh:
            data = json.load(fh)
    except (OSError, EOFError, json.JSONDecodeError) as exc:
        return f"{path}: unreadable ({exc})"
    info = data.get("distributedInfo") if isinstance(data, dict) else None
    if not isinstance(info, dict) or (info.get("rank"), info.get("world_size")) != (rank, world):
        return f"{path}: distributedInfo should name rank {rank} of {world}, found {info!r:.120}"
    if not isinstance(data.get(METADATA_KEY), dict):
        return f"{path}: no {METADATA_KEY!r} metadata"
    return None


def manifest(cfg: Config, lengths: list[list[int]]) -> dict[str, Any]:
    """runs.json: collectors/manifest.py's schema, one entry per rank with its `rank` and
    `world_size`; `shape` holds the fixed dims (seq: the base length; each step's is in the traces)."""
    provenance = measure.provenance(torch.device("cpu"), cfg.command)
    return {
        "schema": SCHEMA_VERSION,
        "collection": cfg.out.resolve().name,
        "created": provenance["time_utc"],
        "command": cfg.command,
        "device": "cpu",
        "device_name": provenance["device_name"],
        "dtype": "float32",
        "shape": {"batch": cfg.batch, "heads": cfg.heads, "seq": cfg.seq, "head_dim": cfg.head_dim},
        "active_steps": cfg.steps,
        "seed": cfg.seed,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "job": {**{k: v for k, v in asdict(cfg).items() if k not in ("out", "command")}, "seq_per_step": lengths},
        "runs": [
            {
                "variant": cfg.variant,
                "backend_requested": VARIANTS[cfg.variant].backend,
                "compiled": False,
                "trace": trace_name(rank),
                "table": None,
                "rank": rank,
                "world_size": cfg.ranks,
            }
            for rank in range(cfg.ranks)
        ],
        "skipped": [],
    }


def run(cfg: Config) -> int:
    """Spawn the ranks, check their traces, write runs.json and print each step's lengths."""
    lengths = plan(cfg)
    with tempfile.TemporaryDirectory(prefix="attnscope-ranks-") as tmp:
        try:
            mp.spawn(rank_main, args=(cfg, f"file://{Path(tmp) / 'store'}"), nprocs=cfg.ranks, join=True)
        except Exception as exc:  # noqa: BLE001 - a rank's failure (its traceback went to stderr) is one line here
            print(f"{MODE}: error: a rank failed: {measure.one_line(str(exc))}", file=sys.stderr)
            return 1
    problems = [p for r in range(cfg.ranks) if (p := check_trace(cfg.out / trace_name(r), r, cfg.ranks))]
    if problems:
        print(f"{MODE}: error: {problems[0]}", file=sys.stderr)
        return 1
    (cfg.out / MANIFEST_NAME).write_text(json.dumps(manifest(cfg, lengths), indent=2) + "\n")
    print("step  " + " ".join(f"{f'rank {r}':>7}" for r in range(cfg.ranks)) + "  longest")
    for step, seqs in enumerate(lengths[WAIT + WARMUP : WAIT + WARMUP + cfg.steps], start=WAIT + WARMUP):
        print(f"{step:>4}  " + " ".join(f"{s:>7}" for s in seqs) + f"  rank {seqs.index(max(seqs))}")
    files = ", ".join(trace_name(r) for r in range(cfg.ranks))
    print(f"{cfg.ranks} ranks x {cfg.steps} steps (seq per rank and step above) -> {cfg.out}: {files}, {MANIFEST_NAME}")
    return 0


def main(argv: list[str]) -> int:
    """Run the job; 0 when every rank wrote its trace, 1 when one failed, 2 for bad input."""
    return mode.main(MODE, argv, build_config, run)

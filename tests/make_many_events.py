"""A synthetic torch.profiler-shaped trace of millions of tiny events, written as plain strings
(fast: about a second per million events), for tests and benchmarks of views under load.

    python tests/make_many_events.py OUT.json [--events 2000000] [--steps 4]

The shape: `steps` ProfilerStep# spans on the main thread, each holding `units` launches of an
op (aten::mm, or aten::scaled_dot_product_attention every 8th) > cudaLaunchKernel, the kernel
it launched on stream 7 (matched by correlation id) and the ac2g flow pair linking the two; a
second CPU thread runs leaf aten::add ops alongside. Kernels never overlap on their stream.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

KERNELS = (
    "void gemm_kernel<128, 64>(float const*, float*)",
    "void elementwise_add_kernel<float>(float*)",
    "void softmax_warp_forward<float, 8>(float*)",
)
ATTENTION_KERNEL = (
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>, false>(Flash_fwd_params)"
)
PID_CPU, TID_MAIN, TID_SIDE, PID_GPU, STREAM = 100, 1, 2, 0, 7


def write_many_events(out: Path, events: int = 2_000_000, steps: int = 4) -> dict[str, int]:
    """Write the trace to `out`; how many events of each kind it holds (counted while writing)."""
    side = events // 10  # leaf ops on the second thread
    side_per_step = side // steps
    units = max(1, -(-(events - side_per_step * steps - steps - 5) // (5 * steps)))  # at least `events` in all
    meta = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
        "displayTimeUnit": "ms",
    }
    counts = {"events": 0, "steps": steps, "kernels": 0, "ops": 0, "flows": 0}
    with open(out, "w") as fh:
        fh.write(json.dumps(meta)[:-1] + ', "traceEvents": [\n')
        head = [
            f'{{"ph": "M", "name": "process_name", "pid": {PID_CPU}, "tid": 0, "args": {{"name": "python3"}}}}',
            f'{{"ph": "M", "name": "thread_name", "pid": {PID_CPU}, "tid": {TID_MAIN}, "args": {{"name": "main"}}}}',
            f'{{"ph": "M", "name": "thread_name", "pid": {PID_CPU}, "tid": {TID_SIDE}, "args": {{"name": "side"}}}}',
            f'{{"ph": "M", "name": "process_name", "pid": {PID_GPU}, "tid": 0, "args": {{"name": "GPU 0"}}}}',
            f'{{"ph": "M", "name": "thread_name", "pid": {PID_GPU}, "tid": {STREAM}, "args": {{"name": "stream {STREAM}"}}}}',
        ]
        fh.write(",\n".join(head))
        counts["events"] += len(head)
        t = 1000.0
        corr = 1
        for step in range(steps):
            start = t
            dur = units * 4 + 10
            chunk = [
                f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step + 1}", "pid": {PID_CPU}, "tid": {TID_MAIN}, "ts": {start:.3f}, "dur": {dur}}}'  # noqa: E501 (one JSON event, as the file holds it)
            ]
            t += 2
            for i in range(units):
                attention = i % 8 == 0
                op = "aten::scaled_dot_product_attention" if attention else "aten::mm"
                kernel = ATTENTION_KERNEL if attention else KERNELS[i % 3]
                chunk.append(
                    f'{{"ph": "X", "cat": "cpu_op", "name": "{op}", "pid": {PID_CPU}, "tid": {TID_MAIN}, "ts": {t:.3f}, "dur": 3}}'
                )
                chunk.append(
                    f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {PID_CPU}, "tid": {TID_MAIN}, "ts": {t + 1:.3f}, "dur": 1, "args": {{"correlation": {corr}}}}}'  # noqa: E501 (one JSON event, as the file holds it)
                )
                chunk.append(
                    f'{{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": {corr}, "pid": {PID_CPU}, "tid": {TID_MAIN}, "ts": {t + 1:.3f}}}'
                )
                chunk.append(
                    f'{{"ph": "X", "cat": "kernel", "name": "{kernel}", "pid": {PID_GPU}, "tid": {STREAM}, "ts": {t + 2:.3f}, "dur": 2, "args": {{"correlation": {corr}, "device": 0, "stream": {STREAM}}}}}'  # noqa: E501 (one JSON event, as the file holds it)
                )
                chunk.append(
                    f'{{"ph": "f", "bp": "e", "cat": "ac2g", "name": "ac2g", "id": {corr}, "pid": {PID_GPU}, "tid": {STREAM}, "ts": {t + 2:.3f}}}'
                )
                corr += 1
                t += 4
                if len(chunk) >= 50_000:
                    fh.write(",\n" + ",\n".join(chunk))
                    counts["events"] += len(chunk)
                    chunk = []
            for j in range(side_per_step):
                chunk.append(
                    f'{{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": {PID_CPU}, "tid": {TID_SIDE}, "ts": {start + 2 + j * (dur - 4) / side_per_step:.3f}, "dur": 1}}'  # noqa: E501 (one JSON event, as the file holds it)
                )
                if len(chunk) >= 50_000:
                    fh.write(",\n" + ",\n".join(chunk))
                    counts["events"] += len(chunk)
                    chunk = []
            if chunk:
                fh.write(",\n" + ",\n".join(chunk))
                counts["events"] += len(chunk)
            counts["kernels"] += units
            counts["flows"] += units
            counts["ops"] += units + side_per_step
            t = start + dur + 50
        fh.write("\n]}\n")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    counts = write_many_events(args.out, args.events, args.steps)
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.0f} MB, {counts}")


if __name__ == "__main__":
    main()

"""Collectives (COLLECTIVES): their kernels are the 'communication' family, their CPU ops make a
copy's 'communication' class. A user's [[collective]] rows come first (user.is_collective_op,
user.family_rules)."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.engine.rules.common import joined as _joined


@dataclass(frozen=True)
class Collective:
    """One row of COLLECTIVES: a regular expression (case-insensitive) for a collective or its
    staging. kernel: matched against a kernel's (or, on a CPU-only trace, a leaf op's) function
    name (names.parse(...).qualname), giving the 'communication' kernel family; op: matched against
    the raw name of each CPU op of a copy's op chain, giving the copy's 'communication' class.
    examples: names the row must take (tests/test_rules.py checks them against both tables)."""

    pattern: str
    kernel: bool
    op: bool
    reason: str
    source: str
    examples: tuple[str, ...] = ()


COLLECTIVES: tuple[Collective, ...] = (
    Collective(
        r"^(nccl|rccl|msccl)",
        True,
        False,
        "NCCL, RCCL and MSCCL device kernels (ncclDevKernel_*, ncclKernel_*)",
        "NVIDIA/nccl src/device/generate.py (ncclDevKernel_<coll>_<op>_<type>_<algo>_<proto>); ROCm/rccl; "
        "microsoft/msccl",
        (
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t",
        ),
    ),
    Collective(
        r"^c10d::",
        True,
        True,
        "PyTorch's c10d dispatcher ops (c10d::allreduce_, c10d::broadcast_, ...)",
        "pytorch/pytorch torch/csrc/distributed/c10d/Ops.cpp",
        ("c10d::allreduce_", "c10d::broadcast_"),
    ),
    Collective(
        r"^_?c10d_functional::",
        False,
        True,
        "functional collectives (torch.distributed._functional_collectives, compiled graphs' collectives)",
        "pytorch/pytorch torch/csrc/distributed/c10d/Functional.cpp",
        ("_c10d_functional::all_gather_into_tensor", "c10d_functional::wait_tensor"),
    ),
    Collective(
        r"^nccl:",
        False,
        True,
        "ProcessGroupNCCL's record_function ranges (nccl:all_reduce, nccl:_all_gather_base, ...)",
        "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp",
        ("nccl:all_reduce", "nccl:broadcast"),
    ),
    Collective(
        r"^gloo:",
        False,
        True,
        "ProcessGroupGloo's record_function ranges (gloo:all_reduce, ...)",
        "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupGloo.cpp",
        ("gloo:all_reduce",),
    ),
    Collective(
        r"^record_param_comms$",
        False,
        True,
        "the profiler's record of a collective's parameters (RECORD_PARAM_COMMS), around its launch",
        "pytorch/pytorch torch/csrc/distributed/c10d/ParamCommsUtils.hpp",
        ("record_param_comms",),
    ),
    Collective(
        r"torch\.distributed|ddp\.reducer",
        False,
        True,
        "torch.distributed's Python calls and DDP's reducer, which copies gradient buckets for the all-reduce",
        "pytorch/pytorch torch/nn/parallel/distributed.py, torch/csrc/distributed/c10d/reducer.cpp",
        ("torch.distributed.ddp.reducer::copy_bucket_to_grad",),
    ),
    Collective(
        r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all",
        True,
        True,
        "a collective's verb anywhere in the name: custom all-reduce kernels, vLLM/SGLang all-gather ops",
        "the collectives' names in NCCL, torch.distributed and the serving frameworks",
        ("vllm::all_reduce", "_C_custom_ar::all_reduce"),
    ),
    Collective(
        r"^All2All",
        False,
        True,
        "TorchRec's all-to-all autograd functions (All2All_Pooled_Req, All2All_Seq_Req_Wait, ...)",
        "pytorch/torchrec torchrec/distributed/comm_ops.py",
        ("All2All_Pooled_Req",),
    ),
    Collective(
        r"^(vllm::)?cross_device_reduce",
        True,
        False,
        "vLLM's custom all-reduce kernels (cross_device_reduce_1stage / _2stage)",
        "vllm-project/vllm csrc/custom_all_reduce.cuh",
        (
            "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
            "vllm::Signal*, __nv_bfloat16*, int, int)",
        ),
    ),
    Collective(
        r"^deep_ep::",
        True,
        False,
        "DeepEP's expert-parallel dispatch and combine kernels",
        "deepseek-ai/DeepEP csrc/kernels/",
        ("deep_ep::intranode::dispatch",),
    ),
    Collective(
        r"^nvshmem",
        True,
        False,
        "NVSHMEM's device-side communication kernels",
        "NVIDIA NVSHMEM (nvshmem* / nvshmemi_* kernels)",
    ),
)


COLLECTIVE_KERNELS = _joined([c.pattern for c in COLLECTIVES if c.kernel])
"""COLLECTIVES' kernel rows as one pattern: FAMILY_RULES' 'communication' row."""
COLLECTIVE_OPS = _joined([c.pattern for c in COLLECTIVES if c.op])
"""COLLECTIVES' op rows as one pattern (case-insensitive; is_collective_op adds a user's rows)."""

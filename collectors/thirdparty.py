"""Third-party fused attention kernels as variants: SageAttention 1.x, FlashAttention-4 (CuTe DSL)
and FlashInfer, each called the way its library documents a causal prefill.

- thirdparty-sage: `sageattention.sageattn(q, k, v, tensor_layout="HND", is_causal=causal)`
  (SageAttention 1.x, Triton: Q and K quantized to INT8 per block by quant_per_block_int8_kernel,
  then the attention kernel `_attn_fwd`; V in fp16). It takes our [batch, heads, seq, head_dim]
  layout as is. SageAttention 1.x subtracts K's mean from `k` in place (its smooth_k), so the
  variant hands it a copy of k: a requested `aten::clone` in its trace, and the inputs the other
  variants share stay as they were.
- thirdparty-fa4: `flash_attn.cute.flash_attn_func(q, k, v, causal=causal)` from the
  `flash-attn-4` package (CuTe DSL kernels compiled at the first call); it takes
  [batch, seq, heads, head_dim] views and returns (out, lse).
- thirdparty-flashinfer: `flashinfer.single_prefill_with_kv_cache(q, k, v, causal=causal,
  kv_layout="HND")` once per sequence of the batch (q as [seq, heads, head_dim], k and v as
  [heads, seq, head_dim]); the outputs are stacked back into [batch, heads, seq, head_dim].

What each supports (LIBRARIES, from the libraries' own checks) is checked before anything is
called: a missing package, a device that is not CUDA, a CUDA capability below the library's, a
dtype or head_dim it does not take each raise `Unavailable` naming the reason. Anything that goes
wrong after that is the library's (or our) failure: an `error`, never a skip.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from collectors.unavailable import Unavailable

Attention = Callable[[Tensor, Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class Library:
    """A third-party attention library. module: what the variant imports; package: what pip installs;
    dtypes: the input dtypes it takes; head_dims: a test of head_dim on a device of compute capability
    (major, minor), and `head_dims_text` the same in words; capability: the lowest CUDA compute
    capability it runs on; devices: device types it runs on (CUDA only; a test may widen it to run a
    stand-in on the CPU); source: where these limits are read."""

    name: str
    module: str
    package: str
    dtypes: tuple[torch.dtype, ...]
    head_dims: Callable[[int, tuple[int, int]], bool]
    head_dims_text: str
    capability: tuple[int, int]
    source: str
    devices: tuple[str, ...] = ("cuda",)


def _fa4_head_dim(head_dim: int, capability: tuple[int, int]) -> bool:
    """flash_attn.cute.interface._validate_head_dims: a multiple of 8 (16 bytes of fp16/bf16) from
    8 to 256 on sm90 (and sm8x, sm12x, which it does not check further); on sm100/sm110 8 to 128, or 256."""
    if head_dim % 8 or not 8 <= head_dim <= 256:
        return False
    return capability[0] not in (10, 11) or head_dim <= 128 or head_dim == 256


LIBRARIES: dict[str, Library] = {
    "thirdparty-sage": Library(
        "SageAttention 1.x",
        "sageattention",
        "sageattention==1.0.6",
        (torch.float16, torch.bfloat16, torch.float32),
        lambda d, _cap: d in (64, 96, 128),
        "64, 96, 128",
        (8, 0),
        "thu-ml/SageAttention 1.0.6 sageattention/core.py sageattn (asserts q.is_cuda, dtype fp16/bf16/fp32, "
        "headdim in [64, 96, 128]; its Triton INT8 kernels need sm80 or newer)",
    ),
    "thirdparty-fa4": Library(
        "FlashAttention-4 (CuTe DSL)",
        "flash_attn.cute",
        "flash-attn-4",
        (torch.float16, torch.bfloat16),
        _fa4_head_dim,
        "multiples of 8 from 8 to 256 (sm100/sm110: to 128, or 256)",
        (8, 0),
        "Dao-AILab/flash-attention flash_attn/cute/interface.py (_flash_attn_fwd: inputs fp16 or bf16 (fp8 on "
        "sm100 only), compute capability 8.x to 12.x; _validate_head_dims)",
    ),
    "thirdparty-flashinfer": Library(
        "FlashInfer",
        "flashinfer",
        "flashinfer-python",
        (torch.float16, torch.bfloat16),
        lambda d, _cap: d in (64, 128, 256),
        "64, 128, 256",
        (8, 0),
        "flashinfer-ai/flashinfer flashinfer/prefill.py single_prefill_with_kv_cache (fp16/bf16 q, the head "
        "dims its prefill kernels are instantiated for: 64, 128, 256; sm80 or newer for bf16)",
    ),
}
"""Each third-party variant's library and what it supports, by variant name."""


def load(name: str, q: Tensor) -> object:
    """The library's module for variant `name`, after checking that it fits q (device, CUDA
    capability, dtype, head_dim) and imports; Unavailable with the reason otherwise."""
    lib = LIBRARIES[name]
    if q.device.type not in lib.devices:
        raise Unavailable(f"{lib.name} runs on CUDA only; this run is on {q.device.type}")
    capability = _capability(q.device, lib)
    if capability < lib.capability:
        raise Unavailable(
            f"{lib.name} needs CUDA compute capability {'.'.join(map(str, lib.capability))} or newer; "
            f"this GPU is {'.'.join(map(str, capability))}"
        )
    if q.dtype not in lib.dtypes:
        names = ", ".join(str(d).removeprefix("torch.") for d in lib.dtypes)
        raise Unavailable(f"{lib.name} takes {names}, not {str(q.dtype).removeprefix('torch.')}")
    head_dim = q.shape[-1]
    if not lib.head_dims(head_dim, capability):
        raise Unavailable(f"{lib.name} takes head_dim {lib.head_dims_text} on this GPU, not {head_dim}")
    try:
        return importlib.import_module(lib.module)
    except ImportError as exc:
        raise Unavailable(
            f"the `{lib.package}` package is not installed ({exc}); pip install {lib.package}"
            + (" (or collectors/gpu_run.sh's wheel)" if name == "thirdparty-sage" else "")
        ) from None


def _capability(device: torch.device, lib: Library) -> tuple[int, int]:
    """The CUDA compute capability of `device` (major, minor); the library's own lowest elsewhere
    (a stand-in a test runs on the CPU)."""
    if device.type == "cuda":
        return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]
    return lib.capability


def bind_sage(q: Tensor, causal: bool = True) -> Attention:
    """SageAttention 1.x on [batch, heads, seq, head_dim] ("HND"), k copied (see the module docstring)."""
    sage = load("thirdparty-sage", q)
    sageattn = getattr(sage, "sageattn")
    return lambda q, k, v: sageattn(q, k.clone(), v, tensor_layout="HND", is_causal=causal)


def bind_fa4(q: Tensor, causal: bool = True) -> Attention:
    """FlashAttention-4's flash_attn_func on [batch, seq, heads, head_dim] views."""
    cute = load("thirdparty-fa4", q)
    flash_attn_func = getattr(cute, "flash_attn_func")

    def fa4(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal)
        if isinstance(out, (tuple, list)):
            out = out[0]
        return out.transpose(1, 2)

    return fa4


def bind_flashinfer(q: Tensor, causal: bool = True) -> Attention:
    """FlashInfer's single prefill, one call per sequence: q [seq, heads, head_dim], k and v "HND"."""
    flashinfer = load("thirdparty-flashinfer", q)
    prefill = getattr(flashinfer, "single_prefill_with_kv_cache")

    def single_prefills(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        outs = [
            prefill(q[b].transpose(0, 1), k[b], v[b], causal=causal, kv_layout="HND").transpose(0, 1)
            for b in range(q.shape[0])
        ]
        return torch.stack(outs)

    return single_prefills

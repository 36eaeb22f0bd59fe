"""Op names that give an op its meaning, each group with its reason and source: which ops are not
the model's (NOT_MODEL_OP_RULES, one table with named kinds), which ops ask for a copy (the copies
analysis), which ops only make a view or allocate (METADATA_OPS), and the ops of an attention
written by hand (the backends analysis; collectors/measure.py reads the same).

Op names are cpu_op (or user_annotation) names as torch.profiler records them; patterns are
regular expressions over the raw name (no names.parse: an op's name is not a C++ signature).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STEP_MARK = "ProfilerStep#"
"""torch.profiler's step annotation, ProfilerStep#N, one per profiler.step() (torch/profiler/profiler.py:
record_function("ProfilerStep#" + str(step_num))); Kineto mirrors it on the device as a
gpu_user_annotation."""
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")  # the step annotation and its number

COPY_OP = "aten::copy_"
"""The op that makes a tensor copy: on a CPU-only trace every tensor copy is one, and its Input Dims
give a copy's bytes (pytorch/pytorch aten/src/ATen/native/Copy.cpp)."""


# ---------------------------------------------------------------- not the model's op


@dataclass(frozen=True)
class NotModelOp:
    """One row of NOT_MODEL_OP_RULES: ops (a regular expression over the raw name, matched at its
    start) that are the profiler's, the compiler's, the autograd engine's or a wrapper's, not an op
    the model's code called. kind: one of NOT_MODEL_KINDS."""

    kind: str
    pattern: str
    reason: str
    source: str


NOT_MODEL_KINDS = ("bookkeeping", "compiled region", "compiled graph", "wrapper", "autograd")
"""bookkeeping: profiler and torch.compile spans that do no work of their own; compiled region: the
span of a compiled graph's run; compiled graph: AOTAutograd's autograd.Function that runs one;
wrapper: spans that only hold the ops a module, DDP or a library called; autograd: the autograd
engine's nodes and gradient accumulation."""

NOT_MODEL_OP_RULES: tuple[NotModelOp, ...] = (
    NotModelOp(
        "bookkeeping",
        r"TorchDynamo Cache Lookup",
        "Dynamo's guard check before a compiled frame runs",
        "pytorch/pytorch torch/csrc/dynamo/eval_frame.c",
    ),
    NotModelOp(
        "bookkeeping",
        r"Pregraph bytecode",
        "Dynamo's bytecode that runs before a compiled graph",
        "pytorch/pytorch torch/_dynamo/output_graph.py",
    ),
    NotModelOp(
        "bookkeeping",
        r"AOTDispatcher",
        "AOTAutograd's runtime wrappers around a compiled graph",
        "pytorch/pytorch torch/_functorch/_aot_autograd/runtime_wrappers.py",
    ),
    NotModelOp(
        "bookkeeping",
        r"ProfilerStep#",
        "the profiler's step spans (ProfilerStep#N)",
        "pytorch/pytorch torch/profiler/profiler.py",
    ),
    NotModelOp(
        "bookkeeping",
        r"## ",
        "inductor's record_function marks ('## Call CompiledFxGraph ... ##', '## Guard ...')",
        "pytorch/pytorch torch/_inductor/output_code.py",
    ),
    NotModelOp(
        "compiled region",
        r"Torch-Compiled Region",
        "the span of one compiled frame's run ('Torch-Compiled Region: 0/0')",
        "pytorch/pytorch torch/_dynamo/convert_frame.py",
    ),
    NotModelOp(
        "compiled region",
        r"## Call CompiledFxGraph",
        "inductor's call of a compiled FX graph",
        "pytorch/pytorch torch/_inductor/output_code.py",
    ),
    NotModelOp(
        "compiled graph",
        r"CompiledFunction",
        "AOTAutograd's autograd.Function that runs a compiled graph (CompiledFunction, CompiledFunctionBackward)",
        "pytorch/pytorch torch/_functorch/_aot_autograd/runtime_wrappers.py",
    ),
    NotModelOp(
        "wrapper",
        r"DistributedDataParallel",
        "DDP's forward span around the module's ops",
        "pytorch/pytorch torch/nn/parallel/distributed.py",
    ),
    NotModelOp(
        "wrapper",
        r"nn\.Module: ",
        "module annotations (with_modules / the Python tracer: 'nn.Module: Attention_0')",
        "pytorch/pytorch torch/autograd/profiler_util.py; tests/data traces",
    ),
    NotModelOp(
        "wrapper",
        r"record_param_comms$",
        "c10d's record of a collective's parameters around its work",
        "pytorch/pytorch torch/csrc/distributed/c10d/ParamCommsUtils.hpp",
    ),
    NotModelOp(
        "wrapper",
        r"forward$",
        "a TorchScript module's forward span",
        "pytorch/pytorch torch/csrc/jit/runtime/interpreter.cpp",
    ),
    NotModelOp(
        "wrapper",
        r"\w*profiler\w*::",
        "a library's own profiler marks (sglang_profiler::...)",
        "tests/data/tracelens_mi300x_sglang_qwen3_prefilldecode_ck_fmha.json.gz",
    ),
    NotModelOp(
        "autograd",
        r"autograd::",
        "the autograd engine's node spans ('autograd::engine::evaluate_function: MmBackward0')",
        "pytorch/pytorch torch/csrc/autograd/engine.cpp",
    ),
    NotModelOp(
        "autograd",
        r"torch::autograd::",
        "autograd's own nodes (torch::autograd::AccumulateGrad, CopySlices, GraphRoot)",
        "pytorch/pytorch torch/csrc/autograd/functions/",
    ),
    NotModelOp(
        "autograd",
        r"\w+Backward\d*$",
        "generated backward nodes (MmBackward0, SliceBackward0)",
        "pytorch/pytorch tools/autograd/derivatives.yaml",
    ),
)


def not_model_ops(*kinds: str) -> str:
    """The rows of NOT_MODEL_OP_RULES of `kinds` as one regular expression over a raw op name."""
    unknown = set(kinds) - set(NOT_MODEL_KINDS)
    if unknown:
        raise ValueError(f"kinds must be among {', '.join(NOT_MODEL_KINDS)}")
    return "^(?:" + "|".join(r.pattern for r in NOT_MODEL_OP_RULES if r.kind in kinds) + ")"


# What each reader leaves out (the names the readers had before the table; each is a set of kinds).
BOOKKEEPING_OPS = not_model_ops("bookkeeping", "compiled region")
"""cpu_ops with no work of their own (kernels: not device work on a CPU-only trace; roofline)."""
WRAPPER_OPS = re.compile(not_model_ops("bookkeeping", "compiled region", "compiled graph", "wrapper"))
"""Ops that only wrap other ops (besides autograd nodes): never the origin of a copy (copies)."""
AUTOGRAD_OPS = re.compile(not_model_ops("autograd"))
"""Autograd engine work: a copy under it is the 'autograd' class (copies)."""
NOT_MODEL_OPS = not_model_ops("autograd", "compiled graph", "compiled region")
"""The engine's or the compiler's ops: left out of a run's op signature (fingerprint, beside
BOOKKEEPING_OPS and METADATA_OPS)."""
COMPILED_REGION = not_model_ops("compiled region")
"""A compiled graph's run: a CPU flex run's evidence (backends)."""

# record_function annotations have no op namespace and read like prose: "Optimizer.step#SGD.step".
ANNOTATION = re.compile(r"^[^:]*[.#( ][^:]*$")


# ---------------------------------------------------------------- views and allocations

# cpu_ops that only make a new view or allocate: no work of their own (kernels: not device work on
# a CPU-only trace; roofline: they move no bytes). pytorch/pytorch aten/src/ATen/native/native_functions.yaml.
METADATA_OPS = (
    r"^aten::(view|_unsafe_view|_reshape_alias|reshape|view_as|as_strided|transpose|t|permute|expand|expand_as|"
    r"unsqueeze|squeeze|slice|select|narrow|split|split_with_sizes|chunk|unbind|detach|alias|resolve_conj|"
    r"resolve_neg|empty|empty_like|empty_strided|lift_fresh|contiguous|flatten|unflatten|numpy_T|"
    r"broadcast_tensors|result_type|size|stride|dim|is_same_size|lift)$"
)


# ---------------------------------------------------------------- requested copies

# Ops whose job is to move or convert data: a copy whose origin is one of these was asked for.
# The model's code called them (x.to, x.contiguous(), x.type_as(y), F.pad, torch.cat, ...), so the
# copy is the call's own work, not one an op made behind the user's back. docs/design.md lists them;
# the names are pytorch/pytorch aten/src/ATen/native/native_functions.yaml's.
REQUESTED_COPY_OPS = frozenset(
    {
        "aten::copy_",
        "aten::copy",
        "aten::_copy_from",
        "aten::_copy_from_and_resize",
        "aten::to",
        "aten::_to_copy",
        "aten::clone",
        "aten::contiguous",
        "aten::_local_scalar_dense",
        "aten::item",
        "aten::cpu",
        "aten::cuda",
        "aten::lift_fresh",
        "aten::lift_fresh_copy",
        "aten::cat",
        "aten::_cat",
        "aten::concat",
        "aten::concatenate",
        "aten::stack",
        "aten::hstack",
        "aten::vstack",
        "aten::index_copy",
        "aten::index_copy_",
        "aten::pin_memory",
        "aten::_pin_memory",
        "aten::to_dense",
        "aten::repeat",
        "aten::tile",
        "aten::tensor",
        "aten::scalar_tensor",
        "aten::new_tensor",
        "aten::detach_copy",
        "aten::_foreach_copy_",
        "aten::_foreach_copy",
        # explicit conversions and paddings the model's code calls (their copy is the call's whole job)
        "aten::type_as",
        "aten::double",
        "aten::float",
        "aten::half",
        "aten::bfloat16",
        "aten::int",
        "aten::long",
        "aten::pad",
        "aten::_pad_enum",
        "aten::constant_pad_nd",
        "aten::_pad_circular",
        "aten::reflection_pad1d",
        "aten::reflection_pad2d",
        "aten::reflection_pad3d",
        "aten::replication_pad1d",
        "aten::replication_pad2d",
        "aten::replication_pad3d",
        "aten::repeat_interleave",
        "aten::narrow_copy",
        # DDP's bucketing: flattening gradients into one buffer is the op's whole job
        "aten::flatten_dense_tensors",
        "aten::unflatten_dense_tensors",
    }
)
# Functionalization's *_copy ops (aten::view_copy, aten::permute_copy, ...) copy by name.
REQUESTED_COPY_SUFFIX = re.compile(r"^aten::\w+_copy$")
# A chain through one of these reads a value back to Python (`.item()`, `if tensor:`): the user
# asked for that value, so its tiny device-to-host copy is a sync to know about, not a hidden copy.
SCALAR_READS = frozenset({"aten::item", "aten::_local_scalar_dense"})


# ---------------------------------------------------------------- attention written by hand

SDPA_OP = r"^aten::(scaled_dot_product_attention|_scaled_dot_product_)"
"""PyTorch's fused attention op and its backends' ops (aten/src/ATen/native/transformers/attention.cpp):
ops under it are the math path's, not an eager attention."""
EAGER_MATMUL = r"^aten::(matmul|bmm|baddbmm|einsum)$"
"""The matmuls beside a compiled hand-written attention's generated softmax kernel."""
EAGER_SOFTMAX = r"^aten::(_?softmax|_safe_softmax)$"
"""The softmax of an attention written by hand (aten::softmax, _softmax, and _safe_softmax, which
SDPA's math path and masked attention call)."""
# Matrix products that can compute attention scores (Q K^T) or apply them to V (P V); aten::mm
# too, which a 2-D attention (one head, no batch) calls.
EAGER_CHAIN_MATMUL = r"^aten::(matmul|bmm|baddbmm|einsum|mm)$"
# torch.compile fuses a hand-written attention's scale, mask and softmax into one generated kernel
# (cpp_fused_* on CPU, triton_*_fused_* on GPU) between two matmuls.
INDUCTOR_SOFTMAX = r"(cpp|triton)_\w*fused\w*softmax"


# ---------------------------------------------------------------- ops and kernels whose work is counted elsewhere

COMPOSITE_OPS = re.compile(
    r"^aten::(matmul|masked_fill|clone|softmax|log_softmax|_safe_softmax|to|_to_copy|type_as|ones|zeros|full|"
    r"ones_like|zeros_like|full_like|new_ones|new_zeros|new_full|scalar_tensor|linear|einsum|dropout|"
    r"scaled_dot_product_attention)$"
)
"""Ops whose work is done by the ops they call (each counted there), on a CPU-only trace: their
ATen implementations are CompositeImplicitAutograd or call another op for every element they touch
(aten/src/ATen/native/native_functions.yaml, the ops' dispatch entries)."""
INDUCTOR_KERNELS = re.compile(r"^(triton_|graph_\d+_cpp_|cpp_fused_)")
"""Kernels torch.compile (Inductor) generates: triton_poi/red/per_fused_* on a GPU, cpp_fused_* and
graph_N_cpp_fused_* on a CPU (torch/_inductor/codegen: triton.py, cpp.py kernel names)."""

"""Name rules: the tables that say what an op or kernel name means, each row with its reason and source.

Moved here from the modules that read them, so that a rule is written once and no analysis
imports another only for its table (kernels.family_of reads the attention-backend table; the
backends analysis reads kernels.family_of: kept in one module, the two formed an import circle).

One module per table (each re-exported here, so `from dashboard.engine.rules import X` reads any):

    backends.py     BACKEND_TABLE     attention backends by op and kernel name (analyses/backends.py,
                                      kernels.family_of)
    families.py     FAMILY_RULES      kernel families by function name (kernels.family_of); its
                                      'communication' row is COLLECTIVES' kernel rows, its KV-cache
                                      part KV_CACHE_WRITES
    collectives.py  COLLECTIVES       collectives: kernels (the 'communication' family) and the CPU
                                      ops of a copy's op chain (copies.py's 'communication' class)
    calls.py        KV_CACHE_WRITES   copy kernels that write a KV cache (copies.py: requested)
                    CALL_PARTS        attention kernels that are one part of a call whose main kernel
                                      is another (quantization before it, a split-KV merge after it:
                                      efficiency.attention_calls)
    launches.py     LAUNCH_CALLS      host calls that launch a CUDA/HIP graph or one kernel
                                      (graphs.py, diff.readings)
                    HOST_CATEGORIES   the host-side categories the timeline draws and op_diff
                                      compares, besides the launch calls (diff.py)
    user.py         a user's rows (read_rules, user_rules) and the tables with them first
                    (backend_table, family_rules, attention_backend, is_collective_op)
    names.py        the demangler: names reduced to the function they call (itanium.py reads
                    mangled names)
    phases.py       PHASE_KERNELS     attention kernels that serve one phase of a serving step, prefill
                                      or decode (analyses/phases.py, for steps with no annotation)
    peaks.py        PEAK_TABLE        devices' peak FLOP/s and bandwidth (imported as rules.peaks)
    devices.py      CATEGORIES        event categories of every accelerator and their roles (the loader)
                    DEVICE_CLASSES    device events that are copies or sync events by name (MTIA, ...)
                                      and the copy directions (imported as rules.devices)
    op_readers.py   OP_READERS        attention ops by schema: where each keeps its arguments, and so
                                      what an attention op is by name (reader_for; imported as
                                      rules.op_readers)

A user adds rows to BACKEND_TABLE, FAMILY_RULES and COLLECTIVES from files named by
ATTNSCOPE_RULES (settings.RULES; TOML or JSON, read once, tried before the built-in rows):
see read_rules and docs/design.md, section "Name rules". tests/test_rules.py checks that the
tables agree with each other.
"""

from __future__ import annotations

from dashboard.engine.rules.backends import BACKEND_NAMES, BACKEND_TABLE, BACKENDS, AttentionBackend
from dashboard.engine.rules.calls import (
    CALL_PARTS,
    KV_CACHE_WRITE_KERNELS,
    KV_CACHE_WRITES,
    CallPart,
    NameRule,
    call_backend,
    call_part,
    is_kv_cache_write,
)
from dashboard.engine.rules.collectives import COLLECTIVE_KERNELS, COLLECTIVE_OPS, COLLECTIVES, Collective
from dashboard.engine.rules.families import FAMILIES, FAMILY_RULES, FamilyRule
from dashboard.engine.rules.launches import (
    GRAPH_LAUNCH,
    HOST_CATEGORIES,
    HOST_SPANS,
    KERNEL_LAUNCH,
    LAUNCH_CALLS,
    LAUNCH_KINDS,
    HostCategory,
    LaunchCall,
    launch_pattern,
)
from dashboard.engine.rules.user import (
    SECTIONS,
    RulesError,
    UserRules,
    attention_backend,
    backend_table,
    family_rules,
    is_collective_op,
    is_fused_attention,
    read_rules,
    rule_files,
    user_rules,
)

__all__ = [
    "BACKENDS",
    "BACKEND_NAMES",
    "BACKEND_TABLE",
    "CALL_PARTS",
    "COLLECTIVES",
    "COLLECTIVE_KERNELS",
    "COLLECTIVE_OPS",
    "FAMILIES",
    "FAMILY_RULES",
    "GRAPH_LAUNCH",
    "HOST_CATEGORIES",
    "HOST_SPANS",
    "KERNEL_LAUNCH",
    "KV_CACHE_WRITES",
    "KV_CACHE_WRITE_KERNELS",
    "LAUNCH_CALLS",
    "LAUNCH_KINDS",
    "SECTIONS",
    "AttentionBackend",
    "CallPart",
    "Collective",
    "FamilyRule",
    "HostCategory",
    "LaunchCall",
    "NameRule",
    "RulesError",
    "UserRules",
    "attention_backend",
    "backend_table",
    "call_backend",
    "call_part",
    "family_rules",
    "is_collective_op",
    "is_fused_attention",
    "is_kv_cache_write",
    "launch_pattern",
    "read_rules",
    "rule_files",
    "user_rules",
]

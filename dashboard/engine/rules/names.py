"""Kernel and op names reduced to the function they call: namespace, own name, template arguments.

A kernel's name in a trace is whatever its compiler or library made of it: a demangled C++
signature (`void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`), an Itanium-mangled
symbol (`_ZN7ck_tile6kentryI...`, as ROCm traces of Composable Kernel show), or a plain identifier
(cuBLAS `sm90_xmma_gemm_*`, Triton `triton_poi_fused_*`, NCCL `ncclDevKernel_*`). parse() strips
the return type, the parameter list and the template arguments, so that classifiers look at what a
kernel is and not at words that only occur in its argument types (`cutlass::` in the template
arguments of a MoE kernel does not make it a GEMM).

Generic launchers carry the real kernel as their first template argument that names a type:
`cutlass::Kernel<cutlass_80_tensorop_s1688gemm_...>`, `cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>`,
`ck_tile::kentry<2, ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel<...>>`. For those the
identity is that argument (architecture guards such as `flash::enable_sm90_or_later<...>` peeled
off), and `launcher` keeps the launcher's name.

Mangled names are read by a small parser of the Itanium C++ ABI's name grammar (nested names,
substitutions, template arguments and literals), not by a dependency: the standard library has no
demangler, and libstdc++'s `__cxa_demangle` (what c++filt and the `cxxfilt` package call) rejects
some real kernel names outright (SGLang's `sgl_hip::activation::act_and_mul_kernel`, whose template
argument is a function address) and every name a profiler cut short; the parser keeps what it read.
The parser is rules/itanium.py (demangle, re-exported here).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from dashboard.engine.rules.itanium import demangle

# Generic entry points whose first type-naming template argument is the kernel itself.
LAUNCHERS = re.compile(r"^(cutlass::(Kernel|Kernel2|device_kernel)|ck_tile::kentry|ck::kernel_entry)$")
# Template wrappers that only guard the architecture: peeled off a launcher's argument.
ARCH_GUARDS = re.compile(r"(^|::)enable_sm\d+\w*$")
# Template arguments that are values or builtin types, never the kernel's name.
NOT_A_NAME = re.compile(
    r"^(-?\d[\w.]*|true|false|\(.*|(unsigned |signed )?(void|bool|char|short|int|long|float|double|half)\b.*|"
    r"std::bfloat16_t|__half|__nv_bfloat16|c10::(Half|BFloat16))$"
)
_ANON_NSYS = re.compile(r"<unnamed>")
_VOID = re.compile(r"^void ")  # kernels return void; other return types come with a parameter list
_AMD_SUFFIX = re.compile(r"(\.kd|\s*\[clone [^\]]*\])$")


@dataclass(frozen=True)
class KernelName:
    """A name reduced to its parts. namespace: 'at::native::(anonymous namespace)' ('' when none);
    base: the function's own name; template_args: its top-level template arguments as text;
    launcher: the generic launcher the identity was taken from ('' when none)."""

    raw: str
    namespace: str
    base: str
    template_args: tuple[str, ...] = ()
    launcher: str = ""

    @property
    def qualname(self) -> str:
        """namespace::base, the string classifiers match."""
        return f"{self.namespace}::{self.base}" if self.namespace else self.base

    @property
    def template_text(self) -> str:
        """The template arguments joined with ', ' ('' when none)."""
        return ", ".join(self.template_args)


@functools.lru_cache(maxsize=1 << 16)
def parse(name: str) -> KernelName:
    """The function a kernel or op name calls (see the module docstring). Never raises: a name that
    does not read as C++ is its own base name."""
    text = _AMD_SUFFIX.sub("", name.strip())
    if text.startswith(("_Z", "__Z")):
        text = demangle(text) or text
    text = _ANON_NSYS.sub("(anonymous namespace)", text)
    namespace, base, args = split_qualified(strip_signature(text))
    parsed = KernelName(name, namespace, base, args)
    return _unwrap_launcher(parsed)


def strip_signature(text: str) -> str:
    """'void ns::f<T>(int, float)' -> 'ns::f<T>': drop a parameter list that follows the name with no
    space between (so 'Memcpy DtoD (Device -> Device)' stays whole) and then the return type."""
    s = _VOID.sub("", text.strip())
    if s.endswith(" const"):
        s = s[: -len(" const")]
    if not s.endswith(")"):
        return s
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        ch = s[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                if i == 0 or s[i - 1] == " ":
                    return s
                return _last_token(s[:i])
    return s


def _last_token(s: str) -> str:
    """The last space-separated token outside any brackets: the name after its return type."""
    depth = 0
    cut = 0
    for i, ch in enumerate(s):
        if ch in "<({[":
            depth += 1
        elif ch in ">)}]":
            depth = max(depth - 1, 0)
        elif ch == " " and depth == 0 and not s.startswith("(anonymous", i + 1):
            cut = i + 1
    return s[cut:]


def split_qualified(s: str) -> tuple[str, str, tuple[str, ...]]:
    """'a::b<x>::f<T, U>' -> ('a::b', 'f', ('T', 'U')). Template arguments of the enclosing scopes
    are dropped; an unclosed '<' (a name cut short) keeps what was read."""
    parts: list[str] = []
    args: list[str] = []
    current, arg = "", ""
    depth, i = 0, 0
    while i < len(s):
        ch = s[i]
        if depth == 0 and s.startswith("::", i):
            parts.append(current)
            current, args = "", []
            i += 2
            continue
        if ch == "<" and not _is_operator(current):
            depth += 1
            if depth == 1:
                arg = ""
                i += 1
                continue
        elif ch == ">" and depth > 0 and not s.startswith("->", i - 1):
            depth -= 1
            if depth == 0:
                args.append(arg.strip())
                i += 1
                continue
        elif ch in "({[":
            close = _matching(s, i)
            chunk = s[i:close]
            if depth == 0:
                current += chunk
            else:
                arg += chunk
            i = close
            continue
        if depth == 0:
            current += ch
        elif depth == 1 and ch == ",":
            args.append(arg.strip())
            arg = ""
        else:
            arg += ch
        i += 1
    if depth > 0 and arg.strip():
        args.append(arg.strip())
    parts.append(current)
    parts = [p.strip() for p in parts]
    return "::".join(p for p in parts[:-1] if p), parts[-1], tuple(a for a in args if a)


def _is_operator(current: str) -> bool:
    return current.endswith("operator")


def _matching(s: str, start: int) -> int:
    """Index just past the bracket that closes s[start] (len(s) when it is never closed)."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = [pairs[s[start]]]
    i = start + 1
    while i < len(s) and stack:
        ch = s[i]
        if ch in pairs:
            stack.append(pairs[ch])
        elif ch == stack[-1]:
            stack.pop()
        i += 1
    return i


def _unwrap_launcher(parsed: KernelName) -> KernelName:
    """For a generic launcher, the identity of the kernel it launches (see the module docstring)."""
    if not LAUNCHERS.match(parsed.qualname):
        return parsed
    inner = next((a for a in parsed.template_args if not NOT_A_NAME.match(a)), None)
    if inner is None:
        return parsed
    namespace, base, args = split_qualified(inner)
    while ARCH_GUARDS.search(f"{namespace}::{base}") and args:
        namespace, base, args = split_qualified(args[0])
    return KernelName(parsed.raw, namespace, base, args, launcher=parsed.qualname)

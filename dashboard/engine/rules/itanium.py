"""A reader of the Itanium C++ ABI's name grammar, for mangled kernel names (`_ZN7ck_tile6kentryI...`).

The part of the grammar kernel names use: nested names, substitutions, template arguments and
literals. demangle() keeps what it read of a name a profiler cut short. names.parse calls it; why a
parser of our own and not libstdc++'s __cxa_demangle: see names.py.
"""

from __future__ import annotations


_BUILTIN = {
    "v": "void",
    "w": "wchar_t",
    "b": "bool",
    "c": "char",
    "a": "signed char",
    "h": "unsigned char",
    "s": "short",
    "t": "unsigned short",
    "i": "int",
    "j": "unsigned int",
    "l": "long",
    "m": "unsigned long",
    "x": "long long",
    "y": "unsigned long long",
    "n": "__int128",
    "o": "unsigned __int128",
    "f": "float",
    "d": "double",
    "e": "long double",
    "g": "__float128",
    "z": "...",
}
_BUILTIN_D = {
    "Dn": "decltype(nullptr)",
    "Dh": "half",
    "Di": "char32_t",
    "Ds": "char16_t",
    "Du": "char8_t",
    "Da": "auto",
    "Dc": "decltype(auto)",
    "DF16b": "std::bfloat16_t",
}
_LITERAL_SUFFIX = {"j": "u", "l": "l", "m": "ul", "x": "ll", "y": "ull"}
_ABBREVIATIONS = {
    "St": "std",
    "Sa": "std::allocator",
    "Sb": "std::basic_string",
    "Ss": "std::string",
    "Si": "std::istream",
    "So": "std::ostream",
    "Sd": "std::iostream",
}
_OPERATORS = {
    "cl": "operator()",
    "ix": "operator[]",
    "eq": "operator==",
    "ne": "operator!=",
    "lt": "operator<",
    "gt": "operator>",
    "pl": "operator+",
    "mi": "operator-",
    "ml": "operator*",
    "dv": "operator/",
    "aS": "operator=",
    "ad": "operator&",
    "ng": "operator-",
    "nt": "operator!",
    "co": "operator~",
}
_UNARY_EXPR = {"ad": "&", "ng": "-", "nt": "!", "co": "~"}


_SEQ_ID = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")  # the base-36 digits of a substitution's seq-id


class _Stop(Exception):
    """The parser met something outside its subset or the end of a truncated name."""


def demangle(symbol: str) -> str | None:
    """'_ZN5aiter24add_rmsnorm_quant_kernelIDF16bLi256EEEv...' -> 'aiter::add_rmsnorm_quant_kernel<std::bfloat16_t, 256>':
    the function's qualified name and its template arguments (no return or parameter types). A
    template argument the parser cannot read ends the list there; None when not even the name reads."""
    reader = _Itanium(symbol)
    try:
        return reader.function()
    except (_Stop, RecursionError):  # RecursionError: types nested thousands deep ('_Z1fIPKPKPK...')
        return reader.partial()


class _Itanium:
    """A recursive-descent reader of the part of the Itanium mangling grammar kernel names use."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.subs: list[str] = []  # substitution candidates, in the order the ABI numbers them
        self.fn_name: str | None = None
        self.fn_args: list[str] = []  # the function's template arguments read so far

    # -- cursor
    def peek(self, n: int = 1) -> str:
        return self.s[self.i : self.i + n]

    def eat(self, token: str) -> bool:
        if self.s.startswith(token, self.i):
            self.i += len(token)
            return True
        return False

    def need(self, token: str) -> None:
        if not self.eat(token):
            raise _Stop

    def number(self) -> int:
        start = self.i
        while self.i < len(self.s) and self.s[self.i].isdigit():
            self.i += 1
        if start == self.i:
            raise _Stop
        return int(self.s[start : self.i])

    def partial(self) -> str | None:
        if self.fn_name is None:
            return None
        return self.fn_name + (f"<{', '.join(self.fn_args)}>" if self.fn_args else "")

    # -- names
    def function(self) -> str:
        if not (self.eat("_Z") or self.eat("__Z")):
            raise _Stop
        self.name(function=True)
        return self.partial() or ""

    def name(self, function: bool = False) -> str:
        if self.peek() == "N":
            return self.nested(function)
        if self.peek() == "Z":
            return self.local_name(function)
        if self.eat("St"):
            text = "std::" + self.unqualified("std")
        elif self.peek() == "S":
            text = self.substitution()
        else:
            self.eat("L")
            text = self.unqualified("")
        if self.peek() == "I":
            self.subs.append(text)
            return self.template_id(text, function)
        if function:
            self.fn_name = text
        return text

    def template_id(self, text: str, function: bool) -> str:
        if function:
            self.fn_name = text
            self.template_args(into=self.fn_args)
            return self.partial() or text
        args = self.template_args()
        return f"{text}<{', '.join(args)}>"

    def nested(self, function: bool) -> str:
        self.need("N")
        while self.peek() in ("r", "V", "K", "R", "O"):
            self.i += 1
        prefix = ""
        while not self.eat("E"):
            if self.i >= len(self.s):
                raise _Stop
            if self.peek() == "I":
                if function:
                    self.fn_name, self.fn_args = prefix, []
                    self.template_args(into=self.fn_args)
                    if self.peek() == "E":
                        prefix = self.partial() or prefix
                        continue
                    prefix = f"{prefix}<{', '.join(self.fn_args)}>"
                    self.fn_name, self.fn_args = None, []
                else:
                    prefix = f"{prefix}<{', '.join(self.template_args())}>"
                self.subs.append(prefix)
                continue
            if self.peek() == "S" and self.peek(2) != "St":
                part = self.substitution()
                prefix = part if not prefix else f"{prefix}::{part}"
                continue
            if self.eat("St"):
                prefix = "std"
                continue
            if self.peek() == "T":
                prefix = self.template_param()
                self.subs.append(prefix)
                continue
            self.eat("L")
            part = self.unqualified(prefix)
            prefix = part if not prefix else f"{prefix}::{part}"
            if function and self.peek() == "E":
                self.fn_name = prefix
            else:
                self.subs.append(prefix)
        return prefix

    def local_name(self, function: bool) -> str:
        self.need("Z")
        outer = _Itanium(self.s)
        outer.i, outer.subs = self.i, self.subs
        outer_name = outer.name(function=True)
        outer_text = outer.partial() or outer_name
        self.i = outer.i
        while self.i < len(self.s) and self.peek() != "E":  # the enclosing function's parameter types
            self.type()
        self.need("E")
        if self.eat("s"):
            entity = "string literal"
        else:
            entity = self.name(function=function)
        if self.eat("_"):
            self.number()
        text = f"{outer_text}::{entity}"
        if function:
            self.fn_name = f"{outer_text}::{self.fn_name or entity}"
        return text

    def unqualified(self, prefix: str) -> str:
        ch = self.peek()
        if ch.isdigit():
            return self.source_name()
        if self.eat("Ut"):
            n = self.number() + 2 if self.peek().isdigit() else 1
            self.need("_")
            return f"{{unnamed type#{n}}}"
        if self.eat("Ul"):
            params = []
            while not self.eat("E"):
                params.append(self.type())
            n = self.number() + 2 if self.peek().isdigit() else 1
            self.need("_")
            return f"{{lambda({', '.join(p for p in params if p != 'void')})#{n}}}"
        if ch in ("C", "D") and self.peek(2)[1:].isdigit():
            self.i += 2
            own = prefix.rsplit("::", 1)[-1]
            return own if ch == "C" else "~" + own
        code = self.peek(2)
        if code in _OPERATORS:
            self.i += 2
            return _OPERATORS[code]
        raise _Stop

    def source_name(self) -> str:
        length = self.number()
        if self.i + length > len(self.s):
            raise _Stop
        ident = self.s[self.i : self.i + length]
        self.i += length
        return "(anonymous namespace)" if ident.startswith("_GLOBAL__N") else ident

    def substitution(self) -> str:
        for abbrev, text in _ABBREVIATIONS.items():
            if self.eat(abbrev):
                return text
        self.need("S")
        if self.eat("_"):
            index = 0
        else:
            start = self.i
            while self.i < len(self.s) and self.s[self.i] in _SEQ_ID:
                self.i += 1
            if self.i == start:  # 'S' followed by neither a seq-id nor '_': not a substitution this reader knows
                raise _Stop
            index = int(self.s[start : self.i], 36) + 1
            self.need("_")
        return self.subs[index] if index < len(self.subs) else "?"

    def template_param(self) -> str:
        self.need("T")
        index = 0 if self.eat("_") else self.number() + 1
        if index and not self.eat("_"):
            raise _Stop
        return self.fn_args[index] if index < len(self.fn_args) else f"T{index}"

    # -- template arguments
    def template_args(self, into: list[str] | None = None) -> list[str]:
        args: list[str] = [] if into is None else into
        self.need("I")
        while not self.eat("E"):
            start = self.i
            try:
                if self.i >= len(self.s):
                    raise _Stop
                args.append(self.template_arg())
            except _Stop:
                if into is not None and (salvaged := self.salvage_name(start)):
                    args.append(salvaged)  # a name cut short still names the kernel a launcher runs
                raise
        return args

    def salvage_name(self, start: int) -> str:
        """The qualified name that begins at `start`, as far as it reads (for names cut short)."""
        probe = _Itanium(self.s)
        probe.i, probe.subs, parts = start, list(self.subs), []
        probe.eat("N")
        try:
            while probe.i < len(probe.s):
                if probe.peek() == "S":
                    parts.append(probe.substitution())
                elif probe.peek().isdigit():
                    parts.append(probe.source_name())
                else:
                    break
        except _Stop:
            pass
        return "::".join(parts)

    def template_arg(self) -> str:
        if self.eat("Tn"):  # C++20 template-param-decl: the parameter's type, then the argument
            self.type()
        elif self.eat("Ty"):
            pass
        if self.peek() == "L":
            return self.literal()
        if self.eat("X"):
            text = self.expression()
            self.need("E")
            return text
        if self.eat("J"):
            items = []
            while not self.eat("E"):
                items.append(self.template_arg())
            return ", ".join(items)
        return self.type()

    def literal(self) -> str:
        self.need("L")
        if self.eat("_Z"):
            inner = _Itanium(self.s)
            inner.i, inner.subs = self.i, self.subs
            inner.name(function=True)
            while inner.i < len(inner.s) and inner.peek() != "E":  # the function's own types
                inner.type()
            self.i = inner.i
            self.need("E")
            return inner.partial() or "?"
        code = self.peek()
        if code in _BUILTIN:
            self.i += 1
            kind = code
        else:
            kind = self.type()
        negative = self.eat("n")
        start = self.i
        while self.i < len(self.s) and self.s[self.i] != "E":
            self.i += 1
        value = ("-" if negative else "") + self.s[start : self.i]
        self.need("E")
        if kind == "b":
            return "true" if value == "1" else "false"
        if kind in _BUILTIN:
            return value + _LITERAL_SUFFIX.get(kind, "")
        return f"({kind}){value}"

    def expression(self) -> str:
        code = self.peek(2)
        if code in _UNARY_EXPR:
            self.i += 2
            return _UNARY_EXPR[code] + self.expression()
        if self.peek() == "L":
            return self.literal()
        if self.peek() == "T":
            return self.template_param()
        raise _Stop

    # -- types
    def type(self) -> str:
        ch = self.peek()
        if ch in _BUILTIN:
            self.i += 1
            return _BUILTIN[ch]
        for code, text in _BUILTIN_D.items():
            if self.eat(code):
                return text
        if self.eat("DF"):
            bits = self.number()
            self.need("_")
            return f"_Float{bits}"
        if ch in "PROKVr" or self.peek(2) in ("Dp", "Dv") or ch in "FAMu" or ch == "T":
            text = self.compound_type()
        elif ch == "S":
            if self.eat("St"):
                text = "std::" + self.unqualified("std")
                self.subs.append(text)
            else:
                text = self.substitution()
            if self.peek() == "I":
                text = f"{text}<{', '.join(self.template_args())}>"
                self.subs.append(text)
            return text
        elif ch == "N":
            return self.nested(function=False)
        elif ch == "Z":
            text = self.local_name(function=False)
        elif ch.isdigit():
            text = self.source_name()
            if self.peek() == "I":
                self.subs.append(text)
                text = f"{text}<{', '.join(self.template_args())}>"
        else:
            raise _Stop
        self.subs.append(text)
        return text

    def compound_type(self) -> str:
        """Pointers, references, qualifiers, packs, vectors, functions, arrays, member pointers,
        vendor types and template parameters (each its own substitution candidate, added by type())."""
        ch = self.peek()
        suffix = {"P": "*", "R": "&", "O": "&&", "K": " const", "V": " volatile", "r": " restrict"}
        if ch in suffix:
            self.i += 1
            return self.type() + suffix[ch]
        if self.eat("Dp"):
            return self.type() + "..."
        if self.eat("Dv"):
            n = self.number()
            self.need("_")
            return f"{self.type()} __vector({n})"
        if self.eat("F"):
            self.eat("Y")
            ret = self.type()
            params = []
            while not self.eat("E"):
                if self.peek() in ("R", "O") and self.peek(2)[1:] == "E":
                    self.i += 1
                    continue
                params.append(self.type())
            return f"{ret} ({', '.join(p for p in params if p != 'void')})"
        if self.eat("A"):
            n = str(self.number()) if self.peek().isdigit() else ""
            self.need("_")
            return f"{self.type()} [{n}]"
        if self.eat("M"):
            cls = self.type()
            member = self.type()
            return f"{member} {cls}::*"
        if self.eat("u"):
            return self.source_name()
        text = self.template_param()
        if self.peek() == "I":
            self.subs.append(text)
            text = f"{text}<{', '.join(self.template_args())}>"
        return text

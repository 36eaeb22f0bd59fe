"""The check's settings: pyproject.toml's [tool.attnscope.check] table, the flags over it, and the
gate's Rules made of them."""

from __future__ import annotations

import argparse
from typing import Any

from dashboard.engine.rules import BACKENDS

CHECK_OPTIONS = {  # [tool.attnscope.check] key -> (argparse dest, type)
    "max-slowdown": ("max_slowdown", float),
    "max-family-slowdown": ("max_family_slowdown", float),
    "max-host-increase": ("max_host_increase", float),
    "inconclusive": ("inconclusive", str),
    "max-kernel-increase": ("max_kernel_increase", float),
    "allow-new-copies": ("allow_new_copies", bool),
    "require-backend": ("require_backend", str),
    "allow-math": ("allow_math", bool),
    "allow-different-workload": ("allow_different_workload", bool),
    "min-speedup": ("min_speedup", float),
    "require-parity": ("require_parity", bool),
    "min-attention-efficiency": ("min_attention_efficiency", float),
    "max-memory-increase": ("max_memory_increase", float),
    "max-efficiency-drop": ("max_efficiency_drop", float),
    "max-idle-increase": ("max_idle_increase", float),
    "confidence": ("confidence", float),
    "resamples": ("resamples", int),
    "seed": ("seed", int),
    "rules": ("rule", dict),
}


def _check_settings(args: argparse.Namespace) -> tuple[dict[str, Any], str | None]:
    """The check's settings: pyproject.toml's [tool.attnscope.check] (--config FILE, else the
    nearest one at or above the current folder), then the command line's flags over it."""
    from pathlib import Path

    from dashboard.engine.compare.verdict import find_config, read_config

    path = Path(args.config) if args.config else find_config(Path.cwd())
    table = (read_config(path) or {}) if path is not None else {}
    if args.config and not table:
        raise ValueError(f"{path}: no [tool.attnscope.check] table")
    settings: dict[str, Any] = {}
    for key, value in table.items():
        known = CHECK_OPTIONS.get(key.replace("_", "-"))
        if known is None:
            raise ValueError(
                f"{path}: [tool.attnscope.check] has an unknown key '{key}' (known: {', '.join(CHECK_OPTIONS)})"
            )
        dest, kind = known
        ok = isinstance(value, kind) or (kind is float and isinstance(value, int) and not isinstance(value, bool))
        if not ok or (kind is not bool and isinstance(value, bool)):
            raise ValueError(f"{path}: [tool.attnscope.check] {key} must be a {kind.__name__}")
        settings[dest] = dict(value) if kind is dict else value
    for dest, _ in CHECK_OPTIONS.values():
        given = getattr(args, dest, None)
        if dest == "rule":
            if given:
                levels = dict(settings.get("rule", {}))
                for item in given:
                    name, _, level = item.partition("=")
                    levels[name.strip()] = level.strip()
                settings["rule"] = levels
        elif given is not None:
            settings[dest] = given
    return settings, str(path) if table else None


def _gate_rules(settings: dict[str, Any]) -> Any:
    """The gate's Rules from the merged settings (config file, then flags); ValueError names a bad one."""
    from dashboard.engine.compare.gate import Rules, with_levels

    rules = Rules(
        max_kernel_increase_pct=settings.get("max_kernel_increase", 0.0),
        no_new_copies=not settings.get("allow_new_copies", False),  # --no-new-copies is the default, said out loud
        require_backend=settings.get("require_backend"),
        forbid_math=not settings.get("allow_math", False),
        min_speedup=settings.get("min_speedup"),
        require_parity=settings.get("require_parity", False),
        min_attention_efficiency=settings.get("min_attention_efficiency"),
        max_slowdown_pct=settings.get("max_slowdown"),
        max_family_slowdown_pct=settings.get("max_family_slowdown"),
        max_host_increase_pct=settings.get("max_host_increase"),
        inconclusive=settings.get("inconclusive", "pass"),
        **{
            key: settings[dest]
            for key, dest in (
                ("confidence", "confidence"),
                ("resamples", "resamples"),
                ("seed", "seed"),
                ("max_memory_increase_pct", "max_memory_increase"),
                ("max_efficiency_drop", "max_efficiency_drop"),
                ("max_idle_increase", "max_idle_increase"),
            )
            if dest in settings
        },
    )
    if rules.inconclusive not in ("pass", "fail"):
        raise ValueError(f"inconclusive must be 'pass' or 'fail', not '{rules.inconclusive}'")
    if rules.require_backend is not None and rules.require_backend not in BACKENDS:
        raise ValueError(f"require-backend must be one of {', '.join(BACKENDS)}")
    return with_levels(rules, settings.get("rule", {}))

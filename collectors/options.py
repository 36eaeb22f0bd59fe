"""Command-line pieces every `python -m collectors` mode shares: the error type, the parser that
raises it, the dtype names, and the checks of --device, --out and integers (positive, at least N)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Callable, NoReturn

import torch

PROG = "python -m collectors"
DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
"""Short dtype names on the command line and in the tables, and the torch dtype of each."""
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}


class UsageError(Exception):
    """Bad command-line input; the message is the one line shown to the user."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise UsageError (one line, exit 2) instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def at_least(minimum: int) -> Callable[[str], int]:
    """argparse type: an integer of at least `minimum`."""

    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}: {value}")
        return value

    return check


positive = at_least(1)
"""argparse type: an integer of at least 1."""


def device(choice: str) -> torch.device:
    """The torch device for --device auto|cpu|cuda; UsageError when CUDA is asked for and absent."""
    if choice == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: this torch build sees no CUDA device")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


def out_dir(path: Path) -> Path:
    """Create the output folder if missing; UsageError when it is a file or not writable."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {path}: exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot create the folder ({exc.strerror or exc})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"--out {path}: folder is not writable")
    return path

"""A dashboard server the browser tests can stop and start again: `streamlit run dashboard/app.py`
on a free loopback port with a store folder and extra trace paths of the test's choosing.

The waiting, the port and the browser's arguments come from tests/test_dashboard_browser.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from test_dashboard_browser import REPO, _free_port, _wait_healthy


class Server:
    """One `streamlit run` process. start() may be called again after stop() (same port, same
    store): a restart."""

    def __init__(self, store: Path, log: Path, paths: Sequence[Path] = (), options: Sequence[str] = ()) -> None:
        self.store, self.log_path, self.paths, self.options = Path(store), Path(log), list(paths), list(options)
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 90) -> "Server":
        env = {k: v for k, v in os.environ.items() if k not in ("ATTNSCOPE_TRACES", "ATTNSCOPE_NO_STORE")}
        env["ATTNSCOPE_STORE"] = str(self.store)
        cmd = [sys.executable, "-m", "streamlit", "run", str(REPO / "dashboard" / "app.py"), "--server.headless", "true",
               "--server.port", str(self.port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
               *self.options]
        if self.paths:
            cmd += ["--", *map(str, self.paths)]
        log = self.log_path.open("a")
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()  # the child holds its own copy
        try:
            _wait_healthy(self.port, self.proc, timeout=timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def rss_bytes(pid: int) -> int:
    """Resident memory of a process and its children (the loader's slice workers), in bytes:
    psutil when installed, else /proc/PID/status VmRSS (the process alone)."""
    try:
        import psutil
    except ImportError:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no VmRSS for process {pid}")
    proc = psutil.Process(pid)
    total = proc.memory_info().rss
    for child in proc.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total

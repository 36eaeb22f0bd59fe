"""The dashboard works on a machine without a network: `streamlit run dashboard/app.py`, the README's
command, starts without asking any other machine anything. Left to its defaults, a headless Streamlit
server (any Linux box without a display) asks checkip.amazonaws.com for the machine's external IP to
print an "External URL"; .streamlit/config.toml names the address instead.

The server runs with a sitecustomize that writes down every name it looks up and every address it
connects to; the test reads that list once the server has printed its URL.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from test_dashboard_browser import REPO, SERVER_QUIET, _free_port, _wait_healthy

RECORDER = """
import os, socket

_log = os.environ["ATTNSCOPE_NETWORK_LOG"]
_getaddrinfo = socket.getaddrinfo
_connect = socket.socket.connect


def _write(text):
    with open(_log, "a") as fh:
        fh.write(text + "\\n")


def getaddrinfo(host, *args, **kwargs):
    _write(f"lookup {host}")
    return _getaddrinfo(host, *args, **kwargs)


def connect(self, address):
    _write(f"connect {address!r}")
    return _connect(self, address)


socket.getaddrinfo = getaddrinfo
socket.socket.connect = connect
_write("recording")
"""
LOCAL = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "::", "", "None")


def off_the_machine(lines: list[str]) -> list[str]:
    """The recorded lookups and connections that name another machine."""
    out = []
    for line in lines:
        kind, _, what = line.partition(" ")
        if kind == "recording":
            continue
        host = what if kind == "lookup" else what.strip("()").split(",")[0].strip("'\" ")
        if host not in LOCAL and not host.startswith(("127.", "/")):
            out.append(line)
    return out


def test_the_readme_command_starts_the_server_without_asking_another_machine_anything(tmp_path):
    recorder = tmp_path / "recorder"
    recorder.mkdir()
    (recorder / "sitecustomize.py").write_text(RECORDER)
    log, printed = tmp_path / "network.log", tmp_path / "streamlit.log"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("ATTNSCOPE_TRACES",)}
    env.update(
        PYTHONPATH=os.pathsep.join([str(recorder), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        ATTNSCOPE_NETWORK_LOG=str(log),
        ATTNSCOPE_STORE=str(tmp_path / "store"),
    )
    env.pop("DISPLAY", None)  # headless, as on a server: the case that looked the external IP up
    with printed.open("w") as out:
        # `streamlit run dashboard/app.py` with only a free port (8501 may be taken) and no file watcher
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "dashboard/app.py", "--server.port", str(port), *SERVER_QUIET],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_healthy(port, proc, timeout=90)
        deadline = time.monotonic() + 30
        while "URL:" not in printed.read_text() and time.monotonic() < deadline:  # printed once it started
            time.sleep(0.2)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    text = printed.read_text()
    assert "URL:" in text and "External URL" not in text, text[-2000:]
    recorded = log.read_text().splitlines() if log.exists() else []
    assert "recording" in recorded, "the recorder did not load: the test would prove nothing"
    assert off_the_machine(recorded) == [], text[-2000:]


def test_the_recorder_tells_another_machine_from_this_one():
    assert off_the_machine(
        ["lookup localhost", "lookup None", "connect ('127.0.0.1', 8501)", "lookup checkip.amazonaws.com"]
    ) == ["lookup checkip.amazonaws.com"]
    assert off_the_machine(["connect ('8.8.8.8', 80)"]) == ["connect ('8.8.8.8', 80)"]

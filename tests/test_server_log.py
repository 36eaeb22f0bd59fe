"""tests/browser_server.tracebacks: the browser tests fail on any traceback in the server's log
except Streamlit's own WebSocket teardown race, and on that one only when it is all Streamlit's."""

from __future__ import annotations

from browser_server import tracebacks

SITE = "/venv/lib/python3.11/site-packages"
# As CI's log held it (frames shortened to the first and last of each exception), 7 December.
RACE = f"""INFO:     connection closed
ERROR:    Exception in ASGI application
Traceback (most recent call last):
  File "{SITE}/streamlit/web/server/starlette/starlette_websocket.py", line 516, in _websocket_endpoint
    data = await websocket.receive_bytes()
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SITE}/starlette/websockets.py", line 131, in receive_bytes
    raise WebSocketDisconnected('WebSocket is not connected. Need to call "accept" first.')
starlette.websockets.WebSocketDisconnected: WebSocket is not connected. Need to call "accept" first.

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "{SITE}/uvicorn/protocols/websockets/websockets_sansio_impl.py", line 416, in run_asgi
    result = await self.app(self.scope, self.receive, self.send)
  File "{SITE}/streamlit/web/server/starlette/starlette_websocket.py", line 524, in _websocket_endpoint
    await websocket.close()
  File "{SITE}/starlette/websockets.py", line 104, in send
    raise WebSocketDisconnected('Cannot call "send" once a close message has been sent.')
starlette.websockets.WebSocketDisconnected: Cannot call "send" once a close message has been sent.
INFO:     127.0.0.1:40000 - "GET /_stcore/health HTTP/1.1" 200 OK
"""


def test_streamlits_own_websocket_teardown_race_is_not_reported():
    assert tracebacks(RACE) == []
    assert tracebacks("INFO: nothing wrong\n") == []


def test_a_frame_of_ours_or_another_exception_is_reported():
    ours = RACE.replace(
        f'  File "{SITE}/uvicorn/protocols/websockets/websockets_sansio_impl.py", line 416, in run_asgi',
        '  File "/repo/dashboard/app.py", line 12, in open_tab',
    )
    assert len(tracebacks(ours)) == 1 and "dashboard/app.py" in tracebacks(ours)[0]
    other = RACE.replace(
        'starlette.websockets.WebSocketDisconnected: Cannot call "send"', 'KeyError: Cannot call "send"'
    )
    assert len(tracebacks(other)) == 1
    two = (
        RACE
        + """Traceback (most recent call last):
  File "/repo/dashboard/views/tab_set.py", line 40, in draw
    raise ValueError("x")
ValueError: x
"""
    )
    found = tracebacks(two)
    assert len(found) == 1 and found[0].endswith("ValueError: x")

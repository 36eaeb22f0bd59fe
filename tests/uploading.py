"""Uploads in AppTest: what the dashboard's upload route does for a browser (dashboard/uploads.py
writes each file to disk under the session's ticket), then what the uploader component does with
the answers (its state lists them), so the app's next run opens them. AppTest has no HTTP server;
the route itself is tested over ASGI in test_uploads.py and in a browser in
test_dashboard_browser.py."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from dashboard import uploads
from dashboard.views import uploader


def send(at: AppTest, files: list[tuple], limit: int | None = None) -> list[uploads.Refused]:
    """Upload `files` ((name, bytes) or (name, bytes, mime type)) from the AppTest session, as the browser would after the user
    picked them: the uploader then lists exactly these (as st.file_uploader's set_value did), and
    the app runs. The uploads the route refused, with why."""
    ticket = at.session_state[uploader.TICKET]
    most, label = (limit, f"{limit:,} bytes") if limit is not None else uploads.upload_limit()
    listed, refused = [], []
    for name, data, *_ in files:
        try:
            receiving = uploads.REGISTRY.receive(ticket, name, len(data), most, label, alive=lambda session: True)
        except uploads.Refused as exc:
            refused.append(exc)
            continue
        receiving.write(data)
        done = receiving.finish()
        listed.append({"id": done.id, "name": done.name, "size": done.size, "sizeText": ""})
    at.session_state[uploader.KEY] = {"files": listed}
    at.run()
    return refused

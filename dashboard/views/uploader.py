"""The sidebar's uploader: files go to the dashboard's upload route (dashboard/uploads.py), which
streams them to disk, instead of into the server's memory as st.file_uploader keeps them.

The browser side is a small st.components.v2 component (no iframe): a drop zone with a Browse
button, each file PUT with its progress shown, and the list of uploaded files with a remove
button. Its state is the list of uploads ({"id", "name", "size"}) the browser holds; the server
trusts none of it beyond the ids, which it looks up among this session's own uploads.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from dashboard import uploads
from dashboard import catalog

KEY = "uploads"  # the component's state in st.session_state: {"files": [{"id", "name", "size"}, ...]}
TICKET = "upload_ticket"

HTML = """
<div class="zone" part="zone">
  <svg class="icon" aria-hidden="true" viewBox="0 0 24 24" width="28" height="28"><path fill="currentColor"
    d="M19.35 10.04A7.49 7.49 0 0 0 12 4C9.11 4 6.6 5.64 5.35 8.04A5.994 5.994 0 0 0 0 14
       c0 3.31 2.69 6 6 6h13c2.76 0 5-2.24 5-5 0-2.64-2.05-4.78-4.65-4.96zM14 13v4h-4v-4H7l5-5 5 5h-3z"/></svg>
  <div class="words"><div class="lead">Drag and drop traces here</div><div class="small limit"></div></div>
  <label class="browse" tabindex="0">Browse files<input type="file" multiple accept=".json,.gz"></label>
</div>
<div class="busy" aria-live="polite"></div>
<div class="errors" role="alert"></div>
<ul class="files"></ul>
"""

CSS = """
:host, .zone, .files, .busy, .errors { font-family: var(--st-font, sans-serif); color: var(--st-text-color, #31333f); }
.zone { display: flex; align-items: center; gap: 0.75rem; padding: 1rem; border-radius: var(--st-base-radius, 0.5rem);
        background: var(--st-secondary-background-color, #f0f2f6); border: 1px dashed transparent; }
.zone.over { border-color: var(--st-primary-color, #ff4b4b); }
.icon { flex: none; opacity: 0.6; }
.words { flex: 1; min-width: 0; }
.lead { font-size: 0.95rem; }
.small { font-size: 0.8rem; opacity: 0.7; }
.browse { cursor: pointer; white-space: nowrap; padding: 0.25rem 0.75rem; border-radius: var(--st-base-radius, 0.5rem);
          border: 1px solid var(--st-border-color, rgba(49, 51, 63, 0.2)); background: var(--st-background-color, #fff); font-size: 0.9rem; }
.browse:hover { border-color: var(--st-primary-color, #ff4b4b); color: var(--st-primary-color, #ff4b4b); }
.browse input { display: none; }
.files { list-style: none; margin: 0.5rem 0 0 0; padding: 0; }
.files li { display: flex; align-items: center; gap: 0.5rem; padding: 0.25rem 0; font-size: 0.9rem; }
.files .name { flex: 1; min-width: 0; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.files button { border: none; background: none; cursor: pointer; font-size: 1rem; color: inherit; opacity: 0.6; }
.files button:hover { opacity: 1; color: var(--st-primary-color, #ff4b4b); }
.busy div, .errors div { font-size: 0.85rem; padding: 0.25rem 0; }
.errors div { color: var(--st-red-color, #d22); }
progress { width: 100%; height: 0.4rem; }
"""

JS = """
function sizeText(n) {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];  // as catalog.format_bytes writes them
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i += 1; }
  return (i === 0 ? n : n.toFixed(1)) + ' ' + units[i];
}

function put(data, file, onProgress) {
  return new Promise((resolve) => {
    const xhr = new XMLHttpRequest();
    const query = '?ticket=' + encodeURIComponent(data.ticket) + '&name=' + encodeURIComponent(file.name);
    xhr.open('PUT', data.url + query);
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded / e.total); };
    xhr.onload = () => {
      let body = {};
      try { body = JSON.parse(xhr.responseText); } catch (err) { body = {}; }
      if (xhr.status === 200 && body.id) resolve({ ok: body });
      else resolve({ error: body.error || (file.name + ': the server answered ' + xhr.status) });
    };
    xhr.onerror = () => resolve({ error: file.name + ': the upload did not reach the server (connection lost)' });
    xhr.send(file);
  });
}

export default function (component) {
  const { data, parentElement, setStateValue } = component;
  const root = parentElement;
  const zone = root.querySelector('.zone');
  const input = root.querySelector('input[type=file]');
  const busy = root.querySelector('.busy');
  const errors = root.querySelector('.errors');
  const list = root.querySelector('.files');
  root.querySelector('.limit').textContent = data.note;
  const files = Array.isArray(data.files) ? data.files.slice() : [];

  list.replaceChildren(...files.map((f) => {
    const li = document.createElement('li');
    const name = document.createElement('span');
    name.className = 'name';
    name.textContent = f.name;
    name.title = f.name;
    const size = document.createElement('span');
    size.className = 'small';
    size.textContent = f.sizeText;
    const remove = document.createElement('button');
    remove.type = 'button';
    remove.textContent = '\\u2715';
    remove.title = 'Remove ' + f.name;
    remove.setAttribute('aria-label', 'Remove ' + f.name);
    remove.onclick = () => {
      fetch(data.url + '?ticket=' + encodeURIComponent(data.ticket) + '&id=' + encodeURIComponent(f.id), { method: 'DELETE' });
      setStateValue('files', files.filter((g) => g.id !== f.id));
    };
    li.append(name, size, remove);
    return li;
  }));

  async function send(chosen) {
    errors.replaceChildren();
    const added = [];
    for (const file of chosen) {
      if (file.size > data.limit) {
        const line = document.createElement('div');
        line.textContent = file.name + ': ' + sizeText(file.size) + ' is over the upload limit of ' + data.limitText + '; not sent';
        errors.append(line);
        continue;
      }
      const line = document.createElement('div');
      const label = document.createElement('span');
      const bar = document.createElement('progress');
      bar.max = 1;
      bar.value = 0;
      label.textContent = 'Uploading ' + file.name + ' (' + sizeText(file.size) + ')';
      line.append(label, bar);
      busy.append(line);
      const got = await put(data, file, (f) => { bar.value = f; });
      line.remove();
      if (got.ok) added.push({ id: got.ok.id, name: got.ok.name, size: got.ok.size, sizeText: sizeText(got.ok.size) });
      else {
        const bad = document.createElement('div');
        bad.textContent = got.error;
        errors.append(bad);
      }
    }
    if (added.length) setStateValue('files', files.concat(added));
  }

  input.onchange = () => { const chosen = Array.from(input.files); input.value = ''; send(chosen); };
  zone.ondragover = (e) => { e.preventDefault(); zone.classList.add('over'); };
  zone.ondragleave = () => zone.classList.remove('over');
  zone.ondrop = (e) => { e.preventDefault(); zone.classList.remove('over'); send(Array.from(e.dataTransfer.files)); };
  root.querySelector('.browse').onkeydown = (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); input.click(); } };
}
"""

COMPONENT = st.components.v2.component("attnscope_uploader", html=HTML, css=CSS, js=JS)


def _session_id() -> str:
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else ""


def held_files() -> list[dict[str, Any]]:
    """The uploads the browser says it holds, from the component's state (untrusted: only
    entries with a string id are kept)."""
    state = st.session_state.get(KEY)
    files = state.get("files") if hasattr(state, "get") else None
    return [f for f in files if isinstance(f, dict) and isinstance(f.get("id"), str)] if isinstance(files, list) else []


def uploader(
    container: Any, limit: int, registry: uploads.Registry = uploads.REGISTRY
) -> tuple[list[uploads.Upload], list[str]]:
    """Draw the uploader in `container`; this session's uploads, in the order they were added,
    and a line for each the server no longer holds (a restarted server, or a removed file)."""
    session = _session_id()
    ticket = registry.session_ticket(session, st.session_state.get(TICKET))
    st.session_state[TICKET] = ticket
    held = held_files()
    found: list[uploads.Upload] = []
    lost: list[str] = []
    for entry in held:
        upload = registry.get(entry["id"], session)
        if upload is None:
            lost.append(
                f"{entry.get('name')}: this upload is not on the server (it may have restarted since); upload it again"
            )
        else:
            found.append(upload)
    limit_text = f"{catalog.format_bytes(limit)}"
    with container:
        st.markdown(
            "**Add torch.profiler traces** (.json or .json.gz)",
            help="Any Chrome-trace JSON written by torch.profiler / Kineto. Parsed once, then cached. Your uploads "
            "become the comparison, the first one the baseline; the samples stay one click away.",
        )
        COMPONENT(
            key=KEY,
            default={"files": []},
            on_files_change=lambda: None,
            data={
                "url": uploads.route_path(),
                "ticket": ticket,
                "limit": limit,
                "limitText": limit_text,
                "note": f"Up to {limit_text} per file",
                "files": [
                    {"id": u.id, "name": u.name, "size": u.size, "sizeText": catalog.format_bytes(u.size)}
                    for u in found
                ],
            },
        )
    return found, lost

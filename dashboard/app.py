"""attnscope dashboard: `streamlit run dashboard/app.py [-- TRACE_OR_FOLDER ...]`.

Wiring only: page config, the run picker in the sidebar, and the tabs. Each tab is a module in
dashboard/views that draws what dashboard.engine computes. The last lines serve the upload route
(dashboard/uploads.py) beside streamlit's own: `streamlit run` finds `app = st.App(...)` without
running the file, imports it as a module to serve it, and runs it as the page's script.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

if __package__ in (None, ""):  # `streamlit run dashboard/app.py` runs this file as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from typing import Any, Callable

import streamlit as st

from dashboard import charts, report, runs
from dashboard import catalog, catalog_offers, prepare
from dashboard.engine import Comparison
from dashboard.engine.compare.speed import DEFAULT_USD_PER_GPU_HOUR
from dashboard.engine.rules import RulesError, user_rules
from dashboard.views import backends, copies, kernels, link, literal, overview, speedups, sweep, timeline, uploader
from dashboard.views import ranks as ranks_view
from dashboard.views import run_names, tab_set
from dashboard.views.store import offer_saved_view, show_store

TABS = {
    "Overview": overview.render,
    "Kernels": kernels.render,
    "Copies": copies.render,
    "Timeline diff": timeline.render,
    "Speedups": speedups.render,
    "Backends": backends.render,
    "Ranks": ranks_view.render,
    "Sweep": sweep.render,
}
TAB_FAILED = "The {tab} tab could not be drawn for the selected runs:"
SIDEBAR_PX = 400  # room for the run picker and the rename table


def main() -> None:
    """The page; then the drawn runs' other analyses are computed ahead of their tabs once the server
    is quiet (prepare.AHEAD: on under a server only)."""
    with prepare.AHEAD.page_run():
        selection = page()
    if selection is not None:
        prepare.AHEAD.add(selection.runs.values())


def page() -> runs.Selection | None:
    """The page: the sidebar's run picker, then the open tab; the selection it drew (None: none)."""
    runs.drop_closed_uploads()
    st.set_page_config(
        page_title="attnscope: attention profiles side by side",
        page_icon=favicon(),
        layout="wide",
        initial_sidebar_state=SIDEBAR_PX,
    )
    st.title("attnscope", anchor=False)
    st.caption(
        "Attention profiles side by side: kernels per step, hidden copies, timelines, which SDPA backend really ran, "
        "parity and speed. Pick runs in the sidebar; the URL keeps your choice, so you can share it."
    )
    try:
        user_rules()  # the user's rules files (ATTNSCOPE_RULES), read once per server process
    except RulesError as exc:
        st.error(literal.md(str(exc)), icon=":material/rule:")
        st.stop()
    selection, drawn, finish = pick_runs()
    try:
        if selection is not None:
            open_tab(selection)
    finally:  # also when a rerun stops this run mid-way: the store write waits for this
        drawn.set()
    finish()  # the trace store's part of the sidebar, once this run's new traces are written to it
    return selection


@st.fragment
def open_tab(selection: runs.Selection) -> None:
    """The tabs, a fragment of the page: in a page's run the open one, then in the run the page asks
    for once it is quiet every tab, kept in the page, so a switch draws nothing again and the
    sidebar is not run again to draw them (views/tab_set.py)."""
    with prepare.AHEAD.page_run():  # (a fragment's run is a page's run to the analyses computed ahead)
        tab_set.draw(TABS, selection, draw_with_link)


def draw_with_link(name: str, render: Callable[[runs.Selection], None], selection: runs.Selection) -> None:
    """One tab, with the choices the link holds: a choice a tab writes to the link (Kernels' step,
    Speedups' price) runs that tab alone, and reaches the selection's Comparison here, before and
    after it, as a run of the whole page would at its start: the share buttons, which make their
    files when clicked, report what the page shows."""
    selection.comparison = comparison_from_link(selection)
    draw_tab(name, render, selection)
    selection.comparison = comparison_from_link(selection)  # with what the tab wrote to the link


def comparison_from_link(selection: runs.Selection) -> Comparison:
    """The session's Comparison of `selection` with the choices the link holds: the Speedups tab's
    prices, the Kernels tab's names and steps (runs.comparison_for: the one kept when unchanged)."""
    by, steps = link_diff_choices(selection)
    return runs.comparison_for(
        selection, link_price("usd", DEFAULT_USD_PER_GPU_HOUR), link_price("usd_cpu", None), by, steps
    )


BOLT = ((0.62, 0.06), (0.22, 0.56), (0.48, 0.56), (0.36, 0.94), (0.78, 0.40), (0.52, 0.40), (0.66, 0.06))


def favicon(size: int = 32):
    """The tab's icon, drawn here (a white bolt on the dashboard's blue): served by this server, so
    the page fetches nothing from the internet (a ':material/...' icon is fetched from Google's
    font CDN, and fails offline)."""
    import numpy as np

    y, x = (np.mgrid[0:size, 0:size] + 0.5) / size
    inside = np.zeros((size, size), bool)
    for (x1, y1), (x2, y2) in zip(BOLT, BOLT[1:] + BOLT[:1]):  # even-odd rule over the polygon's edges
        crosses = ((y1 > y) != (y2 > y)) & (x < (x2 - x1) * (y - y1) / (y2 - y1 + 1e-12) + x1)
        inside ^= crosses
    image = np.empty((size, size, 3), np.uint8)
    image[:] = (0x4C, 0x78, 0xA8)
    image[inside] = (255, 255, 255)
    from PIL import Image  # streamlit's own dependency

    return Image.fromarray(image)


def draw_tab(name: str, render: Callable[[runs.Selection], None], selection: runs.Selection) -> None:
    """Draw one tab; an unexpected error in the engine or the view becomes one red line in that
    tab (its type and message, no traceback) instead of taking the whole app down."""
    try:
        render(selection)
    except Exception as exc:  # noqa: BLE001 - one bad run must not take the dashboard down
        st.error(
            f"{TAB_FAILED.format(tab=name)} {type(exc).__name__}: {literal.md(catalog.one_line(str(exc)))}. "
            "The other tabs are unaffected; deselecting the run that causes it brings this one back.",
            icon=":material/error:",
        )


def gather_pending(cache: runs.TraceCache, sidebar: Any) -> tuple[list, list[catalog.Pending], list, list]:
    """What this page will open: the bundled and given collections and files, the uploads (a
    limit lowered since one arrived refuses it), the uploads and store runs a shared link names;
    (collections, pending, failures, uploads)."""
    collections, loose, failures = catalog.discover(extra=catalog.extra_paths())
    pending: list[catalog.Pending] = []
    for item in catalog.pending_files([s for c in collections for s in c.sources] + loose, cache):
        (pending if isinstance(item, catalog.Pending) else failures).append(item)

    limit, limit_problem = runs.upload_limit()
    uploaded, lost = uploader.uploader(sidebar, limit)
    if limit_problem and uploaded:
        sidebar.warning(literal.md(limit_problem), icon=":material/upload_file:")
    for line in lost:
        sidebar.warning(literal.md(line), icon=":material/upload_file:")
    taken = {p.source.id for p in pending}
    for upload in uploaded:
        too_big = catalog.refused_upload(upload.name, upload.size, limit)  # a limit lowered since it arrived
        if too_big is not None:
            failures.append(too_big)
            continue
        item = catalog.pending_upload(upload.name, upload.path, upload.size, upload.sha, taken, upload.arrival)
        taken.add(item.source.id)
        pending.append(item)
    for ident, digest in link_sources().items():  # uploads a shared link names: from the store
        if ident not in taken:
            stored = catalog.pending_stored(ident, digest, cache)
            (pending if isinstance(stored, catalog.Pending) else failures).append(stored)
            taken.add(ident)
    for run_id in link_store_runs():  # runs of the store's catalog a link names (`attnscope ingest`)
        found, gone = catalog.pending_store_run(run_id, cache)
        pending.extend(found)
        failures.extend(gone)

    return collections, pending, failures, uploaded


def pick_runs() -> tuple[runs.Selection | None, threading.Event, Callable[[], None]]:
    """The sidebar: uploads, parsing with progress, one-click sets of runs, which runs to compare,
    the baseline and labels. The runs on offer are parsed only where their manifest does not
    describe them (catalog_offers), the chosen ones once chosen (Opening). The returned event is
    set once the tabs are drawn; the returned callable waits for the trace store's write, then
    draws the sidebar's saved view and store sections, which read the store."""
    cache = runs.trace_cache()
    apply_saved_view(cache)
    sidebar = st.sidebar
    sidebar.header("Runs")
    collections, pending, failures, uploaded = gather_pending(cache, sidebar)
    opening = Opening(cache)
    loaded, bad = opening.offers(pending, collections)
    for upload in uploaded:  # read while it arrived but not needed (the store had it): let go
        upload.let_go()
    drawn, wait_for_store = opening.drawn, opening.wait_for_store

    for failure in failures + bad:
        sidebar.error(literal.md(failure.message), icon=":material/error:")

    if not loaded:
        st.info(
            "No runs yet. Upload a torch.profiler trace in the sidebar, or make a collection with "
            "`python -m collectors --out sample_traces/mine`.",
            icon=":material/upload_file:",
        )
        return None, drawn, wait_for_store

    ids = [r.source.id for r in loaded]
    link.seed_labels("label", ids)
    labels = run_names.run_labels(loaded)
    sets = catalog.run_sets(loaded)
    first_seed = "sel_runs" not in st.session_state.get(link.SEEDED, set())
    # The rename table goes below the picker but is sent before it (the picker fills a container
    # kept above it): the browser loads the grid's code, which the Overview's table needs too, while
    # the server opens and compares the chosen runs. A table that arrives before that code waits for
    # it, and React then shows it no sooner than 0.5 s after its placeholder.
    picker = sidebar.container()
    run_names.edit_labels(sidebar, loaded, labels)
    follow_link(picker, sets, loaded, ids)

    pick_sets(picker, sets)
    pick_modes(picker, sets, loaded)
    chosen = picker.multiselect(
        "Compare",
        ids,
        key="sel_runs",
        format_func=labels.get,
        placeholder="Choose runs to compare",
        help="The runs every tab shows side by side, in this order. GPU and CPU-only runs are compared in separate groups.",
    )
    offered = {r.source.id: r for r in loaded}
    by_id = opening.chosen(offered, chosen, first_seed)
    link.publish("run", chosen)
    if not chosen:
        st.info("Choose at least one run in the sidebar.", icon=":material/checklist:")
        return None, drawn, wait_for_store
    baseline = pick_baseline(picker, chosen, labels)
    link.publish_labels("label")
    link.publish("src", [f"{i}={by_id[i].digest}" for i in chosen if i.startswith("upload/")])
    selection = make_selection(by_id, offered, labels, chosen, baseline, collections, cache)
    selection.comparison = comparison_from_link(selection)
    offer_downloads(sidebar, selection)

    def finish() -> None:
        wait_for_store()
        offer_saved_view(sidebar, cache)
        show_store(sidebar, cache, [(labels[i], by_id[i]) for i in chosen], [(labels[r.source.id], r) for r in loaded])

    return selection, drawn, finish


class Opening:
    """What a script run opens, with one progress bar at the top of the page: the runs on offer
    (catalog_offers.offer_runs: parsed only where no manifest describes them), then the chosen
    ones. The traces it parses go to the trace store from a thread that starts with the first of
    them but waits for `drawn` (set once the tabs are drawn, or the run is stopped; at most
    runs.STORE_WRITE_WAIT_S), so that the write's CPU (0.9 s for the 910 MB trace) does not delay
    the first table, and no rerun can skip the write."""

    def __init__(self, cache: runs.TraceCache) -> None:
        self.cache = cache
        self.slot = st.empty()
        self.evicted: list = st.session_state.setdefault("store_evicted", [])  # removed after this session's uploads
        self.deferred: list[catalog.Parsed] = []
        self.drawn = threading.Event()
        self.writer: threading.Thread | None = None

    def offers(
        self, pending: list[catalog.Pending], collections: list
    ) -> tuple[list[catalog_offers.Offer], list[catalog.Failure]]:
        """The runs on offer and the files that failed."""
        progress = runs.Throttled(self.slot.progress)
        found = catalog_offers.offer_runs(
            pending, collections, cache=self.cache, progress=progress, defer_store=self.deferred
        )
        self.parsed()
        return found

    def chosen(
        self, offered: dict[str, catalog_offers.Offer], chosen: list[str], first_seed: bool
    ) -> dict[str, catalog.Run]:
        """The chosen runs by id, parsed where not yet. When one fails (a file that does not parse,
        or a manifest that said otherwise than its traces), the page runs again: the failure or the
        traces are then known, and the picker offers what it offered before manifests were read;
        `first_seed`: this run chose the runs from the link or the default, which the next run
        then does again (the URL is not yet written), among what it offers."""
        progress = runs.Throttled(self.slot.progress)
        opened, bad = catalog_offers.open_offers(
            [offered[i] for i in chosen], cache=self.cache, progress=progress, defer_store=self.deferred
        )
        self.parsed()
        if bad:
            self.drawn.set()  # what did parse is written now
            if first_seed:
                st.session_state[link.SEEDED].discard("sel_runs")
            st.rerun()
        return opened

    def parsed(self) -> None:
        """After a parse: the progress bar goes, and the store's writer starts with the first trace."""
        self.slot.empty()
        if self.deferred and self.writer is None:
            self.writer = threading.Thread(target=self.write_after_tabs, name="attnscope-store-write")
            self.writer.start()

    def write_after_tabs(self) -> None:
        self.drawn.wait(runs.STORE_WRITE_WAIT_S)
        catalog.store_parsed(self.cache, self.deferred, self.evicted)

    def wait_for_store(self) -> None:
        self.drawn.set()
        if self.writer is not None:
            self.writer.join()


def follow_link(sidebar, sets: list[catalog.RunSet], loaded: list[catalog_offers.Offer], ids: list[str]) -> None:
    """The runs a shared link asks for (kept for when its uploads arrive), the uploads that join the
    comparison, and a line naming the link's runs that are not loaded here."""
    if "link_wanted" not in st.session_state:  # what a shared link asked for, kept for when its uploads arrive
        st.session_state["link_wanted"] = (st.query_params.get_all("run"), st.query_params.get("baseline"))
    missing = link.seed_list("sel_runs", "run", ids, catalog_offers.opening_runs(sets, loaded))
    follow_uploads(ids)
    if missing:
        st.session_state["link_missing"] = missing
    still_missing = [m for m in st.session_state.get("link_missing", []) if m not in ids and not m.startswith("store/")]
    if still_missing:
        sidebar.info(
            "This link names runs that are not loaded here: "
            + ", ".join(literal.md(m) for m in still_missing)
            + ". Upload them to see them."
        )


def pick_baseline(sidebar, chosen: list[str], labels: dict[str, str]) -> str:
    """The baseline among the chosen runs (the link's, else the first), published in the link."""
    link.seed_choice("baseline", "baseline", chosen, chosen[0])
    baseline = sidebar.selectbox(
        "Baseline",
        chosen,
        key="baseline",
        format_func=labels.get,
        help="Speedups, kernel differences and 'more copies' notes are measured against this run (a run of the other "
        "device kind is measured against the first run of its own kind).",
    )
    link.publish("baseline", baseline)
    return baseline


def make_selection(
    by_id: dict[str, catalog.Run],
    offered: dict[str, catalog_offers.Offer],
    labels: dict[str, str],
    chosen: list[str],
    baseline: str,
    collections: list,
    cache: runs.TraceCache,
) -> runs.Selection:
    """What the tabs draw: the chosen runs by label, the baseline, colours by place among all runs
    on offer (stable), ranks and modes, and the runs of several ranks not chosen (the Ranks tab's
    example; parsed when that tab asks for one)."""
    ids = list(offered)
    colour = {ident: charts.run_color(i) for i, ident in enumerate(ids)}  # by place among all runs on offer: stable
    others = {labels[i]: offered[i] for i in ids if i not in chosen and len(offered[i].digests) > 1}
    return runs.Selection(
        runs={labels[i]: by_id[i].trace for i in chosen},
        baseline=labels[baseline],
        ids={labels[i]: i for i in chosen},
        collections=collections,
        colors={labels[i]: colour[i] for i in chosen},
        ranks={labels[i]: by_id[i].ranks for i in chosen},
        modes={labels[i]: m for i in chosen if (m := runs.mode_of(by_id[i].trace))},
        other_ranks=catalog_offers.LazyRanks(others, cache),
    )


def link_sources() -> dict[str, str]:
    """Uploads a shared link names, run id -> SHA-256 in the trace store (`src=<id>=<sha>`),
    read once per session."""
    if "link_src" not in st.session_state:
        found = {}
        for raw in st.query_params.get_all("src"):
            ident, _, digest = raw.rpartition("=")
            if ident.startswith("upload/") and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest):
                found[ident] = digest
        st.session_state["link_src"] = found
    return st.session_state["link_src"]


def link_store_runs() -> list[str]:
    """Runs of the store's catalog a link names (`run=store/<run id>`), read once per session, so
    they stay on offer when the user picks other runs."""
    if "link_store" not in st.session_state:
        found = [r.removeprefix("store/") for r in st.query_params.get_all("run") if r.startswith("store/")]
        st.session_state["link_store"] = [r for r in dict.fromkeys(found) if r and "/" not in r and "@" not in r]
    return st.session_state["link_store"]


def apply_saved_view(cache: runs.TraceCache) -> None:
    """`?view=<id>`: on a session's first run, the saved view's link (runs, labels, baseline, tab,
    prices) replaces the URL's parameters, and its note is shown above the tabs."""
    view_id = st.query_params.get("view")
    if view_id is None or "saved_view" in st.session_state:
        note = st.session_state.get("saved_view")
        if note:
            st.info(f"Saved view {literal.md(view_id or '')}: {literal.md(note)}", icon=":material/bookmark:")
        return
    payload = cache.store.view(view_id) if cache.store is not None else None
    if not isinstance(payload, dict) or not isinstance(payload.get("query"), dict):
        st.session_state["saved_view"] = ""
        st.warning(f"No saved view {literal.md(view_id)} on this server.", icon=":material/bookmark:")
        return
    query = {k: v for k, v in payload["query"].items() if isinstance(k, str) and k != "view"}
    st.query_params.from_dict({**query, "view": view_id})  # its tab too: the tabs read it later in this run
    st.session_state["saved_view"] = str(payload.get("note") or "")
    if st.session_state["saved_view"]:
        st.info(
            f"Saved view {literal.md(view_id)}: {literal.md(st.session_state['saved_view'])}",
            icon=":material/bookmark:",
        )


def follow_uploads(ids: list[str]) -> None:
    """When new files are uploaded, they join the comparison (after the runs already chosen, which
    stay) and the baseline stays the one the user had; into an empty comparison, the first upload
    becomes the baseline. When they complete a shared link's runs, the link's selection and
    baseline are restored instead."""
    known: set[str] = st.session_state.setdefault("known_runs", set())
    uploaded = [i for i in ids if i.startswith("upload/")]
    fresh = [i for i in uploaded if i not in known]
    known.update(ids)
    if not fresh:
        return
    wanted, wanted_baseline = st.session_state.get("link_wanted", ([], None))
    if any(i in wanted for i in fresh):
        chosen = [i for i in wanted if i in ids]
        st.session_state["sel_runs"] = chosen
        st.session_state["baseline"] = wanted_baseline if wanted_baseline in chosen else chosen[0]
        return
    chosen = [i for i in st.session_state.get("sel_runs") or [] if i in ids]
    st.session_state["sel_runs"] = chosen + [i for i in fresh if i not in chosen]
    if st.session_state.get("baseline") not in chosen:  # an empty comparison (or a baseline no longer chosen)
        st.session_state["baseline"] = (chosen or fresh)[0]


def pick_modes(sidebar, sets: list[catalog.RunSet], loaded: list[catalog_offers.Offer]) -> None:
    """A switch beside the run sets: the compiled and CUDA-graph runs of the article's variants
    with the eager ones, or eager alone, for the collection of the first selected run. Shown only
    when that collection has runs of more than one mode."""
    chosen = st.session_state.get("sel_runs") or []
    if not chosen:
        return
    traces = {r.source.id: r.facts for r in loaded}  # what mode_of and article_path read of a trace
    home = next((s for s in sets if chosen[0] in s.ids), None)
    if home is None or len({runs.mode_of(traces[i]) for i in home.ids} - {None}) < 2:
        return
    if runs.article_path(home.ids, traces) == home.ids:  # no article variant: nothing to switch
        return
    st.session_state["with_modes"] = any(runs.mode_of(traces[i]) not in (None, runs.MODES[0]) for i in chosen)

    def switch() -> None:
        path = runs.article_path(home.ids, traces, with_modes=bool(st.session_state.get("with_modes")))
        st.session_state["sel_runs"] = path
        if st.session_state.get("baseline") not in path:
            st.session_state["baseline"] = path[0]

    sidebar.toggle(
        "Compiled and CUDA-graph runs too",
        key="with_modes",
        on_change=switch,
        help=f"Off: the article's path in '{home.name}', eager (naive, naive_inplace, sdpa, the forced backends). "
        "On: each of those variants also compiled (torch.compile) and with CUDA graphs (mode='reduce-overhead').",
    )


def pick_sets(sidebar, sets: list[catalog.RunSet]) -> None:
    """One button per set of runs (each collection, the command line's files, the uploads):
    a click makes that set the comparison, its first run the baseline."""

    def choose(ids: list[str]) -> None:
        st.session_state["sel_runs"] = list(ids)
        st.session_state["baseline"] = ids[0]

    sidebar.caption("Compare one set of runs:")
    with sidebar.container(horizontal=True, key="run_sets"):
        for rs in sets:
            kind = "GPU" if rs.gpu else "CPU"
            st.button(
                f"{rs.name} · {len(rs.ids)}",
                key=f"pick_{rs.name}",
                on_click=choose,
                args=(rs.ids,),
                help=f"Compare the {len(rs.ids)} runs of '{rs.name}' ({kind} traces), the first as the baseline",
                icon=":material/memory:" if kind == "GPU" else ":material/computer:",
            )


def link_price(param: str, default: float | None) -> float | None:
    """A price as the link holds it (the Speedups tab writes it there)."""
    raw = st.query_params.get(param)
    try:
        return float(raw) if raw is not None else default
    except ValueError:
        return default


def link_diff_choices(selection: runs.Selection) -> tuple[str, dict[str, int | None]]:
    """The Kernels tab's choices as the link holds them, for the reports: kernels by base or full
    name (`names=full`), and the step compared per run label (`kstep=<run id>=<step>`)."""
    by = "name" if st.query_params.get("names") == "full" else "base"
    label_of = {ident: label for label, ident in selection.ids.items()}
    steps: dict[str, int | None] = {}
    for raw in st.query_params.get_all("kstep"):
        ident = max((i for i in label_of if raw.startswith(i + "=")), key=len, default=None)
        if ident is not None:
            try:
                steps[label_of[ident]] = int(raw[len(ident) + 1 :])
            except ValueError:
                continue
    return by, steps


def offer_downloads(sidebar, selection: runs.Selection) -> None:
    """HTML report and Markdown summary of the selected runs, made when the button is pressed from
    the selection's Comparison as the page's last run left it (open_tab: the prices the Speedups
    tab shows, the Kernels tab's choices, as the link holds them). A Comparison taken when the
    buttons were drawn reported a choice made in a tab only from the next run on.

    A click reruns nothing (`on_click="ignore"`): a rerun would register the buttons' callables
    under new ids and drop the old ones when it ends, and the browser's request for the file, sent
    with the click under the old id, could then find nothing and start no download (seen in a CI
    rehearsal: the second of two downloads never came). Nothing on the page changes with a
    download, so the rerun was also a whole script run for nothing."""
    sidebar.subheader("Share")
    sidebar.download_button(
        "HTML report (works offline)",
        data=lambda: report.render_html(selection.comparison),
        file_name="attnscope-report.html",
        mime="text/html",
        icon=":material/download:",
        key="dl_html",
        on_click="ignore",
    )
    sidebar.download_button(
        "Markdown summary (for a PR comment)",
        data=lambda: report.render_markdown(selection.comparison),
        file_name="attnscope-summary.md",
        mime="text/markdown",
        icon=":material/download:",
        key="dl_md",
        on_click="ignore",
    )


if __name__ == "__main__":  # streamlit runs this file as the page's script, once per rerun
    main()
else:  # `streamlit run dashboard/app.py` finds this (without running the file) and serves it with the upload route
    # What the first page imports, imported at the server's start instead: the favicon's PIL, and the
    # Styler the tables colour their rows with (pandas imports it, and jinja2, on a frame's first
    # .style): 0.05-0.15 s of the first script run on the 2-core machine, before the first table.
    import pandas.io.formats.style  # noqa: F401
    import PIL.Image  # noqa: F401

    # Streamlit's first element in a process asks inspect.stack() whether it runs in a REPL
    # (delta_generator._maybe_print_use_warning), and inspect then maps each of the ~1,900 loaded
    # modules to its file: 0.05-0.1 s of the first script run. Mapped here, at the server's start,
    # that run maps only the modules it imports itself (inspect keeps the map).
    import inspect

    inspect.stack()

    import contextlib
    from collections.abc import AsyncIterator

    from dashboard import uploads

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        """The server's start opens the first screen's runs (dashboard/prepare.py) while the first
        browser loads the page, and turns on the analyses computed ahead of the tabs; its stop
        deletes the uploads."""
        prepare.start()
        prepare.AHEAD.enable()
        async with uploads.lifespan(app):
            yield None

    app = st.App(__file__, routes=[uploads.route()], lifespan=lifespan)

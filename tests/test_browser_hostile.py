"""The dashboard in a real browser under hostile input (issue 12 items 2, 3 and 5).

1. Trace strings are text: a real trace whose kernels, ops, threads, device name and file name
   carry HTML, JavaScript and Markdown is uploaded beside the clean original (and a corrupt file);
   every tab is opened, chart points are hovered, and nothing from the trace runs (no
   window.__pwned, no dialog, no <script>/<img onerror>/javascript: link made from it in the page
   or any frame) while the payloads are shown literally. The HTML report the app offers is opened
   from disk and checked the same way; the Markdown summary escapes pipes, backticks and links.
   The corrupt upload gets one error line naming it; the other uploads stay loaded.
2. A trace of ~2,000,000 tiny events, named at start: every tab draws its keyed element within
   a bound and never shows an exception (the time per tab is printed; -s shows it).

Without a browser the tests skip with the reason; with CI set, a missing browser is a failure.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import re
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

from browser_server import Server
from make_many_events import write_many_events
from test_dashboard_browser import (  # noqa: F401
    CHROMIUM,
    CHROMIUM_ARGS,
    OPEN_TAB,
    REPO,
    TABS,
    WIDTH,
    _settle,
    again_if_redrawn,
    browser_ready,
    clear_comparison,
    forward_messages,
    timeline_hover,
    timeline_point,
)

CLEAN = REPO / "tests" / "data" / "tracelens_h100_bert_sdpa_flash.json.gz"
PLOTLY_JS = Path(__import__("plotly").__file__).parent / "package_data" / "plotly.min.js"

IMG = '<img src=x onerror="window.__pwned=1">'
SCRIPT = "<script>window.__pwned=2</script>"
LINK = "[x](javascript:window.__pwned=3)"
MARKDOWN = "**bold** _it_ `code` | pipe"
LONG = "very_long_" + "ab" * 1500 + IMG  # 3,000+ characters, a payload at the end
PAYLOADS = [IMG, SCRIPT, LINK, MARKDOWN, LONG]
IMG_BARE = "<img src=x onerror=window.__pwned=4>"  # a browser sends '"' in a file name as %22
HOSTILE_NAME = f"{IMG_BARE} {LINK} {MARKDOWN}.json.gz"  # and no '/' can be in a file name
HOSTILE_LABEL = HOSTILE_NAME.removesuffix(".json.gz")
CLEAN_LABEL = CLEAN.name.removesuffix(".json.gz")
BROKEN_NAME = "broken-upload.json"

# Kernels and ops of the clean trace renamed to payloads (each kept unique by a plain suffix).
KERNEL_RENAMES = {
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>": IMG + " gemm",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add": SCRIPT + " add",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel": LINK + " norm",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl": MARKDOWN + " gelu",
    "void at::native::(anonymous namespace)::indexSelectLargeIndex": LONG,
}
OP_RENAMES = {
    "aten::is_nonzero": IMG + " op",  # the top of the trace's only copy's chain: the copy becomes hidden, an alarm box
    "aten::gelu": SCRIPT + " op",
    "aten::layer_norm": LINK + " op",
    "aten::add": MARKDOWN + " op",
    "aten::embedding": LONG + " op",
}

# In the page and every frame: what a payload would have made had it been read as HTML/Markdown.
FIND_EXECUTABLE = """() => {
  const found = [];
  // a script the browser would run (not a JSON data block) that holds a payload
  for (const s of document.querySelectorAll('script'))
    if (!/json/i.test(s.type || '') && (s.textContent || '').includes('__pwned')) found.push('script: ' + s.textContent.slice(0, 80));
  for (const el of document.querySelectorAll('[onerror],[onload],[onclick],[onmouseover]'))
    for (const a of ['onerror', 'onload', 'onclick', 'onmouseover'])
      if ((el.getAttribute(a) || '').includes('__pwned')) found.push(el.tagName + ' ' + a);
  for (const img of document.querySelectorAll('img'))
    if (/\\/x$/.test(img.getAttribute('src') || '') || img.getAttribute('src') === 'x') found.push('img src=x');
  for (const a of document.querySelectorAll('a[href]')) if (/^\\s*javascript:/i.test(a.getAttribute('href'))) found.push('a href=' + a.getAttribute('href'));
  for (const a of document.querySelectorAll('[href]')) if ((a.getAttribute('href') || '').includes('__pwned')) found.push(a.tagName + ' href');
  for (const el of document.querySelectorAll('strong, b, em, i')) {
    const t = el.textContent.trim(); if (t === 'bold' || t === 'it') found.push(el.tagName + ' ' + t);
  }
  return found;
}"""


def hostile_trace() -> dict:
    """The clean trace with its strings renamed to payloads (the json module, not the engine)."""
    doc = json.loads(gzip.decompress(CLEAN.read_bytes()))
    doc = copy.deepcopy(doc)
    renamed = {"kernel": 0, "op": 0, "thread": 0}
    threads = 0
    for e in doc["traceEvents"]:
        name = e.get("name")
        if e.get("cat") == "kernel":
            for prefix, payload in KERNEL_RENAMES.items():
                if isinstance(name, str) and name.startswith(prefix):
                    e["name"] = payload
                    renamed["kernel"] += 1
        elif e.get("cat") == "cpu_op" and name in OP_RENAMES:
            e["name"] = OP_RENAMES[name]
            renamed["op"] += 1
        elif e.get("ph") == "M" and name == "thread_name":
            e["args"]["name"] = f"{PAYLOADS[threads % len(PAYLOADS)]} thread {threads}"
            threads += 1
            renamed["thread"] += 1
    assert all(renamed.values()), renamed  # every kind of string carries a payload
    doc["deviceProperties"][0]["name"] = IMG + " H100"  # a metadata string the Overview shows
    doc["traceName"] = SCRIPT
    return doc


def hostile_bytes() -> bytes:
    return gzip.compress(json.dumps(hostile_trace()).encode(), mtime=0)


def _dialogs(page) -> list[str]:
    fired: list[str] = []

    def on_dialog(dialog) -> None:
        fired.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    page.on("dialog", on_dialog)
    return fired


def assert_nothing_ran(page, where: str, dialogs: list[str]) -> None:
    assert page.evaluate("() => typeof window.__pwned") == "undefined", f"{where}: a payload ran (window.__pwned set)"
    assert not dialogs, f"{where}: a dialog fired: {dialogs}"
    for frame in page.frames:
        try:
            made = frame.evaluate(FIND_EXECUTABLE)
            pwned = frame.evaluate("() => typeof window.__pwned")
        except Exception as exc:  # noqa: BLE001 - a cross-origin or detached frame cannot be read
            if "detached" in str(exc).lower():
                continue
            raise
        assert not made, f"{where}, frame {frame.url[:80]}: elements made from trace strings: {made}"
        assert pwned == "undefined", f"{where}, frame {frame.url[:80]}: window.__pwned set"


def hover_charts(page, limit: int = 3, within: str = OPEN_TAB) -> list[str]:
    """Move the mouse over a grid of points on the first `limit` charts in view (in `within`: the
    open tab, the page keeping the closed ones drawn); the hover labels' texts seen. A chart Streamlit redrew while it was hovered is found again and hovered
    again from the start, once the page has settled."""
    seen: list[str] = []
    charts = page.locator(within).locator(".js-plotly-plot")
    for i in range(limit):
        found = again_if_redrawn(page, lambda: _hover_chart(page, charts, i))
        if found is None:  # fewer charts than `limit`
            break
        seen.extend(found)
    return seen


def _hover_chart(page, charts, i: int) -> list[str] | None:
    """The hover labels seen over chart i of `charts` (None when there is no chart i)."""
    if i >= charts.count():
        return None
    chart = charts.nth(i)
    chart.scroll_into_view_if_needed()
    area = chart.locator(".nsewdrag").first
    box = area.bounding_box() if area.count() else None
    if not box:
        return []
    seen: list[str] = []
    for fy in (0.95, 0.8, 0.6, 0.4, 0.2):
        for k in range(1, 16):
            page.mouse.move(box["x"] + box["width"] * k / 16, box["y"] + box["height"] * fy)
            text = chart.locator(".hoverlayer").text_content() or ""
            if text.strip():
                seen.append(text)
    page.mouse.move(0, 0)
    return seen


def hover_timeline(page, limit: int = 12) -> list[str]:
    """Hover the canvas timeline's bars whose names hold markup (else its first bars), up to
    `limit`; the tooltips' texts. Fails if the component's own tree holds an element a payload
    would have made (it lives in a shadow root, which FIND_EXECUTABLE does not enter). Done again
    from the start if Streamlit redrew the canvas meanwhile."""
    return again_if_redrawn(page, lambda: _hover_timeline(page, limit))


def _hover_timeline(page, limit: int) -> list[str]:
    canvas = page.locator(".st-key-chart_timeline canvas")
    if not canvas.count():
        return []
    canvas.evaluate("c => c.scrollIntoView({block: 'center'})")  # clear of the app's sticky header
    box, drawn = canvas.bounding_box(), canvas.evaluate("c => c.__attnscope")
    seen: list[str] = []
    for panel, p in enumerate(drawn["data"]["panels"]):
        marked = [
            i for i in range(len(p["start"])) if "<" in p["names"][p["name"][i]] or "[" in p["names"][p["name"][i]]
        ]
        for i in (marked or list(range(len(p["start"]))))[:limit]:
            tip = timeline_hover(page, *timeline_point(box, drawn, panel, i))
            if tip:
                seen.append(tip)
    made = canvas.evaluate(
        "c => Array.from(c.getRootNode().querySelectorAll('img, script, a, iframe, b, strong, em')).map(e => e.tagName)"
    )
    assert not made, f"the timeline made elements from trace strings: {made}"
    page.mouse.move(0, 0)
    return seen


def settle(page, bound_s: float = 60.0) -> None:
    """_settle with a bound of the test's choosing: the app's run over and the page quiet."""
    _settle(page, bound_s)


def main_text(page) -> str:
    """The open tab's text (the page keeps the closed tabs drawn, hidden)."""
    return page.locator(OPEN_TAB).text_content() or ""


def open_every_tab(page, bound_s: float = 60.0, on_tab=None) -> dict[str, float]:
    """Click every tab (a 'Ranks' tab too when the app has one); the seconds until each drew its
    keyed element and the app settled. Fails on an exception box or a tab that could not be drawn."""
    names = [t.strip() for t in page.get_by_role("tab").all_inner_texts()]
    assert set(TABS) <= set(names), names
    times: dict[str, float] = {}
    for tab in names:
        start = time.monotonic()
        page.get_by_role("tab", name=tab, exact=True).click()
        key = TABS.get(tab)
        try:
            if key:
                page.locator(f".st-key-{key}").first.wait_for(timeout=bound_s * 1000)
            settle(page, bound_s)
        except Exception as exc:  # noqa: BLE001 - say which tab, and how long it had
            raise AssertionError(
                f"{tab} did not draw within {time.monotonic() - start:.0f} s ({type(exc).__name__})"
            ) from exc
        times[tab] = time.monotonic() - start
        assert page.locator("[data-testid='stException']").count() == 0, f"{tab}: the app raised"
        assert page.get_by_text("tab could not be drawn").count() == 0, (
            f"{tab}: the tab failed to draw: {main_text(page)[:500]}"
        )
        assert times[tab] < bound_s, f"{tab} took {times[tab]:.1f} s"
        if on_tab:
            on_tab(tab)
    return times


@pytest.fixture
def store(tmp_path) -> Path:
    return tmp_path / "store"


@pytest.mark.slow  # CI: the newest-versions pass only
def test_trace_strings_never_run_in_any_tab_or_report_and_a_bad_upload_stays_alone(browser_ready, tmp_path, store):
    from playwright.sync_api import sync_playwright

    uploads = [
        {"name": CLEAN.name, "mimeType": "application/gzip", "buffer": CLEAN.read_bytes()},
        {"name": HOSTILE_NAME, "mimeType": "application/gzip", "buffer": hostile_bytes()},
        {
            "name": BROKEN_NAME,
            "mimeType": "application/json",
            "buffer": b'{"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1',
        },
    ]
    with Server(store, tmp_path / "streamlit.log") as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": WIDTH, "height": 1000}, accept_downloads=True)
            page = context.new_page()
            dialogs = _dialogs(page)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            received = forward_messages(page)
            page.goto(server.url)
            page.locator(".st-key-tbl_overview").first.wait_for(timeout=90_000)
            _settle(page)
            clear_comparison(page)  # the uploads alone: an upload joins what is on screen
            page.set_input_files("input[type=file]", uploads)
            page.locator("[data-testid=stSidebar] [data-testid=stAlert]", has_text=BROKEN_NAME).wait_for(timeout=90_000)
            page.locator(".st-key-tbl_overview [role=row]", has_text=CLEAN_LABEL).wait_for(
                state="attached", timeout=90_000
            )
            _settle(page)

            # isolation: one line names the bad file; the two good uploads are loaded and compared
            alerts = [
                t
                for t in page.locator(
                    "[data-testid=stSidebar] [data-testid=stAlert] [data-testid=stMarkdownContainer]"
                ).all_inner_texts()
                if BROKEN_NAME in t
            ]
            assert len(alerts) == 1 and len(alerts[0].strip().splitlines()) == 1, alerts
            assert "Traceback" not in page.content()
            cells = [
                c.strip()
                for c in page.locator(
                    "[class*='st-key-tbl_overview'] [role=row] [role=gridcell]:first-child"
                ).all_text_contents()
            ]
            assert [c for c in cells if c] == [CLEAN_LABEL, HOSTILE_LABEL]  # shown literally, in upload order

            hovers: list[str] = []

            def check(tab: str) -> None:
                assert_nothing_ran(page, tab, dialogs)
                text = main_text(page)
                if tab in TABS:  # (a Ranks tab shows runs with ranks only)
                    assert IMG in text or HOSTILE_LABEL in text, f"{tab}: no payload shown literally"
                hovers.extend(hover_charts(page))
                if tab == "Timeline diff":  # the canvas: its tooltips show the payloads as text
                    tips = hover_timeline(page)
                    assert any(payload in tip for tip in tips for payload in (IMG, SCRIPT, LINK, LONG)), tips[:5]
                    hovers.extend(tips)
                assert_nothing_ran(page, f"{tab} after hovering", dialogs)

            open_every_tab(page, on_tab=check)
            # the payloads as text, somewhere in the page (tables, alarm boxes, labels, chart labels)
            whole = page.locator("body").text_content() or ""
            page.get_by_role("tab", name="Kernels", exact=True).click()
            page.locator(".st-key-tbl_kernels").first.wait_for(timeout=60_000)
            _settle(page)
            whole += page.locator("body").text_content() or ""
            for payload in (IMG, SCRIPT, LINK, MARKDOWN):
                assert payload in whole + "".join(hovers), f"{payload!r} is not shown literally anywhere"
            assert hovers, "no chart hover label appeared"
            assert any(IMG in h or "gemm" in h or HOSTILE_LABEL[:20] in h for h in hovers), hovers[:5]

            # the HTML report and the Markdown summary the app offers, as downloaded, clicked one
            # right after the other as a reviewer would; a click runs no script: a run would give
            # the buttons' files new ids and drop the ids the browser asks for (a CI rehearsal saw
            # the second download never come)
            _settle(page)
            since = len(received)
            with page.expect_download(timeout=120_000) as got:
                page.get_by_role("button", name="HTML report").click()
            html_path = tmp_path / "report.html"
            got.value.save_as(html_path)
            with page.expect_download(timeout=120_000) as got:
                page.get_by_role("button", name="Markdown summary").click()
            md_path = tmp_path / "summary.md"
            got.value.save_as(md_path)
            kinds = [kind for kind, _, _ in received[since:]]
            assert "script_finished" not in kinds and "new_session" not in kinds, kinds
            assert kinds.count("backend_operation_response") == 2, kinds  # one file made per click
            assert not errors, errors

            report = context.new_page()
            report_dialogs = _dialogs(report)
            report.goto(html_path.as_uri())
            report.wait_for_function(
                "() => { const n = document.querySelectorAll('script.attnscope-figure').length;"
                " return n > 0 && document.querySelectorAll('.js-plotly-plot .nsewdrag').length >= n; }",
                timeout=60_000,
            )
            _settle(report)  # the figures drawn and laid out: the page stops changing
            text = report.locator("body").inner_text()  # what is shown (not the JSON data blocks)
            for payload in (IMG, HOSTILE_LABEL):
                assert payload in text, f"the HTML report does not show {payload!r} literally"
            report_hovers = hover_charts(report, limit=6, within="body")
            assert_nothing_ran(report, "HTML report", report_dialogs)
            assert any(HOSTILE_LABEL in h for h in report_hovers), report_hovers[
                :5
            ]  # hover labels: the payloads as text
        finally:
            browser.close()

    summary = md_path.read_text()
    # Markdown: nothing a renderer would read as a link, emphasis, code, a cell break or HTML. With
    # every backslash-escaped character taken out, no payload's syntax is left.
    bare = re.sub(r"\\.", "\x00", summary)
    for raw in ("[x]", "](javascript:", "**bold**", "_it_", "`code`", "` | pipe", "<img", "<script", "</script>"):
        assert raw not in bare, f"the Markdown summary holds {raw!r} unescaped"
    assert r"\[x\]\(javascript:window.\_\_pwned=3\)" in summary
    assert r"\*\*bold\*\* \_it\_ \`code\` \| pipe" in summary
    assert r"\<img src=x onerror=" in summary


# Plotly's own markup: a live link, bold, a line break, an entity and a template field.
PLOTLY_LABEL = '<a href="https://evil.example/">click</a> <b>bold</b> x<br>y &amp; %{y}'


def chart_figures(label: str) -> dict:
    """Every chart builder's figure for two runs, one of them named `label` (its kernels too)."""
    import polars as pl

    from dashboard import charts

    runs = [label, "plain run"]
    speed = pl.DataFrame(
        {
            "run": runs,
            "median_us": [1.0, 2.0],
            "p10_us": [1.0, 2.0],
            "p90_us": [1.0, 2.0],
            "time_source": [label, "device busy"],
            "speedup": [1.0, 0.5],
            "tokens_per_s": [10.0, 5.0],
            "usd_per_mtok": [1.0, 2.0],
        }
    )
    families = pl.DataFrame(
        {"run": runs, "family": ["gemm", "gemm"], "count_per_step": [1.0, 2.0], "us_per_step": [1.0, 2.0]}
    )
    groups = pl.DataFrame(
        {"run": runs, "copy_class": ["hidden", "requested"], "us_per_step": [1.0, 2.0], "per_step": [1.0, 1.0]}
    )
    diff = pl.DataFrame({"family": ["gemm"], "a_ns": [1000], "b_ns": [2000], "a_count": [1], "b_count": [2]})
    tl = pl.DataFrame(
        {
            "lane": ["GPU 0 stream 7"],
            "lane_kind": ["gpu"],
            "start_us": [0.0],
            "end_us": [1.0],
            "dur_us": [1.0],
            "family": ["gemm"],
            "name": [label],
            "cat": ["kernel"],
            "id": [1],
        }
    )
    return {
        "work_by_family_stacked": charts.work_by_family_stacked(families, runs, "kernels"),
        "family_grouped": charts.family_grouped(families, runs, "time"),
        "step_time_bars": charts.step_time_bars(speed),
        "speedup_bars": charts.speedup_bars(speed, label),
        "throughput_bars": charts.throughput_bars(speed),
        "copy_time_bars": charts.copy_time_bars(groups, runs),
        "family_diff_bars": charts.family_diff_bars(diff, f"A: {label} step 1", "B: plain run step 1"),
        "timeline_pair": charts.timeline_pair(tl, tl, f"A: {label} step 1", "B: plain run step 1"),
    }


def test_chart_strings_carry_no_plotly_markup():
    """Labels and kernel names reach plotly as entities, never as its markup (no browser needed).
    Before charts.plain(), a run label's <a href> was a live link in every chart's axis."""
    for name, fig in chart_figures(PLOTLY_LABEL).items():
        text = fig.to_json()
        for raw in ('<a href=\\"https://evil', "<a href=", "<b>bold", "x<br>y", "%{y} ", "&amp; %"):
            assert raw not in text, f"{name}: {raw!r} reaches plotly as markup"
        assert "&lt;a href=" in text, name  # (the label is there, escaped)


def test_plain_in_polars_escapes_as_plain_does():
    """charts.plain_expr (the timeline's hovers, escaped a column at a time) against plain() value
    by value: the payloads, the real kernel names, and the edge cases of the escape order."""
    import polars as pl

    from dashboard.charts import plain, plain_expr

    names = [
        line.split("\t")[0]
        for line in (REPO / "tests" / "data" / "kernel_names.tsv").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    values = [PLOTLY_LABEL, IMG, SCRIPT, "%{", "%%{{", "&lt;", "&amp;%{x}", "<<>>&&", "", "plain", "é ∑ 🙂", *names]
    got = pl.Series(values).to_frame("v").select(plain_expr(pl.col("v"))).to_series().to_list()
    assert got == [plain(v) for v in values]
    assert len(names) > 100


def test_charts_show_plotly_markup_in_labels_literally(browser_ready, tmp_path):
    """In Chromium: no link, bold or line break made from a label, and the label's text drawn."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            for name, fig in chart_figures(PLOTLY_LABEL).items():
                path = tmp_path / f"{name}.html"
                path.write_text(fig.to_html(include_plotlyjs=str(PLOTLY_JS), full_html=True))
                page.goto(path.as_uri())
                page.locator(".main-svg").first.wait_for(timeout=30_000)
                links = page.evaluate(
                    "() => [...document.querySelectorAll('svg a')].map(a => a.getAttribute('href') || a.getAttribute('xlink:href'))"
                )
                assert not [h for h in links if "evil" in (h or "")], f"{name}: a label became a link: {links}"
                bold = page.evaluate(
                    "() => [...document.querySelectorAll('tspan')].filter(t => /bold/.test(t.getAttribute('style') || '')).map(t => t.textContent)"
                )
                assert "bold" not in bold, f"{name}: a label's <b> was drawn bold"
                drawn = page.locator("svg").all_text_contents()
                hovers = hover_charts(page, limit=2)
                assert any("<b>bold</b> x<br>y &amp; %{y}" in t for t in drawn + hovers), (
                    f"{name}: the label is not drawn literally"
                )
        finally:
            browser.close()


def test_the_checks_see_a_payload_that_was_read_as_html(browser_ready):
    """The checks above can fail: the same payloads placed into a page as HTML are caught."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for html_text in (
                f"<div>{IMG}</div>",
                f"<div>{SCRIPT}</div>",
                '<a href="javascript:window.__pwned=3">x</a>',
                "<p><strong>bold</strong></p>",
            ):
                page = browser.new_page()
                dialogs = _dialogs(page)
                page.set_content(html_text)  # returns once the page's load event fired (the img's error too)
                with pytest.raises(AssertionError):
                    assert_nothing_ran(page, "a page made of the payload", dialogs)
                page.close()
            page = browser.new_page()
            dialogs = _dialogs(page)
            page.set_content("<script>alert(1)</script>")
            with pytest.raises(AssertionError, match="dialog"):
                assert_nothing_ran(page, "alert", dialogs)
        finally:
            browser.close()


@pytest.mark.slow  # CI: the newest-versions pass only
def test_a_trace_of_two_million_events_draws_every_tab_within_a_minute(browser_ready, tmp_path, store):
    from playwright.sync_api import sync_playwright

    trace = tmp_path / "many.json"
    t0 = time.monotonic()
    counts = write_many_events(trace, events=2_000_000)
    made_s = time.monotonic() - t0
    assert counts["events"] >= 2_000_000
    ident = "file/many.json"
    with Server(store, tmp_path / "streamlit.log", paths=[trace]) as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            start = time.monotonic()
            page.goto(server.url + "?" + urlencode([("run", ident), ("baseline", ident)]))
            page.locator(".st-key-tbl_overview [role=row]", has_text="many").wait_for(state="attached", timeout=300_000)
            _settle(page)
            first = time.monotonic() - start
            times = open_every_tab(page, bound_s=60.0)
            assert not errors, errors
        finally:
            browser.close()
    report = ", ".join(f"{tab} {s:.1f} s" for tab, s in times.items())
    print(
        f"\n2M-event trace ({trace.stat().st_size / 1e6:.0f} MB, {counts}; written in {made_s:.1f} s): "
        f"first view (parse + overview) {first:.1f} s; tabs: {report}"
    )
    if os.environ.get("ATTNSCOPE_TIMES"):
        Path(os.environ["ATTNSCOPE_TIMES"]).write_text(json.dumps({"first_s": first, "tabs": times, "counts": counts}))

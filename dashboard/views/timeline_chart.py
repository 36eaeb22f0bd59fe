"""The Timeline diff tab's chart: two step timelines drawn on a 2D canvas by a small
st.components.v2 component (no iframe), from charts.timeline_data.

Plotly draws a bar as a WebGL line segment, and in a browser without a GPU (a remote desktop,
headless Chromium) its per-segment work took 2-2.7 s for two steps of 12,700 events each; a
canvas fills the same bars in milliseconds, so every event stays drawn as itself up to
charts.TIMELINE_MAX_EVENTS per step. The offline HTML report keeps plotly's figure
(charts.timeline_pair), which needs no server.

In the browser: hover a bar for its name, family, lane, start and duration; drag across the
chart to zoom into that time range, turn the wheel over it to zoom about the pointer, and
double-click to see the whole step again. The zoom is kept while the app reruns with the same
two steps. Names are written with textContent and fillText, never parsed as markup.
"""

from __future__ import annotations

import streamlit as st

HTML = """
<div class="legend"></div>
<div class="stage">
  <canvas role="img"></canvas>
  <div class="band" hidden></div>
  <div class="tip" role="tooltip" hidden><div class="tname"></div><div class="tline tfam"></div><div class="tline ttime"></div></div>
</div>
"""

CSS = """
:host, .legend, .tip { font-family: var(--st-font, sans-serif); color: var(--st-text-color, #31333f); }
.legend { display: flex; flex-wrap: wrap; gap: 0.25rem 1rem; font-size: 0.8rem; margin: 0 0 0.25rem 0; }
.legend span.sw { display: inline-block; width: 0.8rem; height: 0.8rem; border-radius: 2px; margin-right: 0.3rem; vertical-align: -0.1rem; }
.stage { position: relative; width: 100%; }
canvas { display: block; width: 100%; cursor: crosshair; }
.band { position: absolute; top: 0; background: rgba(66, 133, 244, 0.15); border-left: 1px solid #4285f4;
        border-right: 1px solid #4285f4; pointer-events: none; }
.tip { position: absolute; pointer-events: none; max-width: 34rem; padding: 0.4rem 0.6rem; font-size: 0.8rem;
       background: var(--st-background-color, #fff); border: 1px solid var(--st-border-color, rgba(49, 51, 63, 0.2));
       border-radius: 0.3rem; box-shadow: 0 2px 6px rgba(0, 0, 0, 0.15); overflow-wrap: anywhere; z-index: 10; }
.tname { font-weight: 600; }
.tline { opacity: 0.85; }
"""

JS = """
const NAME_MAX = 600;  // characters of a name in the tooltip (template names run to thousands)
const TITLE_PX = 24, AXIS_PX = 44, PAD_RIGHT = 12, BAR = 0.7, MIN_LABEL_PX = 13;

function fmt(v) {
  const a = Math.abs(v);
  const digits = a >= 100 ? 1 : a >= 1 ? 3 : 4;
  return v.toLocaleString('en-US', { maximumFractionDigits: digits });
}

function niceStep(range, count) {
  const raw = range / Math.max(count, 1);
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  const m = raw / p;
  return (m >= 5 ? 10 : m >= 2 ? 5 : m >= 1 ? 2 : 1) * p;
}

function layout(st, width) {
  // panel rows share the height in proportion to their lanes, as in the report's figure
  const d = st.data;
  const rows = d.panels.map((p) => Math.max(p.lanes.length, 1));
  const total = rows.reduce((s, r) => s + r, 0);
  const free = d.height - AXIS_PX - TITLE_PX * d.panels.length;
  let y = 0;
  st.panels = d.panels.map((p, i) => {
    const h = free * rows[i] / total;
    const box = { p, top: y + TITLE_PX, height: h, laneH: h / rows[i], lanes: rows[i] };
    y += TITLE_PX + h;
    return box;
  });
  st.gutter = Math.min(Math.max(st.labelW + 14, 60), Math.floor(width * 0.3));
  st.width = width;
  st.plotW = Math.max(width - st.gutter - PAD_RIGHT, 10);
}

function draw(st) {
  const { canvas, ctx, data: d } = st;
  const dpr = window.devicePixelRatio || 1;
  const width = st.stage.clientWidth || 800;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(d.height * dpr);
  canvas.style.height = d.height + 'px';
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.font = '12px ' + st.font;
  st.labelW = 0;
  for (const p of d.panels) for (const lane of p.lanes) st.labelW = Math.max(st.labelW, ctx.measureText(lane).width);
  layout(st, width);
  ctx.clearRect(0, 0, width, d.height);
  const [v0, v1] = st.view;
  const k = st.plotW / (v1 - v0);
  const gx = st.gutter;
  const step = niceStep(v1 - v0, st.plotW / 110);
  const ticks = [];
  for (let t = Math.ceil(v0 / step) * step; t <= v1 + step * 1e-9; t += step) ticks.push(t);
  for (const box of st.panels) {
    const { p, top, height, laneH } = box;
    ctx.fillStyle = st.text;
    ctx.font = '600 13px ' + st.font;
    ctx.textBaseline = 'alphabetic';
    ctx.fillText(p.title, gx, top - 7);
    // grid
    ctx.strokeStyle = st.grid;
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (const t of ticks) { const x = Math.round(gx + (t - v0) * k) + 0.5; ctx.moveTo(x, top); ctx.lineTo(x, top + height); }
    for (let l = 1; l < box.lanes; l++) { const y = Math.round(top + l * laneH) + 0.5; ctx.moveTo(gx, y); ctx.lineTo(gx + st.plotW, y); }
    ctx.stroke();
    // lane labels: every n-th one when lanes are too thin for each
    ctx.font = '12px ' + st.font;
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    const every = Math.max(1, Math.ceil(MIN_LABEL_PX / laneH));
    for (let l = 0; l < p.lanes.length; l += every) ctx.fillText(p.lanes[l], gx - 6, top + (l + 0.5) * laneH, gx - 10);
    ctx.textAlign = 'left';
    // bars, one colour at a time
    ctx.save();
    ctx.beginPath();
    ctx.rect(gx, top, st.plotW, height);
    ctx.clip();
    const barH = Math.max(laneH * BAR, 1);
    const pad = (laneH - barH) / 2;
    const n = p.start.length;
    for (let f = 0; f < d.families.length; f++) {
      if (st.hidden.has(f)) continue;
      ctx.fillStyle = d.families[f].color;
      for (let i = 0; i < n; i++) {
        if (p.family[i] !== f) continue;
        const x = gx + (p.start[i] - v0) * k;
        const w = Math.max(p.dur[i] * k, 1);
        if (x + w < gx || x > gx + st.plotW) continue;
        ctx.fillRect(x, top + p.lane[i] * laneH + pad, w, barH);
      }
    }
    ctx.restore();
    ctx.strokeStyle = st.axis;
    ctx.strokeRect(gx + 0.5, top + 0.5, st.plotW - 1, height - 1);
  }
  // x axis under the last panel
  const last = st.panels[st.panels.length - 1];
  const base = last.top + last.height;
  ctx.fillStyle = st.text;
  ctx.font = '11px ' + st.font;
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  for (const t of ticks) ctx.fillText(fmt(t), gx + (t - v0) * k, base + 5);
  ctx.font = '12px ' + st.font;
  ctx.fillText(d.axis, gx + st.plotW / 2, base + 24);
  ctx.textAlign = 'left';
  // what was drawn where, for the browser tests (and a curious reader of the page)
  canvas.__attnscope = {
    data: d, view: st.view.slice(), gutter: gx, plotW: st.plotW, hidden: [...st.hidden],
    panels: st.panels.map((b) => ({ top: b.top, height: b.height, laneH: b.laneH })),
  };
}

function hit(st, mx, my) {
  // the bar under the pointer: its lane from y, then a binary search of the lane's starts
  const box = st.panels.find((b) => my >= b.top && my < b.top + b.height);
  if (!box || mx < st.gutter || mx > st.gutter + st.plotW) return null;
  const p = box.p;
  const lane = Math.floor((my - box.top) / box.laneH);
  const [v0, v1] = st.view;
  const k = st.plotW / (v1 - v0);
  const t = v0 + (mx - st.gutter) / k;
  const tol = 3 / k;
  let lo = 0, hi = p.lane.length;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (p.lane[mid] < lane || (p.lane[mid] === lane && p.start[mid] <= t + tol)) lo = mid + 1; else hi = mid; }
  let best = null, bestGap = Infinity;
  for (let i = lo - 1, seen = 0; i >= 0 && p.lane[i] === lane && seen < 256; i--, seen++) {
    if (st.hidden.has(p.family[i])) continue;
    const end = p.start[i] + Math.max(p.dur[i], 1 / k);
    const gap = t < p.start[i] ? p.start[i] - t : t > end ? t - end : 0;
    if (gap <= tol && gap < bestGap) { best = i; bestGap = gap; if (gap === 0) break; }
  }
  return best === null ? null : { p, i: best };
}

function showTip(st, got, mx, my) {
  const { tip } = st;
  if (!got) { tip.hidden = true; return; }
  const { p, i } = got;
  const fam = st.data.families[p.family[i]].name;
  const name = p.names[p.name[i]];
  tip.querySelector('.tname').textContent = name.length > NAME_MAX ? name.slice(0, NAME_MAX) + '\u2026' : name;
  tip.querySelector('.tfam').textContent = fam + ' \\u00b7 ' + p.lanes[p.lane[i]];
  tip.querySelector('.ttime').textContent = p.merged[i] > 1
    ? 'start ' + fmt(p.start[i]) + ' \\u00b5s \\u00b7 ' + p.merged[i].toLocaleString('en-US') + ' events, '
      + fmt(p.busy[i]) + ' \\u00b5s busy over ' + fmt(p.dur[i]) + ' \\u00b5s'
    : 'start ' + fmt(p.start[i]) + ' \\u00b5s \\u00b7 duration ' + fmt(p.dur[i]) + ' \\u00b5s';
  tip.hidden = false;
  const w = tip.offsetWidth, h = tip.offsetHeight;
  tip.style.left = Math.max(0, Math.min(mx + 14, st.width - w - 4)) + 'px';
  tip.style.top = (my + 16 + h > st.data.height ? Math.max(0, my - h - 10) : my + 16) + 'px';
}

export default function (component) {
  const { data, parentElement } = component;
  const root = parentElement;
  const canvas = root.querySelector('canvas');
  const stage = root.querySelector('.stage');  // root may be a shadow root: measure and style from an element
  const sig = JSON.stringify([data.span, data.panels.map((p) => [p.title, p.lanes.length, p.start.length])]);
  const kept = root.__attnscopeTimeline;
  const st = {
    root, stage, canvas, ctx: canvas.getContext('2d'), data,
    tip: root.querySelector('.tip'), band: root.querySelector('.band'),
    view: kept && kept.sig === sig ? kept.view : [0, data.span],
    hidden: kept && kept.sig === sig ? kept.hidden : new Set(),
  };
  root.__attnscopeTimeline = { sig, view: st.view, hidden: st.hidden };
  const css = getComputedStyle(stage);
  st.font = css.getPropertyValue('--st-font').trim() || 'sans-serif';
  st.text = css.getPropertyValue('--st-text-color').trim() || '#31333f';
  st.grid = 'rgba(128, 128, 128, 0.18)';
  st.axis = 'rgba(128, 128, 128, 0.45)';
  canvas.setAttribute('aria-label', data.panels.map((p) => p.title).join('; '));

  const legend = root.querySelector('.legend');
  legend.replaceChildren(...data.families.map((f, i) => {
    const item = document.createElement('label');
    item.style.cursor = 'pointer';
    item.style.opacity = st.hidden.has(i) ? '0.4' : '1';
    item.title = 'Show or hide ' + f.name;
    const sw = document.createElement('span');
    sw.className = 'sw';
    sw.style.background = f.color;
    item.append(sw, document.createTextNode(f.name));
    item.onclick = () => {
      if (st.hidden.has(i)) st.hidden.delete(i); else st.hidden.add(i);
      item.style.opacity = st.hidden.has(i) ? '0.4' : '1';
      draw(st);
    };
    return item;
  }));

  const setView = (a, b) => {
    const min = 1e-3, span = data.span;
    if (b - a < min) { const c = (a + b) / 2; a = c - min / 2; b = c + min / 2; }
    if (b - a >= span) { a = 0; b = span; }  // never wider than the whole step
    else if (a < 0) { b -= a; a = 0; }
    else if (b > span) { a -= b - span; b = span; }
    st.view = [a, b];
    root.__attnscopeTimeline.view = st.view;
    draw(st);
  };
  const local = (e) => { const r = canvas.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
  let drag = null;
  canvas.onmousedown = (e) => {
    const [mx] = local(e);
    if (e.button !== 0 || mx < st.gutter) return;
    drag = { x: mx };
    e.preventDefault();
  };
  canvas.onmousemove = (e) => {
    const [mx, my] = local(e);
    if (drag) {
      const x0 = Math.max(Math.min(drag.x, mx), st.gutter), x1 = Math.min(Math.max(drag.x, mx), st.gutter + st.plotW);
      Object.assign(st.band.style, { left: x0 + 'px', width: Math.max(x1 - x0, 0) + 'px', height: st.data.height - AXIS_PX + 'px' });
      st.band.hidden = false;
      st.tip.hidden = true;
      return;
    }
    showTip(st, hit(st, mx, my), mx, my);
  };
  const finish = (e) => {
    if (!drag) return;
    const [mx] = local(e);
    const a = Math.min(drag.x, mx), b = Math.max(drag.x, mx);
    drag = null;
    st.band.hidden = true;
    if (b - a < 4) return;
    const [v0, v1] = st.view;
    const k = st.plotW / (v1 - v0);
    setView(v0 + (Math.max(a, st.gutter) - st.gutter) / k, v0 + (Math.min(b, st.gutter + st.plotW) - st.gutter) / k);
  };
  canvas.onmouseup = finish;
  canvas.onmouseleave = (e) => { finish(e); st.tip.hidden = true; };
  canvas.ondblclick = () => setView(0, data.span);
  canvas.onwheel = (e) => {
    const [mx] = local(e);
    if (mx < st.gutter) return;
    e.preventDefault();
    const [v0, v1] = st.view;
    const k = st.plotW / (v1 - v0);
    const t = v0 + (mx - st.gutter) / k;
    const f = Math.exp(Math.max(-3, Math.min(3, e.deltaY * 0.002)));
    setView(t - (t - v0) * f, t + (v1 - t) * f);
  };
  draw(st);
  if (root.__attnscopeResize) root.__attnscopeResize.disconnect();  // one observer, whatever the reruns
  const ro = new ResizeObserver(() => { if (stage.clientWidth !== st.width) draw(st); });
  ro.observe(stage);
  root.__attnscopeResize = ro;
  return () => { ro.disconnect(); root.__attnscopeResize = null; };
}
"""

COMPONENT = st.components.v2.component("attnscope_timeline", html=HTML, css=CSS, js=JS)


def timeline_chart(data: dict, key: str) -> None:
    """Draw charts.timeline_data's two timelines."""
    COMPONENT(key=key, data=data)

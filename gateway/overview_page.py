"""The overview page: server-rendered HTML with an inline SVG chart, no script, no build step.

Everything from the database goes through gateway/page_text.py (escaped, control and bidi
characters shown as escapes, each text in its own direction); workflow ids in links are also URL-quoted.
"""

from __future__ import annotations

from decimal import Decimal
from html import escape
from urllib.parse import quote

from control.overview import BANDS, FAILURES_READ, Overview
from gateway.page_text import attr, text
from schema.spend import WASTE_CAUSES

WIDTH, HEIGHT, PAD = 720, 220, 34
COLOURS = {"succeeded": "#2e9d57", "failed": "#c8453b", "waiting for a person": "#e0a526",
           "fetching and transcoding": "#6a5acd", "at the provider": "#3b7dd8", "waiting": "#b8c0cc"}
SPEND_ROWS = ("reserved", "settled", "released", "refunded", "adjustments", "charged", "held")

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f4f5f7;color:#1d2330}
header{background:#1d2b53;color:#fff;padding:10px 18px}header h1{font-size:17px;margin:0}
section{background:#fff;margin:12px 18px;padding:10px 14px;border-radius:8px;box-shadow:0 1px 3px #0002}
h2{font-size:15px;margin:2px 0 8px}table{border-collapse:collapse}
td,th{border:1px solid #dde;padding:3px 8px;text-align:left;font-size:13px}td.n{text-align:right}
.small{color:#556;font-size:12px}.legend span{display:inline-block;margin-right:12px}
.swatch{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.thumbs{display:flex;flex-wrap:wrap;gap:10px}.thumbs figure{margin:0;width:150px;font-size:11px}
.thumbs img{width:150px;height:150px;object-fit:contain;background:#000;border-radius:4px}
"""


def _credits(amount: Decimal | None) -> str:
    return "-" if amount is None else f"{amount.normalize():f}"


def _chart(view: Overview) -> str:
    """Stacked areas, one per band, of the tasks in it over time (the last point is now)."""
    n = len(view.times)
    top = max(view.total, 1)

    def x(i: int) -> float:
        return PAD + (WIDTH - 2 * PAD) * (i + 1) / n

    def y(v: float) -> float:
        return HEIGHT - PAD - (HEIGHT - 2 * PAD) * v / top

    below = [0] * n
    shapes = []
    for band in BANDS:
        values = view.bands[band]
        above = [b + v for b, v in zip(below, values, strict=True)]
        upper = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(above))
        lower = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in reversed(list(enumerate(below))))
        shapes.append(f'<polygon class="band" data-band="{escape(band)}" fill="{COLOURS[band]}" '
                      f'points="{upper} {lower}"><title>{escape(band)}: {values[-1]}</title>'
                      "</polygon>")
        below = above
    start, end = view.times[0], view.times[-1]
    axis = (f'<line x1="{PAD}" y1="{y(0):.1f}" x2="{WIDTH - PAD}" y2="{y(0):.1f}" stroke="#556"/>'
            f'<text x="{PAD}" y="{HEIGHT - 10}" font-size="11">{escape(start.strftime("%H:%M:%S"))}</text>'
            f'<text x="{WIDTH - PAD}" y="{HEIGHT - 10}" font-size="11" text-anchor="end">'
            f'{escape(end.strftime("%H:%M:%S"))} UTC</text>'
            f'<text x="4" y="{y(top) + 4:.1f}" font-size="11">{view.total}</text>')
    legend = "".join(f'<span><i class="swatch" style="background:{COLOURS[b]}"></i>{escape(b)} '
                     f'<b class="now" data-band="{escape(b)}">{view.bands[b][-1]}</b></span>' for b in BANDS)
    return (f'<svg id="progress" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
            f'aria-label="tasks by status over time">{"".join(shapes)}{axis}</svg>'
            f'<div class="legend small">{legend}</div>')


def _counts(view: Overview) -> str:
    rows = "".join(f'<tr><td>{escape(s)}</td><td class="n" id="count-{escape(s)}">{n}</td></tr>'
                   for s, n in sorted(view.counts.items()))
    return f'<table id="counts"><tr><th>status</th><th>tasks</th></tr>{rows}' \
           f'<tr><th>total</th><th class="n" id="count-total">{view.total}</th></tr></table>'


def _spend(view: Overview) -> str:
    s = view.spend
    rows = [(name, name, getattr(s, name)) for name in SPEND_ROWS]
    rows += [(f"wasted-{c}", f"wasted: {c}", s.wasted[c]) for c in WASTE_CAUSES]
    rows += [("wasted-total", "wasted in all", s.wasted_total),
             ("per-succeeded", f"per SUCCEEDED video ({s.succeeded})", s.cost_per_succeeded),
             ("per-approved", f"per approved video ({s.approved})", s.cost_per_approved)]
    body = "".join(f'<tr><td>{escape(label)}</td><td class="n" id="spend-{key}">{_credits(v)}</td></tr>'
                   for key, label, v in rows)
    return f'<table id="spend"><tr><th>credits</th><th>amount</th></tr>{body}</table>'


def _workflow_link(ui: str, task_id: str, workflow_id: str) -> str:
    if not ui:
        return text(task_id)
    return f'<a href="{escape(ui + quote(workflow_id, safe=""))}" rel="noreferrer">{text(task_id)}</a>'


def _failures(view: Overview, ui: str) -> str:
    if not view.failures:
        return '<p class="small">No task failed.</p>'
    rows = []
    for f in view.failures:
        links = ", ".join(_workflow_link(ui, t, w) for t, w in f.tasks)
        more = f" and {f.count - len(f.tasks)} more" if f.count > len(f.tasks) else ""
        rows.append(f'<tr class="failure"><td>{escape(f.status)}</td><td>{escape(f.error_class)}</td>'
                    f'<td>{text(f.error)}</td><td class="n">{f.count}</td><td class="small">{links}{more}</td></tr>')
    capped = (f'<p class="small">Counted over the first {FAILURES_READ:,} failed tasks by id; the counts by '
              'status above hold them all.</p>') if view.failures_capped else ""
    return ('<table id="failures"><tr><th>status</th><th>class</th><th>reason</th><th>tasks</th><th>which</th></tr>'
            f'{"".join(rows)}</table>{capped}')


def _thumbnails(view: Overview, thumbnails: dict[str, str], videos: dict[str, str]) -> str:
    if not view.thumbnails:
        return '<p class="small">No finished video yet.</p>'
    figures = []
    for t in view.thumbnails:
        img = f'<img src="{escape(thumbnails[t.task_id])}" alt="{attr(t.label)}" loading="lazy">'
        if t.task_id in videos:
            img = f'<a href="{escape(videos[t.task_id])}" rel="noreferrer">{img}</a>'
        figures.append(f'<figure class="thumb" data-task="{escape(t.task_id)}">{img}'
                       f'<figcaption>{text(t.label)}</figcaption></figure>')
    return f'<div class="thumbs">{"".join(figures)}</div>'


def _tasks(view: Overview, ui: str) -> str:
    rows = "".join(
        f'<tr><td>{_workflow_link(ui, t.task_id, t.workflow_id)}</td><td>{escape(t.status)}</td>'
        f'<td>{text(t.product_id)}</td><td>{text(t.locale)}</td><td>{escape(t.aspect_ratio)}</td>'
        f'<td class="route" title="{attr(t.route_note or "")}">{text(t.route)}</td>'
        f'<td class="small">{escape(t.updated_at.strftime("%H:%M:%S"))}</td></tr>' for t in view.tasks)
    shown = f"the {len(view.tasks)} most recently changed of {view.total}" if len(view.tasks) < view.total else "all"
    return (f'<p class="small">{shown}; each links to its workflow in the Temporal Web UI</p><table id="tasks">'
            f'<tr><th>task</th><th>status</th><th>product</th><th>locale</th><th>ratio</th><th>route</th><th>changed</th></tr>'
            f'{rows}</table>')


def render_overview(view: Overview, *, viewer: str, thumbnails: dict[str, str], videos: dict[str, str],
                    workflow_ui: str, refresh_s: int | None) -> str:
    refresh = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    state = "running: this page refreshes itself" if view.running else "nothing left to run"
    if view.paused_by and view.running:
        state = f"paused by {view.paused_by}: this page refreshes itself"
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">{refresh}
<meta name="viewport" content="width=device-width,initial-scale=1"><title>Import {escape(view.import_id)}</title>
<style>{_CSS}</style></head><body>
<header><h1>Import {escape(view.import_id)} · {text(view.catalog)}</h1>
<span class="small" style="color:#ccd">created {escape(view.created_at.strftime("%Y-%m-%d %H:%M:%S %Z"))} ·
{view.total} tasks · <span id="state">{text(state)}</span> · viewer {text(viewer)}</span></header>
<section><h2>Progress</h2>{_chart(view)}</section>
<section style="display:flex;gap:30px;flex-wrap:wrap"><div><h2>Tasks by status</h2>{_counts(view)}</div>
<div><h2>Spend and waste</h2>{_spend(view)}</div></section>
<section><h2>Failures by reason</h2>{_failures(view, workflow_ui)}</section>
<section><h2>Finished videos</h2>{_thumbnails(view, thumbnails, videos)}</section>
<section><h2>Tasks</h2>{_tasks(view, workflow_ui)}</section>
</body></html>"""

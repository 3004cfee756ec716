"""The gallery page: server-rendered HTML, a little inline CSS and JavaScript, no build step.

Everything user-supplied goes through gateway/page_text.py (escaped, control and bidi characters
shown as escapes, each text in its own direction); the items travel to the script as JSON inside a
`<script type="application/json">` block with `<` escaped. No inline handler: the page's CSP runs
only the nonce'd script, which also submits the filters on change (the form has its button too).
Keys: j / → next, k / ← previous, space or p play/pause, a approve, r reject (asks a reason),
g regenerate (edit the prompt), x select, shift+A approve the selection, ? help.
"""

from __future__ import annotations

import json
from html import escape
from urllib.parse import urlencode

from contracts.tenant_text import shown
from control.review import Filters, IssueItem, ReviewItem
from gateway.page_text import attr, text

STATUSES = ("REVIEW", "ALL", "SUCCEEDED", "REJECTED", "QUEUED", "RUNNING", "EXPIRED", "FAILED_FINAL")

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f4f5f7;color:#1d2330}
header{background:#1d2b53;color:#fff;padding:10px 18px;display:flex;gap:18px;align-items:center;flex-wrap:wrap}
header h1{font-size:17px;margin:0}
#counter{background:#ffcc4d;color:#1d2330;border-radius:12px;padding:2px 10px;font-weight:600}
nav.tabs a{color:#fff;margin-right:12px;text-decoration:none;opacity:.7}
nav.tabs a.on{opacity:1;border-bottom:2px solid #ffcc4d}
form.filters,.bulk{padding:8px 18px;display:flex;gap:10px;align-items:center;flex-wrap:wrap}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(270px,1fr));gap:14px;padding:8px 18px 40px}
.card{background:#fff;border-radius:8px;padding:10px;box-shadow:0 1px 3px #0002;border:3px solid transparent;
min-width:0;overflow-wrap:anywhere}
.card.current{border-color:#3b6cf6}
.card video{width:100%;max-height:300px;background:#000;border-radius:4px}
.card h2{font-size:15px;margin:6px 0 2px}
.meta,.small{color:#556;font-size:12px}
.prompt{font-size:12px;background:#f0f2f7;padding:4px 6px;border-radius:4px;margin:4px 0;max-height:60px;overflow:auto}
.checks{list-style:none;padding:0;margin:4px 0;font-size:12px}
.checks .fail{color:#b3261e;font-weight:600}.checks .ok{color:#1e7a3c}
.status{font-weight:700;font-size:12px;padding:1px 6px;border-radius:8px;background:#e3e6ee}
.status.SUCCEEDED{background:#c9f0d6}.status.REJECTED{background:#f7d0cc}.status.QUEUED{background:#ffe7a8}
.actions button{margin:6px 4px 0 0}
dialog textarea,dialog input{width:100%;box-sizing:border-box}
table{border-collapse:collapse;margin:8px 18px;background:#fff}
td,th{border:1px solid #dde;padding:4px 8px;text-align:left;font-size:13px;overflow-wrap:anywhere}
kbd{background:#eee;border:1px solid #ccc;border-radius:3px;padding:0 4px;font-size:12px}
"""

_JS = """
document.querySelectorAll('form.filters select').forEach(s=>s.addEventListener('change', ()=>s.form.submit()));
const data = JSON.parse(document.getElementById('items').textContent);
const cfg = JSON.parse(document.getElementById('cfg').textContent);
const cards = [...document.querySelectorAll('.card')];
let cur = cards.length ? 0 : -1;
function focusCard(i){ if(!cards.length) return; cur=(i+cards.length)%cards.length;
  cards.forEach((c,n)=>c.classList.toggle('current', n===cur));
  cards[cur].scrollIntoView({block:'nearest'}); }
function card(){ return cur>=0 ? cards[cur] : null; }
function video(c){ return c && c.querySelector('video'); }
function setStatus(id, status){ const c=document.getElementById('t-'+id); if(!c) return;
  const s=c.querySelector('.status'); s.textContent=status; s.className='status '+status; c.dataset.status=status; }
function updateCounter(){ const left=cards.filter(c=>c.dataset.status==='REVIEW').length;
  document.getElementById('left').textContent=left; }
async function decide(ids, action, reason, prompt){
  const r = await fetch(cfg.decide, {method:'POST', credentials:'same-origin',
    headers:{'Content-Type':'application/json','X-CSRF-Token':cfg.csrf},
    body:JSON.stringify({task_ids:ids, action, reason:reason||'', prompt:prompt||null})});
  const out = await r.json();
  const msg = document.getElementById('msg');
  if(!r.ok){ msg.textContent = out.detail || ('refused: '+r.status); return; }
  const bad = out.results.filter(x=>!x.ok);
  out.results.filter(x=>x.ok).forEach(x=>setStatus(x.task_id, x.status));
  msg.textContent = bad.length ? bad.map(x=>x.message).join('; ') : (action+': '+ids.length+' done');
  updateCounter();
}
function nextPending(){ for(let k=1;k<=cards.length;k++){ const i=(cur+k)%cards.length;
  if(cards[i].dataset.status==='REVIEW'){ focusCard(i); return; } } }
async function approve(c){ if(!c) return; await decide([c.dataset.task], 'approve'); nextPending(); }
function ask(kind, c){ if(!c) return; const d=document.getElementById(kind+'-dialog');
  d.dataset.task=c.dataset.task;
  if(kind==='regen'){ d.querySelector('textarea').value=data[c.dataset.task].prompt; }
  else { d.querySelector('input').value=''; }
  d.showModal(); }
document.getElementById('reject-form').addEventListener('submit', async e=>{ e.preventDefault();
  const d=document.getElementById('reject-dialog'); const reason=d.querySelector('input').value.trim();
  if(!reason){ return; } d.close(); await decide([d.dataset.task], 'reject', reason); nextPending(); });
document.getElementById('regen-form').addEventListener('submit', async e=>{ e.preventDefault();
  const d=document.getElementById('regen-dialog'); const text=d.querySelector('textarea').value.trim();
  d.close(); const t=data[d.dataset.task];
  await decide([d.dataset.task], 'regenerate', 'regenerate', text && text!==t.prompt ? text : null); nextPending(); });
document.querySelectorAll('dialog .cancel').forEach(b=>b.addEventListener('click',
  e=>e.target.closest('dialog').close()));
function selected(){ return cards.filter(c=>c.querySelector('.pick').checked && c.dataset.status==='REVIEW')
  .map(c=>c.dataset.task); }
document.getElementById('bulk-approve').addEventListener('click', async ()=>{ const ids=selected();
  if(ids.length) await decide(ids, 'approve'); });
document.getElementById('pick-all').addEventListener('change', e=>cards.forEach(c=>{
  c.querySelector('.pick').checked=e.target.checked; }));
function on(c, i, sel, fn){ c.querySelector(sel).addEventListener('click', ev=>{ ev.stopPropagation();
  focusCard(i); fn(c); }); }
cards.forEach((c,i)=>{ c.addEventListener('click', ()=>focusCard(i));
  on(c, i, '.do-approve', approve); on(c, i, '.do-reject', x=>ask('reject', x));
  on(c, i, '.do-regen', x=>ask('regen', x)); });
document.addEventListener('keydown', e=>{
  if(e.target.closest('dialog') || ['INPUT','TEXTAREA','SELECT'].includes(e.target.tagName)) return;
  const c=card(), v=video(c);
  if(e.key==='j'||e.key==='ArrowRight'){ focusCard(cur+1); }
  else if(e.key==='k'||e.key==='ArrowLeft'){ focusCard(cur-1); }
  else if(e.key===' '||e.key==='p'){ if(v){ v.paused ? v.play() : v.pause(); } }
  else if(e.key==='A'&&e.shiftKey){ document.getElementById('bulk-approve').click(); }
  else if(e.key==='a'){ approve(c); }
  else if(e.key==='r'){ ask('reject', c); }
  else if(e.key==='g'){ ask('regen', c); }
  else if(e.key==='x'){ if(c){ const p=c.querySelector('.pick'); p.checked=!p.checked; } }
  else if(e.key==='?'){ document.getElementById('help').toggleAttribute('hidden'); }
  else { return; }
  e.preventDefault(); });
focusCard(0); updateCounter();
"""


def _options(name: str, values: list[str], chosen: str | None, label: str) -> str:
    opts = [f'<option value="">{escape(label)}: all</option>']
    opts += [f'<option value="{escape(v)}"{" selected" if v == chosen else ""}>{attr(v)}</option>' for v in values]
    return f'<select name="{name}">{"".join(opts)}</select>'


def _card(item: ReviewItem, video: str | None) -> str:
    checks = "".join(
        f'<li class="{"ok" if c.passed else "fail"}">{"✓" if c.passed else "✗"} {escape(c.name)}: '
        f'{text(c.detail)}</li>' for c in item.checks) or '<li class="small">no automatic checks</li>'
    # `#t=0.5`: the browser shows a frame of the video (not a black box) before it plays.
    player = (f'<video src="{escape(video)}#t=0.5" preload="metadata" controls playsinline loop muted></video>'
              if video else '<div class="small">no rendition yet</div>')
    price = f"{text(item.price)} {text(item.currency or '')}" if item.price else "no price"
    edited = ' <span class="small">(edited)</span>' if item.prompt_edited else ""
    return f"""<article class="card" id="t-{escape(item.task_id)}" data-task="{escape(item.task_id)}"
 data-status="{escape(item.status)}">
{player}
<h2>{text(item.title)}</h2>
<div class="meta">{price} · {text(item.locale)} · {escape(item.aspect_ratio)} · {text(item.template_id)}
 · {text(item.variant)}</div>
<div class="prompt" title="prompt">{text(item.prompt)}{edited}</div>
<ul class="checks">{checks}</ul>
<div class="small">cost {item.cost:g} credits · {item.attempts} attempt{"s" if item.attempts != 1 else ""}
 · <span class="status {escape(item.status)}">{escape(item.status)}</span></div>
<div class="actions"><label><input type="checkbox" class="pick"> select</label>
<button class="do-approve">Approve <kbd>a</kbd></button><button class="do-reject">Reject <kbd>r</kbd></button>
<button class="do-regen">Regenerate <kbd>g</kbd></button></div>
</article>"""


def _issues_table(issues: list[IssueItem]) -> str:
    if not issues:
        return '<p style="margin:8px 18px">No validation issues in this import.</p>'
    rows = "".join(
        f"<tr><td>{i.row if i.row is not None else ''}</td><td>{text(i.product_id or '')}</td>"
        f"<td>{text(i.field)}</td><td>{text(i.value[:200])}</td><td>{text(i.reason)}</td>"
        f"<td>{escape(i.action)}</td></tr>" for i in issues)
    return ("<table id=\"issues\"><tr><th>row</th><th>product</th><th>field</th><th>value</th><th>reason</th>"
            f"<th>action</th></tr>{rows}</table>")


def _script_json(value: object) -> str:
    """JSON safe inside a <script> element: no `<` can close it."""
    return json.dumps(value).replace("<", "\\u003c")


def _pager(base: str, kept: dict[str, str], page: int, more: bool) -> str:
    """Previous / next links of the grid (the page number is the only state)."""
    links = []
    if page > 1:
        links.append(f'<a id="prev-page" href="{base}?{escape(urlencode({**kept, "page": page - 1}))}">previous</a>')
    links.append(f"page {page}")
    if more:
        links.append(f'<a id="next-page" href="{base}?{escape(urlencode({**kept, "page": page + 1}))}">next</a>')
    return f'<nav class="pager small" style="margin:8px 18px">{" · ".join(links)}</nav>'


def render_gallery(*, import_id: str, reviewer: str, items: list[ReviewItem], videos: dict[str, str],
                   counts: dict[str, int], facets: dict[str, list[str]], issues: list[IssueItem], filters: Filters,
                   tab: str, csrf: str, nonce: str, page: int = 1, more: bool = False) -> str:
    base = f"/review/{escape(import_id)}"
    kept = {k: v for k, v in (("status", filters.status or "ALL"), ("locale", filters.locale),
                              ("ratio", filters.aspect_ratio), ("template", filters.template_id)) if v}
    videos_link = f"{base}?{urlencode(kept)}"
    issues_link = f"{base}?{urlencode({**kept, 'tab': 'issues'})}"
    data = {i.task_id: {"prompt": shown(i.prompt), "status": i.status} for i in items}
    cfg = {"decide": f"/review/{import_id}/decisions", "csrf": csrf}
    left = counts.get("REVIEW", 0)
    status_opts = "".join(f'<option value="{s}"{" selected" if s == (filters.status or "ALL") else ""}>{s}</option>'
                          for s in STATUSES)
    if tab == "issues":
        body = _issues_table(issues)
    else:
        grid = "".join(_card(i, videos.get(i.task_id)) for i in items) or \
            '<p style="margin:8px 18px">Nothing matches these filters.</p>'
        body = f"""<form class="filters" method="get" action="{base}">
<select name="status">{status_opts}</select>
{_options("locale", facets["locale"], filters.locale, "locale")}
{_options("ratio", facets["aspect_ratio"], filters.aspect_ratio, "ratio")}
{_options("template", facets["template_id"], filters.template_id, "template")}
<button type="submit">Filter</button>
</form>
<div class="bulk"><label><input type="checkbox" id="pick-all"> select all shown</label>
<button id="bulk-approve">Approve selected <kbd>shift+A</kbd></button><span id="msg" class="small"></span>
<span class="small">keys: <kbd>j</kbd>/<kbd>k</kbd> next/previous · <kbd>space</kbd> play · <kbd>a</kbd> approve ·
<kbd>r</kbd> reject · <kbd>g</kbd> regenerate · <kbd>x</kbd> select · <kbd>?</kbd> help</span></div>
<p id="help" class="small" style="margin:0 18px" hidden>Approve and reject move to the next video waiting for
review. Regenerate starts a new paid attempt with the prompt as you leave it; the new video comes back here.</p>
<section class="grid">{grid}</section>
{_pager(base, kept, page, more)}"""
    payload, settings = _script_json(data), _script_json(cfg)
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1"><title>Review {escape(import_id)}</title>
<style>{_CSS}</style></head><body>
<header><h1>Review · {escape(import_id)}</h1><span id="counter"><span id="left">{left}</span> left to review</span>
<span class="small" style="color:#ccd">{sum(counts.values())} videos · reviewer {text(reviewer)}</span>
<nav class="tabs"><a href="{videos_link}" class="{"on" if tab != "issues" else ""}">Videos</a>
<a href="{issues_link}" id="issues-tab" class="{"on" if tab == "issues" else ""}">Validation issues
({len(issues)})</a></nav></header>
{body}
<dialog id="reject-dialog"><form id="reject-form"><p>Why is this video rejected?</p>
<input name="reason" required placeholder="reason (kept with the decision)">
<p><button type="submit">Reject</button> <button type="button" class="cancel">Cancel</button></p></form></dialog>
<dialog id="regen-dialog"><form id="regen-form"><p>Regenerate with this prompt (a new paid attempt):</p>
<textarea name="prompt" rows="5"></textarea>
<p><button type="submit">Regenerate</button> <button type="button" class="cancel">Cancel</button></p></form></dialog>
<script type="application/json" id="items">{payload}</script>
<script type="application/json" id="cfg">{settings}</script>
<script nonce="{escape(nonce)}">{_JS if tab != "issues" else ""}</script>
</body></html>"""

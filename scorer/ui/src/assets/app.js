// Loadstar's live view: node tiles coloured by real load, each node's windows and trend,
// the latest placement decisions with every candidate's per-plugin scores. Data arrives on
// the server-sent event stream /ui/events; everything is drawn with textContent (node names
// and reasons come from clients, never from HTML).
'use strict';

const RESOURCES = ['cpu', 'memory', 'network', 'disk_io', 'gpu'];
const HISTORY = 120; // samples of each resource kept per node for the trend lines
const MAX_DECISIONS = 100;
const FLAG_STALE = 1;
const FLAG_CORDONED = 8;

const state = {
  nodes: new Map(), // name -> { flags, load: [5], hist: [Float32Array x5], len, el }
  order: '',
  resource: 0,
  sort: 'name',
  filter: '',
  staleOnly: false,
  selected: null,
  decisions: [], // newest first
  firstFrame: false,
};
// What the browser test and the render benchmark read: frames applied, the time the last
// frame took to apply and draw, the slowest one, and when the first one was drawn.
window.loadstar = { frames: 0, decisions: 0, firstFrameMs: null, frameMs: null, maxFrameMs: 0 };

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function colour(v) {
  if (v === null || v === undefined) return '#c8ccd4';
  const x = Math.max(0, Math.min(1, v));
  const hue = 120 * (1 - x);
  const light = 45 + 5 * Math.sin(Math.PI * x);
  return `hsl(${hue.toFixed(0)}, 62%, ${light.toFixed(0)}%)`;
}

function pct(v) {
  return v === null || v === undefined ? '–' : `${(v * 100).toFixed(1)}\u00a0%`;
}

// ---- nodes -------------------------------------------------------------------------------

function applyFrame(frame) {
  const started = performance.now();
  const seen = new Set();
  for (const [name, flags, load] of frame.nodes) {
    seen.add(name);
    let n = state.nodes.get(name);
    if (!n) {
      const tile = el('div', null, 'tile');
      tile.dataset.name = name;
      tile.setAttribute('role', 'listitem');
      n = { flags: 0, load: [null, null, null, null, null], hist: RESOURCES.map(() => new Float32Array(HISTORY).fill(NaN)), len: 0, el: tile, shown: undefined };
      state.nodes.set(name, n);
    }
    n.flags = flags;
    n.load = load;
    for (let r = 0; r < RESOURCES.length; r++) {
      const h = n.hist[r];
      h.copyWithin(0, 1);
      h[HISTORY - 1] = load[r] === null ? NaN : load[r];
    }
    n.len = Math.min(HISTORY, n.len + 1);
  }
  for (const name of [...state.nodes.keys()]) {
    if (!seen.has(name)) {
      state.nodes.get(name).el.remove();
      state.nodes.delete(name);
    }
  }
  render();
  const took = performance.now() - started;
  window.loadstar.frameMs = took;
  window.loadstar.maxFrameMs = Math.max(window.loadstar.maxFrameMs, took);
  window.loadstar.frames += 1;
  if (!state.firstFrame) {
    state.firstFrame = true;
    performance.mark('loadstar-first-frame');
    window.loadstar.firstFrameMs = performance.now();
  }
  if (state.selected && state.nodes.has(state.selected)) drawTrends(state.selected);
}

function visibleNodes() {
  const f = state.filter;
  const r = state.resource;
  const list = [];
  for (const [name, n] of state.nodes) {
    if (f && !name.includes(f)) continue;
    if (state.staleOnly && !(n.flags & FLAG_STALE)) continue;
    list.push(name);
  }
  if (state.sort === 'name') {
    list.sort();
  } else {
    const sign = state.sort === 'hot' ? -1 : 1;
    const val = (name) => {
      const v = state.nodes.get(name).load[r];
      return v === null ? (sign < 0 ? -1 : 2) : v;
    };
    list.sort((a, b) => sign * (val(a) - val(b)) || (a < b ? -1 : 1));
  }
  return list;
}

function render() {
  const grid = $('grid');
  const list = visibleNodes();
  grid.classList.toggle('big', list.length <= 60);
  grid.classList.toggle('dense', list.length > 1500);
  const big = list.length <= 60;
  const key = list.join('\n');
  if (key !== state.order) {
    state.order = key;
    grid.replaceChildren(...list.map((name) => state.nodes.get(name).el));
  }
  const r = state.resource;
  let stale = 0;
  let hot = 0;
  let sum = 0;
  let counted = 0;
  for (const [name, n] of state.nodes) {
    const v = n.load[r];
    const isStale = (n.flags & FLAG_STALE) !== 0;
    if (isStale) stale++;
    if (v !== null) { sum += v; counted++; if (v >= 0.8) hot++; }
    const shown = `${v}|${n.flags}|${big}|${r}`;
    if (n.shown !== shown) {
      n.shown = shown;
      const t = n.el;
      t.style.backgroundColor = colour(v);
      t.classList.toggle('stale', isStale);
      t.classList.toggle('cordoned', (n.flags & FLAG_CORDONED) !== 0);
      t.title = `${name}\n${RESOURCES[r]}: ${pct(v)}${isStale ? '\nstale' : ''}`;
      t.textContent = big ? `${name} ${v === null ? '' : Math.round(v * 100) + '%'}` : '';
    }
  }
  $('count').textContent = `${list.length} of ${state.nodes.size}`;
  const mean = counted ? sum / counted : null;
  $('summary').textContent = `${state.nodes.size} nodes · ${stale} stale · ${hot} at ≥ 80 % ${RESOURCES[r]} · mean ${pct(mean)}`;
}

async function selectNode(name) {
  if (state.selected && state.nodes.has(state.selected)) state.nodes.get(state.selected).el.classList.remove('selected');
  state.selected = name;
  if (!name) { $('node-panel').hidden = true; return; }
  const n = state.nodes.get(name);
  if (n) n.el.classList.add('selected');
  $('node-panel').hidden = false;
  $('node-name').textContent = name;
  await refreshNode();
}

async function refreshNode() {
  const name = state.selected;
  if (!name) return;
  let d;
  try {
    const resp = await fetch(`/ui/api/nodes/${encodeURIComponent(name)}`);
    if (!resp.ok) { $('node-facts').textContent = (await resp.text()).trim(); return; }
    d = await resp.json();
  } catch (e) {
    $('node-facts').textContent = `could not load: ${e}`;
    return;
  }
  if (state.selected !== name) return;
  const facts = [];
  if (d.logical_cpus !== null) facts.push(`${d.logical_cpus} CPUs`);
  if (d.memory_bytes !== null) facts.push(`${(d.memory_bytes / 2 ** 30).toFixed(1)} GiB`);
  if (d.gpus) facts.push(`${d.gpus} GPUs`);
  facts.push(`${d.pods} pods (${d.measured_pods} measured, ${d.inflight} in flight)`);
  if (d.report_age_seconds !== null) facts.push(`report ${d.report_age_seconds.toFixed(1)} s ago${d.stale ? ' — STALE' : ''}`);
  else facts.push('no agent report');
  if (d.ready === false) facts.push('NotReady');
  if (d.unschedulable) facts.push('cordoned');
  if (d.taints.length) facts.push(`taints: ${d.taints.join(', ')}`);
  const req = Object.entries(d.requested).map(([k, v]) => `${k} ${v}/${d.allocatable[k] ?? '?'}`);
  if (req.length) facts.push(`requested ${req.join(', ')}`);
  $('node-facts').textContent = facts.join(' · ');
  const body = $('node-windows').tBodies[0];
  const rows = d.resources.map((res) => {
    const w = (s) => res.windows.find((x) => x.seconds === s);
    const tr = el('tr');
    tr.append(el('td', res.resource), el('td', pct(res.latest), 'num'));
    const td = el('td');
    const c = el('canvas', null, 'spark');
    c.width = 90; c.height = 22; c.dataset.resource = res.resource;
    td.append(c);
    tr.append(td);
    for (const s of [60, 300, 900]) tr.append(el('td', w(s) ? pct(w(s).mean) : '–', 'num'));
    tr.append(el('td', w(60) ? pct(w(60).stddev) : '–', 'num'), el('td', w(60) ? pct(w(60).p95) : '–', 'num'));
    return tr;
  });
  body.replaceChildren(...rows);
  drawTrends(name);
}

function drawTrends(name) {
  const n = state.nodes.get(name);
  if (!n) return;
  for (const c of document.querySelectorAll('#node-windows canvas.spark')) {
    const r = RESOURCES.indexOf(c.dataset.resource);
    const ctx = c.getContext('2d');
    ctx.clearRect(0, 0, c.width, c.height);
    if (r < 0) continue;
    const h = n.hist[r];
    ctx.strokeStyle = '#36c';
    ctx.lineWidth = 1.2;
    ctx.beginPath();
    let started = false;
    // The samples seen since the page opened, spread over the width (at most HISTORY).
    const first = HISTORY - n.len;
    const span = Math.max(1, n.len - 1);
    for (let i = first; i < HISTORY; i++) {
      if (Number.isNaN(h[i])) { started = false; continue; }
      const x = ((i - first) / span) * (c.width - 1);
      const y = c.height - 1 - h[i] * (c.height - 2);
      if (started) ctx.lineTo(x, y); else ctx.moveTo(x, y);
      started = true;
    }
    ctx.stroke();
  }
}

// ---- decisions ---------------------------------------------------------------------------

function applyDecisions(list) {
  // Newest first; a newer record of the same pod (and source) replaces the older one.
  const key = (d) => `${d.source}|${d.pod}`;
  const fresh = new Set(list.map(key));
  state.decisions = list.concat(state.decisions.filter((d) => !fresh.has(key(d)))).slice(0, MAX_DECISIONS);
  window.loadstar.decisions = state.decisions.length;
  const rows = state.decisions.map((d) => {
    const tr = el('tr');
    tr.dataset.seq = d.seq;
    const time = new Date(d.at_ms).toLocaleTimeString();
    const outcome = el('td');
    outcome.append(el('span', d.outcome.replace('_', ' '), `badge ${d.outcome}`));
    tr.append(el('td', time), el('td', d.pod), outcome, el('td', d.node ?? '–'), el('td', d.error ?? d.summary, 'summary'));
    tr.addEventListener('click', () => showDecision(d));
    return tr;
  });
  $('decisions').tBodies[0].replaceChildren(...rows);
  $('decision-count').textContent = `(${state.decisions.length})`;
}

function showDecision(d) {
  $('decision-panel').hidden = false;
  $('decision-pod').textContent = `${d.pod} (${d.source}, profile ${d.profile}${d.attempt ? `, attempt ${d.attempt}` : ''})`;
  $('decision-summary').textContent = `${d.outcome.replace('_', ' ')}${d.node ? ` → ${d.node}` : ''}. ${d.summary}${d.error ? ` Binding failed: ${d.error}` : ''}`;
  const plugins = d.candidates.length ? d.candidates[0].plugins.map((p) => `${p[0]} ×${p[2]}`) : [];
  const head = el('tr');
  head.append(el('th', 'node'), el('th', 'total'), ...plugins.map((p) => el('th', p)));
  const table = $('decision-candidates');
  table.tHead.replaceChildren(head);
  table.tBodies[0].replaceChildren(...d.candidates.map((c) => {
    const tr = el('tr');
    tr.append(el('td', c.node + (c.stale ? ' (stale)' : '')), el('td', c.total.toFixed(2), 'num'), ...c.plugins.map((p) => el('td', p[1], 'num')));
    return tr;
  }));
  const shown = d.candidates.length;
  const rest = d.feasible - shown;
  const items = d.filtered.map((g) => {
    const li = el('li');
    li.append(el('b', `${g.count} × ${g.plugin}`), document.createTextNode(`: ${g.reason} `));
    const names = g.nodes.slice(0, 20).join(', ') + (g.count > 20 ? ` … ${g.count - Math.min(20, g.nodes.length)} more` : '');
    li.append(el('span', names, 'nodes'));
    return li;
  });
  if (rest > 0) items.unshift(el('li', `${rest} more feasible node(s) scored lower (not kept)`));
  $('decision-filtered').replaceChildren(...items);
}

// ---- profiles ----------------------------------------------------------------------------

async function loadProfiles() {
  try {
    const resp = await fetch('/ui/api/profiles');
    const list = await resp.json();
    $('profiles').replaceChildren(...list.map((p) => {
      const div = el('div', null, 'profile');
      div.append(el('b', p.name), el('div', `window ${p.window_seconds} s · stale nodes: ${p.stale_policy} · nodes per cycle: ${p.percentage_of_nodes_to_score === 0 ? 'adaptive' : p.percentage_of_nodes_to_score + ' %'}`),
        el('div', `filters: ${p.filters.join(', ') || '–'}`),
        el('div', `scores: ${p.scores.map(([n, w]) => `${n} ×${w}`).join(', ') || '–'}`));
      return div;
    }));
  } catch (e) {
    $('profiles').textContent = `could not load profiles: ${e}`;
  }
}

// ---- wiring ------------------------------------------------------------------------------

function connect() {
  const es = new EventSource('/ui/events');
  es.addEventListener('open', () => { $('status').textContent = 'live'; $('status').classList.remove('down'); });
  es.addEventListener('error', () => { $('status').textContent = 'reconnecting…'; $('status').classList.add('down'); });
  es.addEventListener('nodes', (ev) => applyFrame(JSON.parse(ev.data)));
  es.addEventListener('decisions', (ev) => applyDecisions(JSON.parse(ev.data)));
}

function init() {
  $('resource').addEventListener('change', (e) => { state.resource = Number(e.target.value); state.order = ''; render(); });
  $('sort').addEventListener('change', (e) => { state.sort = e.target.value; render(); });
  $('filter').addEventListener('input', (e) => { state.filter = e.target.value.trim(); render(); });
  $('stale-only').addEventListener('change', (e) => { state.staleOnly = e.target.checked; render(); });
  $('grid').addEventListener('click', (e) => { const name = e.target.dataset && e.target.dataset.name; if (name) selectNode(name); });
  $('node-close').addEventListener('click', () => selectNode(null));
  $('decision-close').addEventListener('click', () => { $('decision-panel').hidden = true; });
  setInterval(() => { if (state.selected) refreshNode(); }, 3000);
  loadProfiles();
  connect();
}

init();

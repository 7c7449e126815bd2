/* console.js - the taskmill console, one page with a view per hash route:
 *   #/                              dashboard: fleet history charts, tasks,
 *                                   the send form
 *   #/tasks/NAME                    one task: figures and history charts
 *   #/tasks/NAME/dead-letters       dead-letter search and bulk actions
 *   #/tasks/NAME/dead-letters/ID    a dead letter's page
 *   #/tasks/NAME/messages/ID        a message's page
 *   #/tasks/NAME/delayed            delayed messages: run now, delete
 *   #/daemons                       every daemon on the broker
 *   #/schedules                     the schedules
 * It polls /api/v1/tasks every 2 s, and only what the view on screen
 * shows (history at most every 30 s); nothing runs in the daemon for it
 * when no page is open. An endpoint the daemon does not have (404 "not
 * found") is noted as not available and asked again at most once a
 * minute. Text from the daemon (bodies, errors, names) only ever goes in
 * through textContent, never as HTML.
 * (One file over 800 lines: the build embeds exactly index.html,
 * console.css and console.js.) */
'use strict';

const REFRESH_MS = 2000;
const HISTORY_MS = 30000;
const ABSENT_RETRY_MS = 60000;
const PREVIEW_CHARS = 300;
const TOKEN_KEY = 'taskmill.token';
const READONLY_WHY = 'read-only: set http.token in the daemon\'s ' +
  'configuration to allow changes';
const NOBODIES_WHY = 'Message bodies are not shown: without http.token ' +
  'the daemon serves aggregate figures only. Set http.token in its ' +
  'configuration to browse them.';
const SVGNS = 'http://www.w3.org/2000/svg';

const state = { tasks: [], writable: false, schemas: null, needToken: false,
                route: { view: 'dashboard' }, absent: {}, historyAt: {},
                loaded: false, dlqSeq: 0 };

function $(id) { return document.getElementById(id); }

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function button(text, cls, onclick) {
  const b = el('button', text, cls);
  b.type = 'button';
  b.addEventListener('click', onclick);
  return b;
}

function link(text, href, cls) {
  const a = el('a', text, cls);
  a.href = href;
  return a;
}

function showError(text) {
  const p = $('error');
  p.textContent = text || '';
  p.hidden = !text;
}

/* NotThere is the error of an endpoint this daemon does not have. */
class NotThere extends Error {}

/* api calls the admin API; resolves to the parsed JSON answer, rejects
 * with an Error whose text is the daemon's (a NotThere for a path the
 * daemon does not know). 401 asks for the token. With meta, meta.link is
 * set to the answer's Link header. */
async function api(method, path, body, meta) {
  const headers = { Accept: 'application/json' };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = 'Bearer ' + token;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(path, { method, headers, body,
                                credentials: 'omit', cache: 'no-store' });
  let j = null;
  try { j = await r.json(); } catch (e) { j = null; }
  if (meta) meta.link = r.headers.get('Link');
  if (r.status === 401 || (r.status === 403 && j && j.error === 'wrong token')) {
    state.needToken = true;
    $('token-form').hidden = false;
    const why = r.status === 401
      ? 'This daemon needs its API token.'
      : 'The token was refused: wrong token.';
    throw new Error(why);
  }
  if (r.status === 404 && j && j.error === 'not found')
    throw new NotThere('not available from this daemon');
  if (!r.ok) {
    throw new Error((j && j.error) ? j.error : 'HTTP ' + r.status);
  }
  return j;
}

/* optional GETs an endpoint that newer daemons have: null (and no new
 * request for a minute) when this one answers that it has no such path. */
async function optional(key, path) {
  const a = state.absent[key];
  if (a && Date.now() - a < ABSENT_RETRY_MS) return null;
  try {
    const j = await api('GET', path);
    delete state.absent[key];
    return j;
  } catch (e) {
    if (!(e instanceof NotThere)) throw e;
    state.absent[key] = Date.now();
    return null;
  }
}

function taskPath(name, suffix) {
  return '/api/v1/tasks/' + encodeURIComponent(name) + (suffix || '');
}

function fmt(v, digits) {
  if (v === null || v === undefined) return '–';
  if (typeof v === 'number' && digits !== undefined) return v.toFixed(digits);
  return String(v);
}

/* toMs reads a time as the API gives it: epoch seconds or milliseconds,
 * or an RFC 3339 text. NaN when it is none of these. */
function toMs(v) {
  if (typeof v === 'number') return v < 1e11 ? v * 1000 : v;
  if (typeof v === 'string' && v !== '') {
    if (/^[0-9]+$/.test(v)) return toMs(Number(v));
    return Date.parse(v);
  }
  return NaN;
}

function when(v) {
  const ms = toMs(v);
  return Number.isFinite(ms) ? new Date(ms).toLocaleString() : fmt(v);
}

function ago(v) {
  const ms = toMs(v);
  if (!Number.isFinite(ms)) return fmt(v);
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  return s < 120 ? s + ' s ago' : Math.round(s / 60) + ' min ago';
}

/* pick returns the first of the keys o has (the API's names may vary
 * between versions: started, started_ms, ...). */
function pick(o, keys) {
  for (const k of keys) if (o && o[k] !== undefined && o[k] !== null) return o[k];
  return undefined;
}

/* row appends a row to table's body (or to into): the first cell a row
 * header, each cell labelled with its column's header for the narrow
 * layout. Cells are text, a Node, or [content, class]. */
function row(table, cells, data, into) {
  const heads = Array.from(table.tHead.rows[0].cells).map(c => c.textContent);
  const tr = el('tr');
  Object.assign(tr.dataset, data || {});
  cells.forEach((c, i) => {
    const [content, cls] = Array.isArray(c) ? c : [c, ''];
    const cell = el(i === 0 ? 'th' : 'td', null, cls || null);
    if (i === 0) cell.scope = 'row';
    else cell.dataset.label = heads[i].replace(/\u00ad/g, '');
    if (content instanceof Node) cell.appendChild(content);
    else cell.textContent = fmt(content);
    tr.appendChild(cell);
  });
  (into || table.tBodies[0]).appendChild(tr);
  return tr;
}

/* prettyBody shows a JSON body indented, anything else as it is. */
function prettyBody(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) {
    return String(text);
  }
}

/* ---- the chart: SVG drawn here, no library ---- */

const CH = { w: 600, h: 230, l: 52, r: 12, t: 12, b: 40 };
const MAX_BARS = 150;
const SERIES = [['success', 'processed (success)'], ['failed', 'failed']];
const RANGES = { '1h': 3600e3, '24h': 86400e3, '7d': 7 * 86400e3 };

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

/* niceMax rounds a count up to 1, 2 or 5 times a power of ten. */
function niceMax(v) {
  if (v <= 4) return 4;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function clock(ms, range) {
  const d = new Date(ms);
  const hm = String(d.getHours()).padStart(2, '0') + ':' +
    String(d.getMinutes()).padStart(2, '0');
  return range === '7d' ? (d.getMonth() + 1) + '/' + d.getDate() : hm;
}

/* drawChart fills fig with the chart of one range: axes with ticks and
 * titles, gridlines, a line per series, a legend, and the values of the
 * point under the pointer (or chosen with the arrow keys) in a tooltip
 * and in the readout line below. hist is the history answer, or null when
 * there is none; without any count the chart says "no data yet". */
function drawChart(fig, title, range, hist) {
  const span = RANGES[range];
  const step = (hist && hist.step_seconds) || (range === '7d' ? 3600 : 60);
  const raw = ((hist && hist.points) || []).map(p => ({
    t: toMs(p.t), success: +p.success || 0, failed: +p.failed || 0,
    dead_lettered: +p.dead_lettered || 0, retried: +p.retried || 0,
  })).filter(p => Number.isFinite(p.t)).sort((a, b) => a.t - b.t);
  const any = raw.some(p => p.success || p.failed || p.dead_lettered ||
                            p.retried);
  const t1 = Math.max(Date.now(), raw.length ? raw[raw.length - 1].t : 0);
  const t0 = t1 - span;
  /* at most MAX_BARS points across: the API's steps are summed into
   * buckets of k steps (24 h of minutes: 10 minutes each) */
  const k = Math.max(1, Math.ceil(span / (step * 1000) / MAX_BARS));
  const bucket = k * step * 1000;
  const inRange = raw.filter(p => p.t >= t0);
  const shown = k === 1 ? inRange : [];
  for (const p of k === 1 ? [] : inRange) {
    const b = t0 + Math.floor((p.t - t0) / bucket) * bucket;
    let q = shown[shown.length - 1];
    if (!q || q.t !== b) {
      q = { t: b, success: 0, failed: 0, dead_lettered: 0, retried: 0 };
      shown.push(q);
    }
    for (const f of ['success', 'failed', 'dead_lettered', 'retried'])
      q[f] += p[f];
  }
  const max = niceMax(Math.max(0, ...shown.map(p => Math.max(p.success,
                                                             p.failed))));
  const pw = CH.w - CH.l - CH.r, ph = CH.h - CH.t - CH.b;
  const X = t => CH.l + Math.max(0, Math.min(1, (t - t0) / span)) * pw;
  const Y = v => CH.t + ph - (v / max) * ph;
  const secs = k * step;
  const per = secs % 3600 === 0 ? (secs === 3600 ? 'hour' : secs / 3600 + ' hours')
    : secs % 60 === 0 ? (secs === 60 ? 'minute' : secs / 60 + ' minutes')
    : secs + ' s';

  fig.replaceChildren();
  fig.dataset.state = !hist ? 'unavailable' : any ? 'data' : 'empty';
  fig.appendChild(el('figcaption', title));
  const s = svg('svg', { viewBox: `0 0 ${CH.w} ${CH.h}`, role: 'img',
                         tabindex: '0', focusable: 'true' });
  s.setAttribute('aria-label', title + ': ' + (any
    ? 'use the left and right arrow keys for the values'
    : 'no data yet'));
  /* the count axis: gridlines and labels */
  for (let i = 0; i <= 4; i++) {
    const v = max * i / 4, y = Y(v);
    s.appendChild(svg('line', { x1: CH.l, x2: CH.l + pw, y1: y, y2: y,
                                class: 'grid' }));
    s.appendChild(svg('text', { x: CH.l - 6, y: y + 4, 'text-anchor': 'end',
                                class: 'tick y-tick' }, String(v)));
  }
  /* the time axis: a tick every quarter of the range */
  for (let i = 0; i <= 4; i++) {
    const t = t0 + span * i / 4, x = X(t);
    s.appendChild(svg('line', { x1: x, x2: x, y1: CH.t + ph, y2: CH.t + ph + 4,
                                class: 'axis' }));
    s.appendChild(svg('text', { x, y: CH.t + ph + 16, class: 'tick x-tick',
                                'text-anchor': i === 0 ? 'start'
                                  : i === 4 ? 'end' : 'middle' },
                      clock(t, range)));
  }
  s.appendChild(svg('line', { x1: CH.l, x2: CH.l, y1: CH.t, y2: CH.t + ph,
                              class: 'axis y-axis' }));
  s.appendChild(svg('line', { x1: CH.l, x2: CH.l + pw, y1: CH.t + ph,
                              y2: CH.t + ph, class: 'axis x-axis' }));
  s.appendChild(svg('text', { x: CH.l + pw / 2, y: CH.h - 4,
                              'text-anchor': 'middle', class: 'axis-title' },
                    'time (local)'));
  s.appendChild(svg('text', { x: 12, y: CH.t + ph / 2, 'text-anchor': 'middle',
                              class: 'axis-title',
                              transform: `rotate(-90 12 ${CH.t + ph / 2})` },
                    'count per ' + per));
  if (any) {
    for (const [key] of SERIES) {
      const d = shown.map((p, i) => (i ? 'L' : 'M') + X(p.t).toFixed(1) +
                          ' ' + Y(p[key]).toFixed(1)).join(' ');
      if (d) s.appendChild(svg('path', { d, class: 'series ' + key }));
    }
  } else {
    s.appendChild(svg('text', { x: CH.l + pw / 2, y: CH.t + ph / 2,
                                'text-anchor': 'middle',
                                class: 'empty-text' }, 'no data yet'));
  }
  fig.appendChild(s);
  const legend = el('ul', null, 'legend');
  for (const [key, label] of SERIES) {
    const li = el('li');
    li.append(el('span', null, 'swatch ' + key), label);
    legend.appendChild(li);
  }
  fig.appendChild(legend);
  const readout = el('p', any ? 'Point at the chart, or focus it and use ' +
    'the arrow keys, for the values.' : 'no data yet', 'readout');
  readout.setAttribute('aria-live', 'polite');
  fig.appendChild(readout);
  if (!any || shown.length === 0) return;

  /* hover and keyboard: one chosen point */
  const tip = svg('g', { class: 'tip' });
  let cur = -1;
  const choose = i => {
    cur = Math.max(0, Math.min(shown.length - 1, i));
    const p = shown[cur], x = X(p.t);
    const lines = [new Date(p.t).toLocaleString(),
                   'processed ' + p.success, 'failed ' + p.failed,
                   'dead-lettered ' + p.dead_lettered, 'retried ' + p.retried];
    tip.replaceChildren(svg('line', { x1: x, x2: x, y1: CH.t, y2: CH.t + ph,
                                      class: 'cursor' }));
    for (const [key] of SERIES)
      tip.appendChild(svg('circle', { cx: x, cy: Y(p[key]), r: 3.5,
                                      class: 'dot ' + key }));
    const bw = 150, bh = 14 * lines.length + 8;
    const bx = x + bw + 10 > CH.l + pw ? x - bw - 8 : x + 8;
    tip.appendChild(svg('rect', { x: bx, y: CH.t + 2, width: bw, height: bh,
                                  rx: 3 }));
    lines.forEach((l, k) => tip.appendChild(svg('text', {
      x: bx + 6, y: CH.t + 16 + 14 * k }, l)));
    if (!tip.parentNode) s.appendChild(tip);
    readout.textContent = lines[0] + ': ' + lines.slice(1).join(', ');
    fig.dataset.point = String(cur);
  };
  const hide = () => { tip.remove(); };
  s.addEventListener('pointermove', ev => {
    const r = s.getBoundingClientRect();
    const t = t0 + ((ev.clientX - r.left) * CH.w / r.width - CH.l) / pw * span;
    let best = 0;
    shown.forEach((p, i) => {
      if (Math.abs(p.t - t) < Math.abs(shown[best].t - t)) best = i;
    });
    choose(best);
  });
  s.addEventListener('pointerleave', () => {
    if (document.activeElement !== s) hide();
  });
  s.addEventListener('focus', () => choose(cur < 0 ? shown.length - 1 : cur));
  s.addEventListener('blur', hide);
  s.addEventListener('keydown', ev => {
    const moves = { ArrowLeft: cur - 1, ArrowRight: cur + 1, Home: 0,
                    End: shown.length - 1 };
    if (!(ev.key in moves)) return;
    ev.preventDefault();
    choose(moves[ev.key]);
  });
}

/* loadHistory draws the two charts (1 h and 24 h) of the fleet, or of
 * one task, at most every HISTORY_MS unless forced. */
async function loadHistory(task, ids, note, force) {
  const key = task || '';
  if (!force && Date.now() - (state.historyAt[key] || 0) < HISTORY_MS) return;
  state.historyAt[key] = Date.now();
  const who = task ? 'task ' + task : 'all tasks';
  let unavailable = false;
  for (const [range, id] of [['1h', ids[0]], ['24h', ids[1]]]) {
    let h = null;
    try {
      h = await optional('history', '/api/v1/history?range=' + range +
                         (task ? '&task=' + encodeURIComponent(task) : ''));
      unavailable = unavailable || h === null;
    } catch (e) {
      $(note).textContent = 'History: ' + e.message;
      state.historyAt[key] = 0;
    }
    drawChart($(id), (range === '1h' ? 'Last hour' : 'Last 24 hours') +
              ', ' + who, range, h);
  }
  if (unavailable)
    $(note).textContent = 'History is not available from this daemon.';
  else if ($(note).textContent.startsWith('History is not'))
    $(note).textContent = '';
}

/* ---- tasks ---- */

function renderSummary(j) {
  $('broker').textContent = j.broker.kind + ' ' + j.broker.url + ' ';
  $('broker').appendChild(el('span', j.broker.connected ? 'up' : 'down',
                             j.broker.connected ? 'up' : 'down'));
  $('pool').textContent = j.pool.kind + ', ' + j.pool.busy + ' of ' +
    j.pool.size + ' busy';
  $('updated').textContent = new Date().toLocaleTimeString();
}

function outcomesText(t) {
  return Object.entries(t.outcomes || {}).filter(([, n]) => n > 0)
    .map(([k, n]) => k + ' ' + n).join(', ') || '–';
}

/* renderTasks rebuilds the rows, and puts in the page only those that
 * changed (a row the pointer or a click is on stays while its figures
 * do); a focused button or link of a changed row keeps the focus. */
function renderTasks(j) {
  const table = $('tasks');
  const body = table.tBodies[0];
  const f = document.activeElement;
  const keep = f && table.contains(f) ? f.dataset.focus : null;
  const fresh = document.createElement('tbody');
  for (const t of j.tasks) {
    const name = link(t.name, '#/tasks/' + encodeURIComponent(t.name));
    name.dataset.focus = 'name ' + t.name;
    const dead = link(fmt(t.dead_letters), '#/tasks/' +
                      encodeURIComponent(t.name) + '/dead-letters');
    dead.dataset.focus = 'dead ' + t.name;
    dead.setAttribute('aria-label', 'dead letters of ' + t.name + ': ' +
                      fmt(t.dead_letters));
    row(table, [name, [fmt(t.rate_1s, 1), 'rate1'], [fmt(t.rate_60s, 2), 'rate60'],
                [fmt(t.p50_ms, 1), 'p50'], [fmt(t.p99_ms, 1), 'p99'],
                [t.inflight, 'inflight'], [t.queue_depth, 'queue'],
                [t.pending, 'pending'], [t.scheduled, 'scheduled'],
                [dead, 'dead'], [outcomesText(t), 'outcomes'],
                [t.circuit, 'circuit'], [pauseCell(t), 'intake']],
        { task: t.name }, fresh);
  }
  const rows = Array.from(fresh.rows);
  rows.forEach((tr, i) => {
    const old = body.rows[i];
    if (!old) body.appendChild(tr);
    else if (old.outerHTML !== tr.outerHTML) old.replaceWith(tr);
  });
  while (body.rows.length > rows.length) body.deleteRow(-1);
  if (keep && !table.contains(document.activeElement)) {
    const again = Array.from(table.querySelectorAll('[data-focus]'))
      .find(e => e.dataset.focus === keep);
    if (again) again.focus();
  }
}

/* pauseCell shows whether the task's intake runs, with the button that
 * flips it (a write: not shown without a token, as the others). */
function pauseCell(t) {
  const frag = document.createDocumentFragment();
  frag.appendChild(el('span', t.paused ? 'paused ' : 'running ',
                      t.paused ? 'paused' : 'running'));
  const action = t.paused ? 'resume' : 'pause';
  const b = button(t.paused ? 'Resume' : 'Pause', 'write pause',
                   () => setPaused(t.name, action));
  b.dataset.task = t.name;
  b.dataset.action = action;
  b.dataset.focus = 'pause ' + t.name;
  b.setAttribute('aria-label', b.textContent + ' task ' + t.name);
  frag.appendChild(b);
  return frag;
}

async function setPaused(name, action) {
  try {
    await api('POST', taskPath(name, '/' + action));
    showError('');
  } catch (e) {
    showError(action + ' ' + name + ': ' + e.message);
  }
  refresh();
}

function renderTask(name) {
  const t = state.tasks.find(x => x.name === name);
  const dl = $('task-figures');
  dl.replaceChildren();
  if (!t) {
    dl.append(el('dt', 'Task'), el('dd', 'no task ' + name + ' in this ' +
                                    'daemon\'s configuration'));
    return;
  }
  const lim = t.limits || {};
  const figs = [['Intake', t.paused ? 'paused' : 'running'],
    ['Rate 1 s / 60 s', fmt(t.rate_1s, 1) + ' / ' + fmt(t.rate_60s, 2)],
    ['p50 / p99 ms', fmt(t.p50_ms, 1) + ' / ' + fmt(t.p99_ms, 1)],
    ['In flight', fmt(t.inflight)], ['Queue', fmt(t.queue_depth)],
    ['Pending', fmt(t.pending)], ['Scheduled', fmt(t.scheduled)],
    ['Dead letters', fmt(t.dead_letters)], ['Outcomes', outcomesText(t)],
    ['Circuit', fmt(t.circuit)], ['Queue name', fmt(t.queue)],
    ['Limits', Object.entries(lim).map(([k, v]) => k + ' ' + v).join(', ') ||
      '–']];
  for (const [k, v] of figs) dl.append(el('dt', k), el('dd', v));
}

function fillSelect(sel, names) {
  const keep = sel.value;
  const have = Array.from(sel.options).map(o => o.value);
  if (have.join('\n') === names.join('\n')) return;
  sel.replaceChildren();
  for (const n of names) sel.appendChild(el('option', n));
  if (names.includes(keep)) sel.value = keep;
}

function setWritable(w) {
  state.writable = w;
  document.body.classList.toggle('readonly', !w);
  const p = $('readonly');
  p.textContent = w ? '' : 'Changes are disabled and message bodies are ' +
    'not shown: ' + READONLY_WHY + '.';
  p.hidden = w;
}

async function refresh() {
  try {
    const j = await api('GET', '/api/v1/tasks');
    state.tasks = j.tasks;
    state.needToken = false;
    $('token-form').hidden = true;
    showError('');
    const was = state.loaded && state.writable;
    setWritable(j.writable);
    renderSummary(j);
    const names = j.tasks.map(t => t.name);
    fillSelect($('dlq-task'), names);
    const sendFirst = $('send-task').options.length === 0;
    fillSelect($('send-task'), names);
    if (sendFirst) prefill();
    const first = !state.loaded || was !== state.writable;
    state.loaded = true;
    await poll(j, first);
  } catch (e) {
    showError(e.message);
  }
}

/* poll refreshes what the view on screen shows: the periodic part, and
 * with first the part loaded once when the view opens. */
async function poll(j, first) {
  const r = state.route;
  if (r.view === 'dashboard') {
    renderTasks(j);
    await loadHistory(null, ['chart-1h', 'chart-24h'], 'history-note', first);
  } else if (r.view === 'task') {
    renderTask(r.task);
    await loadHistory(r.task, ['chart-task-1h', 'chart-task-24h'],
                      'task-history-note', first);
  } else if (r.view === 'daemons') {
    await loadDaemons();
  } else if (r.view === 'schedules') {
    await loadSchedules();
  } else if (first && r.view === 'dlq') {
    await loadDeadLetters();
  } else if (first && r.view === 'delayed') {
    await loadDelayed();
  } else if (first && r.view === 'message') {
    await loadMessage();
  }
}

/* ---- dead letters: search, bulk actions, one entry ---- */

function dlqTask() { return state.route.task; }

/* dlqFilter is the search form's query: q, since, until (RFC 3339). */
function dlqFilter() {
  const f = new URLSearchParams();
  const q = $('dlq-q').value.trim();
  if (q) f.set('q', q);
  for (const k of ['since', 'until']) {
    const v = $('dlq-' + k).value;
    if (v) f.set(k, new Date(v).toISOString());
  }
  return f;
}

function dlqPath(suffix, filter) {
  const qs = filter && filter.toString();
  return taskPath(dlqTask(), '/dead-letters' + (suffix || '')) +
    (qs ? '?' + qs : '');
}

/* nextAfter is the after= cursor of a Link rel="next" header, or null
 * on the last page. */
function nextAfter(link) {
  const m = /<([^>]*)>;\s*rel="next"/.exec(link || '');
  if (!m) return null;
  return new URL(m[1], location.href).searchParams.get('after');
}

/* filters tells whether the daemon applies the search: asked for a text
 * no entry holds, a daemon that filters answers an empty list; one that
 * ignores q answers its newest entries. Bulk actions on a search are
 * offered only then, so that they never act on more than the result. */
async function filters() {
  const f = new URLSearchParams({ q: 'no-entry-holds-' +
    Math.random().toString(36).slice(2) + Date.now(), limit: '1' });
  const l = await api('GET', dlqPath('', f));
  return Array.isArray(l) && l.length === 0;
}

/* loadDeadLetters shows a page of the task's dead letters (the search's
 * result), newest first; with after, the page older than that entry. */
async function loadDeadLetters(after) {
  const task = dlqTask();
  if (!task) return;
  /* only the latest call shows its answer: an older one answered late
   * (the view opened, then a search) does not overwrite it */
  const seq = ++state.dlqSeq;
  $('dlq-task').value = task;
  $('dlq-h').textContent = 'Dead letters of ' + task;
  const list = $('dlq');
  $('dlq-older').hidden = true;
  if (!state.writable) {
    /* no token: the daemon answers 403 to any request for bodies */
    list.replaceChildren();
    $('dlq-status').textContent = NOBODIES_WHY;
    return;
  }
  const filter = dlqFilter();
  const searching = filter.toString() !== '';
  try {
    const f = new URLSearchParams(filter);
    f.set('limit', '100');
    if (typeof after === 'string') f.set('after', after);
    const meta = {};
    const entries = await api('GET', dlqPath('', f), undefined, meta);
    const older = nextAfter(meta.link);
    let note = '';
    const filtered = searching && (entries.length === 0 || await filters());
    if (searching && !filtered)
      note = ' Search is not available from this daemon: all entries ' +
        'are shown and the bulk buttons act on all of them.';
    if (seq !== state.dlqSeq) return;
    list.replaceChildren();
    $('dlq-status').textContent = (entries.length === 0
      ? 'No dead letters' + (searching ? ' match the search' : '') +
        (typeof after === 'string' ? ' older.' : '.')
      : entries.length + ' dead letter(s)' +
        (filtered ? ' matching the search' : '') + ', newest first' +
        (older ? '; older ones on the next page.' : '.')) + note;
    $('dlq-older').hidden = !older;
    $('dlq-older').dataset.after = older || '';
    for (const d of entries) list.appendChild(deadLetterItem(task, d));
  } catch (e) {
    if (seq !== state.dlqSeq) return;
    list.replaceChildren();
    $('dlq-status').textContent = e.message;
  }
}

function deadLetterItem(task, d) {
  const li = el('li');
  li.dataset.id = d.id;
  const head = el('div');
  const open = link(d.id, '#/tasks/' + encodeURIComponent(task) +
                    '/dead-letters/' + encodeURIComponent(d.id), 'open');
  open.setAttribute('aria-label', 'open dead letter ' + d.id);
  head.appendChild(open);
  head.appendChild(el('span', ' · attempts ' + d.attempts + ' · ' +
    (d.failed_at || '') + ' · origin ' + (d.origin_id || '–'), 'note'));
  li.appendChild(head);
  li.appendChild(el('div', 'Error: ' + d.error, 'dlq-error'));
  const text = String(d.body);
  const cut = text.length > PREVIEW_CHARS || d.truncated;
  li.appendChild(el('pre', text.slice(0, PREVIEW_CHARS) + (cut ? ' …' : ''),
                    'dlq-body'));
  const bar = el('div', null, 'bar');
  if (cut)
    bar.appendChild(link('Whole body (' + d.body_bytes + ' bytes)',
                         open.href, 'whole'));
  bar.append(
    button('Replay', 'write replay', () => move('POST',
      '/' + encodeURIComponent(d.id) + '/replay', 'replayed')),
    button('Purge', 'write danger purge', () => move('DELETE',
      '/' + encodeURIComponent(d.id), 'purged')));
  for (const b of bar.querySelectorAll('button'))
    b.setAttribute('aria-label', b.textContent + ' dead letter ' + d.id);
  li.appendChild(bar);
  return li;
}

/* move replays or purges (one entry, or the search's result with
 * filter), then shows the list again with what the daemon answered. */
async function move(method, suffix, key, filter) {
  try {
    const j = await api(method, dlqPath(suffix, filter));
    await loadDeadLetters();
    $('dlq-status').textContent = key + ' ' + j[key] + '. ' +
      $('dlq-status').textContent;
  } catch (e) {
    $('dlq-status').textContent = e.message;
  }
}

/* countMatches counts the search's result, following the pages. */
async function countMatches(filter) {
  let n = 0, after = null;
  for (let pages = 0; pages < 100; pages++) {
    const f = new URLSearchParams(filter);
    f.set('limit', '1000');
    if (after) f.set('after', after);
    const meta = {};
    const l = await api('GET', dlqPath('', f), undefined, meta);
    n += l.length;
    after = nextAfter(meta.link);
    if (!after) return { n, more: false };
  }
  return { n, more: true };
}

/* bulk asks, naming the count, then replays or purges the search's
 * result (all entries without a search). */
async function bulk(method, suffix, key, verb) {
  const task = dlqTask();
  let filter = dlqFilter();
  try {
    if (filter.toString() !== '' && !(await filters())) filter = null;
    const c = await countMatches(filter || new URLSearchParams());
    const what = (c.more ? 'at least ' : '') + c.n + ' dead letter(s) of ' +
      'task ' + task + (filter && filter.toString() ? ' matching the search'
      : ' (all of them)');
    if (c.n === 0) {
      $('dlq-status').textContent = 'No dead letters to ' +
        verb.toLowerCase() + '.';
      return;
    }
    if (!confirm(verb + ' ' + what + '?' + (method === 'DELETE'
      ? ' This cannot be undone.' : ''))) return;
    await move(method, suffix, key, filter || undefined);
  } catch (e) {
    $('dlq-status').textContent = e.message;
  }
}

/* ---- one message ---- */

/* traceId is the trace id of a W3C traceparent, or null. */
function traceId(tp) {
  const m = /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(tp || '');
  return m ? m[1] : null;
}

const MSG_SKIP = ['body', 'error', 'progress', 'result', 'truncated'];

function renderMessage(kind, task, m) {
  $('msg-h').textContent = (kind === 'dlq' ? 'Dead letter ' : 'Message ') +
    m.id + ' of ' + task;
  const dl = $('msg-meta');
  dl.replaceChildren();
  dl.append(el('dt', 'Task'), el('dd', task));
  for (const [k, v] of Object.entries(m)) {
    if (MSG_SKIP.includes(k) || v === null || v === undefined) continue;
    const text = typeof v === 'object' ? JSON.stringify(v) : String(v);
    dl.append(el('dt', k.replace(/_/g, ' ')), el('dd', text, 'meta-' + k));
  }
  const tid = traceId(m.traceparent);
  if (tid) dl.append(el('dt', 'trace id'), el('dd', tid, 'meta-trace-id'));
  $('msg-error').textContent = m.error || '';
  $('msg-error-box').hidden = !m.error;
  const extra = $('msg-extra');
  extra.replaceChildren();
  for (const k of ['progress', 'result']) {
    if (m[k] === undefined || m[k] === null) continue;
    extra.append(el('h3', k[0].toUpperCase() + k.slice(1)),
                 el('pre', typeof m[k] === 'string' ? m[k]
                   : JSON.stringify(m[k], null, 2), 'msg-' + k));
  }
  $('msg-body').textContent = prettyBody(m.body);
  $('msg-actions').hidden = kind !== 'dlq';
  $('msg-delayed-actions').hidden = kind !== 'delayed';
  $('msg-content').hidden = false;
}

/* loadMessage shows the route's message: a dead letter from its own URL;
 * another message from .../messages/ID where the daemon has it, else
 * found among the delayed messages or the dead letters. */
async function loadMessage() {
  const { task, id, kind } = state.route;
  const base = '#/tasks/' + encodeURIComponent(task);
  $('msg-back').href = base + (kind === 'dlq' ? '/dead-letters' : '');
  $('msg-back').textContent = kind === 'dlq' ? 'Back to the dead letters'
    : 'Back to the task';
  $('msg-h').textContent = 'Message ' + id + ' of ' + task;
  $('msg-content').hidden = true;
  if (!state.writable) {
    $('msg-status').textContent = NOBODIES_WHY;
    return;
  }
  $('msg-status').textContent = 'Loading…';
  const enc = encodeURIComponent(id);
  try {
    let m = null, k = kind;
    if (kind === 'dlq') {
      m = await api('GET', taskPath(task, '/dead-letters/' + enc));
    } else {
      m = await optional('message', taskPath(task, '/messages/' + enc));
      if (!m) {
        const l = await optional('delayed', taskPath(task, '/delayed'));
        m = (l || []).find(x => x.id === id) || null;
        if (m) k = 'delayed';
      }
      if (!m) {
        try {
          m = await api('GET', taskPath(task, '/dead-letters/' + enc));
          k = 'dlq';
        } catch (e) { m = null; }
      }
    }
    if (!m) throw new Error('message ' + id + ' not found, or not ' +
                            'available from this daemon');
    renderMessage(k, task, m);
    $('msg-status').textContent = '';
  } catch (e) {
    $('msg-status').textContent = e.message;
  }
}

/* messageAction acts on the message on screen: replay or purge a dead
 * letter (where is "dead-letters"), run now or delete a delayed one
 * ("delayed"); done says what happened. A delete asks first. */
async function messageAction(where, method, suffix, done) {
  const { task, id } = state.route;
  if (method === 'DELETE' && !confirm((where === 'delayed'
    ? 'Delete delayed message ' : 'Purge dead letter ') + id +
    '? This cannot be undone.')) return;
  try {
    await api(method, taskPath(task, '/' + where + '/' +
                               encodeURIComponent(id) + suffix));
    $('msg-status').textContent = done + '.';
    $('msg-actions').hidden = true;
    $('msg-delayed-actions').hidden = true;
  } catch (e) {
    $('msg-status').textContent = e.message;
  }
}

/* ---- delayed messages ---- */

async function loadDelayed() {
  const task = state.route.task;
  $('delayed-h').textContent = 'Delayed messages of ' + task;
  const table = $('delayed');
  table.tBodies[0].replaceChildren();
  if (!state.writable) {
    $('delayed-status').textContent = NOBODIES_WHY;
    table.hidden = true;
    return;
  }
  try {
    const l = await optional('delayed', taskPath(task, '/delayed'));
    table.hidden = !l || l.length === 0;
    if (!l) {
      $('delayed-status').textContent = 'Delayed messages are not ' +
        'available from this daemon.';
      return;
    }
    $('delayed-status').textContent = l.length === 0
      ? 'No delayed messages.' : l.length + ' delayed message(s).';
    for (const m of l) {
      const enc = encodeURIComponent(m.id);
      const acts = document.createDocumentFragment();
      acts.append(
        button('Run now', 'write run-now', () => delayedAction(
          'POST', '/delayed/' + enc + '/run-now', 'Run ' + m.id + ' now')),
        ' ',
        button('Delete', 'write danger delete', () => delayedAction(
          'DELETE', '/delayed/' + enc, 'Delete delayed message ' + m.id +
          '? This cannot be undone.')));
      const text = String(m.body);
      row(table, [link(m.id, '#/tasks/' + encodeURIComponent(task) +
                       '/messages/' + enc),
                  when(m.due_ms !== undefined ? m.due_ms : m.due),
                  [text.slice(0, PREVIEW_CHARS) +
                   (text.length > PREVIEW_CHARS || m.truncated ? ' …' : ''),
                   'body'],
                  [acts, 'actions']], { id: m.id });
    }
  } catch (e) {
    $('delayed-status').textContent = e.message;
  }
}

async function delayedAction(method, suffix, question) {
  if (method === 'DELETE' && !confirm(question)) return;
  try {
    await api(method, taskPath(state.route.task, suffix));
    await loadDelayed();
  } catch (e) {
    $('delayed-status').textContent = e.message;
  }
}

/* ---- daemons ---- */

/* load resolves to what get does; on an error it shows the error in the
 * status line (after what) and resolves to undefined. */
async function load(status, what, get) {
  try {
    return await get();
  } catch (e) {
    $(status).textContent = what + ': ' + e.message;
    return undefined;
  }
}

async function loadDaemons() {
  const table = $('daemons');
  const j = await load('daemons-status', 'Daemons',
                       () => optional('daemons', '/api/v1/daemons'));
  if (j === undefined) return;
  if (j === null) {
    table.hidden = true;
    $('daemons-status').textContent = 'The list of daemons is not ' +
      'available from this daemon.';
    return;
  }
  const list = Array.isArray(j) ? j : (j.daemons || []);
  table.hidden = list.length === 0;
  table.tBodies[0].replaceChildren();
  for (const d of list) {
    const pool = d.pool || {};
    row(table, [fmt(pick(d, ['instance', 'id'])), fmt(d.host), fmt(d.pid),
                fmt(d.version),
                when(pick(d, ['started', 'started_ms', 'started_at'])),
                fmt(pick(d, ['generation', 'config_generation'])),
                fmt(pool.busy) + ' / ' + fmt(pool.size) +
                  (pool.kind ? ' (' + pool.kind + ')' : ''),
                ago(pick(d, ['last_seen', 'last_seen_ms', 'last_seen_at']))],
        { instance: String(pick(d, ['instance', 'id'])) });
  }
  $('daemons-status').textContent = list.length + ' daemon(s) on this broker.';
}

/* ---- schedules ---- */

async function loadSchedules() {
  const list = await load('sched-status', 'Schedules',
                          () => api('GET', '/api/v1/schedules'));
  if (list === undefined) return;
  const rows = Array.isArray(list) ? list : [];
  const table = $('schedules');
  table.tBodies[0].replaceChildren();
  for (const s of rows) {
    row(table, [s.name, s.task, s.spec, s.timezone || '–',
                [s.last_slot_ms ? when(s.last_slot_ms) : '–', 'last'],
                [s.next_slot_ms ? when(s.next_slot_ms) : '–', 'next']],
        { schedule: s.name });
  }
  $('sched-status').textContent = rows.length ? '' : 'No schedules.';
}

/* ---- sending ---- */

function resolve(doc, node, depth) {
  if (!node || depth > 20) return node;
  if (node.$ref && node.$ref.startsWith('#/')) {
    let v = doc;
    for (const part of node.$ref.slice(2).split('/'))
      v = v ? v[part.replace(/~1/g, '/').replace(/~0/g, '~')] : undefined;
    return resolve(doc, v, depth + 1);
  }
  return node;
}

/* example builds a sample value from a JSON schema. */
function example(doc, s, depth) {
  s = resolve(doc, s, 0) || {};
  if (depth > 6) return null;
  if (s.examples && s.examples.length) return s.examples[0];
  if ('default' in s) return s.default;
  if (s.enum && s.enum.length) return s.enum[0];
  const type = Array.isArray(s.type) ? s.type[0] : s.type;
  if (type === 'object' || s.properties) {
    const o = {};
    for (const [k, v] of Object.entries(s.properties || {}))
      o[k] = example(doc, v, depth + 1);
    return o;
  }
  if (type === 'array') return [];
  if (type === 'integer' || type === 'number') return 0;
  if (type === 'boolean') return false;
  if (type === 'string') return '';
  return null;
}

async function prefill() {
  const name = $('send-task').value;
  const t = state.tasks.find(x => x.name === name);
  if (!t) return;
  let body = {};
  try {
    if (!state.schemas) state.schemas = await api('GET', '/asyncapi.json');
    const doc = state.schemas;
    for (const ch of Object.values(doc.channels || {})) {
      if (ch.address !== t.queue) continue;
      const msg = resolve(doc, (ch.messages || {}).request, 0) ||
        resolve(doc, Object.values(ch.messages || {})[0], 0);
      if (msg && msg.payload) body = example(doc, msg.payload, 0) || {};
    }
  } catch (e) {
    body = {};
  }
  $('send-body').value = JSON.stringify(body, null, 2);
}

async function send(ev) {
  ev.preventDefault();
  const status = $('send-status');
  const text = $('send-body').value;
  try {
    const parsed = JSON.parse(text);
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
      throw new Error('the body must be a JSON object');
  } catch (e) {
    status.textContent = 'Not sent: ' + e.message;
    return;
  }
  try {
    const delay = $('send-delay').value.trim();
    const j = await api('POST', taskPath($('send-task').value, '/messages') +
      (delay ? '?delay=' + encodeURIComponent(delay) : ''), text);
    status.textContent = 'Sent: id ' + j.id + (delay ? ', due in ' + delay : '');
  } catch (e) {
    status.textContent = 'Not sent: ' + e.message;
  }
}

/* ---- routes ---- */

/* parseRoute reads location.hash into { view, task, id, kind }. */
function parseRoute(hash) {
  const parts = hash.replace(/^#\/?/, '').split('/').filter(Boolean)
    .map(p => { try { return decodeURIComponent(p); } catch (e) { return p; } });
  if (parts[0] === 'daemons') return { view: 'daemons' };
  if (parts[0] === 'schedules') return { view: 'schedules' };
  if (parts[0] === 'tasks' && parts[1]) {
    const task = parts[1];
    if (parts.length === 2) return { view: 'task', task };
    if (parts[2] === 'dead-letters' && parts.length === 3)
      return { view: 'dlq', task };
    if (parts[2] === 'dead-letters' && parts.length === 4)
      return { view: 'message', task, id: parts[3], kind: 'dlq' };
    if (parts[2] === 'messages' && parts.length === 4)
      return { view: 'message', task, id: parts[3], kind: 'message' };
    if (parts[2] === 'delayed' && parts.length === 3)
      return { view: 'delayed', task };
  }
  return { view: 'dashboard' };
}

const VIEW_SECTION = { dashboard: 'view-dashboard', task: 'view-task',
                       dlq: 'view-dlq', message: 'view-message',
                       delayed: 'view-delayed', daemons: 'view-daemons',
                       schedules: 'view-schedules' };

/* route shows the view of the hash; the data it needs loads with the
 * next refresh (at once). */
function route() {
  const r = parseRoute(location.hash);
  const same = JSON.stringify(r) === JSON.stringify(state.route);
  /* a search belongs to one task's dead letters: another task's list
   * starts unfiltered */
  if (r.view === 'dlq' && (!state.route || state.route.task !== r.task))
    for (const k of ['q', 'since', 'until']) $('dlq-' + k).value = '';
  state.route = r;
  for (const [view, id] of Object.entries(VIEW_SECTION))
    $(id).hidden = view !== r.view;
  for (const a of document.querySelectorAll('header nav a')) {
    if (a.dataset.nav === r.view) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (r.task) {
    const base = '#/tasks/' + encodeURIComponent(r.task);
    $('task-h').textContent = 'Task ' + r.task;
    $('task-dlq-link').href = base + '/dead-letters';
    $('task-delayed-link').href = base + '/delayed';
  }
  document.title = 'taskmill console' + (r.task ? ': ' + r.task : '');
  if (!same) state.historyAt = {};
  if (r.view === 'delayed' || r.view === 'message') delete state.absent.delayed;
  if (r.view === 'daemons') delete state.absent.daemons;
  if (state.loaded)
    poll({ tasks: state.tasks }, true).catch(e => showError(e.message));
}

/* ---- start ---- */

function start() {
  $('token-form').addEventListener('submit', ev => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $('token').value.trim());
    $('token').value = '';
    state.schemas = null;
    state.loaded = false;
    refresh();
  });
  $('dlq-task').addEventListener('change', () => {
    location.hash = '#/tasks/' + encodeURIComponent($('dlq-task').value) +
      '/dead-letters';
  });
  $('dlq-search').addEventListener('submit', ev => {
    ev.preventDefault();
    loadDeadLetters();
  });
  $('dlq-clear').addEventListener('click', () => {
    for (const k of ['q', 'since', 'until']) $('dlq-' + k).value = '';
    loadDeadLetters();
  });
  $('dlq-older').addEventListener('click', () =>
    loadDeadLetters($('dlq-older').dataset.after));
  $('dlq-replay-all').addEventListener('click', () =>
    bulk('POST', '/replay', 'replayed', 'Replay'));
  $('dlq-purge-all').addEventListener('click', () =>
    bulk('DELETE', '', 'purged', 'Delete'));
  for (const [id, ...act] of [
    ['msg-replay', 'dead-letters', 'POST', '/replay', 'Replayed'],
    ['msg-purge', 'dead-letters', 'DELETE', '', 'Purged'],
    ['msg-run-now', 'delayed', 'POST', '/run-now', 'Sent to run now'],
    ['msg-delete', 'delayed', 'DELETE', '', 'Deleted']])
    $(id).addEventListener('click', () => messageAction(...act));
  $('delayed-refresh').addEventListener('click', () => loadDelayed());
  $('send-task').addEventListener('change', prefill);
  $('send-form').addEventListener('submit', send);
  window.addEventListener('hashchange', route);
  route();
  refresh();
  setInterval(refresh, REFRESH_MS);
}

document.addEventListener('DOMContentLoaded', start);

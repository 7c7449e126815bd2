/* console.js - the taskmill console: reads /api/v1/tasks and
 * /api/v1/schedules every 2 s and drives the dead-letter, publish (with an
 * optional delay) and pause/resume calls of the admin API. Text from
 * the daemon (bodies, errors, names) only ever goes in through
 * textContent, never as HTML. */
'use strict';

const REFRESH_MS = 2000;
const SPARK_POINTS = 150;            /* 5 minutes at one point per 2 s */
const TOKEN_KEY = 'taskmill.token';
const READONLY_WHY = 'read-only: set http.token in the daemon\'s ' +
  'configuration to allow changes';
const NOBODIES_WHY = 'Dead-letter bodies are not shown: without ' +
  'http.token the daemon serves aggregate figures only. Set http.token ' +
  'in its configuration to browse them.';

const state = { tasks: [], writable: false, history: {}, last: {},
                schemas: null, needToken: false };

function $(id) { return document.getElementById(id); }

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function showError(text) {
  const p = $('error');
  p.textContent = text || '';
  p.hidden = !text;
}

/* api calls the admin API; resolves to the parsed JSON answer, rejects
 * with an Error whose text is the daemon's. 401 asks for the token. With
 * meta, meta.link is set to the answer's Link header. */
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
  if (!r.ok) {
    throw new Error((j && j.error) ? j.error : 'HTTP ' + r.status);
  }
  return j;
}

function fmt(v, digits) {
  if (v === null || v === undefined) return '–';
  if (typeof v === 'number' && digits !== undefined) return v.toFixed(digits);
  return String(v);
}

function drawSpark(canvas, points) {
  const w = canvas.width, h = canvas.height, ctx = canvas.getContext('2d');
  ctx.clearRect(0, 0, w, h);
  if (points.length < 2) return;
  const max = Math.max(1, ...points);
  /* newest at the right edge; a short history is spread over at least
   * a minute's width */
  const span = Math.max(30, points.length - 1);
  const x0 = w - ((points.length - 1) / span) * w;
  ctx.strokeStyle = '#1f6feb';
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  points.forEach((v, i) => {
    const x = x0 + (i / span) * w;
    const y = h - 1 - (v / max) * (h - 2);
    if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
  });
  ctx.stroke();
}

/* record keeps each task's throughput (completions per second between
 * two refreshes) for the sparkline. */
function record(t, now) {
  const done = Object.values(t.outcomes || {}).reduce((a, b) => a + b, 0);
  const last = state.last[t.name];
  const hist = state.history[t.name] || (state.history[t.name] = []);
  if (last && now > last.at) {
    hist.push(Math.max(0, (done - last.done) * 1000 / (now - last.at)));
    if (hist.length > SPARK_POINTS) hist.shift();
  }
  state.last[t.name] = { done, at: now };
}

function renderTasks(j) {
  const now = Date.now();
  $('broker').textContent = j.broker.kind + ' ' + j.broker.url + ' ';
  const up = el('span', j.broker.connected ? 'up' : 'down',
                j.broker.connected ? 'up' : 'down');
  $('broker').appendChild(up);
  $('pool').textContent = j.pool.kind + ', ' + j.pool.busy + ' of ' +
    j.pool.size + ' busy';
  $('updated').textContent = new Date(now).toLocaleTimeString();
  const body = $('tasks').tBodies[0];
  /* the rows are rebuilt; a focused pause button keeps the focus */
  const focused = document.activeElement;
  const keep = focused && focused.classList.contains('pause')
    ? focused.dataset.task : null;
  body.replaceChildren();
  for (const t of j.tasks) {
    record(t, now);
    const tr = el('tr');
    tr.dataset.task = t.name;
    const name = el('th', t.name);
    name.scope = 'row';
    tr.appendChild(name);
    tr.appendChild(el('td', fmt(t.rate_1s, 1), 'rate1'));
    tr.appendChild(el('td', fmt(t.rate_60s, 2), 'rate60'));
    const sp = el('td');
    const c = document.createElement('canvas');
    c.width = 120; c.height = 24;
    c.setAttribute('role', 'img');
    c.setAttribute('aria-label', 'throughput of the last minutes');
    sp.appendChild(c);
    tr.appendChild(sp);
    tr.appendChild(el('td', fmt(t.p50_ms, 1), 'p50'));
    tr.appendChild(el('td', fmt(t.p99_ms, 1), 'p99'));
    tr.appendChild(el('td', fmt(t.inflight), 'inflight'));
    tr.appendChild(el('td', fmt(t.queue_depth), 'queue'));
    tr.appendChild(el('td', fmt(t.pending), 'pending'));
    tr.appendChild(el('td', fmt(t.scheduled), 'scheduled'));
    tr.appendChild(el('td', fmt(t.dead_letters), 'dead'));
    const oc = Object.entries(t.outcomes || {}).filter(([, n]) => n > 0)
      .map(([k, n]) => k + ' ' + n).join(', ');
    tr.appendChild(el('td', oc || '–', 'outcomes'));
    tr.appendChild(el('td', t.circuit, 'circuit'));
    tr.appendChild(pauseCell(t));
    body.appendChild(tr);
    drawSpark(c, state.history[t.name] || []);
  }
  if (keep !== null) {
    for (const b of body.querySelectorAll('button.pause')) {
      if (b.dataset.task === keep) b.focus();
    }
  }
}

/* pauseCell shows whether the task's intake runs, with the button that
 * flips it (a write: disabled without a token, as the others). */
function pauseCell(t) {
  const td = el('td', null, 'intake');
  td.appendChild(el('span', t.paused ? 'paused ' : 'running ',
                    t.paused ? 'paused' : 'running'));
  const b = el('button', t.paused ? 'Resume' : 'Pause', 'write pause');
  b.type = 'button';
  b.dataset.task = t.name;
  b.dataset.action = t.paused ? 'resume' : 'pause';
  b.setAttribute('aria-label', b.textContent + ' task ' + t.name);
  b.disabled = !state.writable;
  if (!state.writable) b.title = READONLY_WHY;
  b.addEventListener('click', () => setPaused(t.name, b.dataset.action));
  td.appendChild(b);
  return td;
}

async function setPaused(name, action) {
  try {
    await api('POST', '/api/v1/tasks/' + encodeURIComponent(name) + '/' +
              action);
    showError('');
  } catch (e) {
    showError(action + ' ' + name + ': ' + e.message);
  }
  refresh();
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
  for (const b of document.querySelectorAll('button.write')) {
    b.disabled = !w;
    if (w) b.removeAttribute('title'); else b.title = READONLY_WHY;
  }
  const p = $('readonly');
  p.textContent = w ? '' : 'Changes are disabled: ' + READONLY_WHY + '.';
  p.hidden = w;
}

async function refresh() {
  try {
    const j = await api('GET', '/api/v1/tasks');
    state.tasks = j.tasks;
    state.needToken = false;
    $('token-form').hidden = true;
    showError('');
    renderTasks(j);
    const names = j.tasks.map(t => t.name);
    const first = $('dlq-task').options.length === 0;
    fillSelect($('dlq-task'), names);
    const sendFirst = $('send-task').options.length === 0;
    fillSelect($('send-task'), names);
    setWritable(j.writable);
    loadSchedules();
    if (first) loadDeadLetters();
    if (sendFirst) prefill();
  } catch (e) {
    showError(e.message);
  }
}

/* ---- dead letters ---- */

function dlqPath(suffix) {
  return '/api/v1/tasks/' + encodeURIComponent($('dlq-task').value) +
    '/dead-letters' + (suffix || '');
}

/* nextAfter is the after= cursor of a Link rel="next" header, or null
 * on the last page. */
function nextAfter(link) {
  const m = /<([^>]*)>;\s*rel="next"/.exec(link || '');
  if (!m) return null;
  return new URL(m[1], location.href).searchParams.get('after');
}

/* wholeBody replaces a cut body with the whole one, read from the entry's
 * own URL. */
async function wholeBody(id, pre, btn) {
  try {
    const d = await api('GET', dlqPath('/' + encodeURIComponent(id)));
    pre.textContent = d.body;
    btn.remove();
  } catch (e) {
    $('dlq-status').textContent = e.message;
  }
}

/* loadDeadLetters shows the newest page of the task's dead letters, or
 * with after the page older than that entry. */
async function loadDeadLetters(after) {
  if (!$('dlq-task').value) return;
  const list = $('dlq');
  $('dlq-older').hidden = true;
  if (!state.writable) {
    /* no token: the daemon answers 403 to any request for bodies */
    list.replaceChildren();
    $('dlq-status').textContent = NOBODIES_WHY;
    return;
  }
  try {
    const q = '?limit=100' + (typeof after === 'string'
      ? '&after=' + encodeURIComponent(after) : '');
    const meta = {};
    const entries = await api('GET', dlqPath(q), undefined, meta);
    const older = nextAfter(meta.link);
    list.replaceChildren();
    $('dlq-status').textContent = entries.length === 0
      ? 'No dead letters' + (typeof after === 'string' ? ' older.' : '.')
      : entries.length + ' dead letter(s), newest first' +
        (older ? '; older ones on the next page.' : '.');
    $('dlq-older').hidden = !older;
    $('dlq-older').dataset.after = older || '';
    for (const d of entries) {
      const li = el('li');
      li.dataset.id = d.id;
      const head = el('div');
      head.appendChild(el('strong', d.id));
      head.appendChild(el('span', ' · attempts ' + d.attempts +
        ' · ' + (d.failed_at || '') + ' · origin ' + (d.origin_id || '–'),
        'note'));
      li.appendChild(head);
      li.appendChild(el('div', 'Error: ' + d.error, 'dlq-error'));
      const pre = el('pre', d.body, 'dlq-body');
      li.appendChild(pre);
      const bar = el('div', null, 'bar');
      if (d.truncated) {
        const wb = el('button', 'Whole body (' + d.body_bytes + ' bytes)',
                      'whole');
        wb.type = 'button';
        wb.addEventListener('click', () => wholeBody(d.id, pre, wb));
        bar.appendChild(wb);
      }
      const rp = el('button', 'Replay', 'write replay');
      rp.type = 'button';
      rp.addEventListener('click', () => move('POST',
        '/' + encodeURIComponent(d.id) + '/replay', 'replayed'));
      const pg = el('button', 'Purge', 'write danger purge');
      pg.type = 'button';
      pg.addEventListener('click', () => move('DELETE',
        '/' + encodeURIComponent(d.id), 'purged'));
      bar.append(rp, pg);
      li.appendChild(bar);
      list.appendChild(li);
    }
    setWritable(state.writable);
  } catch (e) {
    $('dlq-status').textContent = e.message;
  }
}

async function move(method, suffix, key) {
  try {
    const j = await api(method, dlqPath(suffix));
    $('dlq-status').textContent = key + ' ' + j[key] + '.';
    await loadDeadLetters();
    $('dlq-status').textContent = key + ' ' + j[key] + '.';
  } catch (e) {
    $('dlq-status').textContent = e.message;
  }
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
    const j = await api('POST', '/api/v1/tasks/' +
      encodeURIComponent($('send-task').value) + '/messages' +
      (delay ? '?delay=' + encodeURIComponent(delay) : ''), text);
    status.textContent = 'Sent: id ' + j.id + (delay ? ', due in ' + delay : '');
  } catch (e) {
    status.textContent = 'Not sent: ' + e.message;
  }
}

/* ---- schedules ---- */

function slotText(ms) {
  if (ms === null || ms === undefined) return '–';
  return new Date(ms).toLocaleString();
}

async function loadSchedules() {
  let list;
  try {
    list = await api('GET', '/api/v1/schedules');
  } catch (e) {
    $('sched-status').textContent = 'Schedules: ' + e.message;
    return;
  }
  const rows = Array.isArray(list) ? list : [];
  const body = $('schedules').tBodies[0];
  body.replaceChildren();
  for (const s of rows) {
    const tr = el('tr');
    tr.dataset.schedule = s.name;
    const name = el('th', s.name);
    name.scope = 'row';
    tr.appendChild(name);
    tr.appendChild(el('td', s.task));
    tr.appendChild(el('td', s.spec));
    tr.appendChild(el('td', s.timezone || '–'));
    tr.appendChild(el('td', slotText(s.last_slot_ms), 'last'));
    tr.appendChild(el('td', slotText(s.next_slot_ms), 'next'));
    body.appendChild(tr);
  }
  $('sched-status').textContent = rows.length ? '' : 'No schedules.';
}

/* ---- start ---- */

function start() {
  $('token-form').addEventListener('submit', ev => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $('token').value.trim());
    $('token').value = '';
    state.schemas = null;
    refresh().then(() => loadDeadLetters());
  });
  $('dlq-task').addEventListener('change', () => loadDeadLetters());
  $('dlq-refresh').addEventListener('click', () => loadDeadLetters());
  $('dlq-older').addEventListener('click', () =>
    loadDeadLetters($('dlq-older').dataset.after));
  $('dlq-replay-all').addEventListener('click', () => {
    if (confirm('Replay every dead letter of task ' + $('dlq-task').value +
                '?'))
      move('POST', '/replay', 'replayed');
  });
  $('dlq-purge-all').addEventListener('click', () => {
    if (confirm('Delete every dead letter of task ' + $('dlq-task').value +
                '? This cannot be undone.'))
      move('DELETE', '', 'purged');
  });
  $('send-task').addEventListener('change', prefill);
  $('send-form').addEventListener('submit', send);
  refresh();
  setInterval(refresh, REFRESH_MS);
}

document.addEventListener('DOMContentLoaded', start);

// console-views.mjs BASE_URL TOKEN SHOT_DIR: the console's views in headless
// Chromium against a daemon with http.token = TOKEN and the tasks add, rej,
// resize-thumbnails and send-welcome-email (test_http_console_views.sh).
// The endpoints a daemon may not have yet (history, daemons, delayed) and
// the dead-letter search are answered in the browser from fixtures of the
// API's contract (docs/http.md), by request interception: nothing is
// served by the daemon that it would not serve anyway. Checks:
//   - the tasks table fits: at 1280x800 no horizontal overflow of the
//     table's box nor of the document (scrollWidth <= clientWidth,
//     measured in the page); Pause visible at 1280, 1400 and 1920 px;
//   - the dashboard's charts draw the history as lines with axes, and
//     show a point's values on pointer move and by the arrow keys; a
//     task's page asks for that task's history;
//   - the daemons table shows each daemon's fields;
//   - delayed messages: listed, Run now and Delete (after a confirmation)
//     send their requests; a delayed message's page shows its body;
//   - a search + bulk replay sends the search's filter and its
//     confirmation names the count; a dead letter's page replays it;
//   - every control of the dashboard is reached by Tab;
//   - no request leaves the daemon's origin, no console error.
//   - at 640 px (200 % zoom) no view with data passes the screen;
// Screenshots in SHOT_DIR: dashboard.png, daemons.png, message.png,
// dashboard-640.png.
import { fail, ok, sleep, until, run, watch, overflow, tabReaches,
         WAIT_MS } from './console-lib.mjs';

const [base, token, dir] = process.argv.slice(2);
const problems = [];

const NOW = Date.now();
const MIN = 60e3;
// history: a per-minute curve, failures now and then
function history(range, task) {
  const n = range === '1h' ? 60 : 1440;
  const scale = task ? 0.5 : 1;
  const points = Array.from({ length: n }, (_, i) => {
    const t = Math.floor((NOW - (n - 1 - i) * MIN) / MIN) * 60;
    return { t, success: Math.round(scale * (40 + 25 * Math.sin(i * 9 / n))),
             failed: i % 9 === 0 ? 6 : i % 4 === 0 ? 1 : 0,
             dead_lettered: i % 9 === 0 ? 1 : 0, retried: i % 4 === 0 ? 2 : 0 };
  });
  return { step_seconds: 60, points };
}
const DAEMONS = [
  { instance: 'worker-a-4242', host: 'worker-a', pid: 4242, version: '0.1.0',
    started: new Date(NOW - 3600e3).toISOString(), generation: 3,
    pool: { kind: 'thread', size: 8, busy: 3 }, tasks: ['add', 'rej'],
    last_seen: new Date(NOW - 2000).toISOString() },
  { instance: 'worker-b-977', host: 'worker-b', pid: 977, version: '0.1.0',
    started: new Date(NOW - 7200e3).toISOString(), generation: 2,
    pool: { kind: 'fork', size: 4, busy: 4 }, tasks: ['add'],
    last_seen: new Date(NOW - 5000).toISOString() },
];
const DELAYED = [
  { id: '1796000000000-0', due: new Date(NOW + 600e3).toISOString(),
    due_ms: NOW + 600e3, body: '{"a":1,"b":2}', truncated: false, body_bytes: 13 },
  { id: '1796000000001-0', due: new Date(NOW + 900e3).toISOString(),
    due_ms: NOW + 900e3, body: '{"a":5,"b":8}', truncated: false, body_bytes: 13 },
];
const FOUND = [1, 2].map(i => ({
  id: `179600000000${i}-0`, origin_id: `17950000000${i}-0`, attempts: 3,
  failed_at: new Date(NOW - i * 60e3).toISOString(),
  error: 'timeout after 30000 ms', body: `{"image":"${i}.png"}`,
  truncated: false, body_bytes: 16 }));

const seen = [];       // the intercepted requests: "METHOD path?query"
function json(req, body) {
  req.respond({ status: 200, contentType: 'application/json',
                body: JSON.stringify(body) });
}

await run(problems, 'no request to another origin, no console error, ' +
          'no failed request', async browser => {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 800 });
  watch(page, base, problems, true);
  await page.setRequestInterception(true);
  page.on('request', req => {
    const u = new URL(req.url());
    const m = req.method();
    const p = u.pathname, q = u.searchParams;
    const what = m + ' ' + p + u.search;
    if (p === '/api/v1/history') {
      seen.push(what);
      return json(req, history(q.get('range'), q.get('task')));
    }
    if (p === '/api/v1/daemons') { seen.push(what); return json(req, DAEMONS); }
    if (p === '/api/v1/tasks/add/delayed') { seen.push(what); return json(req, DELAYED); }
    if (/^\/api\/v1\/tasks\/add\/delayed\/[^/]+(\/run-now)?$/.test(p)) {
      seen.push(what);
      return json(req, m === 'DELETE' ? { deleted: 1 } : { ran: 1 });
    }
    if (p.startsWith('/api/v1/tasks/rej/dead-letters') && q.has('q')) {
      seen.push(what);
      if (p.endsWith('/replay')) return json(req, { replayed: FOUND.length });
      return json(req, q.get('q') === 'timeout' ? FOUND : []);
    }
    req.continue();
  });
  const dialogs = [];
  page.on('dialog', async d => { dialogs.push(d.message()); await d.accept(); });
  await page.evaluateOnNewDocument(t =>
    sessionStorage.setItem('taskmill.token', t), token);
  await page.goto(base + '/', { waitUntil: 'load' });
  await until('four task rows', async () =>
    (await page.$$('#tasks tbody tr')).length === 4);

  // the tasks table fits; Pause shows in full at three widths
  for (const [w, h] of [[1280, 800], [1400, 900], [1920, 1080]]) {
    await page.setViewport({ width: w, height: h });
    await sleep(300);
    const m = await page.evaluate(() => {
      const box = document.querySelector('#tasks').parentElement;
      const de = document.documentElement;
      const vw = de.clientWidth;
      const pause = Array.from(document.querySelectorAll('#tasks button.pause'))
        .map(b => b.getBoundingClientRect());
      return { box: [box.scrollWidth, box.clientWidth],
               doc: [de.scrollWidth, de.clientWidth],
               pause: pause.length === 4 && pause.every(r =>
                 r.width > 0 && r.left >= 0 && r.right <= vw) };
    });
    if (m.box[0] > m.box[1] || m.doc[0] > m.doc[1] || !m.pause)
      fail(`the tasks table at ${w} px: ${JSON.stringify(m)}`);
  }
  ok('the tasks table fits 1280x800 (scrollWidth <= clientWidth); Pause ' +
     'visible at 1280, 1400, 1920 px');

  // the charts: lines, axes, values on pointer move and by keyboard
  await page.setViewport({ width: 1280, height: 800 });
  await until('the charts drawn with data', () => page.evaluate(() => {
    const figs = Array.from(document.querySelectorAll('#view-dashboard .chart'));
    return (figs.length === 2 && figs.every(f => f.dataset.state === 'data' &&
      f.querySelector('path.series.success').getAttribute('d').split('L').length > 50 &&
      f.querySelector('path.series.failed') &&
      f.querySelectorAll('.x-tick').length >= 3 &&
      f.querySelectorAll('.y-tick').length >= 3)) ||
      figs.map(f => f.dataset.state).join();
  }));
  if (!seen.some(s => s === 'GET /api/v1/history?range=1h') ||
      !seen.some(s => s === 'GET /api/v1/history?range=24h'))
    fail('the dashboard did not ask for both ranges: ' + seen.join(', '));
  ok('the dashboard charts the fleet\'s history of 1 h and 24 h: lines, axes, ticks');
  const svgBox = await (await page.$('#chart-1h svg')).boundingBox();
  await page.mouse.move(svgBox.x + svgBox.width * 0.5, svgBox.y + svgBox.height * 0.5);
  await until('the values under the pointer', () => page.evaluate(() => {
    const f = document.getElementById('chart-1h');
    return (f.querySelector('.tip text') !== null &&
      /processed \d+, failed \d+/.test(f.querySelector('.readout').textContent)) ||
      f.querySelector('.readout').textContent;
  }));
  const hovered = await page.$eval('#chart-1h', f => f.dataset.point);
  await page.mouse.move(0, 0);
  await page.$eval('#chart-1h svg', e => e.focus());
  await page.keyboard.press('End');
  await page.keyboard.press('ArrowLeft');
  const keyed = await page.$eval('#chart-1h', f => [f.dataset.point,
    f.querySelector('.readout').textContent]);
  if (keyed[0] !== '58' || !/processed \d+/.test(keyed[1]))
    fail('the arrow keys do not choose a point: ' + JSON.stringify(keyed));
  ok(`a point's values on pointer move (point ${hovered}) and by the arrow keys`);
  await page.evaluate(() => document.activeElement.blur());
  await page.screenshot({ path: dir + '/dashboard.png' });

  const nk = await tabReaches(page, 'dashboard');
  ok(`Tab reaches all ${nk} controls of the dashboard`);

  // a task's page: its figures and its own history
  // (in one step in the page: the rows are rebuilt as figures change)
  await page.$eval('tr[data-task="add"] th a', a => a.click());
  await until('the task page with its history', () => page.evaluate(() =>
    (!document.getElementById('view-task').hidden &&
     document.getElementById('chart-task-1h').dataset.state === 'data' &&
     /Queue/.test(document.getElementById('task-figures').textContent)) ||
    location.hash));
  if (!seen.includes('GET /api/v1/history?range=1h&task=add'))
    fail('the task page did not ask for its history: ' + seen.join(', '));
  ok('#/tasks/add shows the task\'s figures and its own history');

  // the daemons table
  await page.click('header nav a[href="#/daemons"]');
  await until('the daemons listed', () => page.evaluate(() => {
    const rows = Array.from(document.querySelectorAll('#daemons tbody tr'))
      .map(tr => Array.from(tr.children).map(c => c.textContent.replace(/^.*: /, '')));
    return (rows.length === 2 && rows[0][0] === 'worker-a-4242' &&
      rows[0][1] === 'worker-a' && rows[0][2] === '4242' &&
      rows[0][3] === '0.1.0' && rows[0][5] === '3' &&
      rows[0][6] === '3 / 8 (thread)' && /s ago$/.test(rows[0][7]) &&
      rows[1][6] === '4 / 4 (fork)') || JSON.stringify(rows);
  }));
  await page.screenshot({ path: dir + '/daemons.png' });
  ok('#/daemons lists instance, host, pid, version, started, generation, ' +
     'pool and last seen');

  // delayed messages: run now, delete after a confirmation, a page each
  await page.evaluate(() => { location.hash = '#/tasks/add/delayed'; });
  await until('the delayed messages listed', async () =>
    (await page.$$('#delayed tbody tr')).length === 2);
  // (each action lists the messages again: the rows are new ones)
  const listed = () => seen.filter(s => s === 'GET /api/v1/tasks/add/delayed').length;
  let n = listed();
  await page.click(`#delayed tr[data-id="${DELAYED[0].id}"] button.run-now`);
  await until('run now sent', async () =>
    seen.includes(`POST /api/v1/tasks/add/delayed/${DELAYED[0].id}/run-now`) &&
    listed() > n && (await page.$$('#delayed tbody tr')).length === 2);
  n = listed();
  await page.click(`#delayed tr[data-id="${DELAYED[1].id}"] button.delete`);
  await until('delete sent after a confirmation', async () =>
    seen.includes(`DELETE /api/v1/tasks/add/delayed/${DELAYED[1].id}`) &&
    dialogs.some(d => d.includes(DELAYED[1].id)) && listed() > n &&
    (await page.$$('#delayed tbody tr')).length === 2);
  await page.click(`#delayed tr[data-id="${DELAYED[0].id}"] th a`);
  await until('the delayed message\'s page', () => page.evaluate(() =>
    (!document.getElementById('view-message').hidden &&
     document.getElementById('msg-body').textContent.includes('"b": 2') &&
     /due/.test(document.getElementById('msg-meta').textContent)) ||
    location.hash));
  await page.screenshot({ path: dir + '/message.png' });
  await page.click('#msg-run-now');
  await until('run now from the message page', async () =>
    seen.filter(s => s === `POST /api/v1/tasks/add/delayed/${DELAYED[0].id}/run-now`)
      .length === 2 &&
    (await page.$eval('#msg-status', e => e.textContent)) === 'Sent to run now.');
  ok('delayed messages: listed, Run now, Delete (confirmed), a page per ' +
     'message with Run now');

  // a search and a bulk replay of its result
  await page.evaluate(() => { location.hash = '#/tasks/rej/dead-letters'; });
  await page.waitForSelector('#view-dlq:not([hidden])', { timeout: WAIT_MS });
  await page.type('#dlq-q', 'timeout');
  await page.$eval('#dlq-since', e => { e.value = '2026-01-01T00:00:00'; });
  await page.click('#dlq-refresh');
  await until('the search result listed', () => page.evaluate(() =>
    (document.querySelectorAll('#dlq li').length === 2 &&
     /matching the search/.test(document.getElementById('dlq-status').textContent)) ||
    document.getElementById('dlq-status').textContent));
  const n0 = dialogs.length;
  await page.click('#dlq-replay-all');
  await until('the filtered replay sent', async () => {
    const st = await page.$eval('#dlq-status', e => e.textContent);
    return (seen.some(s => s.startsWith(
      'POST /api/v1/tasks/rej/dead-letters/replay?q=timeout&since=2026-')) &&
      /^replayed 2\./.test(st)) ||
      JSON.stringify({ st, dialogs: dialogs.slice(n0),
                       seen: seen.filter(s => s.includes('/rej/')) });
  });
  if (!dialogs[n0] || !dialogs[n0].startsWith('Replay 2 dead letter(s) of task rej matching the search'))
    fail('the confirmation does not name the count: ' + dialogs[n0]);
  ok('a search + bulk replay acts on the filter, its confirmation naming the count');

  // a dead letter's page (the daemon's own): Replay moves it back
  await page.evaluate(() => {
    location.hash = '#/tasks/send-welcome-email/dead-letters';
  });
  await until('the dead letter listed', async () =>
    (await page.$$('#view-dlq:not([hidden]) #dlq li')).length === 1);
  const dead = await page.$eval('#dlq li', e => e.dataset.id);
  await page.click('#dlq li a.open');
  await page.waitForSelector('#msg-replay', { visible: true, timeout: WAIT_MS });
  await page.click('#msg-replay');
  await until('replayed from its page', async () => {
    const r = await fetch(base + '/api/v1/tasks/send-welcome-email/dead-letters/' +
      dead, { headers: { Authorization: 'Bearer ' + token } });
    return (r.status === 404 &&
      (await page.$eval('#msg-status', e => e.textContent)) === 'Replayed.') ||
      r.status;
  });
  ok('a dead letter\'s page replays it');

  // 200 % zoom of 1280 px, with data in every view: nothing past the screen
  await page.setViewport({ width: 640, height: 800 });
  for (const [hash, section] of [['#/', 'view-dashboard'],
    ['#/daemons', 'view-daemons'], ['#/tasks/add/delayed', 'view-delayed'],
    ['#/tasks/add/messages/' + DELAYED[0].id, 'view-message']]) {
    await page.evaluate(h => { location.hash = h; }, hash);
    await page.waitForSelector('#' + section + ':not([hidden])', { timeout: WAIT_MS });
    await sleep(500);
    const wide = await overflow(page);
    if (wide.length) fail(`${hash} at 640 px: ${wide.join('; ')}`);
    if (hash === '#/') await page.screenshot({ path: dir + '/dashboard-640.png' });
  }
  ok('at 640 px (200 % zoom) the views with data stay within the screen');

});

// console-check.mjs MODE BASE_URL [TOKEN] [SCREENSHOT]: drives the console
// in headless Chromium (puppeteer-core with the system's chromium).
//   token     the daemon has http.token = TOKEN: the page asks for it, a
//             wrong one shows an error; then with the token (set before
//             the page loads): no console error, no failed request,
//             figures as /api/v1/tasks (depths, scheduled, outcomes,
//             paused), dead letters rendered as text, a body over 64 KiB
//             cut with a "Whole body" button that shows all of it,
//             replay one, "purge all" asks first, the send form sends.
//   live      http.token = TOKEN too, strictly as above: the configured
//             schedule "yearly" is listed with its next slot; pause in
//             the page stops intake (the queue grows while messages
//             come), resume (by keyboard) drains it; a message sent with
//             a delay shows in Scheduled and runs later; a screenshot
//             with live figures.
//   readonly  no http.token: the write buttons are disabled, the reason
//             shown; no dead-letter body is asked for, and the reason is
//             shown there too; the page fits a phone's width; Tab reaches
//             the controls.
// Prints "ok: WHAT" lines; exits 1 with "FAIL: WHAT" on the first failure.
import puppeteer from 'puppeteer-core';

const [mode, base, token, shot] = process.argv.slice(2);
const CHROMIUM = process.env.TM_CHROMIUM || '/usr/bin/chromium';
const WAIT_MS = 20000;

function fail(what) {
  console.log('FAIL: ' + what);
  process.exit(1);
}
const T0 = Date.now();
function ok(what) { console.log(`ok: ${what} (${Date.now() - T0} ms)`); }

async function apiGet(path) {
  const headers = token ? { Authorization: 'Bearer ' + token } : {};
  const r = await fetch(base + path, { headers });
  if (!r.ok) fail(`GET ${path}: HTTP ${r.status}`);
  return r.json();
}

async function apiPost(path, body) {
  const r = await fetch(base + path, {
    method: 'POST', body,
    headers: { Authorization: 'Bearer ' + token,
               'Content-Type': 'application/json' },
  });
  if (!r.ok) fail(`POST ${path}: HTTP ${r.status} ${await r.text()}`);
  return r.json();
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

// until polls fn (async, true = done) for up to ms (default WAIT_MS).
async function until(what, fn, ms) {
  const end = Date.now() + (ms || WAIT_MS);
  let last;
  while (Date.now() < end) {
    try { last = await fn(); } catch (e) { last = e.message; }
    if (last === true) return;
    await new Promise(r => setTimeout(r, 200));
  }
  fail(`${what} (last: ${JSON.stringify(last)})`);
}

const browser = await puppeteer.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const problems = [];
function watch(page, strict) {
  page.on('console', m => {
    if (m.type() === 'error' && strict) problems.push('console: ' + m.text());
  });
  page.on('pageerror', e => problems.push('page error: ' + e.message));
  page.on('requestfailed', r =>
    problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on('response', r => {
    if (strict && r.status() >= 400)
      problems.push(`HTTP ${r.status()} for ${r.url()}`);
  });
}

try {
  if (mode === 'readonly') {
    const page = await browser.newPage();
    watch(page, true);
    await page.goto(base + '/', { waitUntil: 'load' });
    await until('tasks shown', async () =>
      (await page.$$('#tasks tbody tr')).length === 2);
    await until('write buttons disabled with the reason', () =>
      page.evaluate(() => {
        const b = Array.from(document.querySelectorAll('button.write'));
        const note = document.getElementById('readonly');
        return b.length >= 3 &&
          document.querySelectorAll('button.write.pause').length === 2 &&
          b.every(x => x.disabled &&
                                         x.title.includes('http.token')) &&
          !note.hidden && note.textContent.includes('http.token');
      }));
    ok('without a token the write buttons are disabled, the reason shown');
    // no bodies without a token: the page asks for none (a 403 would
    // count as a failed request) and says why
    await until('dead letters replaced by the reason', () =>
      page.evaluate(() => {
        const s = document.getElementById('dlq-status').textContent;
        return s.includes('http.token') && s.includes('aggregate') &&
          document.querySelectorAll('#dlq li').length === 0;
      }));
    ok('without a token no dead-letter body is asked for, the reason shown');
    // a phone's width: nothing wider than the screen but the task table,
    // which scrolls in its own box; the keyboard reaches the controls
    await page.setViewport({ width: 390, height: 844 });
    const wide = await page.evaluate(() =>
      document.documentElement.scrollWidth - document.documentElement.clientWidth);
    if (wide > 1) fail(`the page is ${wide} px wider than a phone's screen`);
    ok('fits a phone\'s width');
    await page.bringToFront();
    await page.evaluate(() => document.body.focus());
    // (the task table's scroll box may take the focus first)
    const seen = [];
    for (let i = 0; i < 4 && !seen.includes('dlq-task'); i++) {
      await page.keyboard.press('Tab');
      seen.push(await page.evaluate(() => document.activeElement.id ||
                                    document.activeElement.className));
    }
    if (!seen.includes('dlq-task'))
      fail('Tab does not reach the dead-letter controls: ' + seen.join(' '));
    ok('the keyboard reaches the controls');
  } else if (mode === 'token') {
    // 1: no token yet: the page asks; a wrong one shows an error
    const ask = await browser.newPage();
    watch(ask, false);
    await ask.goto(base + '/', { waitUntil: 'load' });
    await ask.waitForSelector('#token-form:not([hidden])', { timeout: WAIT_MS });
    ok('the page asks for the token');
    await ask.type('#token', 'wrong-token');
    await ask.keyboard.press('Enter');
    await until('a wrong token shows an error', () => ask.evaluate(() => {
      const e = document.getElementById('error');
      return !e.hidden && /wrong token/.test(e.textContent);
    }));
    ok('a wrong token shows an error');
    await ask.type('#token', token);
    await ask.keyboard.press('Enter');
    await until('the right token shows the tasks', async () =>
      (await ask.$$('#tasks tbody tr')).length === 2 &&
      await ask.evaluate(() => document.getElementById('error').hidden &&
                         document.getElementById('token-form').hidden));
    const stored = await ask.evaluate(() =>
      sessionStorage.getItem('taskmill.token'));
    if (stored !== token) fail('token not kept in sessionStorage');
    const cookies = await ask.cookies();
    if (cookies.length !== 0) fail('cookies set: ' + JSON.stringify(cookies));
    ok('the right token is kept in sessionStorage, no cookie');
    await ask.close();

    // 2: with the token, strictly: no console error, no failed request
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 900 });
    watch(page, true);
    await page.evaluateOnNewDocument(t =>
      sessionStorage.setItem('taskmill.token', t), token);
    const dialogs = [];
    page.on('dialog', async d => {
      dialogs.push(d.message());
      await d.dismiss();
    });
    await page.goto(base + '/', { waitUntil: 'load' });
    await until('two task rows', async () =>
      (await page.$$('#tasks tbody tr')).length === 2);

    // figures as /api/v1/tasks, within one refresh
    await until('figures match /api/v1/tasks', async () => {
      const j = await apiGet('/api/v1/tasks');
      const dom = await page.evaluate(() =>
        Array.from(document.querySelectorAll('#tasks tbody tr')).map(tr => ({
          name: tr.dataset.task,
          dead: tr.querySelector('.dead').textContent,
          queue: tr.querySelector('.queue').textContent,
          outcomes: tr.querySelector('.outcomes').textContent,
          scheduled: tr.querySelector('.scheduled').textContent,
          intake: tr.querySelector('td.intake span').textContent.trim(),
        })));
      return j.tasks.every((t, i) => {
        const oc = Object.entries(t.outcomes).filter(([, n]) => n > 0)
          .map(([k, n]) => k + ' ' + n).join(', ') || '–';
        const d = dom[i];
        return d && d.name === t.name && d.dead === String(t.dead_letters) &&
          d.queue === String(t.queue_depth) && d.outcomes === oc &&
          d.scheduled === String(t.scheduled) &&
          d.intake === (t.paused ? 'paused' : 'running');
      }) || JSON.stringify(dom);
    });
    ok('figures match /api/v1/tasks');

    // dead letters of "rej": bodies as text, never markup
    await page.select('#dlq-task', 'rej');
    await until('dead letters listed', async () =>
      (await page.$$('#dlq li')).length >= 2);
    const xss = await page.evaluate(() => ({
      imgs: document.querySelectorAll('img').length,
      text: Array.from(document.querySelectorAll('#dlq .dlq-body'))
        .map(e => e.textContent).join('\n'),
    }));
    if (xss.imgs !== 0) fail('an img element was created from a body');
    if (!xss.text.includes('<img src=x onerror=alert(1)>'))
      fail('the body with markup is not shown as text: ' + xss.text);
    ok('a body with markup renders as text (no img element)');

    // the newest body is over 64 KiB: cut, with a button that reads the
    // whole one from the entry's own URL
    const whole = await page.$eval('#dlq li:first-child button.whole',
      b => b.textContent).catch(() => null);
    if (!whole || !whole.includes('100010 bytes'))
      fail('no "Whole body" button on the cut body: ' + whole);
    const shownLen = await page.$eval('#dlq li:first-child .dlq-body',
      e => e.textContent.length);
    if (shownLen !== 65536) fail(`the cut body shows ${shownLen} characters`);
    await page.click('#dlq li:first-child button.whole');
    await until('the whole body shown', () => page.evaluate(() =>
      document.querySelector('#dlq li:first-child .dlq-body')
        .textContent.length === 100010 &&
      !document.querySelector('#dlq li:first-child button.whole')));
    ok('a body over 64 KiB is cut, and "Whole body" shows all of it');

    // "purge all" asks first; dismissed, nothing is purged
    const before = (await page.$$('#dlq li')).length;
    await page.click('#dlq-purge-all');
    await until('purge all asked for confirmation', async () =>
      dialogs.some(m => /Delete every dead letter/.test(m)));
    await new Promise(r => setTimeout(r, 500));
    const after = (await apiGet('/api/v1/tasks/rej/dead-letters')).length;
    if (after !== before) fail(`purge all without confirmation: ${before} -> ${after}`);
    ok('"purge all" asks for confirmation');

    // replay the oldest one through the page: it leaves the dead letters
    const ids = await page.$$eval('#dlq li', l => l.map(e => e.dataset.id));
    const oldest = ids[ids.length - 1];
    await page.click(`#dlq li[data-id="${oldest}"] button.replay`);
    await until('the replayed entry left the dead letters', async () => {
      const l = await apiGet('/api/v1/tasks/rej/dead-letters');
      const shown = await page.$$eval('#dlq li', x => x.map(e => e.dataset.id));
      return (!l.some(e => e.id === oldest) && !shown.includes(oldest)) ||
        shown;
    });
    ok('replay one through the page moved it back');

    // the send form: add {"a":2,"b":3}, the count goes up
    const count = async () => (await apiGet('/api/v1/tasks'))
      .tasks.find(t => t.name === 'add').outcomes.success;
    const n0 = await count();
    await page.select('#send-task', 'add');
    await page.$eval('#send-body', e => { e.value = '{"a":2,"b":3}'; });
    await page.click('#send');
    await until('sent', () => page.$eval('#send-status',
      e => /^Sent: id /.test(e.textContent) || e.textContent));
    await until('the success count went up', async () =>
      (await count()) === n0 + 1);
    ok('the send form sent add {"a":2,"b":3}');
  } else if (mode === 'live') {
    // with the token, strictly: no console error, no failed request
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 900 });
    watch(page, true);
    await page.evaluateOnNewDocument(t =>
      sessionStorage.setItem('taskmill.token', t), token);
    await page.goto(base + '/', { waitUntil: 'load' });
    await until('two task rows', async () =>
      (await page.$$('#tasks tbody tr')).length === 2);

    // the schedules: the configured one with its next slot, as the API
    await until('the schedule is listed with its next slot', async () => {
      const l = await apiGet('/api/v1/schedules');
      const y = l.find(x => x.name === 'yearly');
      if (!y || !y.next_slot_ms) return 'API: ' + JSON.stringify(l);
      const row = await page.evaluate(ms => {
        const tr = document.querySelector('#schedules tr[data-schedule="yearly"]');
        return tr && { task: tr.children[1].textContent,
                       spec: tr.children[2].textContent,
                       next: tr.querySelector('.next').textContent,
                       want: new Date(ms).toLocaleString() };
      }, y.next_slot_ms);
      return (row && row.task === 'add' && row.spec === y.spec &&
              row.next === row.want) || JSON.stringify(row);
    });
    ok('the schedules table shows "yearly" with its next slot');

    // pause in the page: intake stops, the queue grows while messages come
    const add = async () => (await apiGet('/api/v1/tasks'))
      .tasks.find(t => t.name === 'add');
    const pauseBtn = 'tr[data-task="add"] button.pause';
    await page.click(pauseBtn);
    await until('add shown paused', async () => {
      const t = await add();
      const b = await page.$eval(pauseBtn, e => e.textContent);
      const st = await page.$eval('tr[data-task="add"] td.intake span',
                                  e => e.textContent.trim());
      return (t.paused === true && b === 'Resume' && st === 'paused') ||
        JSON.stringify({ api: t.paused, b, st });
    });
    const s0 = (await add()).outcomes.success;
    for (let i = 0; i < 5; i++)
      await apiPost('/api/v1/tasks/add/messages', '{"a":1,"b":' + i + '}');
    await until('the queue grows while paused, shown in the page', async () => {
      const t = await add();
      const shown = await page.$eval('tr[data-task="add"] .queue',
                                     e => e.textContent);
      if (t.outcomes.success !== s0) fail('a paused task ran a message');
      return (t.queue_depth === 5 && shown === '5') ||
        JSON.stringify({ api: t.queue_depth, shown });
    }, 60000);
    ok('pause in the page stopped intake: the queue grew to 5');

    // resume by keyboard: the focused button, Enter
    await page.focus(pauseBtn);
    await page.keyboard.press('Enter');
    await until('resume drains the queue', async () => {
      const t = await add();
      const shown = await page.$eval('tr[data-task="add"] .queue',
                                     e => e.textContent);
      return (!t.paused && t.outcomes.success === s0 + 5 &&
              t.queue_depth === 0 && shown === '0') ||
        JSON.stringify({ paused: t.paused, ok: t.outcomes.success - s0,
                         depth: t.queue_depth, shown });
    }, 60000);
    ok('resume (Enter on the focused button) drained the queue');

    // a message sent with a delay: in Scheduled first, run later
    const DELAY_MS = 8000;
    const n1 = (await add()).outcomes.success;
    await page.select('#send-task', 'add');
    await page.$eval('#send-body', e => { e.value = '{"a":4,"b":4}'; });
    await page.type('#send-delay', (DELAY_MS / 1000) + 's');
    const sentAt = Date.now();
    await page.click('#send');
    await until('sent with a delay', () => page.$eval('#send-status',
      e => /^Sent: id .*, due in 8s$/.test(e.textContent) || e.textContent));
    await until('Scheduled shows the delayed message', async () => {
      const t = await add();
      const shown = await page.$eval('tr[data-task="add"] .scheduled',
                                     e => e.textContent);
      return (t.scheduled === 1 && shown === '1') ||
        JSON.stringify({ api: t.scheduled, shown });
    });
    ok('the delayed message shows in Scheduled');
    await until('the delayed message ran', async () => {
      const t = await add();
      if (t.outcomes.success > n1 && Date.now() - sentAt < DELAY_MS - 100)
        fail(`the delayed message ran after ${Date.now() - sentAt} ms`);
      const shown = await page.$eval('tr[data-task="add"] .scheduled',
                                     e => e.textContent);
      return (t.outcomes.success === n1 + 1 && t.scheduled === 0 &&
              shown === '0') ||
        JSON.stringify({ ok: t.outcomes.success - n1, api: t.scheduled,
                         shown });
    }, 60000);
    ok('the delayed message ran after its delay, Scheduled back to 0');
    await page.$eval('#send-delay', e => { e.value = ''; });

    // a screenshot with live figures: messages coming in meanwhile
    await page.setViewport({ width: 1440, height: 900 });
    for (let k = 0; k < 10; k++) {
      await Promise.all(Array.from({ length: 4 }, (_, i) =>
        apiPost('/api/v1/tasks/add/messages', '{"a":' + i + ',"b":' + k + '}')));
      await sleep(300);
    }
    await page.evaluate(() => {
      document.activeElement.blur();
      for (const e of document.querySelectorAll('.scroll')) e.scrollLeft = 0;
    });
    if (shot) {
      await page.screenshot({ path: shot, fullPage: true });
      ok('screenshot ' + shot);
    }
  } else {
    fail('unknown mode ' + mode);
  }
  if (problems.length) fail(problems.join('; '));
  ok('no console error, no failed request');
} finally {
  await browser.close();
}

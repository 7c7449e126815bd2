// console-check.mjs MODE BASE_URL [TOKEN] [SCREENSHOT]: drives the console
// in headless Chromium (puppeteer-core with the system's chromium; the
// shared parts in console-lib.mjs). Every page is watched: no request to
// another origin than the daemon's, and in the strict parts no console
// error and no failed request (an endpoint of a newer daemon, OPTIONAL in
// console-lib.mjs, may answer 404: the page then says "not available").
//   token     the daemon has http.token = TOKEN: the page asks for it, a
//             wrong one shows an error; then with the token (set before
//             the page loads): figures as /api/v1/tasks (depths,
//             scheduled, outcomes, paused); the dashboard's charts have
//             axes and labels, showing "no data yet" when the daemon has
//             no history, the daemon's counts when it has; the dead-letter
//             link of a task opens its dead letters, rendered as text; a
//             row opens the message's page (deep link) with the whole body
//             (over 64 KiB), metadata and error; back and forward move
//             between the two; a search; "purge all" asks first, naming
//             the count; replay one; every control of the dead-letter view
//             is reached by Tab with a visible focus; at 640 px (200 %
//             zoom of 1280) no view reaches past the screen; the send form
//             sends.
//   live      http.token = TOKEN too, strictly as above: #/schedules lists
//             the configured schedule "yearly" with its next slot; pause
//             in the page stops intake (the queue grows while messages
//             come), resume (by keyboard) drains it; a message sent with
//             a delay shows in Scheduled and runs later; a screenshot
//             with live figures.
//   readonly  no http.token: no control that changes something is shown,
//             the reason is; no message body is asked for (dead letters,
//             a message page), and the reason is shown there too; the page
//             fits a phone's width; Tab reaches the controls.
// Prints "ok: WHAT" lines; exits 1 with "FAIL: WHAT" on the first failure.
import { fail, ok, sleep, until, client, run, watch, overflow,
         tabReaches, WAIT_MS } from './console-lib.mjs';

const [mode, base, token, shot] = process.argv.slice(2);
const api = client(base, token);
const apiGet = api.get;
const apiPost = api.post;
const problems = [];

// go shows the view at hash and waits for its section.
async function go(page, hash, section) {
  await page.evaluate(h => { location.hash = h; }, hash);
  await page.waitForSelector('#' + section + ':not([hidden])',
                             { timeout: WAIT_MS });
}

await run(problems, 'no console error, no failed request', async browser => {
  if (mode === 'readonly') {
    const page = await browser.newPage();
    watch(page, base, problems, true);
    await page.goto(base + '/', { waitUntil: 'load' });
    await until('tasks shown', async () =>
      (await page.$$('#tasks tbody tr')).length === 2);
    await until('no write control shown, the reason given', () =>
      page.evaluate(() => {
        const b = Array.from(document.querySelectorAll('.write'));
        const note = document.getElementById('readonly');
        return b.length >= 4 &&
          document.querySelectorAll('button.write.pause').length === 2 &&
          b.every(x => x.getClientRects().length === 0) &&
          !note.hidden && note.textContent.includes('http.token');
      }));
    ok('without a token no control that changes something is shown, the reason is');
    // no bodies without a token: the page asks for none (a 403 would
    // count as a failed request) and says why
    await go(page, '#/tasks/rej/dead-letters', 'view-dlq');
    await until('dead letters replaced by the reason', () =>
      page.evaluate(() => {
        const s = document.getElementById('dlq-status').textContent;
        return s.includes('http.token') && s.includes('aggregate') &&
          document.querySelectorAll('#dlq li').length === 0;
      }));
    await go(page, '#/tasks/rej/dead-letters/1-0', 'view-message');
    await until('a message page replaced by the reason', () =>
      page.evaluate(() =>
        document.getElementById('msg-status').textContent.includes('http.token') &&
        document.getElementById('msg-content').hidden));
    ok('without a token no message body is asked for, the reason shown');
    // a phone's width: nothing wider than the screen; the keyboard
    // reaches the controls
    await go(page, '#/', 'view-dashboard');
    await page.setViewport({ width: 390, height: 844 });
    await sleep(300);
    const wide = await overflow(page);
    if (wide.length) fail('wider than a phone\'s screen: ' + wide.join('; '));
    ok('fits a phone\'s width');
    await page.bringToFront();
    const n = await tabReaches(page, 'read-only dashboard');
    ok(`Tab reaches all ${n} controls of the read-only dashboard`);
  } else if (mode === 'token') {
    // 1: no token yet: the page asks; a wrong one shows an error
    const ask = await browser.newPage();
    watch(ask, base, problems, false);
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
    watch(page, base, problems, true);
    await page.evaluateOnNewDocument(t =>
      sessionStorage.setItem('taskmill.token', t), token);
    const dialogs = [];
    page.on('dialog', async d => {
      dialogs.push(d.message());
      await d.dismiss();
    });
    // the history before the page loads: null without the endpoint, else
    // whether it has any count
    const h = await apiGet('/api/v1/history?range=1h', false);
    if (h.status !== 200 && h.status !== 404)
      fail('GET /api/v1/history: HTTP ' + h.status);
    const history0 = h.status === 404 ? null : ((await h.json()).points || [])
      .some(p => p.success || p.failed || p.dead_lettered || p.retried);
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

    // the charts: axes, ticks, axis titles and a legend always; the
    // daemon's history when it has one, else "no data yet"
    // (want: as the history read before the page loaded; counts flushed
    // since may show, or wait for the page's next read)
    const want = history0 === null ? 'unavailable' : history0 ? 'data' : 'empty';
    await until('the charts drawn', () => page.evaluate(w => {
      const figs = Array.from(document.querySelectorAll('#view-dashboard .chart'));
      return (figs.length === 2 && figs.every(f => {
        const svg = f.querySelector('svg');
        if (w === 'empty' && f.dataset.state === 'data') w = 'data';
        return svg && f.dataset.state === w &&
          svg.querySelector('.x-axis') && svg.querySelector('.y-axis') &&
          svg.querySelectorAll('.x-tick').length >= 3 &&
          svg.querySelectorAll('.y-tick').length >= 3 &&
          svg.querySelectorAll('.axis-title').length === 2 &&
          f.querySelectorAll('.legend li').length === 2 &&
          (w === 'data' ? svg.querySelector('path.series.success')
            : svg.querySelector('.empty-text').textContent === 'no data yet');
      }) && (w !== 'unavailable' || /not available/.test(
        document.getElementById('history-note').textContent))) ||
        figs.map(f => f.dataset.state).join(',');
    }, want));
    ok(`the dashboard's charts have axes, labels and a legend (${want}` +
       (want === 'unavailable' ? ': "no data yet", history not available' : '') + ')');

    // the dead-letter link of rej opens its dead letters, bodies as text
    // (in one step in the page: the rows are rebuilt as figures change)
    await page.$eval('tr[data-task="rej"] .dead a', a => a.click());
    await until('dead letters listed', async () =>
      (await page.evaluate(() => location.hash)) === '#/tasks/rej/dead-letters' &&
      (await page.$$('#dlq li')).length >= 3);
    const xss = await page.evaluate(() => ({
      imgs: document.querySelectorAll('img').length,
      text: Array.from(document.querySelectorAll('#dlq .dlq-body'))
        .map(e => e.textContent).join('\n'),
    }));
    if (xss.imgs !== 0) fail('an img element was created from a body');
    if (!xss.text.includes('<img src=x onerror=alert(1)>'))
      fail('the body with markup is not shown as text: ' + xss.text);
    ok('a task\'s dead-letter link opens its dead letters; markup renders as text');

    // the newest body is over 64 KiB: the list shows its start and a link
    // to the message's page, which shows all of it
    const whole = await page.$eval('#dlq li:first-child a.whole',
      b => b.textContent).catch(() => null);
    if (!whole || !whole.includes('100010 bytes'))
      fail('no "Whole body" link on the cut body: ' + whole);
    const newest = await page.$eval('#dlq li:first-child', e => e.dataset.id);
    await page.click('#dlq li:first-child a.open');
    await until('the message page shows the whole body', () => page.evaluate(id => {
      const b = document.getElementById('msg-body').textContent;
      return (location.hash === '#/tasks/rej/dead-letters/' + id &&
        !document.getElementById('view-message').hidden &&
        b.includes('z'.repeat(100000)) &&
        document.querySelector('#msg-meta .meta-attempts').textContent === '1' &&
        document.getElementById('msg-error').textContent === 'test') ||
        location.hash + ' ' + b.length;
    }, newest));
    ok('a dead-letter row opens the message page (deep link): whole body, ' +
       'attempts, error');
    await page.goBack();
    await page.waitForSelector('#view-dlq:not([hidden])', { timeout: WAIT_MS });
    await page.goForward();
    await page.waitForSelector('#view-message:not([hidden])', { timeout: WAIT_MS });
    await page.goBack();
    await until('back on the list', async () =>
      (await page.$$('#view-dlq:not([hidden]) #dlq li')).length >= 3);
    ok('back and forward move between the list and the message page');

    // a search: the daemon filters (one entry holds "onerror") or says
    // it cannot
    await page.type('#dlq-q', 'onerror');
    await page.click('#dlq-refresh');
    await until('the search answered', () => page.evaluate(() => {
      const n = document.querySelectorAll('#dlq li').length;
      const s = document.getElementById('dlq-status').textContent;
      return (n === 1 && /matching the search/.test(s)) ||
        (n >= 3 && /Search is not available/.test(s)) || `${n} ${s}`;
    }));
    ok('the search filters, or says it is not available from this daemon');
    await page.click('#dlq-clear');
    await until('the search cleared', async () =>
      (await page.$$('#dlq li')).length >= 3);

    // "purge all" asks first, naming the count; dismissed, nothing purged
    const before = (await page.$$('#dlq li')).length;
    await page.click('#dlq-purge-all');
    await until('purge all asked for confirmation with the count', async () =>
      dialogs.some(m => m.startsWith(`Delete ${before} dead letter(s) of task rej`)) ||
      dialogs);
    await sleep(500);
    const after = (await apiGet('/api/v1/tasks/rej/dead-letters')).length;
    if (after !== before) fail(`purge all without confirmation: ${before} -> ${after}`);
    ok('"purge all" asks for confirmation, naming the count');

    // the keyboard reaches every control of the view, with a visible focus
    const nk = await tabReaches(page, 'dead-letter view');
    ok(`Tab reaches all ${nk} controls of the dead-letter view`);

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

    // 200 % zoom of 1280 px: 640 px CSS; no view reaches past the screen
    await page.setViewport({ width: 640, height: 800 });
    for (const [hash, section] of [
      ['#/', 'view-dashboard'], ['#/tasks/rej', 'view-task'],
      ['#/tasks/rej/dead-letters', 'view-dlq'],
      ['#/tasks/rej/dead-letters/' + newest, 'view-message'],
      ['#/tasks/rej/delayed', 'view-delayed'], ['#/daemons', 'view-daemons'],
      ['#/schedules', 'view-schedules']]) {
      await go(page, hash, section);
      await sleep(700);
      const wide = await overflow(page);
      if (wide.length) fail(`${hash} at 640 px: ${wide.join('; ')}`);
    }
    ok('at 640 px (200 % zoom) no view reaches past the screen');
    await page.setViewport({ width: 1280, height: 900 });

    // the send form: add {"a":2,"b":3}, the count goes up
    await go(page, '#/', 'view-dashboard');
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
    if (shot) {
      await page.screenshot({ path: shot, fullPage: true });
      ok('screenshot ' + shot);
    }
  } else if (mode === 'live') {
    // with the token, strictly: no console error, no failed request
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 900 });
    watch(page, base, problems, true);
    await page.evaluateOnNewDocument(t =>
      sessionStorage.setItem('taskmill.token', t), token);
    await page.goto(base + '/', { waitUntil: 'load' });
    await until('two task rows', async () =>
      (await page.$$('#tasks tbody tr')).length === 2);

    // the schedules: the configured one with its next slot, as the API
    await go(page, '#/schedules', 'view-schedules');
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
    await page.goBack();
    await page.waitForSelector('#view-dashboard:not([hidden])', { timeout: WAIT_MS });

    // pause in the page: intake stops, the queue grows while messages come
    const add = async () => (await apiGet('/api/v1/tasks'))
      .tasks.find(t => t.name === 'add');
    const pauseBtn = 'tr[data-task="add"] button.pause';
    await page.$eval(pauseBtn, b => b.click());
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
});

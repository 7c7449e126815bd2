// console-lib.mjs: what the console's browser checks share (console-check.mjs,
// console-views.mjs): headless Chromium through puppeteer-core, "ok:" and
// "FAIL:" lines, polling, the daemon's API, and a watch on every page that
// collects console errors, failed requests, HTTP errors and any request to
// another origin than the daemon's.
import puppeteer from 'puppeteer-core';

export const CHROMIUM = process.env.TM_CHROMIUM || '/usr/bin/chromium';
export const WAIT_MS = 20000;

// The endpoints a daemon of an older version may not have: the console
// asks for them and says "not available" on a 404 {"error":"not found"}.
// That 404 (and the browser's own log line for it) is expected, no other.
export const OPTIONAL =
  /\/api\/v1\/(history|daemons)(\?|\/|$)|\/api\/v1\/tasks\/[^/?]+\/(delayed|messages\/[^/?]+)(\?|$)/;

export function fail(what) {
  console.log('FAIL: ' + what);
  process.exit(1);
}
const T0 = Date.now();
export function ok(what) { console.log(`ok: ${what} (${Date.now() - T0} ms)`); }

export const sleep = ms => new Promise(r => setTimeout(r, ms));

// until polls fn (async, true = done) for up to ms (default WAIT_MS).
export async function until(what, fn, ms) {
  const end = Date.now() + (ms || WAIT_MS);
  let last;
  while (Date.now() < end) {
    try { last = await fn(); } catch (e) { last = e.message; }
    if (last === true) return;
    await sleep(200);
  }
  fail(`${what} (last: ${JSON.stringify(last)})`);
}

// client returns apiGet/apiPost against base, with the token if any.
export function client(base, token) {
  const auth = token ? { Authorization: 'Bearer ' + token } : {};
  return {
    async get(path, okOnly = true) {
      const r = await fetch(base + path, { headers: auth });
      if (okOnly && !r.ok) fail(`GET ${path}: HTTP ${r.status}`);
      return okOnly ? r.json() : r;
    },
    async post(path, body) {
      const r = await fetch(base + path, {
        method: 'POST', body,
        headers: { ...auth, 'Content-Type': 'application/json' },
      });
      if (!r.ok) fail(`POST ${path}: HTTP ${r.status} ${await r.text()}`);
      return r.json();
    },
  };
}

export async function launch() {
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
}

// run calls main(browser) with a new browser, then fails on any problem
// the watches recorded, else says that none was (last); an exception fails
// the check too. The browser is closed in every case.
export async function run(problems, last, main) {
  const browser = await launch();
  try {
    await main(browser);
    if (problems.length) fail(problems.join('; '));
    ok(last);
  } catch (e) {
    fail('exception: ' + e.stack);
  } finally {
    await browser.close();
  }
}

// watch records on problems what goes wrong on page; strict also counts
// console errors and HTTP errors (but the expected 404 of an OPTIONAL
// endpoint). Every request must stay on base's origin.
export function watch(page, base, problems, strict) {
  const origin = new URL(base).origin;
  page.on('request', r => {
    const u = r.url();
    if (!u.startsWith('data:') && new URL(u).origin !== origin)
      problems.push('request to another origin: ' + u);
  });
  page.on('console', m => {
    if (m.type() !== 'error' || !strict) return;
    const where = (m.location() && m.location().url) || '';
    if (/status of 404/.test(m.text()) && OPTIONAL.test(where)) return;
    problems.push('console: ' + m.text() + ' ' + where);
  });
  page.on('pageerror', e => problems.push('page error: ' + e.message));
  page.on('requestfailed', r =>
    problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on('response', r => {
    if (!strict || r.status() < 400) return;
    if (r.status() === 404 && OPTIONAL.test(r.url())) return;
    problems.push(`HTTP ${r.status()} for ${r.url()}`);
  });
}

// overflow lists the visible elements of page that reach past the
// viewport's right edge, and the document's own horizontal overflow.
export async function overflow(page) {
  return page.evaluate(() => {
    const de = document.documentElement;
    const w = de.clientWidth;
    const out = [];
    if (de.scrollWidth > w) out.push(`document ${de.scrollWidth} > ${w}`);
    for (const e of document.body.querySelectorAll('*')) {
      if (e.closest('[hidden], table.cards thead, svg *')) continue;
      const r = e.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      if (r.right > w + 1 || r.left < -1)
        out.push(`${e.tagName.toLowerCase()}#${e.id}.${e.className} ` +
                 `${Math.round(r.left)}..${Math.round(r.right)}`);
    }
    return out.slice(0, 5);
  });
}

// tabReaches presses Tab from the top of page until every visible control
// (link, button, input, select, textarea, focusable chart) has had the
// focus, or fails naming the ones never reached. Each focused control must
// show an outline. Controls are known by id, or by what they say (the
// page rebuilds rows as figures change: the elements may be new ones).
export async function tabReaches(page, what) {
  await page.evaluate(() => {
    window.tmKey = e => e.id || e.dataset.focus || e.getAttribute('aria-label') ||
      e.tagName + ' ' + (e.getAttribute('href') || '') + ' ' + e.textContent.trim();
  });
  const want = await page.evaluate(() => {
    const sel = 'a[href], button:not([disabled]), input, select, textarea, ' +
      '[tabindex="0"]';
    const keys = [];
    for (const e of document.querySelectorAll(sel)) {
      if (e.closest('[hidden]') || e.getClientRects().length === 0 ||
          getComputedStyle(e).visibility === 'hidden') continue;
      keys.push(window.tmKey(e));
    }
    document.activeElement.blur();
    window.scrollTo(0, 0);
    return [...new Set(keys)];
  });
  const seen = new Set();
  for (let i = 0; i < want.length + 15 && seen.size < want.length; i++) {
    await page.keyboard.press('Tab');
    const f = await page.evaluate(() => {
      const a = document.activeElement;
      const s = getComputedStyle(a);
      return { k: a === document.body ? null : window.tmKey(a),
               html: a.outerHTML.slice(0, 80),
               outline: s.outlineStyle !== 'none' && s.outlineWidth !== '0px' };
    });
    if (f.k === null || !want.includes(f.k)) continue;
    if (!f.outline) fail(`${what}: ${f.html} has no visible focus`);
    seen.add(f.k);
  }
  const missed = want.filter(k => !seen.has(k));
  if (missed.length) fail(`${what}: Tab never reached ${missed.join(' | ')}`);
  return want.length;
}

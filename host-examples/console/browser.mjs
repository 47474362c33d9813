// The operator console in a real browser: Debian's chromium, headless, driven by puppeteer-core.
//
//     node browser.mjs DIR        # DIR holds seed.json from `test_console.py seed DIR`
//
// HEART_FLEET_CLI names the binary, CHROMIUM the browser (default /usr/bin/chromium),
// SCREENSHOTS the folder for the screenshots (default target/console-screenshots).
// The page is checked at 1280×800 and on a phone-sized viewport: the seeded content is shown,
// a requeue without the token is refused with the row unchanged, with the token the run is
// `ready`, a drain marks the instance, the tampered receipt is marked on the run's page, the page
// loads nothing from outside the server and throws no script error.
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import assert from "node:assert/strict";
import puppeteer from "puppeteer-core";

const TOKEN = "console-browser-token-41c9";
const dir = process.argv[2];
assert.ok(dir, "usage: node browser.mjs DIR (DIR/seed.json from test_console.py seed)");
const seeded = JSON.parse(readFileSync(join(dir, "seed.json"), "utf8"));
const cli = process.env.HEART_FLEET_CLI || "heart-fleet";
const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const shots = resolve(process.env.SCREENSHOTS || join(repo, "target", "console-screenshots"));
mkdirSync(shots, { recursive: true });
const tokenFile = join(dir, "browser-token");
writeFileSync(tokenFile, `${TOKEN}\n`);

/** `heart-fleet serve` on a free loopback port; resolves with its base URL once it listens. */
function serve() {
  const proc = spawn(cli, ["--store", seeded.store, "serve", "--listen", "127.0.0.1:0", "--token-file", tokenFile], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  const lines = [];
  return new Promise((ok, fail) => {
    proc.on("error", fail);
    proc.on("exit", (code) => fail(new Error(`serve exited ${code} before listening: ${lines.join("")}`)));
    createInterface({ input: proc.stderr }).on("line", (line) => {
      lines.push(line);
      const m = line.match(/^heart-fleet: serving (http:\/\/\S+)/);
      if (m) ok({ proc, base: m[1].replace(/\/$/, ""), lines });
    });
  });
}

async function api(base, path) {
  const r = await fetch(base + path);
  assert.equal(r.status, 200, `${path}: ${r.status}`);
  return r.json();
}

/** Fails the test on a script error or a request that leaves the server (the page must work offline). */
function watch(page, base, problems) {
  page.on("pageerror", (e) => problems.push(`script error: ${e.message}`));
  page.on("request", (req) => {
    if (!req.url().startsWith(base) && !req.url().startsWith("data:")) problems.push(`request outside the server: ${req.url()}`);
  });
}

/** The page does not scroll sideways (wide tables scroll inside their own box). */
async function noSidewaysScroll(page, what) {
  const { scroll, width } = await page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth,
    width: window.innerWidth,
  }));
  assert.ok(scroll <= width, `${what}: the page is ${scroll}px wide in a ${width}px viewport`);
}

async function text(page, selector) {
  return page.$eval(selector, (e) => e.textContent.trim());
}

async function noticeAfter(page, click) {
  await page.evaluate(() => { document.querySelector("#notice").className = ""; });
  await click();
  await page.waitForFunction(() => /ok|bad/.test(document.querySelector("#notice").className), { timeout: 15000, polling: 100 });
  return page.$eval("#notice", (e) => ({ kind: e.className, text: e.textContent }));
}

async function checkOverview(page, base, viewport) {
  await page.goto(`${base}/`, { waitUntil: "load" });
  await page.waitForSelector(`#quarantined tr[data-run-id="${seeded.quarantined}"]`, { timeout: 15000 });
  assert.equal(await text(page, "#store"), "up");

  // Runs by status: the seeded counts, as the API reports them.
  const summary = await api(base, "/api/summary");
  const shown = await page.$$eval("#runs-by-status .count", (cs) =>
    Object.fromEntries(cs.map((c) => [c.dataset.status, Number(c.querySelector("b").textContent)])));
  assert.equal(shown.quarantined, 1, JSON.stringify(shown));
  assert.equal(shown.leased, 2, JSON.stringify(shown));
  for (const [status, n] of Object.entries(summary.runs)) if (n > 0) assert.equal(shown[status], n, status);

  // Live leases: owner, epoch and time left; the expired one marked expired.
  const lease = async (id) => page.$$eval(`#leases tr[data-run-id="${id}"] td`, (tds) => tds.map((t) => ({ text: t.textContent, cls: t.className })));
  const live = await lease(seeded.live);
  assert.equal(live[1].text, "worker-a");
  assert.match(live[2].text, /^\d+$/);
  assert.match(live[3].text, /^\d+[smh]$/, `time left of the live lease: ${live[3].text}`);
  assert.notEqual(live[3].cls, "expired");
  const expired = await lease(seeded.expired);
  assert.equal(expired[1].text, "worker-b");
  assert.match(expired[3].text, /^expired \d+[smh] ago$/);
  assert.equal(expired[3].cls, "expired");

  // Instances: the dead one without a drain button, the live one with one.
  const instance = async (id) => page.$$eval(`#instances tr[data-instance-id="${id}"] td`, (tds) => tds.map((t) => t.textContent));
  const dead = await instance("worker-dead");
  assert.equal(dead[1], "dead");
  assert.match(dead[4], /^\d+[smh]$/, `heartbeat age: ${dead[4]}`);
  assert.equal(await page.$('#instances tr[data-instance-id="worker-dead"] button.drain'), null);
  assert.equal((await instance("worker-a"))[1], "alive");
  assert.ok(await page.$('#instances tr[data-instance-id="worker-a"] button.drain'));

  // The last hour's chart: the quarantine of the seed counted.
  assert.ok(await page.$("#activity svg rect"), "the activity chart has no bars");
  assert.match(await text(page, '#activity [data-event="quarantined"]'), /^quarantined [1-9]\d*$/);

  await noSidewaysScroll(page, viewport);
  // Every action button is laid out and whole: not cut by its table's scroll box, not past
  // the screen's edge.
  const cut = await page.$$eval("main button", (buttons) => buttons.flatMap((b) => {
    const r = b.getBoundingClientRect();
    const box = (b.closest(".scroll") || document.documentElement).getBoundingClientRect();
    const whole = r.width > 0 && r.left >= box.left && r.right <= Math.min(box.right, window.innerWidth);
    return whole ? [] : [`${b.textContent} at ${Math.round(r.left)}..${Math.round(r.right)} in ${Math.round(box.left)}..${Math.round(box.right)}`];
  }));
  assert.deepEqual(cut, [], `${viewport}: buttons cut off`);
  await page.screenshot({ path: join(shots, `${viewport}-overview.png`), fullPage: true });
}

async function checkRunPage(page, base, viewport) {
  await page.goto(`${base}/#run/${encodeURIComponent(seeded.tampered)}`, { waitUntil: "load" });
  await page.waitForSelector("#receipts li[data-receipt-id]", { timeout: 15000 });
  const marks = await page.$$eval("#receipts li[data-receipt-id]", (lis) =>
    lis.map((li) => ({ verified: li.dataset.verified, mark: li.querySelector("[class^=mark-]").textContent })));
  const receipts = (await api(base, `/api/runs/${encodeURIComponent(seeded.tampered)}`)).receipts;
  assert.equal(marks.length, receipts.length);
  assert.equal(marks[0].mark, "✗ tampered", JSON.stringify(marks));
  assert.ok(marks.slice(1).every((m, i) => m.verified === String(receipts[i + 1].verified)));
  assert.match(await page.$eval("#verification", (e) => e.className), /mark-tampered/);
  await noSidewaysScroll(page, `${viewport} run page`);
  await page.screenshot({ path: join(shots, `${viewport}-run-tampered.png`), fullPage: true });
}

const { proc, base, lines } = await serve();
const exited = new Promise((ok) => proc.once("exit", (code, signal) => ok({ code, signal })));
let browser = null;
const problems = [];
try {
  browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    // The sandbox needs user namespaces, which CI containers running as root do not give.
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  const desktop = await browser.newPage();
  watch(desktop, base, problems);
  await desktop.setViewport({ width: 1280, height: 800 });
  await checkOverview(desktop, base, "desktop");
  console.log("1280×800: runs by status, live and expired leases, quarantine, instances, chart shown");

  // A phone: 390×844 at 3× (an iPhone 12-sized screen), touch; the same content, nothing wider
  // than the screen.
  const phone = await browser.newPage();
  watch(phone, base, problems);
  await phone.setViewport({ width: 390, height: 844, deviceScaleFactor: 3, isMobile: true, hasTouch: true });
  await checkOverview(phone, base, "phone");
  for (const card of ["#leases", "#quarantined", "#instances", "#activity"]) {
    const width = await phone.$eval(card, (e) => e.getBoundingClientRect().right);
    assert.ok(width <= 390, `${card} reaches ${width}px on a 390px screen`);
  }
  console.log("390×844: the same content, every card within the screen, no sideways scroll");

  // Requeue without the token: refused, the run unchanged. (The desktop tab comes to the front:
  // a background tab gets no animation frames.)
  await desktop.bringToFront();
  const before = await api(base, `/api/runs/${seeded.quarantined}`);
  const refused = await noticeAfter(desktop, () => desktop.click(`#quarantined tr[data-run-id="${seeded.quarantined}"] button.requeue`));
  assert.equal(refused.kind, "bad");
  assert.match(refused.text, /requeue .* refused: 401 unauthorized/);
  const after = await api(base, `/api/runs/${seeded.quarantined}`);
  assert.deepEqual(after.run, before.run);
  assert.equal(after.receipts.length, before.receipts.length);
  await desktop.screenshot({ path: join(shots, "desktop-requeue-refused.png") });
  console.log(`requeue without the token: "${refused.text}", the run still ${after.run.status}`);

  // With the token and an operator's name: ready, a `requeued` receipt naming the operator.
  await desktop.type("#token", TOKEN);
  await desktop.$eval("#token", (e) => e.dispatchEvent(new Event("change")));
  await desktop.type("#operator", "alice@ops");
  await desktop.$eval("#operator", (e) => e.dispatchEvent(new Event("change")));
  const done = await noticeAfter(desktop, () => desktop.click(`#quarantined tr[data-run-id="${seeded.quarantined}"] button.requeue`));
  assert.equal(done.kind, "ok", done.text);
  assert.match(done.text, new RegExp(`run ${seeded.quarantined} is ready`));
  const requeued = await api(base, `/api/runs/${seeded.quarantined}`);
  assert.equal(requeued.run.status, "ready");
  const last = requeued.receipts.at(-1);
  assert.equal(last.receipt.event, "requeued");
  assert.equal(last.receipt.owner, "alice@ops");
  assert.equal(last.verified, true);
  await desktop.waitForFunction((id) => !document.querySelector(`#quarantined tr[data-run-id="${id}"]`), {}, seeded.quarantined);
  await desktop.screenshot({ path: join(shots, "desktop-requeued.png"), fullPage: true });
  console.log(`requeue with the token: "${done.text}", receipt requeued by ${last.receipt.owner}`);

  // Drain the live instance.
  const drained = await noticeAfter(desktop, () => desktop.click('#instances tr[data-instance-id="worker-a"] button.drain'));
  assert.equal(drained.kind, "ok", drained.text);
  const instances = (await api(base, "/api/instances")).instances;
  assert.equal(instances.find((i) => i.instance_id === "worker-a").status, "draining");
  console.log(`drain with the token: "${drained.text}"`);

  await checkRunPage(desktop, base, "desktop");
  console.log("run page: the edited receipt marked tampered, every other mark as the API verifies it");

  await phone.bringToFront();
  await checkRunPage(phone, base, "phone");
  console.log("390×844: the run page readable, no sideways scroll");

  assert.deepEqual(problems, []);
  console.log(`screenshots in ${shots}`);
} finally {
  // The server is stopped whatever happened above; a test failure stays the error reported.
  await browser?.close();
  if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGTERM");
}
const { code, signal } = await exited;
assert.equal(code, 0, `serve exited ${code ?? signal} on SIGTERM: ${lines.filter((l) => /panick/.test(l)).join("\n")}`);

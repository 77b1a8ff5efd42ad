/**
 * A real browser for the Web UI test, driven by puppeteer-core with a fresh profile, and a folder for the screenshots
 * the run keeps. test/browser/install-chromium.sh finds it: Debian's Chromium where present, else npm's
 * @sparticuz/chromium (a devDependency: no root, no apt-get), else Debian's installed with apt-get.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import puppeteer from 'puppeteer-core';
import type { Browser, Page } from 'puppeteer-core';
import { ROOT, tmpDir } from './temporal';

/** Chromium's path, or why there is none (the install script's last words). */
export function findChromium(): { path: string } | { why: string } {
  try {
    const found = execFileSync('bash', [path.join(ROOT, 'test', 'browser', 'install-chromium.sh')], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      // Unpacking npm's (seconds), or apt-get when that does not run here: once, then it is found.
      timeout: 600_000,
    });
    return { path: found.trim() };
  } catch (err) {
    const stderr = String((err as { stderr?: string }).stderr ?? (err as Error).message).trim();
    return { why: stderr.split('\n').at(-1) || 'no Chromium' };
  }
}

/**
 * Headless, with a profile of its own; without the background-networking flags Chromium reaches out at start, and a
 * closed network refuses it.
 */
export function launchBrowser(executablePath: string): Promise<Browser> {
  return puppeteer.launch({
    executablePath,
    headless: true,
    userDataDir: tmpDir('oz0-chromium-'),
    // A loaded 2-core machine: the UI's pages may take a while.
    protocolTimeout: 120_000,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/** Where this run keeps the screenshots of one test file: `.oz0/test-artifacts/<run>/<name>/` (git-ignored). */
export function artifactsDir(name: string): string {
  const dir = path.join(ROOT, '.oz0', 'test-artifacts', process.env.OZ0_TEST_RUN ?? 'adhoc', name);
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

/** The page's own global, in functions that run in the page (this project's types have no DOM). */
declare const document: { body?: { innerText: string } };

/** The text the page shows, its frames' included (the UI renders a workflow's markdown in frames of their own). */
export async function textOf(page: Page): Promise<string> {
  const texts = await Promise.all(
    page.frames().map((frame) => frame.evaluate(() => document.body?.innerText ?? '').catch(() => '')),
  );
  return texts.join('\n');
}

/**
 * Waits until the page's text has every one of `texts` (the UI renders as its data arrives). On a timeout the page is
 * kept as `failed-<n>.png` beside the screenshots, and the error names what was missing.
 */
export async function waitForText(page: Page, texts: string[], timeout = 60_000): Promise<void> {
  const deadline = Date.now() + timeout;
  for (;;) {
    const shown = await textOf(page);
    const missing = texts.filter((t) => !shown.includes(t));
    if (missing.length === 0) return;
    if (Date.now() > deadline) {
      const shot = path.join(artifactsDir('web-ui'), `failed-${Date.now()}.png`);
      await page.screenshot({ path: shot }).catch(() => undefined);
      throw new Error(`${page.url()} did not show ${JSON.stringify(missing)} in ${timeout} ms; see ${shot}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Opens a page of the UI and waits until it shows `texts`. */
export async function open(page: Page, url: string, texts: string[]): Promise<void> {
  await page.goto(url, { waitUntil: 'domcontentloaded', timeout: 60_000 });
  await waitForText(page, texts);
}

/**
 * A9: signs `page` in to the approvals inbox at `inbox` as `login`, through the test identity provider's own sign-in
 * page (any password) and, the first time, its consent page.
 */
export async function signInToInbox(page: Page, inbox: string, login: string): Promise<void> {
  await page.goto(`${inbox}/`, { waitUntil: 'domcontentloaded' });
  await page.click('a[href="login"]');
  await page.waitForSelector('input[name=login]', { timeout: 30_000 });
  await page.type('input[name=login]', login);
  await page.type('input[name=password]', 'any');
  await Promise.all([page.waitForNavigation({ waitUntil: 'domcontentloaded' }), page.click('button[type=submit]')]);
  if (!page.url().startsWith(inbox)) {
    await Promise.all([page.waitForNavigation({ waitUntil: 'domcontentloaded' }), page.click('button[type=submit]')]);
  }
  await waitForText(page, ['signed in as']);
}

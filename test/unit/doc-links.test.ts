/**
 * The docs hold together: every relative link in the project's Markdown (README.md, docs/, bench/, deploy/) points at
 * a file that exists, and each `#anchor` at a heading of the page it names, as GitHub makes a heading's anchor. A
 * README that shrinks sends readers on to docs/; a link that leads nowhere loses what it pointed at.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';

const ROOT = path.resolve(__dirname, '..', '..');
/** Folders that hold no docs of the project's own: dependencies, builds, tools, state. */
const SKIP = new Set(['node_modules', 'dist', 'coverage']);

/** The project's Markdown files, relative to the root. */
function markdownFiles(dir = ROOT): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return entry.name.startsWith('.') || SKIP.has(entry.name) ? [] : markdownFiles(full);
    return entry.name.endsWith('.md') ? [path.relative(ROOT, full)] : [];
  });
}

/** The page's lines, those inside fenced code blocks blanked: a `#` or a link there is code, not Markdown. */
function outsideFences(markdown: string): string[] {
  let fence: string | undefined;
  return markdown.split('\n').map((line) => {
    const opens = /^\s*(```+|~~~+)/.exec(line);
    if (fence !== undefined) {
      if (opens && opens[1].startsWith(fence)) fence = undefined;
      return '';
    }
    if (opens) fence = opens[1];
    return opens ? '' : line;
  });
}

/** GitHub's anchor for a heading (github-slugger): lower case, punctuation and symbols dropped, spaces to hyphens. */
function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // a link or an image: its text
    .replace(/`/g, '')
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '').replace(/ /g, '-');
}

/** Every anchor a page has: its headings' slugs, a repeated one numbered `-1`, `-2`, … as GitHub does. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of outsideFences(markdown)) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!heading) continue;
    const base = slug(heading[1]);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** The links of a page whose target is in this repository (no scheme, no host); inline code holds no links. */
function relativeLinks(markdown: string): string[] {
  const links: string[] = [];
  for (const line of outsideFences(markdown).map((l) => l.replace(/(`+)[^`]*?\1/g, ''))) {
    for (const m of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) links.push(m[1]);
    const definition = /^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/.exec(line);
    if (definition) links.push(definition[1]);
  }
  return links.filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target) && !target.startsWith('//'));
}

/** Where the pages come from: the disk, or a test's own pages. Paths are relative to the root. */
interface Pages {
  exists(file: string): boolean;
  /** A Markdown page's text, or undefined when there is no such file. */
  read(file: string): string | undefined;
}

/** What is wrong with each relative link of `file`, as `file: link: why` lines. */
function brokenLinks(file: string, pages: Pages): string[] {
  const page = pages.read(file);
  if (page === undefined) return [`${file}: no such file`];
  return relativeLinks(page).flatMap((link) => {
    const [target, anchor] = link.split('#', 2) as [string, string | undefined];
    const named = target === '' ? file : path.normalize(path.join(path.dirname(file), decodeURI(target)));
    if (!pages.exists(named)) return [`${file}: ${link}: ${named} does not exist`];
    if (anchor === undefined || anchor === '') return [];
    const text = named.endsWith('.md') ? pages.read(named) : undefined;
    if (text === undefined) return [`${file}: ${link}: an anchor into ${named}, which is not a Markdown page`];
    return anchors(text).has(decodeURIComponent(anchor))
      ? []
      : [`${file}: ${link}: ${named} has no heading #${anchor}`];
  });
}

const disk: Pages = {
  exists: (file) => fs.existsSync(path.join(ROOT, file)),
  read: (file) => {
    const full = path.join(ROOT, file);
    return fs.existsSync(full) && fs.statSync(full).isFile() ? fs.readFileSync(full, 'utf8') : undefined;
  },
};

test.each([
  ['Live sessions (H1–H10)', 'live-sessions-h1h10'],
  ['The embedded default: `oz0 dev`', 'the-embedded-default-oz0-dev'],
  ['From plain `@temporalio/client`', 'from-plain-temporalioclient'],
  ["The CLI's start", 'the-clis-start'],
  ['Policy, kill switches and approvals (A1–A3, B6, C5)', 'policy-kill-switches-and-approvals-a1a3-b6-c5'],
  ['The drill: `oz0 plugin test`', 'the-drill-oz0-plugin-test'],
  ['node_modules and [a link](x.md)', 'node_modules-and-a-link'],
])('a heading %j has the anchor GitHub gives it, %j', (heading, anchor) => {
  expect(slug(heading)).toBe(anchor);
});

test('the check finds a missing file, a missing heading and a repeated heading, and takes links in code as code', () => {
  const pages: Record<string, string | undefined> = {
    'README.md': [
      '# oz0',
      '## Quick start',
      '## Quick start',
      'See [the rules](docs/rules.md#keys), [gone](docs/gone.md), [nowhere](docs/rules.md#nowhere),',
      '[the second](#quick-start-1), [a third](#quick-start-2), [the web](https://example.com/x.md#y)',
      'and `[not a link](docs/gone.md)`.',
      '```md',
      '[inside a fence](docs/gone.md)',
      '```',
    ].join('\n'),
    'docs/rules.md': '# Rules\n\n## Keys\n\n```sh\n# not a heading\n```\n[back](../README.md#quick-start)',
  };
  const inMemory: Pages = { exists: (f) => f in pages, read: (f) => pages[f] };
  expect(brokenLinks('README.md', inMemory)).toEqual([
    'README.md: docs/gone.md: docs/gone.md does not exist',
    'README.md: docs/rules.md#nowhere: docs/rules.md has no heading #nowhere',
    'README.md: #quick-start-2: README.md has no heading #quick-start-2',
  ]);
  expect(brokenLinks('docs/rules.md', inMemory)).toEqual([]);
});

test("every relative link in the project's Markdown points at a file that exists, and each #anchor at a heading", () => {
  const files = markdownFiles();
  expect(files).toEqual(expect.arrayContaining(['README.md', 'docs/rules.md', 'bench/README.md']));
  expect(files.flatMap((file) => brokenLinks(file, disk))).toEqual([]);
});

test('the README stays short: at most 250 lines, the rest in docs/ (issue 55)', () => {
  const lines = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8').split('\n').length - 1;
  expect(lines).toBeLessThanOrEqual(250);
});

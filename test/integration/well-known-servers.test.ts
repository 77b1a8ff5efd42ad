/**
 * S1-S4 (issue 45.9): widely used MCP servers nobody here wrote, named by their package at the pinned versions
 * docs/servers.md gives, installed by a real node from npm and PyPI (the registries npm and pip are told of, as
 * `npm install` is) and run sandboxed with the grants docs/servers.md gives: one job calls each, and each answers
 * from its side — the file it wrote and read, the memory file it keeps, the commit it read, the page it fetched.
 * The configs are docs/servers.md's own, read from its JSON blocks, so the documentation cannot drift from what runs.
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { callsOf } from '../../model/job';
import type { JobSpec } from '../../model/schemas';
import { ROOT, runJob, tmpDir, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();

/** docs/servers.md's server configs, by name: each ```json block that holds `"servers"`. */
function documentedServers(): Record<string, Record<string, unknown>> {
  const text = fs.readFileSync(path.join(ROOT, 'docs', 'servers.md'), 'utf8');
  const out: Record<string, Record<string, unknown>> = {};
  for (const [, block] of text.matchAll(/```json\n([\s\S]*?)```/g)) {
    const parsed = JSON.parse(block) as { servers?: Record<string, Record<string, unknown>> };
    Object.assign(out, parsed.servers ?? {});
  }
  return out;
}

/** A documented config with its placeholders (`/srv/…`, `PORT`) made this test's folders and port. */
function fill(value: unknown, places: Record<string, string>): unknown {
  if (typeof value === 'string') return Object.entries(places).reduce((s, [k, v]) => s.split(k).join(v), value);
  if (Array.isArray(value)) return value.map((v) => fill(v, places));
  if (value && typeof value === 'object')
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fill(v, places)]));
  return value;
}

function text(result: { content: unknown[] }): string {
  return (result.content as Array<{ type: string; text?: string }>).map((c) => c.text ?? '').join('\n');
}

test('S1-S4: filesystem, memory, sequential-thinking, time, git and fetch, by package and sandboxed as docs/servers.md says, each answer a job', async () => {
  const servers = documentedServers();
  expect(Object.keys(servers).sort()).toEqual(['fetch', 'filesystem', 'git', 'memory', 'thinking', 'time']);
  // The folders a user would have: files to share (as the user left them: 0755, a file of theirs), a memory folder,
  // a repository with a commit.
  const root = tmpDir('oz0-well-known-');
  fs.chmodSync(root, 0o755);
  const files = path.join(root, 'files');
  const memory = path.join(root, 'memory');
  const repo = path.join(root, 'repo');
  for (const dir of [files, memory, repo]) fs.mkdirSync(dir, { mode: 0o755 });
  fs.writeFileSync(path.join(files, 'hello.txt'), 'hello from the user\n');
  const git = (...args: string[]) => spawnSync('git', ['-C', repo, ...args], { encoding: 'utf8' });
  git('init', '-q');
  fs.writeFileSync(path.join(repo, 'README'), 'a repository\n');
  git('add', 'README');
  expect(git('-c', 'user.name=t', '-c', 'user.email=t@x', 'commit', '-qm', 'the first commit').status).toBe(0);
  // A page on 127.0.0.1 for fetch (its own robots.txt check finds none).
  const page = http.createServer((req, res) => {
    if (req.url === '/page')
      res.writeHead(200, { 'content-type': 'text/html' }).end('<h1>Fetched</h1><p>from 127.0.0.1</p>');
    else res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => page.listen(0, '127.0.0.1', resolve));
  const port = String((page.address() as AddressInfo).port);
  try {
    const config = temporal.config({
      servers: fill(servers, { '/srv/files': files, '/srv/memory': memory, '/srv/repo': repo, PORT: port }),
    });
    const spec: JobSpec = {
      tenant: 'acme',
      steps: [
        { call: 'filesystem.write_file', args: { path: path.join(files, 'note.txt'), content: 'written by a job' } },
        { call: 'filesystem.read_text_file', args: { path: path.join(files, 'note.txt') } },
        { call: 'filesystem.read_text_file', args: { path: path.join(files, 'hello.txt') } },
        {
          call: 'memory.create_entities',
          args: { entities: [{ name: 'oz0', entityType: 'project', observations: ['runs MCP calls'] }] },
        },
        { call: 'memory.read_graph' },
        {
          call: 'thinking.sequentialthinking',
          args: { thought: 'one step', thoughtNumber: 1, totalThoughts: 1, nextThoughtNeeded: false },
        },
        { call: 'time.get_current_time', args: { timezone: 'UTC' } },
        { call: 'git.git_log', args: { repo_path: repo, max_count: 1 } },
        { call: 'fetch.fetch', args: { url: `http://127.0.0.1:${port}/page` } },
      ],
    };
    const { trace } = await runJob(temporal, config, spec);
    const calls = callsOf(trace);
    // Each answered: its text shown beside it where one did not.
    expect(calls.map((c) => [c.tool, c.result.isError ? text(c.result) : 'ok'])).toEqual(
      spec.steps.map((step) => ['call' in step ? step.call : '', 'ok']),
    );
    const [, written, hello, , graph, thought, time, log, fetched] = calls.map((c) => text(c.result));
    expect(written).toBe('written by a job');
    expect(hello).toBe('hello from the user\n');
    expect(graph).toContain('runs MCP calls');
    expect(thought).toContain('"thoughtNumber": 1');
    expect(time).toContain('"timezone": "UTC"');
    expect(log).toContain('the first commit');
    expect(fetched).toContain('Fetched');
    // What the sandboxes left in the user's folders is the user's (their owner's) again.
    expect(fs.readFileSync(path.join(files, 'note.txt'), 'utf8')).toBe('written by a job');
    expect(fs.statSync(path.join(files, 'note.txt')).uid).toBe(fs.statSync(files).uid);
    // The memory server's graph is the tenant's own (issue 55.9: `{tenant}` in its env and grant), in the folder the
    // node made for it.
    expect(fs.readFileSync(path.join(memory, 'acme', 'memory.jsonl'), 'utf8')).toContain('runs MCP calls');
  } finally {
    await new Promise((resolve) => page.close(resolve));
  }
}, 600_000);

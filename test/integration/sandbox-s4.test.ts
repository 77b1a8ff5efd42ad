/**
 * S4 (issue 45.5, 45.7): git in a sandbox, and a program's own arguments in its write grant.
 *
 * Git: A sandbox runs as a uid of its own, so a repository its config grants belongs to
 * another user; git refuses such a one ("dubious ownership") unless it is a safe directory. Each sandbox's
 * /etc/gitconfig names its grants so: `git log` of a granted repository works inside; the control — the same command
 * told to skip the system config (GIT_CONFIG_NOSYSTEM) — meets git's refusal, so the test sees what it would without.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Isolation } from '../../activities/sandbox';
import { gitConfigFor } from '../../activities/sandbox/git';
import { programPaths } from '../../activities/sandbox/program';
import { parseConfig } from '../../common/config';
import type { LoadedConfig } from '../../common/config';
import { ROOT, logger, tmpDir } from '../helpers/temporal';
import { sandboxed, writableDir } from '../helpers/sandbox';

const root = process.getuid?.() === 0;

/** Runs /bin/sh with `args` in a sandbox of the config's harness `sh`: what it printed. */
async function inSandbox(isolation: Isolation, config: LoadedConfig, args: string[], env: Record<string, string> = {}) {
  const started = await isolation.start({
    who: 'sh',
    field: 'harnesses.sh.sandbox',
    command: '/bin/sh',
    args,
    cwd: writableDir(),
    env: { PATH: '/usr/bin:/bin', ...env },
    grants: config.harnesses.sh.sandbox,
    tenant: 'acme',
  });
  let out = '';
  started.child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  started.child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  await new Promise((resolve) => started.child.once('exit', resolve));
  await started.stop(1000);
  return out.trim();
}

/** A config whose harness `sh` has these grants, outside any Temporal. */
function shConfig(grants: Parameters<typeof sandboxed>[0]): LoadedConfig {
  return {
    ...parseConfig({
      node: { stateDir: tmpDir('oz0-state-') },
      harnesses: { sh: { command: '/bin/sh', tools: ['*'], sandbox: sandboxed(grants) } },
    }),
    baseDir: ROOT,
    source: 'test',
  };
}

test('S4: the gitconfig a sandbox sees names its grants as safe, exactly, quoted, after the node’s own', () => {
  const system = path.join(tmpDir(), 'gitconfig');
  fs.writeFileSync(system, '[core]\n\tautocrlf = false');
  const text = gitConfigFor(['/srv/repo', '/srv/a "b"\\c', '/srv/repo'], system)!;
  expect(text.startsWith('[core]\n\tautocrlf = false\n')).toBe(true);
  expect(text).toContain('[safe]\n\tdirectory = "/srv/repo"\n\tdirectory = "/srv/a \\"b\\"\\\\c"\n');
  expect(text).not.toContain('directory = *');
  expect(gitConfigFor([])).toBeUndefined();
});

(root ? test : test.skip)(
  'S4: a repository granted to a sandbox works with git inside it (the control: without the sandbox’s gitconfig, git refuses it as another user’s)',
  async () => {
    const repo = path.join(tmpDir('oz0-repo-'), 'repo');
    const git = (...args: string[]) => spawnSync('git', ['-C', repo, ...args], { encoding: 'utf8' });
    fs.mkdirSync(repo);
    expect(git('init', '-q').status).toBe(0);
    fs.writeFileSync(path.join(repo, 'README'), 'hello');
    git('add', 'README');
    expect(git('-c', 'user.name=t', '-c', 'user.email=t@x', 'commit', '-qm', 'first commit').status).toBe(0);
    fs.chmodSync(path.dirname(repo), 0o755);
    const config = shConfig({ read: [repo] });
    const isolation = new Isolation(config, logger);
    const run = (env: Record<string, string>) =>
      inSandbox(isolation, config, ['-c', `git -C ${repo} log --format=%s 2>&1`], env);
    try {
      expect(await run({})).toBe('first commit');
      expect(await run({ GIT_CONFIG_NOSYSTEM: '1' })).toMatch(/dubious ownership/);
    } finally {
      await isolation.close();
    }
  },
);

test('S4: a file the program’s arguments name inside its write grant is the grant’s, not its program’s: written on its first run and again on its second (the control: one outside is bound read-only)', async () => {
  const grant = writableDir('oz0-grant-');
  const log = path.join(grant, 'out.jsonl');
  const outside = path.join(tmpDir('oz0-prog-'), 'tap.js');
  // Writable by anyone on the node: only its binding, read-only as a program file, keeps the sandbox from it.
  fs.writeFileSync(outside, '// the program', { mode: 0o666 });
  fs.chmodSync(outside, 0o666);
  expect(programPaths('/bin/sh', [outside, log], [grant])).not.toContain(log);
  expect(programPaths('/bin/sh', [outside, log], [grant])).toContain(outside);
  const config = shConfig({ write: [grant] });
  const isolation = new Isolation(config, logger);
  try {
    const append = ['-c', 'echo run >> "$0" && echo wrote || echo refused', log];
    expect(await inSandbox(isolation, config, append)).toBe('wrote');
    // Its second run: the file exists now, and stays the grant's.
    expect(await inSandbox(isolation, config, append)).toBe('wrote');
    expect(fs.readFileSync(log, 'utf8')).toBe('run\nrun\n');
    // The control: a program file its arguments name outside its grants is read-only inside.
    const touch = ['-c', '{ echo x >> "$0"; } 2>&1 && echo wrote || echo refused', outside];
    expect(await inSandbox(isolation, config, touch)).toMatch(/Read-only file system\nrefused$/);
  } finally {
    await isolation.close();
  }
});

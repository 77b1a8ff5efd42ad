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

/** A folder as a user leaves it: owned by `uid`, 0755, with a file of theirs (0644) in it. */
function usersFolder(uid: number) {
  const parent = tmpDir('oz0-users-');
  fs.chmodSync(parent, 0o755);
  const dir = path.join(parent, 'memory');
  fs.mkdirSync(dir, { mode: 0o755 });
  fs.chmodSync(dir, 0o755);
  const file = path.join(dir, 'memory.jsonl');
  fs.writeFileSync(file, '{"first":true}\n', { mode: 0o644 });
  fs.chownSync(dir, uid, uid);
  fs.chownSync(file, uid, uid);
  return { dir, file };
}

/** The ACL entries of a path as getfacl names them (`user::rwx`, `group:70000:rwx`, `mask::rwx`, …). */
function aclOf(p: string, name = 'system.posix_acl_access'): string[] {
  const out = spawnSync(
    'python3',
    ['-c', `import os,sys; sys.stdout.write(os.getxattr(sys.argv[1], '${name}').hex())`, p],
    {
      encoding: 'utf8',
    },
  );
  if (out.status !== 0) return [];
  const buf = Buffer.from(out.stdout, 'hex');
  const tags: Record<number, string> = { 1: 'user:', 2: 'user:', 4: 'group:', 8: 'group:', 16: 'mask:', 32: 'other:' };
  const entries: string[] = [];
  for (let at = 4; at + 8 <= buf.length; at += 8) {
    const tag = buf.readUInt16LE(at);
    const perm = buf.readUInt16LE(at + 2);
    const id = buf.readUInt32LE(at + 4);
    const rwx = `${perm & 4 ? 'r' : '-'}${perm & 2 ? 'w' : '-'}${perm & 1 ? 'x' : '-'}`;
    entries.push(`${tags[tag]}${tag === 2 || tag === 8 ? id : ''}:${rwx}`);
  }
  return entries;
}

(root ? test : test.skip)(
  'S4 (issue 45.4): a write grant works on a folder as its owner left it (0755, a file of theirs in it); what the sandbox leaves there is the owner’s (the control: the sandbox’s user could not write it as left)',
  async () => {
    const owner = 61234;
    const { dir, file } = usersFolder(owner);
    const config = shConfig({ write: [dir] });
    const gid = config.node.sandboxGid;
    // The control: the folder as its owner left it is not the sandbox's user's to write.
    const control = spawnSync(
      'setpriv',
      [`--reuid=${config.node.sandboxUids.first}`, `--regid=${gid}`, '--clear-groups', 'sh', '-c', `echo x >> ${file}`],
      { encoding: 'utf8' },
    );
    expect(control.stderr).toMatch(/Permission denied/);
    const isolation = new Isolation(config, logger);
    try {
      const write = `echo '{"second":true}' >> ${file} && mkdir ${dir}/sub && echo kept > ${dir}/sub/note && echo wrote`;
      expect(await inSandbox(isolation, config, ['-c', `${write} 2>&1`])).toBe('wrote');
      // A second sandbox (another uid) writes what the first left.
      expect(await inSandbox(isolation, config, ['-c', `echo more >> ${dir}/sub/note 2>&1 && echo wrote`])).toBe(
        'wrote',
      );
    } finally {
      await isolation.close();
    }
    expect(fs.readFileSync(file, 'utf8')).toBe('{"first":true}\n{"second":true}\n');
    expect(fs.readFileSync(path.join(dir, 'sub', 'note'), 'utf8')).toBe('kept\nmore\n');
    // The owner, their group and their bits are as they were; one ACL entry lets the sandboxes' group in.
    const stat = fs.statSync(dir);
    expect([stat.uid, stat.gid]).toEqual([owner, owner]);
    expect(aclOf(dir)).toEqual(['user::rwx', 'group::r-x', `group:${gid}:rwx`, 'mask::rwx', 'other::r-x']);
    expect(aclOf(dir, 'system.posix_acl_default')).toEqual(aclOf(dir));
    expect(aclOf(file)).toEqual(['user::rw-', 'group::r--', `group:${gid}:rw-`, 'mask::rw-', 'other::r--']);
    // What the sandboxes left is handed back to the folder's owner.
    expect(fs.statSync(path.join(dir, 'sub')).uid).toBe(owner);
    expect(fs.statSync(path.join(dir, 'sub', 'note')).uid).toBe(owner);
  },
);

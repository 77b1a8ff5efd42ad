/**
 * I1: what a sandbox's uid left in a write grant is handed to the grant's owner when the sandbox ends, so a uid
 * leased again owns nothing an earlier sandbox made, and what its maker could write stays writable by the server's
 * next sandbox (the shared group) — SQLite makes its files 0644 whatever the umask. A link it left is changed itself,
 * never what it points at (the control: a file of the node's outside, untouched).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { handOver } from '../../activities/sandbox/disk';

const root = process.getuid?.() === 0;
const UID = 1_879_000_123;

(root ? test : test.skip)(
  'I1: a sandbox’s files in a write grant go to the grant’s owner, group-writable; a link it left is not followed',
  async () => {
    const top = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-handover-'));
    const grant = path.join(top, 'grant');
    fs.mkdirSync(path.join(grant, 'sub'), { recursive: true });
    const store = path.join(grant, 'sub', 'store.db');
    fs.writeFileSync(store, 'rows');
    fs.chmodSync(store, 0o644);
    const readOnly = path.join(grant, 'notes.txt');
    fs.writeFileSync(readOnly, 'mine');
    fs.chmodSync(readOnly, 0o444);
    const nodeFile = path.join(top, 'node-secret');
    fs.writeFileSync(nodeFile, 'secret');
    fs.chmodSync(nodeFile, 0o600);
    const link = path.join(grant, 'link');
    fs.symlinkSync(nodeFile, link);
    for (const p of [store, readOnly, path.join(grant, 'sub')]) fs.chownSync(p, UID, 65534);
    fs.lchownSync(link, UID, 65534);
    const other = path.join(grant, 'other.txt');
    fs.writeFileSync(other, 'another sandbox’s');
    fs.chownSync(other, UID + 1, 65534);
    fs.chmodSync(other, 0o644);

    await handOver(grant, UID);

    const mode = (p: string) => fs.lstatSync(p).mode & 0o7777;
    expect([fs.statSync(store).uid, fs.statSync(store).gid, mode(store)]).toEqual([0, 65534, 0o664]);
    expect([fs.statSync(readOnly).uid, mode(readOnly)]).toEqual([0, 0o444]);
    expect(fs.lstatSync(path.join(grant, 'sub')).uid).toBe(0);
    expect(fs.lstatSync(link).uid).toBe(0);
    // What the link points at, and what another uid owns, are left as they were.
    expect([fs.statSync(nodeFile).uid, mode(nodeFile)]).toEqual([0, 0o600]);
    expect([fs.statSync(other).uid, mode(other)]).toEqual([UID + 1, 0o644]);
    fs.rmSync(top, { recursive: true, force: true });
  },
);

(root ? test : test.skip)(
  'I12: a folder swapped for a link while the hand-over works through it leads nowhere: the files outside keep their owner (the control: changing by path from the top follows that link)',
  async () => {
    const top = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-handover-'));
    const grant = path.join(top, 'grant');
    const left = path.join(grant, 'left');
    const outside = path.join(top, 'root-only');
    fs.mkdirSync(left, { recursive: true });
    fs.mkdirSync(outside, { mode: 0o700 });
    // The grant's owner is not root (a Compose node's data folder): a file outside that went to it would be the hole.
    const OWNER = 1000;
    fs.chownSync(grant, OWNER, 65534);
    const names = Array.from({ length: 20 }, (_, i) => `f${i}`);
    for (const name of names) {
      fs.writeFileSync(path.join(left, name), 'left behind');
      fs.chownSync(path.join(left, name), UID, 65534);
      fs.writeFileSync(path.join(outside, name), 'root only');
    }
    fs.chownSync(left, UID, 65534);
    // Another sandbox of the server swaps the left-behind folder for a link to the root-only one as soon as the
    // hand-over has read its first entry inside it (renameat2's exchange, in two steps here).
    const lstat = fs.promises.lstat;
    let swapped = false;
    const spy = jest.spyOn(fs.promises, 'lstat').mockImplementation((async (p: fs.PathLike, o?: unknown) => {
      const stat = await (lstat as (p: fs.PathLike, o?: unknown) => Promise<fs.Stats>).call(fs.promises, p, o);
      if (!swapped && /\/f\d+$/.test(String(p))) {
        swapped = true;
        fs.renameSync(left, `${left}.moved`);
        fs.symlinkSync(outside, left);
      }
      return stat;
    }) as typeof fs.promises.lstat);
    try {
      await handOver(grant, UID);
    } finally {
      spy.mockRestore();
    }
    expect(swapped).toBe(true);
    // Outside: every file still root's. Inside (the folder, moved): every file handed to the grant's owner.
    for (const name of names) expect(fs.statSync(path.join(outside, name)).uid).toBe(0);
    for (const name of names) expect(fs.statSync(path.join(`${left}.moved`, name)).uid).toBe(OWNER);
    // The control: the same change by a path from the top goes through the link, as the hand-over did before.
    fs.lchownSync(path.join(left, names[0]), OWNER, -1);
    expect(fs.statSync(path.join(outside, names[0])).uid).toBe(OWNER);
    fs.rmSync(top, { recursive: true, force: true });
  },
);

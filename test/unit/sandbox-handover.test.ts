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

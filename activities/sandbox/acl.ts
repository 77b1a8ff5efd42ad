/**
 * S4 (issue 45.4): a write grant works on a folder as its owner left it. A sandbox on a node run as root is a uid of
 * its own in the group `node.sandboxGid`, so a folder its owner left 0755 (a `MEMORY_FILE_PATH`'s, a project's) is
 * not its to write. The node adds one POSIX ACL entry for that group — rwx on each folder (and as the folder's default,
 * so what is made there later inherits it), rw on each file — and changes nothing else: the owner, the mode and the
 * owner's group keep what they had (`ls -l` shows a `+`, and the group bits show the ACL's mask). What a sandbox
 * leaves there is handed back to the folder's owner when it ends (./disk.ts).
 *
 * Through descriptors, as every walk of a grant is (./disk.ts): `lsetxattr` on the entry as its folder's descriptor
 * names it, so an entry swapped for a link between the walk's look and the change is never followed.
 */
import fs from 'node:fs';
import { koffi } from './ffi';
import { walkTree } from './disk';

const ACCESS = 'system.posix_acl_access';
const DEFAULT = 'system.posix_acl_default';
const VERSION = 2;
const TAG = { userObj: 0x01, user: 0x02, groupObj: 0x04, group: 0x08, mask: 0x10, other: 0x20 } as const;
const NO_ID = 0xffffffff;
const ENODATA = 61;
const EOPNOTSUPP = 95;

interface Entry {
  tag: number;
  perm: number;
  id: number;
}

interface Xattr {
  get(path: string, name: string): Buffer | undefined;
  set(path: string, name: string, value: Buffer): void;
}

let xattr: Xattr | undefined;

class XattrError extends Error {
  constructor(
    readonly errno: number,
    what: string,
  ) {
    super(`${what}: errno ${errno}`);
  }
}

function lib(): Xattr {
  if (xattr) return xattr;
  const ffi = koffi();
  const libc = ffi.load('libc.so.6');
  const lget = libc.func('long lgetxattr(const char *path, const char *name, _Out_ uint8_t *value, size_t size)');
  const lset = libc.func(
    'int lsetxattr(const char *path, const char *name, const uint8_t *value, size_t size, int flags)',
  );
  return (xattr = {
    get(path, name) {
      const buf = Buffer.alloc(4096);
      const n = Number(lget(path, name, buf, buf.length));
      if (n >= 0) return buf.subarray(0, n);
      const errno = ffi.errno();
      if (errno === ENODATA) return undefined;
      throw new XattrError(errno, `lgetxattr ${name}`);
    },
    set(path, name, value) {
      if (lset(path, name, value, value.length, 0) !== 0) throw new XattrError(ffi.errno(), `lsetxattr ${name}`);
    },
  });
}

function decode(buf: Buffer): Entry[] {
  const out: Entry[] = [];
  for (let at = 4; at + 8 <= buf.length; at += 8) {
    out.push({ tag: buf.readUInt16LE(at), perm: buf.readUInt16LE(at + 2), id: buf.readUInt32LE(at + 4) });
  }
  return out;
}

function encode(entries: Entry[]): Buffer {
  const buf = Buffer.alloc(4 + entries.length * 8);
  buf.writeUInt32LE(VERSION, 0);
  entries.forEach((e, i) => {
    buf.writeUInt16LE(e.tag, 4 + i * 8);
    buf.writeUInt16LE(e.perm, 6 + i * 8);
    buf.writeUInt32LE(e.id, 8 + i * 8);
  });
  return buf;
}

/** The ACL a mode stands for: owner, group, others. */
function ofMode(mode: number): Entry[] {
  return [
    { tag: TAG.userObj, perm: (mode >> 6) & 7, id: NO_ID },
    { tag: TAG.groupObj, perm: (mode >> 3) & 7, id: NO_ID },
    { tag: TAG.other, perm: mode & 7, id: NO_ID },
  ];
}

/**
 * The ACL with `gid`'s entry at `perm` (added, or widened), and a mask that lets it through: the mask keeps what it
 * let through before (the owner's group's bits, where there was none) and adds `perm`.
 */
function withGroup(entries: Entry[], gid: number, perm: number): Entry[] {
  const out = entries.filter((e) => !(e.tag === TAG.group && e.id === gid));
  const had = entries.find((e) => e.tag === TAG.group && e.id === gid)?.perm ?? 0;
  out.push({ tag: TAG.group, perm: had | perm, id: gid });
  const mask = out.find((e) => e.tag === TAG.mask);
  const groupObj = out.find((e) => e.tag === TAG.groupObj)?.perm ?? 0;
  const rest = out.filter((e) => e.tag !== TAG.mask);
  rest.push({ tag: TAG.mask, perm: (mask?.perm ?? groupObj) | perm, id: NO_ID });
  return rest.sort((a, b) => a.tag - b.tag || a.id - b.id);
}

function grants(entries: Entry[] | undefined, gid: number, perm: number): boolean {
  const own = entries?.find((e) => e.tag === TAG.group && e.id === gid);
  const mask = entries?.find((e) => e.tag === TAG.mask);
  return !!own && (own.perm & perm) === perm && (!mask || (mask.perm & perm) === perm);
}

/**
 * Whether the group may already write there: the owner's group it is, with its write bit; or an ACL entry of it
 * (anyone may write a folder of mode o+w, and that is its owner's choice, left as it is).
 */
function groupMayWrite(where: string, stat: fs.Stats, gid: number): boolean {
  if (stat.gid === gid && stat.mode & 0o020) return true;
  const acl = lib().get(where, ACCESS);
  return grants(acl && decode(acl), gid, stat.isDirectory() ? 7 : 2);
}

/**
 * Lets the sandboxes' group write a grant (a folder, with all it holds, or a file) as its owner left it; undefined
 * when it could or now can, else why it cannot (a file system that takes no ACL), in words with what to do instead.
 */
export async function letSandboxesWrite(grant: string, gid: number): Promise<string | undefined> {
  const top = await fs.promises.lstat(grant).catch(() => undefined);
  if (!top || top.isSymbolicLink()) return undefined;
  try {
    // Once done, the folder's own entry says so: what sandboxes make there inherits it, and is handed back with it.
    if (top.mode & 0o002 || groupMayWrite(grant, top, gid)) return undefined;
    await walkTree(grant, (where, stat) => {
      if (stat.isDirectory()) {
        const access = lib().get(where, ACCESS);
        lib().set(where, ACCESS, encode(withGroup(access ? decode(access) : ofMode(stat.mode), gid, 7)));
        const dflt = lib().get(where, DEFAULT);
        lib().set(where, DEFAULT, encode(withGroup(dflt ? decode(dflt) : ofMode(stat.mode), gid, 7)));
      } else if (stat.isFile() && stat.gid !== gid) {
        const access = lib().get(where, ACCESS);
        const perm = 6 | (stat.mode & 0o100 ? 1 : 0);
        lib().set(where, ACCESS, encode(withGroup(access ? decode(access) : ofMode(stat.mode), gid, perm)));
      }
      return true;
    });
    return undefined;
  } catch (err) {
    const how = `make it the group's to write by hand: chgrp -R ${gid} ${grant} && chmod -R g+rwX ${grant}${top.isDirectory() ? ` && chmod g+s ${grant}` : ''}`;
    if (err instanceof XattrError && err.errno === EOPNOTSUPP) {
      return `${grant} is not the sandbox's to write (owner uid ${top.uid}, mode ${(top.mode & 0o7777).toString(8)}), and its file system takes no ACL to let the sandboxes' group (${gid}) write it: ${how}`;
    }
    return `${grant} is not the sandbox's to write (owner uid ${top.uid}, mode ${(top.mode & 0o7777).toString(8)}), and the node could not let the sandboxes' group (${gid}) write it (${(err as Error).message}): ${how}`;
  }
}

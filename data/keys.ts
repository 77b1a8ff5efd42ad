/**
 * SPEC D4: the keys that seal each owner's payloads — a tenant's, or the platform's. A key is 32 random bytes; its id
 * is the first 16 hex digits of its SHA-256 (a sealed payload names it, so a reader finds the key or says which it
 * lacks). They come by reference, as credentials do: `tenants.<t>.keys` and `payloads.seal.platformKeys` (`env:NAME`,
 * `file:PATH`, newest first), and the key folder, `<folder>/<owner>/<UTC time>-<id>.key`, the newest sealing.
 * `oz0 key rotate TENANT` writes a new key there: new payloads are sealed with it, and the older keys still open the
 * older payloads. A node seals a tenant's first payload with a key it makes in the folder, so every tenant's data is
 * sealed without a step of the operator's; a process given only acme's keys reads acme's payloads alone.
 */
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { readSecret } from '../common/credentials';
import { PLATFORM, isOwner } from './owners';

export interface Key {
  id: string;
  bytes: Buffer;
}

/** A key as `oz0 key list` shows it: where it comes from, and whether it seals. */
export interface ListedKey {
  owner: string;
  id: string;
  /** `tenants.acme.keys[0]` or the key's file. */
  from: string;
  /** When it was made (a folder's key). */
  made?: string;
  /** It seals the owner's new payloads (the newest); the others open what they sealed. */
  seals: boolean;
}

export interface KeyRingOptions {
  /** The key folder (absolute), if the config names one. */
  folder?: string;
  /** Keys by reference per owner, newest first (the config's `tenants.<t>.keys`, `payloads.seal.platformKeys`). */
  refs: Record<string, readonly string[]>;
  env: NodeJS.ProcessEnv;
  baseDir: string;
  /** Whether a missing owner's first key is made in the folder (nodes: yes; clients read with what they have). */
  make: boolean;
}

/** A sealed payload names a key this process does not have. */
export class KeyMissing extends Error {
  override name = 'KeyMissing';
}

/** A key's id: the first 16 hex digits of its SHA-256. */
export function keyId(bytes: Buffer): string {
  return createHash('sha256').update(bytes).digest('hex').slice(0, 16);
}

/** A key from its text: 32 bytes, as base64 or hex. */
export function parseKey(text: string, where: string): Key {
  const trimmed = text.trim();
  const bytes = /^[0-9a-f]{64}$/i.test(trimmed) ? Buffer.from(trimmed, 'hex') : Buffer.from(trimmed, 'base64');
  if (bytes.length !== 32) throw new Error(`${where} is not a key: 32 bytes, in base64 or hex`);
  return { id: keyId(bytes), bytes };
}

/** A folder for an owner: its name, except the two a path would read as a step (a tenant may be named `..`). */
function ownerFolder(owner: string): string {
  return /^\.*$/.test(owner) ? `%2E${owner}` : owner;
}

/** How long a process seals with the newest key it read before it looks in the folder again (`oz0 key rotate`). */
export const REREAD_MS = 10_000;

export class KeyRing {
  /** Keys by owner, newest first, and when they were read; read again from the folder on a miss and every REREAD_MS. */
  private readonly owned = new Map<string, { keys: Key[]; at: number }>();
  private readonly byId = new Map<string, Key>();
  /** Owners whose payloads named a key this process lacks: it makes no key of theirs (one nobody else could open). */
  private readonly lacking = new Set<string>();

  constructor(private readonly opts: KeyRingOptions) {}

  /** Where new keys go, if anywhere. */
  get folder(): string | undefined {
    return this.opts.folder;
  }

  /** Whether an owner's keys come from the config's references (then `oz0 key rotate` does not change them). */
  byReference(owner: string): boolean {
    return (Object.hasOwn(this.opts.refs, owner) ? this.opts.refs[owner] : []).length > 0;
  }

  /** The key that seals an owner's new payloads: its newest; made in the folder when it has none (and may). */
  sealing(owner: string): Key {
    const read = this.owned.get(owner);
    if (read && Date.now() - read.at > REREAD_MS) this.owned.delete(owner);
    const newest = this.keysOf(owner)[0];
    if (newest) return newest;
    if (this.lacking.has(owner)) {
      throw new KeyMissing(
        `${owner}'s payloads are sealed with a key this process does not have: it seals nothing of ${owner}'s with a key of its own`,
      );
    }
    if (!this.opts.make || !this.opts.folder) {
      throw new KeyMissing(
        `no key seals ${owner}'s payloads here: give it tenants.${owner}.keys or payloads.seal.folder`,
      );
    }
    return this.rotate(owner);
  }

  /** The key of this id, if this process has it: looked for in the folder again before it says no. */
  opening(owner: string, id: string): Key | undefined {
    const known = this.byId.get(`${owner}/${id}`);
    if (known) return known;
    // A key made or rotated in since this process read the folder: read it again, at most once a second.
    const read = this.owned.get(owner);
    if (read && Date.now() - read.at > 1000) this.owned.delete(owner);
    const found = this.keysOf(owner).find((k) => k.id === id);
    if (!found) this.lacking.add(owner);
    return found;
  }

  /** A new key for the owner, in the folder: it seals from now on (`oz0 key rotate`). */
  rotate(owner: string): Key {
    const folder = this.opts.folder;
    if (!folder) throw new Error('payloads.seal.folder names no key folder: a new key has nowhere to go');
    if (!isOwner(owner)) throw new Error(`${owner} is not a tenant's name`);
    const bytes = randomBytes(32);
    const key = { id: keyId(bytes), bytes };
    const dir = path.join(folder, ownerFolder(owner));
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    // To the millisecond, and after the newest there: the newest sorts last even for two rotations in one millisecond.
    const newest = this.fromFolder(owner)[0];
    const after = newest ? Date.parse(madeOf(newest.file, true) ?? '') + 1 : 0;
    const stamp = new Date(Math.max(Date.now(), after || 0)).toISOString().replace(/[-:.]/g, '');
    const file = path.join(dir, `${stamp}-${key.id}.key`);
    const partial = `${file}.${randomBytes(4).toString('hex')}.partial`;
    fs.writeFileSync(partial, `${bytes.toString('base64')}\n`, { mode: 0o600, flag: 'wx' });
    fs.renameSync(partial, file);
    this.owned.delete(owner);
    return key;
  }

  /** The owners the folder has keys of (beside those the config names). */
  folderOwners(): string[] {
    if (!this.opts.folder) return [];
    try {
      return fs
        .readdirSync(this.opts.folder)
        .map((name) => name.replace(/^%2E/, '.'))
        .filter(isOwner)
        .sort();
    } catch {
      return [];
    }
  }

  /** An owner's keys as a person reads them, newest (sealing) first. */
  listed(owner: string): ListedKey[] {
    const refs = Object.hasOwn(this.opts.refs, owner) ? this.opts.refs[owner] : [];
    const field = owner === PLATFORM ? 'payloads.seal.platformKeys' : `tenants.${owner}.keys`;
    const fromRefs = this.fromRefs(owner).map((k, i) => ({ id: k.id, from: `${field}[${i}] (${refs[i]})` }));
    const fromFolder = this.fromFolder(owner).map((k) => ({ id: k.id, from: k.file, made: madeOf(k.file) }));
    return [...fromRefs, ...fromFolder].map((k: { id: string; from: string; made?: string }, i) => ({
      owner,
      id: k.id,
      from: k.from,
      ...(k.made ? { made: k.made } : {}),
      seals: i === 0,
    }));
  }

  /** Every key of an owner this process has, newest first (the references' first, then the folder's by time). */
  keysOf(owner: string): Key[] {
    const read = this.owned.get(owner);
    if (read) return read.keys;
    const keys = [...this.fromRefs(owner), ...this.fromFolder(owner)];
    this.owned.set(owner, { keys, at: Date.now() });
    for (const k of keys) this.byId.set(`${owner}/${k.id}`, k);
    return keys;
  }

  private fromRefs(owner: string): Key[] {
    const refs = Object.hasOwn(this.opts.refs, owner) ? this.opts.refs[owner] : [];
    const where = { env: this.opts.env, baseDir: this.opts.baseDir };
    return refs.map((ref, i) => parseKey(readSecret(ref, where, `the key ${i + 1} of ${owner}`), `the key ${ref}`));
  }

  private fromFolder(owner: string): Array<Key & { file: string }> {
    if (!this.opts.folder) return [];
    const dir = path.join(this.opts.folder, ownerFolder(owner));
    let names: string[];
    try {
      names = fs.readdirSync(dir).filter((n) => /^\d{8}T\d{6}(\d{3})?Z-[0-9a-f]{16}\.key$/.test(n));
    } catch {
      return [];
    }
    return names
      .sort()
      .reverse()
      .map((name) => {
        const file = path.join(dir, name);
        return { ...parseKey(fs.readFileSync(file, 'utf8'), file), file };
      });
  }
}

/** When a folder's key was made, from its name (`20261207T041500123Z-<id>.key`), to the second or the millisecond. */
function madeOf(file: string, ms = false): string | undefined {
  const m = /(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(\d{3})?Z-[0-9a-f]{16}\.key$/.exec(file);
  return m ? `${m[1]}-${m[2]}-${m[3]}T${m[4]}:${m[5]}:${m[6]}${ms ? `.${m[7] ?? '000'}` : ''}Z` : undefined;
}

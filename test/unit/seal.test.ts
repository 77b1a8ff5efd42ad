/**
 * D4's seal, table by table: a payload round-trips whatever it holds; what lies sealed reads as nothing, compressed or
 * not; a payload moved to another job, owner or key does not open; a missing key is named; keys by reference and in the
 * folder, the newest sealing and every one opening; a process that lacks an owner's key makes none of its own.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { randomBytes } from 'node:crypto';
import type { Payload } from '@temporalio/common';
import { KeyMissing, KeyRing, keyId, parseKey } from '../../data/keys';
import {
  DEFLATE_UP_TO,
  JOB_METADATA,
  KEY_METADATA,
  SEALED,
  SealCodec,
  isSealed,
  open,
  seal,
  sealedWith,
} from '../../data/seal';
import { OWNER_METADATA, PLATFORM, PayloadOwners } from '../../data/owners';
import { parseConfig } from '../../common/config';
import { Hidden } from '../../activities/sandbox/hidden';

const json = (value: unknown): Payload => ({
  metadata: { encoding: Buffer.from('json/plain') },
  data: Buffer.from(JSON.stringify(value)),
});
const text = (p: Payload) => Buffer.from(p.data ?? []).toString('utf8');
const meta = (p: Payload, key: string) => Buffer.from(p.metadata?.[key] ?? []).toString('utf8');
const folder = () => fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-keys-'));
const ctx = (workflowId: string) => ({ type: 'workflow' as const, namespace: 'default', workflowId });

function ring(opts: Partial<ConstructorParameters<typeof KeyRing>[0]> = {}) {
  return new KeyRing({ folder: folder(), refs: {}, env: {}, baseDir: '/', make: true, ...opts });
}

describe('D4: a sealed payload', () => {
  const key = randomBytes(32);
  const id = keyId(key);
  const at = { owner: 'acme', id, job: 'job-1' };

  test.each([
    ['a small JSON value', json({ tenant: 'acme', n: 1 })],
    ['an empty payload', { metadata: { encoding: Buffer.from('binary/null') } }],
    ['a megabyte of text', json('canary '.repeat(150_000))],
    [
      'random bytes (nothing to compress)',
      { metadata: { encoding: Buffer.from('binary/plain') }, data: randomBytes(4096) },
    ],
  ])('%s round-trips, metadata and bytes', (_, payload: Payload) => {
    const sealed = seal(payload, at, key);
    expect(isSealed(sealed)).toBe(true);
    expect(sealedWith(sealed)).toEqual(at);
    expect(meta(sealed, OWNER_METADATA)).toBe('acme');
    expect(meta(sealed, JOB_METADATA)).toBe('job-1');
    const opened = open(sealed, at, key);
    expect(Buffer.from(opened.data ?? [])).toEqual(Buffer.from(payload.data ?? []));
    expect(meta(opened, 'encoding')).toBe(meta(payload, 'encoding'));
  });

  test('holds nothing readable, compressed or not — and the same value sealed twice differs (a fresh IV)', () => {
    const canary = `canary-${randomBytes(8).toString('hex')}`;
    const payload = json(`${canary} `.repeat(20_000));
    const a = seal(payload, at, key);
    const b = seal(payload, at, key);
    expect(Buffer.compare(Buffer.from(a.data!), Buffer.from(b.data!))).not.toBe(0);
    const raw = Buffer.from(a.data!);
    expect(raw.includes(canary)).toBe(false);
    for (const inflate of [zlib.inflateSync, zlib.inflateRawSync, zlib.gunzipSync]) {
      let out = '';
      try {
        out = inflate(raw).toString();
      } catch {
        // not that compression: nothing readable either
      }
      expect(out.includes(canary)).toBe(false);
    }
    // Compressed before sealing: 400 KB of a repeated word is a few KB sealed.
    expect(raw.length).toBeLessThan(20_000);
  });

  test('past a MiB it is sealed as it is (it goes to the store; deflate would cost the call more than the seal)', () => {
    const big = json('word '.repeat(300_000));
    const sealed = seal(big, at, key);
    expect(sealed.data!.length).toBeGreaterThan(DEFLATE_UP_TO);
    expect(Buffer.from(open(sealed, at, key).data!)).toEqual(Buffer.from(big.data!));
    // The control, just under: deflated.
    const under = json('word '.repeat(200_000));
    expect(seal(under, at, key).data!.length).toBeLessThan(20_000);
  });

  test.each([
    ['another job', { ...at, job: 'job-2' }],
    ['another owner', { ...at, owner: 'beta' }],
    ['no job named', { ...at, job: '' }],
  ])('moved to %s, it does not open', (_, moved) => {
    const sealed = seal(json('x'), at, key);
    expect(() => open(sealed, moved, key)).toThrow(/does not open/);
  });

  test('a changed byte, or another key, does not open', () => {
    const sealed = seal(json('x'.repeat(100)), at, key);
    const data = Buffer.from(sealed.data!);
    data[data.length - 1] ^= 1;
    expect(() => open({ ...sealed, data }, at, key)).toThrow(/does not open/);
    expect(() => open(sealed, at, randomBytes(32))).toThrow(/does not open/);
    expect(() => open({ ...sealed, data: data.subarray(0, 10) }, at, key)).toThrow(/form this process does not read/);
  });
});

describe('D4: the codec', () => {
  test('seals a job’s payloads with its tenant’s key, a platform workflow’s and an unknown one’s with the platform’s; opens them all', async () => {
    const keys = ring();
    const owners = new PayloadOwners();
    const codec = new SealCodec(keys, owners);
    const [spec] = await codec.encode([json({ tenant: 'acme', steps: [] })], ctx('job-1'));
    expect(sealedWith(spec)).toEqual({ owner: 'acme', id: keys.sealing('acme').id, job: 'job-1' });
    const [later] = await codec.encode([json('an answer')], ctx('job-1'));
    expect(sealedWith(later)?.owner).toBe('acme');
    const [policy] = await codec.encode([json({ rules: 1 })], ctx('oz0-policy/acme'));
    expect(sealedWith(policy)?.owner).toBe(PLATFORM);
    const [nobody] = await codec.encode([json(1)]);
    expect(sealedWith(nobody)).toEqual({ owner: PLATFORM, id: keys.sealing(PLATFORM).id, job: '' });
    expect(keys.sealing('acme').id).not.toBe(keys.sealing(PLATFORM).id);
    const opened = await codec.decode([spec, later, policy, nobody, json('plain, from before sealing')], ctx('job-1'));
    expect(opened.map(text)).toEqual([
      JSON.stringify({ tenant: 'acme', steps: [] }),
      '"an answer"',
      '{"rules":1}',
      '1',
      '"plain, from before sealing"',
    ]);
    // Sealed once only: what is sealed already passes.
    expect(await codec.encode([spec], ctx('job-1'))).toEqual([spec]);
  });

  test('a job started by a plain client (its spec plain): the reader learns its tenant from the spec, and seals what it writes back for the job with the tenant’s key, asking Temporal nothing', async () => {
    const keys = ring();
    const asked: string[] = [];
    const owners = new PayloadOwners(async (id) => (asked.push(id), undefined));
    const codec = new SealCodec(keys, owners);
    await codec.decode([json({ tenant: 'acme', steps: [{ call: 'a.b' }] })], ctx('cli-job'));
    const [status] = await codec.encode([json('running')], ctx('cli-job'));
    expect(sealedWith(status)?.owner).toBe('acme');
    expect(asked).toEqual([]);
    // The control: a job whose spec this process never read is asked of Temporal, and without an answer the
    // platform's key seals it.
    const [other] = await codec.encode([json('running')], ctx('other-job'));
    expect(asked).toEqual(['other-job']);
    expect(sealedWith(other)?.owner).toBe(PLATFORM);
  });

  test('a process without the key a payload names fails that read, naming the key — and makes no key of that owner’s', async () => {
    const writer = new SealCodec(ring(), new PayloadOwners());
    const [sealed] = await writer.encode([json({ tenant: 'beta', steps: [] })], ctx('job-b'));
    const id = sealedWith(sealed)!.id;
    const readerKeys = ring();
    const reader = new SealCodec(readerKeys, new PayloadOwners());
    await expect(reader.decode([sealed], ctx('job-b'))).rejects.toThrow(KeyMissing);
    await expect(reader.decode([sealed], ctx('job-b'))).rejects.toThrow(
      new RegExp(`sealed with beta's key ${id}, which this process does not have`),
    );
    // It would seal beta's next payloads with a key of its own, which nobody else could open: it refuses.
    await expect(reader.encode([json('x')], ctx('job-b'))).rejects.toThrow(/seals nothing of beta's/);
    expect(fs.existsSync(path.join(readerKeys.folder!, 'beta'))).toBe(false);
    // A name that is no owner's is refused as a key's owner.
    const forged = {
      ...sealed,
      metadata: { ...sealed.metadata, [KEY_METADATA]: Buffer.from('../x/0123456789abcdef') },
    };
    await expect(reader.decode([forged])).rejects.toThrow(/names no key/);
  });
});

describe('D4: keys', () => {
  test('by reference (env, file; base64 or hex) before the folder’s; the first seals, every one opens', () => {
    const dir = folder();
    const a = randomBytes(32);
    const b = randomBytes(32);
    fs.writeFileSync(path.join(dir, 'b.key'), `${b.toString('hex')}\n`);
    const keys = ring({
      refs: { acme: ['env:ACME_KEY', 'file:b.key'] },
      env: { ACME_KEY: a.toString('base64') },
      baseDir: dir,
    });
    expect(keys.byReference('acme')).toBe(true);
    expect(keys.byReference('beta')).toBe(false);
    expect(keys.sealing('acme').id).toBe(keyId(a));
    expect(keys.opening('acme', keyId(b))?.bytes).toEqual(b);
    expect(keys.opening('acme', keyId(randomBytes(32)))).toBeUndefined();
    expect(keys.listed('acme').map((k) => [k.from.split(' ')[0], k.seals])).toEqual([
      ['tenants.acme.keys[0]', true],
      ['tenants.acme.keys[1]', false],
    ]);
  });

  test.each([
    ['short', randomBytes(16).toString('base64')],
    ['not a key at all', 'hunter2'],
    ['hex of 31 bytes', randomBytes(31).toString('hex')],
  ])('a reference that is not 32 bytes (%s) is refused, naming it', (_, value) => {
    expect(() => parseKey(value, 'the key env:X')).toThrow(/the key env:X is not a key: 32 bytes/);
  });

  test('the folder: a first key made on the first payload (0600 in a 0700 folder), rotation making the newest the sealing one', () => {
    const keys = ring();
    const first = keys.sealing('acme');
    const dir = path.join(keys.folder!, 'acme');
    expect(fs.statSync(dir).mode & 0o777).toBe(0o700);
    const [file] = fs.readdirSync(dir);
    expect(file).toMatch(new RegExp(`^\\d{8}T\\d{9}Z-${first.id}\\.key$`));
    expect(fs.statSync(path.join(dir, file)).mode & 0o777).toBe(0o600);
    const second = keys.rotate('acme');
    const third = keys.rotate('acme');
    expect(keys.sealing('acme').id).toBe(third.id);
    expect(keys.opening('acme', first.id)?.id).toBe(first.id);
    expect(keys.listed('acme').map((k) => [k.id, k.seals])).toEqual([
      [third.id, true],
      [second.id, false],
      [first.id, false],
    ]);
    // Another process of the same folder reads the rotation at once.
    const other = new KeyRing({ folder: keys.folder, refs: {}, env: {}, baseDir: '/', make: false });
    expect(other.sealing('acme').id).toBe(third.id);
    expect(other.folderOwners()).toEqual(['acme']);
  });

  test('owners whose names a path would read as a step stay inside the folder', () => {
    const keys = ring();
    for (const owner of ['..', '...', PLATFORM]) keys.sealing(owner);
    expect(fs.readdirSync(keys.folder!).sort()).toEqual(['%2E..', '%2E...', '@platform'].sort());
    expect(() => keys.rotate('../etc')).toThrow(/not a tenant's name/);
  });

  test('a process that may not make keys, and has none, says what would give it one', () => {
    const keys = new KeyRing({ refs: {}, env: {}, baseDir: '/', make: false });
    expect(() => keys.sealing('acme')).toThrow(/no key seals acme's payloads here: give it tenants.acme.keys/);
  });

  test('I2: a key folder outside the state folder is hidden from every sandbox, like the state folder', () => {
    const dir = folder();
    const config = { ...parseConfig({ payloads: { seal: { folder: dir } } }), baseDir: '/', source: 'test' };
    const places = new Hidden(config, () => false).secretPlaces();
    expect(places).toContainEqual(expect.objectContaining({ path: dir, what: expect.stringMatching(/keys/) }));
  });

  test('the config: sealing on by default with the state folder’s keys; "off"; keys by reference only', () => {
    expect(parseConfig({}).payloads.seal).toEqual({ platformKeys: [], newPayloads: 'sealed' });
    expect(parseConfig({ payloads: { seal: 'off' } }).payloads.seal).toBe('off');
    expect(() => parseConfig({ tenants: { acme: { keys: ['c2VjcmV0'] } } })).toThrow(/keys/);
    expect(parseConfig({ tenants: { acme: { keys: ['env:K'], viewers: ['ann@acme.example'] } } }).tenants.acme).toEqual(
      expect.objectContaining({ keys: ['env:K'], viewers: ['ann@acme.example'] }),
    );
  });
});

test('SEALED is the encoding the codec writes', () => {
  expect(SEALED).toBe('binary/oz0-sealed');
});

/**
 * data/'s pure parts, table by table: a stored answer's bytes (D7) round-trip whatever they hold, what an answer weighs
 * and holds in words (D1), under which owner a store files each payload (D2), and a folder store's keys, which never
 * lead outside it whatever a job's id is.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ANSWER_ENCODING, decodeAnswer, encodeAnswer } from '../../data/answer-bytes';
import { FolderObjects } from '../../data/folder-objects';
import { StorageDriverClaim } from '@temporalio/common';
import { ownerOf } from '../../data/owner-of';
import { TenantStore, UNOWNED } from '../../data/tenant-store';
import { OWNER_METADATA, PLATFORM, PayloadOwners } from '../../data/owners';
import { answerBytes, holdsOf, sizeInWords } from '../../common/sizes';
import { parseConfig } from '../../common/config';
import { Hidden } from '../../activities/sandbox/hidden';

const payloadOf = (answer: unknown) => ({
  metadata: { encoding: Buffer.from(ANSWER_ENCODING) },
  data: encodeAnswer(answer),
});

describe('D7: a stored answer’s bytes', () => {
  const long = (c: string, n = 5000) => c.repeat(n);
  test.each([
    ['a page of text', { isError: false, content: [{ type: 'text', text: long('ab\n"é') }] }],
    [
      'an image and its caption',
      {
        isError: false,
        content: [
          { type: 'image', data: long('QUJD'), mimeType: 'image/png' },
          { type: 'text', text: 'x' },
        ],
      },
    ],
    [
      'structured content, deep',
      {
        isError: true,
        content: [],
        structuredContent: {
          rows: [
            { n: 1, cell: long('€') },
            { n: 2, cell: 'short' },
          ],
        },
      },
    ],
    ['keys of every sort', { isError: false, content: [], structuredContent: { __proto__: long('p'), '': long('e') } }],
    ['nothing long', { isError: false, content: [{ type: 'text', text: 'ok' }], _meta: { a: [1, null, true] } }],
  ])('%s comes back as it went', (_, answer) => {
    expect(decodeAnswer(payloadOf(answer))).toEqual(JSON.parse(JSON.stringify(answer)));
  });

  test('long strings lie after the head as their bytes, not in the JSON', () => {
    const text = long('z', 100_000);
    const bytes = encodeAnswer({ content: [{ type: 'text', text }] });
    const head = bytes.readUInt32BE(0);
    expect(head).toBeLessThan(200);
    expect(bytes.length).toBe(4 + head + text.length);
  });

  test('a payload of another encoding is not ours; a head that lies is refused', () => {
    expect(
      decodeAnswer({ metadata: { encoding: Buffer.from('json/plain') }, data: Buffer.from('{}') }),
    ).toBeUndefined();
    const bytes = encodeAnswer({ content: [{ text: long('a') }] });
    // The head promises more bytes than there are.
    expect(() =>
      decodeAnswer({ metadata: { encoding: Buffer.from(ANSWER_ENCODING) }, data: bytes.subarray(0, -10) }),
    ).toThrow(/shorter than its head says/);
  });
});

describe('D1: what an answer weighs and holds, in words', () => {
  test.each([
    [{ content: [{ type: 'text', text: 'x'.repeat(3 * 1024 * 1024) }] }, 'text 3.0 MiB'],
    [
      {
        content: [
          { type: 'image', mimeType: 'image/png', data: 'A'.repeat(4 * 1024) },
          { type: 'text', text: 'hi' },
        ],
      },
      'image/png 3.0 KiB, text 2 B',
    ],
    [
      { content: [{ type: 'resource', resource: { uri: 'file:///a.pdf', blob: 'A'.repeat(400) } }] },
      'resource file:///a.pdf 300 B',
    ],
    [
      { content: [{ type: 'resource_link', uri: 'https://x/y', name: 'y' }], structuredContent: { a: 'b' } },
      'link https://x/y, structured 72 B',
    ],
    [{ content: [] }, 'nothing'],
  ])('holds: %#', (answer, words) => {
    expect(holdsOf(answer)).toBe(words);
  });

  test('its bytes are about what its JSON weighs', () => {
    const answer = { content: [{ type: 'text', text: 'é'.repeat(100_000) }], _meta: { k: 'v' } };
    const json = Buffer.byteLength(JSON.stringify(answer));
    expect(Math.abs(answerBytes(answer) - json) / json).toBeLessThan(0.01);
    expect([sizeInWords(1023), sizeInWords(1024), sizeInWords(3 * 1024 * 1024)]).toEqual([
      '1023 B',
      '1.0 KiB',
      '3.0 MiB',
    ]);
  });
});

describe('D2: a store files each payload under its owner', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-owners-'));
  const owners = new PayloadOwners();
  const store = new TenantStore({
    name: 'oz0.folder',
    type: 'oz0.folder',
    objects: new FolderObjects(root),
    bucket: 'objects',
    prefix: '',
    maxBytes: 1024 * 1024,
    owners,
  });
  const json = (value: unknown) => ({
    metadata: { encoding: Buffer.from('json/plain') },
    data: Buffer.from(JSON.stringify(value)),
  });
  const target = (id: string) => ({ target: { kind: 'workflow' as const, namespace: 'default', id, type: 'job' } });
  const ownerOfClaim = async (id: string, payload: ReturnType<typeof json>) =>
    (await store.store(target(id), [payload]))[0].claimData.owner;

  test.each<[string, () => void, string, unknown, string]>([
    ['a job this process learnt the tenant of', () => owners.learn('job-1', 'acme'), 'job-1', { x: 1 }, 'acme'],
    ['a platform workflow', () => undefined, 'oz0-policy/acme', { x: 1 }, PLATFORM],
    ['a job whose spec the payload is', () => undefined, 'job-2', { tenant: 'beta', steps: [] }, 'beta'],
    [
      'a job whose call’s input the payload is',
      () => undefined,
      'job-3',
      { tenant: 'gamma', jobId: 'job-3', tool: 'a.b' },
      'gamma',
    ],
    ['a job nothing said of (no lookup)', () => undefined, 'job-4', { x: 1 }, UNOWNED],
  ])('%s', async (_, before, id, value, owner) => {
    before();
    expect(await ownerOfClaim(id, json(value))).toBe(owner);
  });

  test('a payload that names its owner (a stored answer) is filed under it; the read finds it there', async () => {
    const named = {
      ...json({ a: 1 }),
      metadata: { encoding: Buffer.from('json/plain'), [OWNER_METADATA]: Buffer.from('delta') },
    };
    const [claim] = await store.store(target('job-5'), [named]);
    expect(claim.claimData.owner).toBe('delta');
    expect(claim.claimData.key).toMatch(/^v0\/ns\/default\/wt\/job\/wi\/job-5\//);
    expect(fs.existsSync(path.join(root, 'objects', 'delta', claim.claimData.key))).toBe(true);
    const [back] = await store.retrieve({}, [claim]);
    expect(ownerOf(back)).toBe('delta');
  });

  test('a name that is no owner’s is not learnt, and a claim naming one is not read', async () => {
    owners.learn('job-6', '../etc');
    expect(owners.peek('job-6')).toBeUndefined();
    await expect(
      store.retrieve({}, [new StorageDriverClaim({ owner: '../etc', key: 'x', bucket: 'objects' })]),
    ).rejects.toThrow(/names no owner it knows/);
  });
});

describe('D2: a folder store’s keys', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-folder-'));
  const objects = new FolderObjects(root);

  test.each(['..', '.', '', '%2E..'])('a segment %j stays inside the store', (segment) => {
    const file = objects.fileOf('objects', `acme/v0/wi/${segment}/d/sha256/ab`);
    expect(file.startsWith(path.join(root, 'objects') + path.sep)).toBe(true);
  });

  test('an object is written whole, for the node’s user alone, and read back', async () => {
    await objects.putObject('objects', 'acme/v0/x', Buffer.from('bytes'));
    expect(await objects.objectExists('objects', 'acme/v0/x')).toBe(true);
    expect(Buffer.from(await objects.getObject('objects', 'acme/v0/x')).toString()).toBe('bytes');
    expect(fs.statSync(objects.fileOf('objects', 'acme/v0/x')).mode & 0o777).toBe(0o600);
    await expect(objects.getObject('objects', 'acme/v0/none')).rejects.toThrow(/no object acme\/v0\/none/);
  });
});

test('I2, D2: a folder store outside the state folder is one of the places no sandbox sees', () => {
  const config = {
    ...parseConfig({ payloads: { store: { folder: '/srv/oz0-payloads' } } }),
    baseDir: '/srv',
    source: 'test',
  };
  const places = new Hidden(config, () => false).secretPlaces();
  expect(places).toContainEqual({ path: '/srv/oz0-payloads', what: 'the payload store (payloads.store.folder)' });
  // Its default lies in the state folder, hidden whole.
  const byDefault = { ...parseConfig({}), baseDir: '/srv', source: 'test' };
  expect(new Hidden(byDefault, () => false).secretPlaces().map((p) => p.path)).toEqual(['/srv/.oz0']);
});

/** How oz0 reaches Temporal: the config's address, plus credentials from Temporal's environment config. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { connectionOptions } from '../../common/connection';

const temporal = {
  address: 'ns.acct.tmprl.cloud:7233',
  namespace: 'ns.acct',
  taskQueue: 'oz0',
  policyTaskQueue: 'oz0-policy',
};

test('a local address with no Temporal environment: plain, no TLS, no key', () => {
  expect(connectionOptions({ ...temporal, address: '127.0.0.1:7233' }, {})).toEqual({ address: '127.0.0.1:7233' });
});

test('Temporal Cloud with TEMPORAL_API_KEY: the key, and TLS on', () => {
  const options = connectionOptions(temporal, { TEMPORAL_API_KEY: 'k-123' });
  expect(options).toMatchObject({ address: temporal.address, apiKey: 'k-123', tls: true });
});

test('mTLS from TEMPORAL_TLS_CLIENT_CERT_PATH / _KEY_PATH', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-tls-'));
  fs.writeFileSync(path.join(dir, 'c.pem'), 'CERT');
  fs.writeFileSync(path.join(dir, 'k.pem'), 'KEY');
  const options = connectionOptions(temporal, {
    TEMPORAL_TLS_CLIENT_CERT_PATH: path.join(dir, 'c.pem'),
    TEMPORAL_TLS_CLIENT_KEY_PATH: path.join(dir, 'k.pem'),
  });
  const tls = options.tls as { clientCertPair?: { crt: Uint8Array; key: Uint8Array } };
  expect(Buffer.from(tls.clientCertPair!.crt).toString()).toBe('CERT');
  expect(Buffer.from(tls.clientCertPair!.key).toString()).toBe('KEY');
});

test('a temporal.toml profile supplies credentials; the address stays the one oz0 was given', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-toml-'));
  const file = path.join(dir, 'temporal.toml');
  fs.writeFileSync(file, '[profile.cloud]\naddress = "elsewhere:7233"\napi_key = "from-toml"\n');
  const options = connectionOptions(temporal, { TEMPORAL_CONFIG_FILE: file, TEMPORAL_PROFILE: 'cloud' });
  expect(options).toMatchObject({ address: temporal.address, apiKey: 'from-toml' });
});

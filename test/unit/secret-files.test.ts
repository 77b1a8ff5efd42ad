/**
 * I2: every file the config's secrets are read from is found, wherever the config names one (a tenant's credentials,
 * a server's headers, a field added later), so the node hides each from every sandbox (activities/sandbox/index.ts).
 */
import { secretFilesOf } from '../../common/credentials';

test('I2: every `file:` secret of a config is found, relative to its folder or absolute, with the field that names it', () => {
  const config = {
    servers: { desk: { url: 'https://desk.example/mcp', headers: { 'X-Key': 'file:secrets/desk.key' } } },
    tenants: {
      acme: {
        credentials: { desk: { clientSecret: 'env:ACME_SECRET', privateKey: 'file:/etc/oz0/secrets/acme.pem' } },
      },
      beta: { credentials: { desk: { headers: { Authorization: 'file:secrets/beta.key' } } } },
    },
    later: [{ token: 'file:../outside.key' }],
    // Not secrets: an env reference, a bare word, `file:` with nothing after it.
    other: { a: 'env:X', b: 'file', c: 'file:' },
  };
  expect(secretFilesOf(config, '/srv/oz0')).toEqual([
    { field: 'servers.desk.headers.X-Key', file: '/srv/oz0/secrets/desk.key' },
    { field: 'tenants.acme.credentials.desk.privateKey', file: '/etc/oz0/secrets/acme.pem' },
    { field: 'tenants.beta.credentials.desk.headers.Authorization', file: '/srv/oz0/secrets/beta.key' },
    { field: 'later[0].token', file: '/srv/outside.key' },
  ]);
});

/**
 * SPEC R1: a remote server's credentials per tenant (`tenants.<t>.credentials.<server>`), static headers or OAuth
 * client credentials, each secret given by reference — `env:NAME` (the node's environment) or `file:PATH` (relative to
 * the config's folder) — and read when it is used, never written in the config and never kept but in the node's
 * memory (R3).
 */
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';

/** A secret's reference: where the node reads it, never the secret itself. */
export const SecretRefSchema = z
  .string()
  .regex(
    /^(env:[A-Za-z_][A-Za-z0-9_]*|file:.+)$/,
    'a secret is given by reference, "env:NAME" or "file:PATH", never written in the config',
  );

/** RFC 6749 §3.3: space-separated scope tokens. */
const ScopeSchema = z
  .string()
  .regex(/^[\x21\x23-\x5b\x5d-\x7e]+( [\x21\x23-\x5b\x5d-\x7e]+)*$/, 'space-separated OAuth scopes');

export const CLIENT_AUTH_METHODS = ['client_secret_basic', 'client_secret_post', 'private_key_jwt'] as const;
export type ClientAuthMethod = (typeof CLIENT_AUTH_METHODS)[number];

/** The JWS algorithms a `private_key_jwt` assertion may be signed with. */
const ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'] as const;

/**
 * OAuth client credentials (the MCP authorization spec's client-credentials extension): the client the tenant has at
 * the server's authorization server, how it authenticates there, and that server's issuer: the secret is sent there
 * and nowhere else, whichever authorization server the MCP server names (SEP-2352).
 */
const OAuthCredentialSchema = z
  .strictObject({
    clientId: z.string().min(1).max(512),
    /** How the client authenticates at the token endpoint; by default `client_secret_basic`, or `private_key_jwt` for a key. */
    method: z.enum(CLIENT_AUTH_METHODS).optional(),
    /** `client_secret_basic` and `client_secret_post`: the client's secret. */
    clientSecret: SecretRefSchema.optional(),
    /** `private_key_jwt`: the client's private key, PKCS#8 PEM or a JWK (JSON). */
    privateKey: SecretRefSchema.optional(),
    /** `private_key_jwt`: the assertion's algorithm; by default the key's own (RS256, ES256, ES384, EdDSA). */
    algorithm: z.enum(ALGORITHMS).optional(),
    /** The scopes to ask for; by default what the server asks for (its challenge, else its metadata). */
    scope: ScopeSchema.optional(),
    /** The authorization server the client is registered with: its issuer (RFC 8414), http(s). */
    issuer: z.url({ protocol: /^https?$/, error: 'issuer is the authorization server’s issuer URL, http(s)' }),
  })
  .superRefine((o, ctx) => {
    const method = o.method ?? (o.privateKey ? 'private_key_jwt' : 'client_secret_basic');
    const needs = method === 'private_key_jwt' ? 'privateKey' : 'clientSecret';
    const other = method === 'private_key_jwt' ? 'clientSecret' : 'privateKey';
    if (!o[needs]) ctx.addIssue({ code: 'custom', path: [needs], message: `${method} needs ${needs}` });
    if (o[other]) ctx.addIssue({ code: 'custom', path: [other], message: `${method} takes no ${other}` });
    if (o.algorithm && method !== 'private_key_jwt')
      ctx.addIssue({ code: 'custom', path: ['algorithm'], message: 'algorithm is for private_key_jwt' });
  })
  .transform((o) => ({ ...o, method: o.method ?? (o.privateKey ? 'private_key_jwt' : 'client_secret_basic') }));

const HeaderNameSchema = z.string().regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, 'an HTTP header name');

/** One tenant's credentials for one remote server: static headers, OAuth client credentials, or both. */
export const CredentialSchema = z
  .strictObject({
    /** Sent with every request to the server; each value a secret's reference. */
    headers: z.record(HeaderNameSchema, SecretRefSchema).optional(),
    oauth: OAuthCredentialSchema.optional(),
  })
  .superRefine((c, ctx) => {
    if (!c.headers && !c.oauth)
      ctx.addIssue({ code: 'custom', message: 'credentials are "headers", "oauth", or both' });
    if (c.oauth && Object.keys(c.headers ?? {}).some((h) => h.toLowerCase() === 'authorization')) {
      ctx.addIssue({
        code: 'custom',
        path: ['headers', 'Authorization'],
        message: 'with oauth, the Authorization header carries the token',
      });
    }
  });

export type Credential = z.infer<typeof CredentialSchema>;
export type OAuthCredential = NonNullable<Credential['oauth']>;

/** A secret the node could not read: it names the field and the reference, never a value. */
export class SecretUnavailable extends Error {
  override name = 'SecretUnavailable';
}

/**
 * I2: every file a secret of the config is read from (`file:PATH`, wherever a secret may be given: a tenant's
 * credentials, a server's headers, and any field that comes later), with the field that names it: no sandbox may see
 * one, whatever its grants say.
 */
export function secretFilesOf(config: object, baseDir: string): Array<{ field: string; file: string }> {
  const out: Array<{ field: string; file: string }> = [];
  const walk = (value: unknown, field: string) => {
    if (typeof value === 'string') {
      if (/^file:./.test(value)) out.push({ field, file: path.resolve(baseDir, value.slice(5)) });
    } else if (Array.isArray(value)) value.forEach((v, i) => walk(v, `${field}[${i}]`));
    else if (value && typeof value === 'object')
      for (const [k, v] of Object.entries(value)) walk(v, field ? `${field}.${k}` : k);
  };
  walk(config, '');
  return out;
}

/**
 * Reads a secret by its reference: `env:NAME` from `env`, `file:PATH` from the file (relative to `baseDir`), its last
 * line break dropped. Read each time it is needed, so a rotated file is taken at the next token request.
 */
export function readSecret(ref: string, where: { env: NodeJS.ProcessEnv; baseDir: string }, field: string): string {
  if (ref.startsWith('env:')) {
    const name = ref.slice(4);
    const value = where.env[name];
    if (value === undefined || value === '')
      throw new SecretUnavailable(`${field} names ${name}, which is not set on this node`);
    return value;
  }
  const file = path.resolve(where.baseDir, ref.slice(5));
  let value: string;
  try {
    value = fs.readFileSync(file, 'utf8').replace(/\r?\n$/, '');
  } catch (err) {
    throw new SecretUnavailable(
      `${field} names the file ${file}, which this node cannot read (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
    );
  }
  if (!value) throw new SecretUnavailable(`${field} names the file ${file}, which is empty`);
  return value;
}

/**
 * SPEC R1-R2 on the node: each tenant's credentials for each per-tenant remote server, as the node holds them. One
 * {@link TenantCredential} per (tenant, server) for the life of the node: its OAuth client with the token it holds,
 * its static headers read from their references at each request. Connections come and go (./pool.ts opens one per
 * tenant and server); what a credential holds outlives them, and nothing of it leaves this process (R3).
 */
import { perTenant } from '../common/config';
import type { LoadedConfig } from '../common/config';
import { readSecret } from '../common/credentials';
import type { Credential } from '../common/credentials';
import type { FetchLike } from '@modelcontextprotocol/client';
import { authorizationFetch, authorizationEnd } from './authorization';
import type { AuthorizationEnd } from './errors';
import type { Challenge } from './authorization';
import { guardedFetch, namedOrigins } from './guarded-fetch';
import { TenantOAuth } from './tenant-oauth';
import type { OAuthSeen } from './tenant-oauth';

/**
 * What one tenant's credential for one server is and what the server asked of it, for `oz0 plugin test --tenant`: the
 * names of its headers and its OAuth client, never a secret or a token (R3).
 */
export interface CredentialReport {
  tenant: string;
  server: string;
  /** The config's field, e.g. `tenants.acme.credentials.tickets`. */
  field: string;
  /** The names of the tenant's own headers (their values are secrets). */
  headers: string[];
  oauth?: {
    clientId: string;
    method: string;
    issuer: string;
    /** The scope the config names, if it names one. */
    scope?: string;
    /** What the server's metadata and its authorization server's asked for, and what the token request gave. */
    seen: OAuthSeen;
  };
}

/** One tenant's credential for one server, as the node holds it. */
export class TenantCredential {
  readonly oauth?: TenantOAuth;
  /** The fetch of this credential's connections: headers on the endpoint's requests, authorization traffic watched. */
  readonly fetch: FetchLike;

  constructor(
    readonly tenant: string,
    readonly server: string,
    private readonly credential: Credential,
    endpoint: URL,
    private readonly where: { env: NodeJS.ProcessEnv; baseDir: string },
    /** The server's own headers (`servers.<name>.headers`), sent too. */
    private readonly serverHeaders: () => Record<string, string>,
    /** I13: the node's fetch, which goes only where the config names or to public addresses (./guarded-fetch.ts). */
    guarded: FetchLike,
  ) {
    // The tenant's headers go to the MCP endpoint only, never to an authorization server.
    const withHeaders: FetchLike = (url, init) => {
      if (new URL(String(url)).href !== endpoint.href) return guarded(url, init);
      const headers = new Headers(init?.headers);
      for (const [name, value] of Object.entries(this.headers())) if (!headers.has(name)) headers.set(name, value);
      return guarded(url, { ...init, headers });
    };
    this.fetch = authorizationFetch(endpoint, withHeaders, (challenge, key) => {
      this.oauth?.noteChallenge(challenge);
      if (key !== undefined) this.noteRefused(key, challenge);
    });
    if (credential.oauth) {
      this.oauth = new TenantOAuth(credential.oauth, endpoint, where, `${this.field}.oauth`, this.fetch);
    }
  }

  /** K1: the calls whose request the server refused before running it (401, 403), by key, until their attempt asks. */
  private readonly refused = new Map<string, Challenge[]>();

  private noteRefused(key: string, challenge: Challenge): void {
    this.refused.set(key, [...(this.refused.get(key) ?? []), challenge]);
    // Bounded: an attempt that never asks (it failed) leaves its entry behind.
    if (this.refused.size > 1000) this.refused.delete(this.refused.keys().next().value!);
  }

  /** What the server refused of the call under `key` before it ran it, and forgets it: the attempt's note. */
  refusals(key: string): Challenge[] {
    const seen = this.refused.get(key) ?? [];
    this.refused.delete(key);
    return seen;
  }

  /** The config's field of this credential. */
  get field(): string {
    return `tenants.${this.tenant}.credentials.${this.server}`;
  }

  /** The headers of each request to the server: its own, then the tenant's, each secret read now (a rotation holds). */
  headers(): Record<string, string> {
    const own = Object.entries(this.credential.headers ?? {}).map(([name, ref]) => [
      name,
      readSecret(ref, this.where, `${this.field}.headers.${name}`),
    ]);
    return { ...this.serverHeaders(), ...Object.fromEntries(own) };
  }

  /** What this credential is and what the server asked of it, in names only. */
  describe(): CredentialReport {
    const oauth = this.credential.oauth;
    return {
      tenant: this.tenant,
      server: this.server,
      field: this.field,
      headers: Object.keys(this.credential.headers ?? {}),
      ...(oauth &&
        this.oauth && {
          oauth: {
            clientId: oauth.clientId,
            method: oauth.method,
            issuer: oauth.issuer,
            ...(oauth.scope && { scope: oauth.scope }),
            seen: { ...this.oauth.seen },
          },
        }),
    };
  }

  /** R4: how an attempt ends for this failure, if it is one of authorization. */
  end(err: unknown): AuthorizationEnd | undefined {
    return authorizationEnd(err, {
      tenant: this.tenant,
      server: this.server,
      clientId: this.credential.oauth?.clientId ?? 'headers',
      field: this.field,
      challenge: this.oauth?.seen.challenge,
    });
  }
}

/** The node's credentials of every tenant for every per-tenant server, made when first needed. */
export class TenantCredentials {
  private readonly held = new Map<string, TenantCredential>();

  constructor(
    private readonly config: LoadedConfig,
    private readonly serverHeaders: (server: string) => Record<string, string>,
    private readonly env: NodeJS.ProcessEnv = process.env,
    /** I13: the node's fetch on a server's word (./guarded-fetch.ts), one for all its connections. */
    readonly guarded: FetchLike = guardedFetch(namedOrigins(config)),
  ) {}

  /** R1: why a call of `tenant` to `server` is refused before anything is sent, if it is. */
  missing(server: string, tenant: string | undefined): string | undefined {
    const config = Object.hasOwn(this.config.servers, server) ? this.config.servers[server] : undefined;
    if (!config || !perTenant(config)) return undefined;
    if (tenant === undefined) return `server "${server}" takes each tenant's own credentials: name a tenant`;
    const tenants = this.config.tenants;
    const has = Object.hasOwn(tenants, tenant) && Object.hasOwn(tenants[tenant].credentials, server);
    return has
      ? undefined
      : `tenant ${tenant} has no credentials for server "${server}" (tenants.${tenant}.credentials.${server}), which takes each tenant's own: nothing was sent`;
  }

  /** The tenant's credential for a per-tenant server (call {@link missing} first). */
  of(server: string, tenant: string): TenantCredential {
    const id = `${tenant}\0${server}`;
    let credential = this.held.get(id);
    if (!credential) {
      const config = this.config.servers[server];
      if (!perTenant(config)) throw new Error(`server "${server}" does not take tenants' own credentials`);
      const why = this.missing(server, tenant);
      if (why) throw new Error(why);
      credential = new TenantCredential(
        tenant,
        server,
        this.config.tenants[tenant].credentials[server],
        new URL(config.url),
        { env: this.env, baseDir: this.config.baseDir },
        () => this.serverHeaders(server),
        this.guarded,
      );
      this.held.set(id, credential);
    }
    return credential;
  }
}

/**
 * The node's config (SPEC "Config"): `--config FILE`, else `OZ0_CONFIG`, else `./oz0.config.json`, else the
 * defaults. Validated with zod; a bad config is refused at start with an error naming the field.
 */
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import {
  DecisionSchema,
  FairnessSchema,
  HarnessNameSchema,
  LimitsSchema,
  PatternSchema,
  ServerNameSchema,
  TenantNameSchema,
  eitherBy,
  formatPath,
} from '../model/schemas';
import { ProtocolChoiceSchema } from '../model/schemas';
import { DEFAULT_CONFIRM_TIMEOUT_SECONDS } from '../model/activities';
import type { ToolSettings } from '../model/activities';
import { TENANT, grantTemplateProblem, splitTool, tenantValueProblem } from '../model/checks';
import { DEFAULT_MAX_PRIORITY, DEFAULT_WEIGHT, defaultReserve } from '../model/shares';
import type { Shares } from '../model/shares';
import { CredentialSchema, SecretRefSchema } from './credentials';
import { PayloadsSchema } from './payloads-config';
import { ApproversSchema, PrincipalSchema } from './approvers';
import { IntegritySchema, PackageSpecSchema, fetcherProblem } from './package-spec';

/**
 * I3: a destination a sandbox may reach, `host:port` — a name, an IPv4 address or a bracketed IPv6 one, and a port.
 */
const HostPortSchema = z
  .string()
  .regex(
    /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*):\d{1,5}$/,
    'a network grant is "host:port" (a name, an IPv4 address or [an IPv6 one], and a port)',
  )
  .refine((value) => {
    const port = Number(value.slice(value.lastIndexOf(':') + 1));
    return port >= 1 && port <= 65535;
  }, 'a port is 1 to 65535');

/** I4: `node.limitsBy` and `OZ0_LIMITS`: a control group of v2 or v1, resource limits alone, or the best there is. */
const LimitsBySchema = z.enum(['auto', 'cgroup2', 'cgroup1', 'rlimit'], {
  error: 'one of auto, cgroup2, cgroup1, rlimit',
});

/**
 * I3: a network grant: `host:port`, or `{ "to": "host:port", "private": true }` — a name that may resolve to a private
 * address (RFC 1918, 100.64.0.0/10, fc00::/7), e.g. a database on the node's private network. Without it, a granted
 * name that resolves to one is refused; a grant by address (`10.0.0.7:5432`) is always connected to as written.
 */
const NetworkGrantSchema = z.union(
  [
    HostPortSchema,
    z.strictObject({
      to: HostPortSchema,
      /** The name may resolve to a private address; never to loopback, link-local, or an address of the node's own. */
      private: z.boolean().default(false),
    }),
  ],
  { error: 'a network grant is "host:port", or { "to": "host:port", "private": true }' },
);

export type NetworkGrant = z.infer<typeof NetworkGrantSchema>;

/** I2: a grant's path, which may name `{tenant}` as a whole folder (activities/sandbox/tenant-grants.ts). */
const GrantPathSchema = z
  .string()
  .min(1)
  .superRefine((p, ctx) => {
    const problem = grantTemplateProblem(p);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  });

/**
 * I1-I5: what a sandboxed server or a harness may reach beyond its own folder and a private /tmp, and its limits.
 * Paths are the config folder's when relative.
 */
export const SandboxSchema = z.strictObject({
  /** Files and folders it may read (I2). */
  read: z.array(GrantPathSchema).default([]),
  /** Files and folders it may read and write (I2). */
  write: z.array(GrantPathSchema).default([]),
  /** I3: no network (the default), exactly these `host:port` destinations, or `"host"`: the node's own network. */
  network: z
    .union([z.literal('host'), z.array(NetworkGrantSchema)], {
      error: 'sandbox.network is a list of "host:port" grants, or "host" for the node\'s own network',
    })
    .default([]),
  /** I4: memory of the whole sandbox (its processes and its /tmp), in MiB. */
  memoryMiB: z
    .number()
    .int()
    .min(32)
    .max(1024 * 1024)
    .default(1024),
  /** I4: processes and threads at once. */
  pids: z.number().int().min(16).max(1_000_000).default(512),
  /** I4: CPU time of the whole sandbox over its life, in seconds. */
  cpuSeconds: z
    .number()
    .positive()
    .max(30 * 24 * 3600)
    .default(3600),
  /** I4: the cores' worth of CPU it may use at once (0.5: half of one core), so one sandbox cannot take the node's. */
  cpus: z.number().min(0.01).max(1024).default(1),
  /** I4: disk of its own folder, its private /tmp and what it writes in its write grants, in MiB. */
  diskMiB: z
    .number()
    .int()
    .min(1)
    .max(16 * 1024 * 1024)
    .default(1024),
});

export type SandboxConfig = z.infer<typeof SandboxSchema>;

/**
 * I2: a stdio server's `args`, `env` or `keyStores` value, which may name `{tenant}` as a whole component of a path
 * (`"MEMORY_FILE_PATH": "/srv/memory/{tenant}/memory.jsonl"`): each tenant's calls then go to a process of its own,
 * given its name there (activities/pool.ts).
 */
const TenantValueSchema = z.string().superRefine((v, ctx) => {
  const problem = tenantValueProblem(v);
  if (problem) ctx.addIssue({ code: 'custom', message: problem });
});

/** Which MCP revision oz0 speaks with the server: asked at connect (`auto`), or pinned. */
const protocol = ProtocolChoiceSchema.default('auto');

const StdioServerSchema = z
  .strictObject({
    /** Its program; with `package`, the name of one of the package's programs (default: its only one). */
    command: z.string().min(1).optional(),
    /** S1: the server as its registry publishes it (`npm:@scope/name@1.2.3`, `pypi:name==1.2.3`), installed by the node. */
    package: PackageSpecSchema.optional(),
    /** S1: the package's own digest, pinned beyond its version (npm's `sha512-…`, PyPI's `sha256:<hex>`). */
    integrity: IntegritySchema.optional(),
    args: z.array(TenantValueSchema).default([]),
    protocol,
    /** For a sandboxed server this is all the environment it gets. */
    env: z.record(z.string(), TenantValueSchema).default({}),
    /**
     * I2, S4: the files a plugin server keeps its keys in (relative to the config's folder), hidden from every sandbox
     * with SQLite's files beside them. An `env` value naming a `.db`, `.sqlite` or `.sqlite3` file is taken for one too.
     */
    keyStores: z.array(TenantValueSchema.min(1)).default([]),
    /** A process of the job's own, isolated (I1-I5): `true` for the defaults, or what it is granted. */
    sandbox: z
      .preprocess((v) => (v === true ? {} : v === false || v === undefined ? null : v), SandboxSchema.nullable())
      .transform((v) => v ?? false),
  })
  .superRefine((s, ctx) => {
    if (s.command === undefined && !s.package) {
      ctx.addIssue({
        code: 'custom',
        path: ['command'],
        message: 'a stdio server names its "command", or its "package"',
      });
    }
    if (s.package && s.command !== undefined && s.command.includes('/')) {
      ctx.addIssue({
        code: 'custom',
        path: ['command'],
        message:
          'with "package", "command" names one of the package\'s own programs (its bin, its console script), not a path',
      });
    }
    if (s.integrity && s.package && s.integrity.startsWith('sha512-') !== (s.package.registry === 'npm')) {
      ctx.addIssue({
        code: 'custom',
        path: ['integrity'],
        message:
          s.package.registry === 'npm'
            ? 'an npm package\'s integrity is "sha512-…"'
            : 'a PyPI file\'s is "sha256:<hex>"',
      });
    }
    if (s.integrity && !s.package) {
      ctx.addIssue({ code: 'custom', path: ['integrity'], message: 'integrity pins a "package"' });
    }
    const fetches = s.sandbox && s.command !== undefined && !s.package ? fetcherProblem(s.command, s.args) : undefined;
    if (fetches) ctx.addIssue({ code: 'custom', path: ['command'], message: fetches });
  })
  .transform((s) => ({ ...s, command: s.command ?? '' }));

const RemoteServerSchema = z
  .strictObject({
    url: z.url({ protocol: /^https?$/, error: 'a remote server url is http:// or https://' }),
    /** Values of the form `env:NAME` are read from the node's environment when the connection opens. */
    headers: z.record(z.string(), z.string()).default({}),
    protocol,
    /**
     * R1: `shared` — every tenant's calls go with the server's own `headers`, on one connection per node; `per-tenant` —
     * each tenant's go with its own credentials (`tenants.<t>.credentials.<server>`) on a connection of its own, and
     * a tenant without them is refused before anything is sent.
     */
    credentials: z.enum(['shared', 'per-tenant']).default('shared'),
  })
  .superRefine((s, ctx) => {
    if (s.credentials !== 'per-tenant') return;
    const auth = Object.keys(s.headers).find((h) => h.toLowerCase() === 'authorization');
    if (auth) {
      ctx.addIssue({
        code: 'custom',
        path: ['headers', auth],
        message:
          "a per-tenant server's identity is each tenant's own (tenants.<t>.credentials), not the server's headers",
      });
    }
  });

const ServerSchema = eitherBy(
  'url',
  RemoteServerSchema,
  StdioServerSchema,
  'a server is { "command": …, "args": […] } or { "package": … } (stdio), or { "url": … } (Streamable HTTP)',
);

/** H1: a harness — the agent program a live session runs — and the tools it may use. */
const HarnessSchema = z.strictObject({
  command: z.string().min(1),
  args: z.array(z.string()).default([]),
  /** All the environment it gets, with OZ0_MCP_URL, OZ0_MCP_TOKEN, OZ0_JOB, OZ0_SESSION(_RUN) and OZ0_INPUT. */
  env: z.record(z.string(), z.string()).default({}),
  /** The tool patterns (`server.function`, `server.*`, `*`) its gateway lists, as far as the tenant's policy allows. */
  tools: z.array(PatternSchema).min(1, 'a harness may use at least one tool pattern'),
  /** The harness is stopped, and its session ends with an error result, past this long. */
  timeoutSeconds: z
    .number()
    .positive()
    .max(7 * 24 * 3600)
    .default(600),
  /** A harness always runs isolated (I1-I5): what it is granted beyond its folder and its gateway. */
  sandbox: SandboxSchema.prefault({}),
});

const ToolSettingsSchema = z.strictObject({
  timeoutSeconds: z
    .number()
    .positive()
    .max(7 * 24 * 3600)
    .optional(),
  maxAttempts: z.number().int().min(1).max(100).optional(),
  /** A4-A6: how long a call whose verdict is `confirm` waits for a person's answer before it is refused. */
  confirmTimeoutSeconds: z
    .number()
    .positive()
    .max(365 * 24 * 3600)
    .optional(),
});

const TenantSchema = z.strictObject({
  /** Seeds the tenant's policy workflow the first time it starts; `oz0 policy set` changes it after. */
  policy: z.record(PatternSchema, DecisionSchema).default({}),
  /** R1: the tenant's own credentials for remote servers whose `credentials` are `per-tenant`, by server. */
  credentials: z.record(ServerNameSchema, CredentialSchema).default({}),
  /**
   * F1, F4: its weight in fair dispatch (default 1) and the highest priority its jobs may ask (default 3). Seeds its
   * shares, like `policy`: `oz0 tenant set` changes them after.
   */
  fairness: FairnessSchema.optional(),
  /** F3: at most this many calls at once and this many a second, on every node together; the same per server. */
  limits: LimitsSchema.optional(),
  /** A9: who may answer its calls in the inbox (emails, subjects, groups), for all its tools or per tool pattern. */
  approvers: ApproversSchema.optional(),
  /**
   * A10: a webhook (Slack's or Teams' incoming webhook, or any that takes `{ "text": … }`) told when a call starts
   * waiting for a person and when its wait ends. Its URL holds its secret: given by reference, `env:NAME` or `file:PATH`.
   */
  notify: z.strictObject({ webhook: SecretRefSchema }).optional(),
  /**
   * D4: the keys that seal its payloads, by reference (`env:NAME`, `file:PATH`: 32 bytes in base64 or hex), newest
   * first: the first seals, every one opens. They come before the key folder's (`payloads.seal.folder`).
   */
  keys: z.array(SecretRefSchema).max(100).default([]),
  /**
   * D5: who may read its jobs decoded in the Temporal UI, through the inbox's codec server (emails, subjects, groups,
   * as `approvers`); its approvers may too.
   */
  viewers: z.array(PrincipalSchema).max(1000).default([]),
});

/** A8, A9: the approvals inbox (`oz0 inbox`): where it listens, and the identity provider people sign in with. */
const InboxSchema = z
  .strictObject({
    host: z.string().min(1).default('127.0.0.1'),
    port: z.number().int().min(0).max(65535).default(8090),
    /** The address people reach it at (behind a proxy, with TLS): its sign-in's redirect, and links to it. */
    publicUrl: z.url({ protocol: /^https?$/ }).optional(),
    /** A9: OpenID Connect: the authorization code flow with PKCE, against the operator's identity provider. */
    oidc: z.strictObject({
      issuer: z.url({ protocol: /^https?$/ }),
      clientId: z.string().min(1),
      /** By reference (`env:NAME`, `file:PATH`); none for a public client. */
      clientSecret: SecretRefSchema.optional(),
      scopes: z.string().default('openid email profile'),
      /** The claim of the ID token (or userinfo) that lists a person's groups. */
      groupsClaim: z.string().min(1).default('groups'),
    }),
    /** D5: who may read the platform's own workflows (tenants' policies, limiters, probes) decoded in the Temporal UI. */
    operators: z.array(PrincipalSchema).max(1000).default([]),
    /**
     * D5: the Temporal UI's address as people's browsers reach it, for links to each job; its codec requests come from
     * there, and only from there (CORS, with the session's cookie). `oz0 inbox --temporal-ui` says it too.
     */
    temporalUi: z.url({ protocol: /^https?$/ }).optional(),
    /** D5: where every decode is recorded (JSON lines; default `<node.stateDir>/decodes.jsonl`); `oz0 inbox decodes` reads it. */
    decodeLog: z.string().min(1).optional(),
    /**
     * D5: the Temporal UI is on another site than the inbox (Temporal Cloud's UI): the sign-in cookie is SameSite=None,
     * so that its codec requests carry it; the inbox must then be served over https (publicUrl).
     */
    crossSiteUi: z.boolean().default(false),
    /** How long a sign-in lasts. */
    sessionHours: z
      .number()
      .positive()
      .max(24 * 30)
      .default(8),
  })
  .refine((inbox) => !inbox.crossSiteUi || inbox.publicUrl?.startsWith('https:'), {
    message:
      'inbox.crossSiteUi needs inbox.publicUrl on https: a browser takes a SameSite=None cookie only if it is Secure',
    path: ['crossSiteUi'],
  });
export type InboxConfig = z.infer<typeof InboxSchema>;

const ConfigShape = z.strictObject({
  temporal: z
    .strictObject({
      address: z.string().min(1).default('127.0.0.1:7233'),
      namespace: z.string().min(1).default('default'),
      taskQueue: z.string().min(1).default('oz0'),
      /**
       * Where tenants' policy workflows run. Policies belong to the namespace (their ids are `oz0-policy/<tenant>`),
       * so every node polls this one queue, whatever its own task queue: a policy stays readable when nodes move.
       */
      policyTaskQueue: z.string().min(1).default('oz0-policy'),
    })
    .prefault({}),
  servers: z.record(ServerNameSchema, ServerSchema).default({}),
  tools: z.record(PatternSchema, ToolSettingsSchema).default({}),
  tenants: z.record(TenantNameSchema, TenantSchema).default({}),
  inbox: InboxSchema.optional(),
  /** D1-D3: where payloads past Temporal's history go (./payloads-config.ts). */
  payloads: PayloadsSchema,
  /** H1: the agent programs a live session may run, by name; a job spec names one, never a command. */
  harnesses: z.record(HarnessNameSchema, HarnessSchema).default({}),
  jobs: z
    .strictObject({
      continueAsNewAfterCalls: z.number().int().min(1).default(1000),
      /** H10: a session's calls past this many get error results that say so. */
      maxCallsPerSession: z.number().int().min(1).max(100_000).default(2000),
    })
    .prefault({}),
  node: z
    .strictObject({
      slots: z.number().int().min(1).max(10_000).default(100),
      /**
       * N5: the live and scripted sessions a node holds open at once, apart from its slots (each session's lease or
       * harness runs on a queue of its own): a session past them is refused as it opens, and opens on another node.
       */
      maxSessions: z.number().int().min(1).max(100_000).default(500),
      /**
       * D1: the largest answer a tool may give (MiB, as its server sends it); past it the call's answer is an error
       * result naming its size and this bound. The node holds a few copies of an answer while it stores it.
       */
      maxResultMiB: z.number().min(1).max(1024).default(64),
      /**
       * F2: slots a node keeps for tenants under their share of it: a tenant whose calls fill the rest takes no more
       * while another tenant's call would wait for one. Default: 5 % of the slots, at least 1 (none below 4 slots); 0: off.
       */
      reserveSlots: z.number().int().min(0).max(10_000).optional(),
      /**
       * F3: a node renews the permits of its tenants' caps every second; ones it stops renewing (it died, or lost
       * Temporal) go back to their limiter after this long. Shorter frees a dead node's share sooner; it must outlast
       * a pause of the node's (a long collection, a loaded machine).
       */
      permitHoldSeconds: z.number().min(3).max(3600).default(30),
      /**
       * F1: at start, a node checks that the Temporal server dispatches fairly (a probe of a few tasks on a queue of
       * its own) and says so when it does not, naming the setting. Off: no probe.
       */
      fairnessProbe: z.boolean().default(true),
      /**
       * Where the server does not push cancels (worker commands off: Temporal Cloud, an older cluster), a running call
       * heartbeats this often, and a cancel reaches it within about this long. With push, calls beat a third of the
       * heartbeat timeout apart and carry a change within a second; this is then only the SDK's throttle (issue 26).
       */
      heartbeatMs: z.number().int().min(50).max(10_000).default(200),
      /** A node whose call misses heartbeats this long is taken as lost (T4). */
      heartbeatTimeoutSeconds: z.number().min(1).max(600).default(10),
      /** Where the node keeps sandbox folders and other state; relative to the config's folder. */
      stateDir: z.string().min(1).default('.oz0'),
      /** How often a node reads again the policies of tenants with running calls: a kill switch stops them within this. */
      policyRefreshMs: z.number().int().min(50).max(10_000).default(250),
      /** A first attempt may use a policy read this recent (0: read it for every call); retries always read anew. */
      policyMaxAgeMs: z.number().int().min(0).max(60_000).default(0),
      /**
       * Follow each tenant's policy workflow, so a first attempt is checked against a live copy with no read of
       * its own (a retry, and a refusal, still read anew). Off: every first attempt reads (policyMaxAgeMs).
       */
      policyWatch: z.boolean().default(true),
      /**
       * C1 (issue 36.4): how many jobs the node follows at once for their cancels — a long poll of the history of each
       * job with a call running here past jobFollowAfterMs, so a job's cancel stops its calls before the job's workflow
       * task has run. Past it, a call hears its cancel Temporal's way only; 0: no follows. Each is a long poll that
       * Temporal's frontend counts against `frontend.namespaceCount` (docs/config.md).
       */
      jobFollows: z.number().int().min(0).max(10_000).default(100),
      /** C1: a job is followed once one of its calls has run this long; a shorter call costs no read. */
      jobFollowAfterMs: z.number().int().min(0).max(600_000).default(15),
      /**
       * A stopped stdio server first has its stdin closed and this long to exit on its own — time to read the cancels
       * before it and run its handlers' cleanup (MCP's stdio shutdown) — before SIGTERM (C3).
       */
      stdinGraceSeconds: z.number().min(0).max(600).default(2),
      /** A stopped server's process group gets SIGTERM, then SIGKILL after this long (C3). */
      killGraceSeconds: z.number().min(0).max(600).default(5),
      /** On SIGTERM a node stops taking calls and gives running ones this long to finish, then cancels them. */
      shutdownGraceSeconds: z.number().min(0).max(3600).default(10),
      /** The port of the node's gateway for harnesses (H3), on 127.0.0.1; 0 picks a free one. */
      gatewayPort: z.number().int().min(0).max(65535).default(0),
      /**
       * I14: the address the gateway listens on. 127.0.0.1 by default (a node's own harnesses reach it there or
       * through their sandbox's socket); an operator whose tenants' agents run elsewhere and reach their external
       * sessions with session tokens names another (behind TLS).
       */
      gatewayHost: z.string().min(1).default('127.0.0.1'),
      /**
       * O1: the port of the node's Prometheus endpoint, `/metrics` (`OZ0_METRICS_PORT` overrides); unset, nothing
       * listens. 0 picks a free one (tests).
       */
      metricsPort: z.number().int().min(0).max(65535).optional(),
      /** O1: the address `/metrics` listens on; every interface by default, so a Prometheus elsewhere can scrape it. */
      metricsHost: z.string().min(1).default('0.0.0.0'),
      /**
       * Calls of one job a harness may have in flight at once through the gateway; the rest wait their turn. Temporal
       * admits 10 Updates in flight per workflow by default (`history.maxInFlightUpdates`), and cancels need room.
       */
      gatewayCallsPerJob: z.number().int().min(1).max(1000).default(8),
      /**
       * I10: what one harness may hold at the gateway, so that it cannot exhaust the node. Connections of a sandboxed
       * harness at once (its own socket); connections to the gateway's TCP port at once, all of them (an unisolated
       * harness's); a request's body; its 2025-11-25 sessions (each `initialize` makes one); its requests in flight;
       * and how long a request may take to arrive, headers and body (a response may take as long as its call).
       */
      gatewayConnectionsPerHarness: z.number().int().min(2).max(10_000).default(64),
      gatewayMaxConnections: z.number().int().min(2).max(100_000).default(1024),
      gatewayMaxBodyBytes: z
        .number()
        .int()
        .min(1024)
        .max(64 * 1024 * 1024)
        .default(2 * 1024 * 1024),
      gatewayLegacySessions: z.number().int().min(1).max(1000).default(16),
      gatewayRequestsPerToken: z.number().int().min(1).max(10_000).default(64),
      gatewayRequestSeconds: z.number().min(1).max(600).default(30),
      /**
       * I6: `bwrap` isolates every sandboxed server and harness with bubblewrap, and refuses to start one where it
       * cannot; `none` runs them as plain processes (one tenant only: the node warns at start, the trace says so).
       */
      isolation: z.enum(['bwrap', 'none']).default('bwrap'),
      /**
       * I8: the bubblewrap binary to run (relative to the config's folder). Unset, a node takes `OZ0_BWRAP`, then
       * `bwrap` on PATH, then oz0's pinned copy in `.tools/bubblewrap`, installing it when missing.
       */
      bwrap: z.string().min(1).optional(),
      /**
       * I3: the DNS servers (`address` or `address:port`) a sandbox's granted names are asked of; unset, the node's own
       * resolver (getaddrinfo: /etc/hosts, then its DNS). Whichever answers, an inward answer is refused.
       */
      dnsServers: z
        .array(
          z
            .string()
            .regex(
              /^(?:\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?|\[[0-9A-Fa-f:.]+\](?::\d{1,5})?|[0-9A-Fa-f:]+)$/,
              'a DNS server is an address, with :port if not 53',
            ),
        )
        .min(1)
        .optional(),
      /**
       * I1: where a node runs as root, each sandbox runs as a uid of its own from this range, never two at once on
       * the machine (every node of the machine takes from it safely). The default lies above systemd-nspawn's
       * container ranges and below systemd's foreign range, clear of people and of /etc/subuid's usual ranges.
       */
      sandboxUids: z
        .strictObject({
          first: z.number().int().min(1000).max(4_294_967_294).default(1_879_048_192),
          count: z.number().int().min(1).max(1_000_000).default(65_536),
        })
        .prefault({})
        .refine((r) => r.first + r.count - 1 <= 4_294_967_294, 'node.sandboxUids ends past the last uid, 4294967294'),
      /** I1: the group every sandbox runs in when the node runs as root (a write grant it shares is this group's). */
      sandboxGid: z.number().int().min(1).max(4_294_967_294).default(65534),
      /**
       * I4: `strict` refuses a sandbox whose limits this node cannot all hold (saying which); `best-effort` runs it
       * holding what it can, and the node warns at start.
       */
      limits: z.enum(['strict', 'best-effort']).default('strict'),
      /** I4: how sandboxes' limits are held: the best this node may use (`auto`), or one mode (`OZ0_LIMITS` overrides). */
      limitsBy: LimitsBySchema.default('auto'),
      /**
       * A7: how often a harness's call that waits for a person's yes tells it so (a progress notification), so a client
       * that resets its timeout on progress keeps waiting; well under the MCP TypeScript SDK's 60 s default.
       */
      waitingNoticeMs: z.number().int().min(100).max(600_000).default(10_000),
      /**
       * I9: how often the node asks Temporal whether the jobs of its sandboxed servers and harnesses still run; one that
       * ended in any way (terminated, timed out too) has them stopped within this and the stop's grace.
       */
      sandboxCheckSeconds: z.number().min(1).max(60).default(10),
      /** A sandboxed server unused this long is stopped even if its job never said it ended. */
      sandboxIdleSeconds: z
        .number()
        .positive()
        .default(15 * 60),
    })
    .prefault({}),
  /** N6: how this release's nodes share a cluster with the release before it (docs/deploy.md, "Rolling back"). */
  upgrade: z
    .strictObject({
      /**
       * While true, this release's nodes write nothing a node of the previous release could not run after them: no
       * marker of this release's changes in a job's history (a waiting call's memo and webhook notice, a session
       * handed on at a shutdown), no batch of questions to a tenant's policy, and no slots kept for tenants under
       * their share unless `node.reserveSlots` says so. It asks for payloads that release reads: none sealed, none
       * stored (`payloads.seal.newPayloads: "plain"`, `payloads.store: "off"`). Set it for an upgrade you may roll
       * back; unset it (restarting the nodes one by one) once no node of the previous release is left.
       */
      rollbackSafe: z.boolean().default(false),
    })
    .prefault({}),
});

/**
 * R1: each tenant's credentials are for a remote server that takes them. F2: a node keeps fewer slots than it has.
 * N6: a rollback-safe node writes payloads the previous release can read.
 */
export const ConfigSchema = ConfigShape.superRefine((config, ctx) => {
  const { seal, store } = config.payloads;
  if (config.upgrade.rollbackSafe && ((seal !== 'off' && seal.newPayloads === 'sealed') || store !== 'off')) {
    ctx.addIssue({
      code: 'custom',
      path: ['upgrade', 'rollbackSafe'],
      message:
        'the previous release opens no sealed payload and no stored one: with upgrade.rollbackSafe, set ' +
        'payloads.seal.newPayloads to "plain" (or payloads.seal to "off") and payloads.store to "off"',
    });
  }
  const { slots, reserveSlots } = config.node;
  if (reserveSlots !== undefined && reserveSlots > 0 && reserveSlots >= slots) {
    ctx.addIssue({
      code: 'custom',
      path: ['node', 'reserveSlots'],
      message: `a node keeps fewer slots for tenants under their share than it has (node.slots: ${slots})`,
    });
  }
  for (const [tenant, { credentials }] of Object.entries(config.tenants)) {
    for (const server of Object.keys(credentials)) {
      const target = Object.hasOwn(config.servers, server) ? config.servers[server] : undefined;
      const problem = !target
        ? `there is no server "${server}"`
        : !('url' in target)
          ? `"${server}" is not a remote server`
          : target.credentials !== 'per-tenant'
            ? `servers.${server}.credentials is "shared": set it to "per-tenant" for tenants' own credentials`
            : undefined;
      if (problem) ctx.addIssue({ code: 'custom', path: ['tenants', tenant, 'credentials', server], message: problem });
    }
  }
});

export type Config = z.infer<typeof ConfigSchema>;
export type ServerConfig = StdioServerConfig | RemoteServerConfig;
export type HarnessConfig = z.infer<typeof HarnessSchema>;
export type StdioServerConfig = z.infer<typeof StdioServerSchema>;
export type RemoteServerConfig = z.infer<typeof RemoteServerSchema>;

/** O1: `OZ0_METRICS_PORT`, a port number (0 picks a free one). */
const MetricsPortEnv = z
  .string()
  .regex(/^\d{1,5}$/, 'a port number, 0-65535')
  .transform(Number)
  .pipe(z.number().int().min(0).max(65535, 'a port number, 0-65535'));

/** A loaded config and the folder its relative paths are resolved against. */
export interface LoadedConfig extends Config {
  baseDir: string;
  source: string;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

export const DEFAULT_TOOL_SETTINGS: ToolSettings = {
  timeoutSeconds: 60,
  maxAttempts: 3,
  confirmTimeoutSeconds: DEFAULT_CONFIRM_TIMEOUT_SECONDS,
};

/** Validates a parsed config object; the error names every bad field. */
export function parseConfig(input: unknown, source = 'config'): Config {
  const parsed = ConfigSchema.safeParse(input);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `${formatPath(i.path)}: ${i.message}`);
    throw new ConfigError(`bad config (${source}): ${lines.join('; ')}`);
  }
  return parsed.data;
}

/**
 * Finds, reads and validates the config, then applies TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE, as
 * Temporal's own tools do, and oz0's OZ0_METRICS_PORT and OZ0_LIMITS.
 */
export function loadConfig(opts: { file?: string; env?: NodeJS.ProcessEnv; cwd?: string } = {}): LoadedConfig {
  const env = opts.env ?? process.env;
  const cwd = opts.cwd ?? process.cwd();
  const explicit = opts.file ?? env.OZ0_CONFIG;
  const file = explicit ? path.resolve(cwd, explicit) : path.join(cwd, 'oz0.config.json');
  let raw: unknown = {};
  let source = 'defaults';
  if (fs.existsSync(file)) {
    source = file;
    try {
      raw = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch (err) {
      throw new ConfigError(`bad config (${file}): not JSON: ${(err as Error).message}`);
    }
  } else if (explicit) {
    throw new ConfigError(`config file not found: ${file}`);
  }
  const config = parseConfig(raw, source);
  if (env.TEMPORAL_ADDRESS) config.temporal.address = env.TEMPORAL_ADDRESS;
  if (env.TEMPORAL_NAMESPACE) config.temporal.namespace = env.TEMPORAL_NAMESPACE;
  if (env.OZ0_METRICS_PORT !== undefined && env.OZ0_METRICS_PORT !== '') {
    const port = MetricsPortEnv.safeParse(env.OZ0_METRICS_PORT);
    if (!port.success) throw new ConfigError(`OZ0_METRICS_PORT: ${port.error.issues[0].message}`);
    config.node.metricsPort = port.data;
  }
  if (env.OZ0_LIMITS !== undefined && env.OZ0_LIMITS !== '') {
    const by = LimitsBySchema.safeParse(env.OZ0_LIMITS);
    if (!by.success) throw new ConfigError(`OZ0_LIMITS: ${by.error.issues[0].message}`);
    config.node.limitsBy = by.data;
  }
  return { ...config, baseDir: source === 'defaults' ? cwd : path.dirname(file), source };
}

/** F2: the slots a node keeps for tenants under their share. */
export function reserveOf(
  node: Pick<Config['node'], 'slots' | 'reserveSlots'>,
  upgrade?: Pick<Config['upgrade'], 'rollbackSafe'>,
): number {
  // N6: a call that waits for a kept slot waits in its job, which the previous release's bundle cannot replay.
  return node.reserveSlots ?? (upgrade?.rollbackSafe ? 0 : defaultReserve(node.slots));
}

/** F1-F5: a tenant's shares as the config seeds them, when it says any; else undefined (the defaults). */
export function sharesSeedOf(config: Pick<Config, 'tenants'>, tenant: string): Shares | undefined {
  const t = Object.hasOwn(config.tenants, tenant) ? config.tenants[tenant] : undefined;
  if (!t?.fairness && !t?.limits) return undefined;
  return {
    weight: t.fairness?.weight ?? DEFAULT_WEIGHT,
    maxPriority: t.fairness?.maxPriority ?? DEFAULT_MAX_PRIORITY,
    limits: t.limits ?? {},
  };
}

/** The settings of a tool: its own entry, else `server.*`, else `*`, else the defaults — field by field. */
export function toolSettings(config: Pick<Config, 'tools'>, tool: string): ToolSettings {
  const { server } = splitTool(tool);
  const layers = [config.tools['*'], config.tools[`${server}.*`], config.tools[tool]];
  const out = { ...DEFAULT_TOOL_SETTINGS };
  for (const layer of layers) {
    if (layer?.timeoutSeconds !== undefined) out.timeoutSeconds = layer.timeoutSeconds;
    if (layer?.maxAttempts !== undefined) out.maxAttempts = layer.maxAttempts;
    if (layer?.confirmTimeoutSeconds !== undefined) out.confirmTimeoutSeconds = layer.confirmTimeoutSeconds;
  }
  return out;
}

export function isRemote(server: ServerConfig): server is RemoteServerConfig {
  return 'url' in server;
}

/** R1: whether each tenant's calls of this server go with the tenant's own credentials. */
export function perTenant(server: ServerConfig): server is RemoteServerConfig & { credentials: 'per-tenant' } {
  return isRemote(server) && server.credentials === 'per-tenant';
}

/** I2: whether a stdio server's `args` or `env` name `{tenant}`: each tenant's calls then have a process of their own. */
export function namesTenant(server: ServerConfig): boolean {
  return !isRemote(server) && [...server.args, ...Object.values(server.env)].some((v) => v.includes(TENANT));
}

/** SPEC "Words": a shared plugin process, a job's own sandboxed process, or a remote Streamable HTTP server. */
export type ServerKind = 'plugin' | 'sandbox' | 'remote';

export function serverKind(server: ServerConfig): ServerKind {
  return isRemote(server) ? 'remote' : server.sandbox ? 'sandbox' : 'plugin';
}

/**
 * I2: what no sandbox may see and why — the node's state folder, its config file, the files its secrets are read from,
 * plugins' key stores — and each sandbox's grants checked against it as they resolve (./grants.ts), with its network
 * grants (I3). Read from the config each time (a key store or a secret file may appear later).
 */
import fs from 'node:fs';
import path from 'node:path';
import { secretFilesOf } from '../../common/credentials';
import type { LoadedConfig, SandboxConfig } from '../../common/config';
import { byNameProblem, isIn, wayProblem } from './grants';
import type { Place, WritableGrant } from './grants';
import { grantOf, parseGrant } from './network';
import { resolvePath, within } from './plan';
import type { ResolvedPath } from './plan';
import { probePath } from './probe';
import { beforeTenant, perTenant } from './tenant-grants';
import { fillTenant } from '../../model/checks';

/** What no sandbox may see: a folder, or a file and the files SQLite keeps beside it; and what it is, in words. */
interface SecretPlace {
  path: string;
  what: string;
  files?: string[];
}

/** S4: a plugin's `env` value that is a key store by its name: an SQLite file, as the plugin kit's stores are. */
const SQLITE_FILE = /\.(db|sqlite3?)$/i;

export class Hidden {
  constructor(
    private readonly config: LoadedConfig,
    /** Whether this node's bubblewrap binds by name (no --ro-bind-fd), known once it is found. */
    private readonly bindsByName: () => boolean,
  ) {}

  /**
   * I2: what no sandbox may see, each with where the config names it: the node's state folder, a folder payload
   * store and the payload keys' folder (their defaults lie in the state folder), its config file, the files its secrets are read from, and the key stores of its plugin servers (S4, what is declared: each file a
   * plugin server's `keyStores` names, and each file its `env` names that is an SQLite database by its name — `.db`,
   * `.sqlite`, `.sqlite3`, as the plugin kit's stores are — never any other path, URL or version a plugin's `env`
   * holds), each with SQLite's `-wal`, `-shm` and `-journal` beside it; a store that names `{tenant}`, the folder
   * before it, which holds every tenant's.
   */
  secretPlaces(): SecretPlace[] {
    const { config } = this;
    const out: SecretPlace[] = [
      { path: path.resolve(config.baseDir, config.node.stateDir), what: "the node's state folder (node.stateDir)" },
    ];
    // D2: a folder store holds every tenant's big payloads and answers, wherever the config puts it.
    const store = config.payloads.store;
    if (store && store !== 'off' && 'folder' in store) {
      out.push({ path: path.resolve(config.baseDir, store.folder), what: 'the payload store (payloads.store.folder)' });
    }
    // D4: the key folder opens every tenant's payloads, wherever the config puts it.
    const seal = config.payloads.seal;
    if (seal !== 'off' && seal.folder) {
      out.push({ path: path.resolve(config.baseDir, seal.folder), what: 'the payload keys (payloads.seal.folder)' });
    }
    if (config.source !== 'defaults' && path.isAbsolute(config.source)) {
      out.push({ path: config.source, what: "the node's config file" });
    }
    // I2: the files the config's secrets are read from (`file:PATH`), wherever they lie: `/etc` is always bound.
    const { baseDir, source: _source, ...rest } = config;
    for (const { field, file } of secretFilesOf(rest, baseDir))
      out.push({ path: file, what: `a secret the config names (${field})`, files: [file] });
    for (const [name, server] of Object.entries(config.servers)) {
      if (!('command' in server) || server.sandbox) continue;
      const stores = [
        ...server.keyStores.map((value, i) => ({ value, field: `servers.${name}.keyStores[${i}]` })),
        ...Object.entries(server.env)
          .filter(([, value]) => !value.startsWith('env:') && SQLITE_FILE.test(value))
          .map(([key, value]) => ({ value, field: `servers.${name}.env.${key}` })),
      ];
      for (const { value, field } of stores) {
        const file = path.resolve(config.baseDir, value);
        // A store per tenant: the folder that holds every tenant's, as it is now and as later tenants' make it grow.
        if (perTenant(file)) {
          const what = `the folder of the key stores of plugin server "${name}", one per tenant (${field})`;
          out.push({ path: beforeTenant(file), what });
          continue;
        }
        out.push({
          path: file,
          what: `the key store of plugin server "${name}" (${field})`,
          files: [file, `${file}-wal`, `${file}-shm`, `${file}-journal`],
        });
      }
    }
    return out;
  }

  /** I2: what no sandbox may see, where it really is: every file of a key store, there yet or not. */
  places(): Place[] {
    return this.secretPlaces().flatMap((place) =>
      (place.files ?? [place.path]).map((p) => ({ path: realPath(p), what: place.what })),
    );
  }

  /** Every folder a sandbox of this config may write, where it really is: a link inside one is a tenant's. */
  writableGrants(): WritableGrant[] {
    const blocks = [
      ...Object.entries(this.config.servers).flatMap(([name, s]) =>
        'command' in s && s.sandbox ? [[`servers.${name}.sandbox`, s.sandbox] as const] : [],
      ),
      ...Object.entries(this.config.harnesses).map(([name, h]) => [`harnesses.${name}.sandbox`, h.sandbox] as const),
    ];
    return blocks.flatMap(([field, grants]) =>
      grants.write.map((w, i) => ({
        field: `${field}.write[${i}]`,
        path: realPath(path.resolve(this.config.baseDir, beforeTenant(w))),
      })),
    );
  }

  /** I2: the paths to hide from a sandbox now: the state folder, the config file, its secrets' files, key stores. */
  hiddenPaths(): string[] {
    return this.secretPlaces().flatMap((place) => (place.files ? place.files.filter(isFile) : [place.path]));
  }

  /**
   * A sandbox's own `env` naming what no sandbox may see (a file a plugin keeps its keys in, the state folder): hidden
   * from it whatever its grants say, so it would fail at run time (EACCES). Each clash names both fields. Relative
   * paths in a sandbox's `env` are its own folder's, and `env:NAME` values are the node's secrets: neither is looked at.
   * `{tenant}` in a value is `tenant`'s name, when the sandbox is a tenant's.
   */
  envProblems(field: string, tenant?: string): string[] {
    const [group, name] = field.split('.');
    const owner = group === 'harnesses' ? this.config.harnesses[name] : this.config.servers[name];
    if (!owner || !('command' in owner)) return [];
    // Compared where they really are: a link to a key store is the key store.
    const places = this.secretPlaces().map((p) => ({ ...p, path: realPath(p.path), files: p.files?.map(realPath) }));
    const problems: string[] = [];
    for (const [key, template] of Object.entries(owner.env)) {
      const value = tenant ? fillTenant(template, tenant) : template;
      if (!path.isAbsolute(value)) continue;
      const file = realPath(value);
      const place = places.find((p) => (p.files ? p.files.includes(file) : within(file, p.path)));
      if (!place) continue;
      problems.push(
        `${group}.${name}.env.${key}: ${file} ${isIn(file, { ...place, path: place.files ? file : place.path })}, which no sandbox may see, whatever its grants say (I2): give it a file of its own`,
      );
    }
    return problems;
  }

  /** What is wrong with a sandbox's grants, each naming its field; empty when nothing is (I2, I3). */
  grantProblems(field: string, grants: SandboxConfig): string[] {
    return this.checkGrants(field, grants).problems;
  }

  /**
   * I2, I3: the grants (and the program's paths) resolved as the kernel would, each checked where it leads
   * (./grants.ts), and the network grants; with the resolutions, which a sandbox's plan then binds as they are.
   */
  checkGrants(
    field: string,
    grants: SandboxConfig,
    program: string[] = [],
  ): { problems: string[]; resolved: Map<string, ResolvedPath> } {
    const problems: string[] = [];
    const resolved = new Map<string, ResolvedPath>();
    const places = this.places();
    const writable = this.writableGrants();
    const byName = this.bindsByName();
    const check = (label: string, p: string, mode: 'ro' | 'rw') => {
      const way = resolvePath(p, probePath);
      resolved.set(p, way);
      const problem =
        wayProblem(label, mode, way, places, writable) ??
        (byName ? byNameProblem(label, way.real, writable) : undefined);
      if (problem) problems.push(problem);
    };
    for (const p of program) check(`its program ${p}`, p, 'ro');
    for (const [kind, mode] of [
      ['read', 'ro'],
      ['write', 'rw'],
    ] as const) {
      for (const [i, granted] of grants[kind].entries()) {
        // A grant that names {tenant}, checked before any tenant's start: what it names before the tenant's folder.
        const p = path.resolve(this.config.baseDir, beforeTenant(granted));
        if (!fs.existsSync(p)) problems.push(`${field}.${kind}[${i}]: ${p} does not exist`);
        else check(`${field}.${kind}[${i}]: ${p}`, p, mode);
      }
    }
    if (grants.network === 'host') return { problems, resolved };
    const temporal = parseGrant(this.config.temporal.address);
    for (const [i, grant] of grants.network.entries()) {
      const g = grantOf(grant);
      if (g.port === temporal.port && (g.host === temporal.host || sameLoopback(g.host, temporal.host))) {
        problems.push(
          `${field}.network[${i}]: ${g.host}:${g.port} is the Temporal frontend, which would let it act for every tenant`,
        );
      }
    }
    return { problems, resolved };
  }
}

function sameLoopback(a: string, b: string): boolean {
  const loop = (h: string) => h === 'localhost' || h.startsWith('127.') || h === '::1';
  return loop(a) && loop(b);
}

/** Where a path really is, its links followed; a file not there yet, where its folder really is. */
function realPath(p: string): string {
  for (const resolve of [
    fs.realpathSync,
    (q: string) => path.join(fs.realpathSync(path.dirname(q)), path.basename(q)),
  ]) {
    try {
      return resolve(p);
    } catch {
      // not there: try its folder, else take it as written
    }
  }
  return path.resolve(p);
}

function isFile(p: string): boolean {
  try {
    return fs.statSync(p).isFile();
  } catch {
    return false;
  }
}

/**
 * An npm registry and a PyPI index of the tests' own on 127.0.0.1 (S1): real packages — a tarball `npm pack` made, a
 * wheel — served as the registries serve them (npm's packument with `dist.integrity`, PEP 503's simple page with each
 * file's `#sha256=`), so the real npm and pip clients install from them. Each may lie about a digest, as a registry
 * that was tampered with would.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { ROOT, tmpDir } from './temporal';

const FIXTURES = path.join(ROOT, 'test', 'fixtures', 'packaged');

export interface NpmPackage {
  name: string;
  version: string;
  tarball: Buffer;
  /** What the registry says the tarball's integrity is (the tarball's own, unless a test makes it lie). */
  integrity: string;
}

export function sha512Integrity(bytes: Buffer): string {
  return `sha512-${createHash('sha512').update(bytes).digest('base64')}`;
}

/** The probe server (test/fixtures/packaged/probe-server.js) packed by npm as `name@version`. */
export function packProbeServer(name: string, version: string, bins: Record<string, string> | undefined = undefined) {
  const dir = tmpDir('oz0-npm-package-');
  const bin = bins ?? { [name.replace(/^@[^/]+\//, '')]: 'server.js' };
  fs.writeFileSync(
    path.join(dir, 'package.json'),
    JSON.stringify({ name, version, type: 'commonjs', bin, files: ['server.js'], license: 'MIT' }),
  );
  fs.copyFileSync(path.join(FIXTURES, 'probe-server.js'), path.join(dir, 'server.js'));
  const out = tmpDir('oz0-npm-pack-');
  const [packed] = JSON.parse(
    execFileSync('npm', ['pack', '--json', '--pack-destination', out], { cwd: dir, encoding: 'utf8' }),
  ) as Array<{ filename: string }>;
  const tarball = fs.readFileSync(path.join(out, packed.filename));
  return { name, version, tarball, integrity: sha512Integrity(tarball), bin } satisfies NpmPackage & { bin: object };
}

export interface Served {
  url: string;
  /** The paths asked for, in order. */
  requests: string[];
  close(): Promise<void>;
}

function serve(handle: (pathname: string, base: string) => { type: string; body: Buffer | string } | undefined) {
  const requests: string[] = [];
  const server = http.createServer((req, res) => {
    const pathname = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname);
    requests.push(pathname);
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const found = handle(pathname, base);
    if (!found) {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not found"}');
      return;
    }
    res.writeHead(200, { 'content-type': found.type }).end(found.body);
  });
  return new Promise<Served>((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        requests,
        close: () => new Promise((done) => server.close(() => done())),
      }),
    ),
  );
}

/** An npm registry serving these packages: packuments at `/<name>`, tarballs at `/-/<file>`. */
export function serveNpmRegistry(packages: Array<NpmPackage & { bin?: object }>): Promise<Served> {
  return serve((pathname, base) => {
    const file = pathname.match(/^\/-\/(.+\.tgz)$/)?.[1];
    if (file) {
      const pkg = packages.find((p) => tarballName(p) === file);
      return pkg && { type: 'application/octet-stream', body: pkg.tarball };
    }
    const name = pathname.slice(1);
    const versions = packages.filter((p) => p.name === name);
    if (!versions.length) return undefined;
    const packument = {
      name,
      'dist-tags': { latest: versions.at(-1)!.version },
      versions: Object.fromEntries(
        versions.map((p) => [
          p.version,
          {
            name,
            version: p.version,
            bin: p.bin,
            dist: {
              tarball: `${base}/-/${tarballName(p)}`,
              integrity: p.integrity,
              shasum: createHash('sha1').update(p.tarball).digest('hex'),
            },
          },
        ]),
      ),
    };
    return { type: 'application/json', body: JSON.stringify(packument) };
  });
}

function tarballName(p: NpmPackage): string {
  return `${p.name.replace('/', '-')}-${p.version}.tgz`;
}

export interface Wheel {
  project: string;
  file: string;
  bytes: Buffer;
  /** What the index says the wheel's sha256 is (its own, unless a test makes it lie). */
  sha256: string;
}

/**
 * The probe server (test/fixtures/packaged/probe_server.py) as a wheel of `project` at `version`, with its console
 * script, built by Python's own zipfile as a wheel is laid out (METADATA, WHEEL, entry_points.txt, RECORD).
 */
export function buildProbeWheel(project: string, version: string): Wheel {
  const module = project.replace(/[-.]/g, '_');
  const file = `${module}-${version}-py3-none-any.whl`;
  const out = path.join(tmpDir('oz0-wheel-'), file);
  const script = `
import base64, hashlib, sys, zipfile
out, module, project, version, source = sys.argv[1:]
info = f"{module}-{version}.dist-info"
files = {
    f"{module}/__init__.py": open(source, "rb").read(),
    f"{info}/METADATA": f"Metadata-Version: 2.1\\nName: {project}\\nVersion: {version}\\nRequires-Python: >=3.8\\n".encode(),
    f"{info}/WHEEL": b"Wheel-Version: 1.0\\nGenerator: oz0-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
    f"{info}/entry_points.txt": f"[console_scripts]\\n{project} = {module}:main\\n".encode(),
}
record = []
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for name, data in files.items():
        z.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    z.writestr(f"{info}/RECORD", "\\n".join(record) + "\\n")
`;
  execFileSync('python3', ['-c', script, out, module, project, version, path.join(FIXTURES, 'probe_server.py')]);
  const bytes = fs.readFileSync(out);
  return { project, file, bytes, sha256: createHash('sha256').update(bytes).digest('hex') };
}

/** A PEP 503 simple index serving these wheels: `/simple/<project>/` links each with its `#sha256=`. */
export function servePypiIndex(wheels: Wheel[]): Promise<Served> {
  const normal = (n: string) => n.toLowerCase().replace(/[-_.]+/g, '-');
  return serve((pathname) => {
    const file = pathname.match(/^\/files\/(.+\.whl)$/)?.[1];
    if (file) {
      const wheel = wheels.find((w) => w.file === file);
      return wheel && { type: 'application/octet-stream', body: wheel.bytes };
    }
    const project = pathname.match(/^\/simple\/([^/]+)\/?$/)?.[1];
    const listed = wheels.filter((w) => project && normal(w.project) === normal(project));
    if (!listed.length) return undefined;
    const links = listed.map((w) => `<a href="/files/${w.file}#sha256=${w.sha256}">${w.file}</a>`).join('<br>\n');
    return { type: 'text/html', body: `<!DOCTYPE html><html><body>\n${links}\n</body></html>\n` };
  });
}

/**
 * The environment the registries' clients run in for a test: these registries only, a cache of the test's own (so
 * nothing an earlier run fetched answers for them), no folder of wheels beside the index.
 */
export function registryEnv(at: { npm?: string; pypi?: string }): Record<string, string | undefined> {
  return {
    npm_config_registry: at.npm ? `${at.npm}/` : undefined,
    npm_config_cache: tmpDir('oz0-npm-cache-'),
    // npm fetches a tarball that fails its integrity again, 10 s and more apart: once is enough to see it refused.
    npm_config_fetch_retries: '0',
    PIP_INDEX_URL: at.pypi ? `${at.pypi}/simple/` : undefined,
    PIP_FIND_LINKS: undefined,
    PIP_EXTRA_INDEX_URL: undefined,
    PIP_NO_CACHE_DIR: '1',
  };
}

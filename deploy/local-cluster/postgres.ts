/**
 * A PostgreSQL of the cluster's own: `initdb` in a project folder, one `postgres` process on a free loopback port,
 * never the machine's own cluster. PostgreSQL refuses to run as root, so under root it runs as the `postgres`
 * user (its data folder and log are handed to that user). Stops are PostgreSQL's own: SIGINT is a fast shutdown
 * (open sessions rolled back, a clean checkpoint), the one the chaos runs use to restart it.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

/** The binaries: PG_BIN, else Debian's PostgreSQL 15, else PATH. */
export function postgresBin(env = process.env): string {
  if (env.PG_BIN) return env.PG_BIN;
  for (const dir of ['/usr/lib/postgresql/15/bin', '/usr/lib/postgresql/16/bin', '/usr/lib/postgresql/17/bin']) {
    if (fs.existsSync(path.join(dir, 'postgres'))) return dir;
  }
  return '';
}

interface RunAs {
  uid: number;
  gid: number;
}

/** Root runs PostgreSQL as the `postgres` user (Debian's package creates it); anyone else as themselves. */
function runAs(): RunAs | undefined {
  if (process.getuid?.() !== 0) return undefined;
  try {
    const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
    const [uid, gid] = [id('-u'), id('-g')];
    return { uid, gid };
  } catch {
    throw new Error('running as root, and PostgreSQL refuses root: there is no `postgres` user to run it as');
  }
}

/** The postgres user must be able to walk down to its data folder: a project under /root (0700) is out of reach. */
function reachable(dir: string, as: RunAs | undefined): void {
  if (!as) return;
  const probe = spawnSync('ls', [dir], { ...as, stdio: 'ignore' });
  if (probe.status !== 0) {
    throw new Error(
      `the postgres user cannot reach ${dir}: let it through the folders above (chmod o+x on each), ` +
        'or run npm run cluster as a user other than root',
    );
  }
}

function bin(name: string): string {
  const dir = postgresBin();
  return dir ? path.join(dir, name) : name;
}

export interface Postgres {
  port: number;
  user: string;
  pid(): number;
  /** Fast shutdown (SIGINT), waiting for the process to exit. */
  stop(): Promise<void>;
  /** Starts it again on the same folder and port. */
  start(): Promise<void>;
}

export interface PostgresOptions {
  dataDir: string;
  logFile: string;
  port: number;
  /** The superuser initdb creates; Temporal connects as it (trust on loopback: this cluster is local). */
  user: string;
}

/** initdb (first time only), then start; resolves once it accepts connections. */
export async function startPostgres(opts: PostgresOptions): Promise<Postgres> {
  const as = runAs();
  const own = (p: string) => as && fs.chownSync(p, as.uid, as.gid);
  fs.mkdirSync(path.dirname(opts.logFile), { recursive: true });
  if (!fs.existsSync(path.join(opts.dataDir, 'PG_VERSION'))) {
    fs.mkdirSync(opts.dataDir, { recursive: true, mode: 0o700 });
    own(opts.dataDir);
    reachable(opts.dataDir, as);
    execFileSync(
      bin('initdb'),
      ['-D', opts.dataDir, '-U', opts.user, '--auth=trust', '-E', 'UTF8', '--locale=C.UTF-8', '--no-sync'],
      { stdio: ['ignore', 'ignore', 'pipe'], ...as },
    );
  }
  fs.closeSync(fs.openSync(opts.logFile, 'a'));
  own(opts.logFile);
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();

  const start = async () => {
    const out = fs.openSync(opts.logFile, 'a');
    // No Unix socket (its default folder belongs to the machine's own cluster): TCP on loopback only.
    const args = ['-D', opts.dataDir, '-p', String(opts.port), '-c', 'listen_addresses=127.0.0.1'];
    args.push('-c', 'unix_socket_directories=', '-c', 'max_connections=200');
    // Its own process group: a Ctrl-C at the terminal must not stop it before the Temporal server.
    child = spawn(bin('postgres'), args, { stdio: ['ignore', out, out], detached: true, ...as });
    fs.closeSync(out);
    const proc = child;
    exited = new Promise((resolve) => proc.once('exit', () => resolve()));
    const deadline = Date.now() + 60_000;
    while (!(await accepts(opts.port, opts.user))) {
      if (proc.exitCode !== null) throw new Error(`postgres exited ${proc.exitCode}: see ${opts.logFile}`);
      if (Date.now() > deadline) throw new Error(`postgres did not start on ${opts.port}: see ${opts.logFile}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  };
  const stop = async () => {
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGINT');
    await exited;
  };
  await start();
  return { port: opts.port, user: opts.user, pid: () => child?.pid ?? -1, stop, start };
}

/** Whether PostgreSQL answers on the port: a startup packet gets an authentication request back ('R'). */
function accepts(port: number, user: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port }, () => {
      const startup = Buffer.from(`user\0${user}\0database\0postgres\0\0`);
      const packet = Buffer.alloc(8 + startup.length);
      packet.writeInt32BE(packet.length, 0);
      packet.writeInt32BE(196608, 4); // protocol 3.0
      startup.copy(packet, 8);
      socket.write(packet);
    });
    socket.setTimeout(1000, () => socket.destroy());
    socket.once('data', (data) => {
      socket.destroy();
      // 'R' (auth) or 'E' (an error such as "the database system is starting up"): only R means ready.
      resolve(data[0] === 0x52);
    });
    socket.once('error', () => resolve(false));
    socket.once('close', () => resolve(false));
  });
}

/**
 * Connecting to a server (issue 25.1): oz0 speaks 2026-07-28 to a server that offers it and the `initialize` handshake
 * (2025-11-25 or older) to one that does not, chosen when it connects — asked with `server/discover` on the server's
 * one process or connection (`servers.<name>.protocol: "auto"`), or pinned by the config.
 */
import { Client, SdkError, SdkErrorCode, SdkHttpError } from '@modelcontextprotocol/client';
import type { ClientCapabilities, Implementation, Transport } from '@modelcontextprotocol/client';
import type { ServerKind } from '../common/config';
import type { Logger } from '../common/logger';
import { MODERN_PROTOCOL } from '../model/protocol';
import type { ProtocolChoice } from '../model/schemas';
import { CONNECT_TIMEOUT_MS, ServerConnection } from './connection';
import { ProcessTransport } from './process-transport';
import { saying } from '../common/last-words';
import { ConnectRateLimited } from './remote';
import { causesOf } from './errors';

/** Whether a failure is the SDK's time limit for a request: the server never answered it. */
function isTimeout(error: unknown): boolean {
  return [...causesOf(error, 4)].some((e) => e instanceof SdkError && e.code === SdkErrorCode.RequestTimeout);
}

/** Who oz0 says it is, in `initialize` and in each 2026-07-28 request's `_meta`. */
export const CLIENT_INFO: Implementation = { name: 'oz0', version: '0.1.0' };

/**
 * How long a stdio server has to answer `server/discover`: one that stays silent that long is taken for an older one,
 * and the handshake follows on the same process (once per node: the answer is remembered). A remote server has the
 * connect's whole time, as for `initialize`: silence over HTTP is an outage, never an older server.
 */
export const STDIO_PROBE_TIMEOUT_MS = 10_000;

/** What the client's `connect({ prior })` takes: the answer a server gave to the probe before. */
type Prior = NonNullable<Parameters<Client['connect']>[1]>['prior'];

/** What each stdio server (by name) answered to the probe, so that its next process is not asked again. */
export type EraVerdicts = Map<string, NonNullable<Prior>>;

export interface ConnectOptions {
  server: string;
  kind: ServerKind;
  choice: ProtocolChoice;
  /** What oz0 offers the server: nothing, but for the listings it asks for as another client (./capabilities.ts). */
  capabilities: ClientCapabilities;
  /** A fresh transport: a new process for a stdio server, a new connection for a remote one. */
  transportFor: () => Transport;
  verdicts?: EraVerdicts;
  logger: Logger;
  onclose: (connection: ServerConnection) => void;
}

function negotiation(choice: ProtocolChoice, stdio: boolean) {
  const probe = { timeoutMs: stdio ? STDIO_PROBE_TIMEOUT_MS : CONNECT_TIMEOUT_MS };
  if (choice === MODERN_PROTOCOL) return { mode: { pin: MODERN_PROTOCOL }, probe } as const;
  if (choice === 'auto') return { mode: 'auto', probe } as const;
  return { mode: 'legacy' } as const;
}

/**
 * Connects, each server started once. A stdio server that closes its stdio on `server/discover` (as servers on the
 * Rust SDK do) may be an older one that cannot be asked, or one that could not start at all (S3): it is started once
 * more and asked `server/discover` again — a server that failed its first start and speaks 2026-07-28 answers it then —
 * and only one that closes on it a second time is started a third time for the `initialize` handshake. A revision is
 * remembered only from a server that answered; one that dies every time said nothing about its revision, and is asked
 * again at its next start (STYLE "Failures say why": a failure is never remembered as a fact about the server).
 */
export async function connectClient(opts: ConnectOptions): Promise<ServerConnection> {
  const prior = opts.choice === 'auto' ? opts.verdicts?.get(opts.server) : undefined;
  const first = await attempt(opts, prior);
  if ('connection' in first) return first.connection;
  if (!first.closedOnProbe || !opts.verdicts) throw first.error;
  opts.logger.info(
    { server: opts.server },
    'the server closed its stdio on server/discover: started again and asked again (it may have failed its start)',
  );
  const again = await attempt(opts, undefined);
  if ('connection' in again) return again.connection;
  if (!again.closedOnProbe) throw again.error;
  opts.logger.info(
    { server: opts.server },
    'the server closed its stdio on server/discover twice: started again for the initialize handshake',
  );
  const second = await attempt(opts, { kind: 'legacy' });
  if (!('connection' in second)) throw second.error;
  opts.logger.info(
    { server: opts.server, protocol: second.connection.protocol },
    'the server answered initialize: an older one, not asked server/discover again',
  );
  opts.verdicts.set(opts.server, { kind: 'legacy' });
  return second.connection;
}

async function attempt(
  opts: ConnectOptions,
  prior: Prior,
): Promise<{ connection: ServerConnection } | { error: unknown; closedOnProbe: boolean }> {
  const { server, kind, logger } = opts;
  const transport = opts.transportFor();
  // The connection the client's callbacks report to, once connected.
  const made: { connection?: ServerConnection } = {};
  const client = new Client(CLIENT_INFO, {
    capabilities: opts.capabilities,
    versionNegotiation: negotiation(opts.choice, transport instanceof ProcessTransport),
    // oz0 has nobody to ask and no model to sample: an `input_required` answer comes back to the attempt, which ends
    // the call with an error result naming what the server asked for (issue 25.5), never a round of its own.
    inputRequired: { autoFulfill: false },
    // A legacy server's list_changed, or 2026-07-28's listen stream: the listing is read anew at the next call.
    listChanged: { tools: { autoRefresh: false, debounceMs: 0, onChanged: () => made.connection?.listChanged() } },
  });
  client.onclose = () => {
    if (made.connection) opts.onclose(made.connection);
  };
  client.onerror = (err) => {
    // A connection being closed on purpose says "aborted" on its way out: not worth a warning. Nor is an error before
    // the connection is made (a write to a server that died at start): the failed connect says why, with its words.
    const level = made.connection && !made.connection.closed ? 'warn' : 'debug';
    logger[level]({ server, err: err.message }, 'server connection error');
  };
  const began = Date.now();
  try {
    await client.connect(transport, { timeout: CONNECT_TIMEOUT_MS, ...(prior ? { prior } : {}) });
  } catch (error) {
    const ended = transport instanceof ProcessTransport && transport.ended;
    await transport.close().catch(() => undefined);
    const probed = opts.choice === 'auto' && !prior;
    const negotiationFailed = error instanceof SdkError && error.code === SdkErrorCode.EraNegotiationFailed;
    let words = transport instanceof ProcessTransport ? await transport.lastWords() : undefined;
    if (transport instanceof ProcessTransport && !ended && isTimeout(error)) {
      // S2: a server that never answered: how long the node waited, and that it was running all along.
      const asked =
        prior?.kind === 'legacy' || opts.choice === '2025-11-25' ? 'initialize' : 'server/discover or initialize';
      const waited = Math.round((Date.now() - began) / 1000);
      words = `the server did not answer ${asked} in ${waited} s, and was still running when the node gave up; ${words ?? 'it wrote nothing on stderr'}`;
    }
    return { error: saying(error, words), closedOnProbe: probed && negotiationFailed && ended };
  }
  const connection = new ServerConnection(
    server,
    kind,
    client,
    transport,
    { clientInfo: CLIENT_INFO, capabilities: opts.capabilities },
    transport instanceof ProcessTransport ? transport : undefined,
  );
  made.connection = connection;
  const sdkOnMessage = transport.onmessage;
  transport.onmessage = (message, extra) => {
    const what = connection.take(message);
    if (what === 'late answer') logger.debug({ server }, 'a late answer to a cancelled request, dropped');
    if (!what) sdkOnMessage?.(message, extra);
  };
  const sdkSend = transport.send.bind(transport);
  transport.send = (message, options) => {
    connection.noteSent(message);
    return sdkSend(message, options);
  };
  if (opts.verdicts && opts.choice === 'auto' && !prior) {
    const discover = client.getDiscoverResult();
    opts.verdicts.set(server, discover ? { kind: 'modern', discover } : { kind: 'legacy' });
  }
  return { connection };
}

/** B4: whether a connect failed on a 429 (on `server/discover` or `initialize`), anywhere in its causes. */
export function rateLimited(err: unknown): boolean {
  return [...causesOf(err, 5)].some(
    (e) => e instanceof ConnectRateLimited || (e instanceof SdkHttpError && e.status === 429),
  );
}

/**
 * Multi-round-trip requests (issue 25.5). A 2026-07-28 server that wants an elicitation or a sampling answers the call
 * with `input_required`, and a server of the Python SDK refuses it with `-32021` when the client did not declare
 * elicitation. oz0 has no person to ask and no model to sample, so either ends the call with an error result that
 * names what the server asked for: an answer the job (and a model) reads, never a wait. Pure.
 */
import type { CallToolResult } from '@modelcontextprotocol/client';

/** MCP's code for "the client did not declare a capability this request needs" (SEP-2133, SEP-2663). */
export const MISSING_REQUIRED_CLIENT_CAPABILITY = -32021;

const KIND_OF_METHOD: Record<string, string> = {
  'elicitation/create': 'elicitation',
  'sampling/createMessage': 'sampling',
  'roots/list': 'roots',
};

const MAX_QUOTE = 160;

/** What an `input_required` result's `inputRequests` ask for, in words: `elicitation ("Confirm the refund?")`. */
export function askedFor(inputRequests: unknown): string {
  const entries = inputRequests && typeof inputRequests === 'object' ? Object.values(inputRequests) : [];
  const asks = entries.map((entry) => {
    const { method, params } = (entry ?? {}) as { method?: unknown; params?: { message?: unknown } };
    const kind = typeof method === 'string' ? (KIND_OF_METHOD[method] ?? method) : 'input';
    const message = typeof params?.message === 'string' ? params.message.trim() : '';
    const quoted = message.length > MAX_QUOTE ? `${message.slice(0, MAX_QUOTE - 3)}...` : message;
    return quoted ? `${kind} (${JSON.stringify(quoted)})` : kind;
  });
  return asks.length ? [...new Set(asks)].join(', ') : 'input it did not name';
}

/** The capabilities a `-32021` refusal says the client lacks, in words: `elicitation`, `extension io.…/tasks`. */
export function missingCapabilities(data: unknown): string {
  const required = (data as { requiredCapabilities?: unknown } | undefined)?.requiredCapabilities;
  if (!required || typeof required !== 'object') return 'a capability it did not name';
  const names = Object.entries(required).flatMap(([name, value]) =>
    name === 'extensions' && value && typeof value === 'object'
      ? Object.keys(value).map((id) => `the extension ${id}`)
      : [name],
  );
  return names.length ? names.join(', ') : 'a capability it did not name';
}

/**
 * The server asked for what oz0 does not offer (`input_required`), or refused the call because oz0 does not offer it
 * (`-32021`): the call's answer is an error result that says which, and the trace's note says it too.
 */
export class AskedForInput extends Error {
  override name = 'AskedForInput';

  constructor(
    /** What it asked for, in words (see {@link askedFor}, {@link missingCapabilities}). */
    readonly asked: string,
    /** It refused the call (`-32021`) rather than ask (`input_required`). */
    readonly refused = false,
  ) {
    super(refused ? `the server needs a client that offers ${asked}` : `the server asked for ${asked}`);
  }

  /** The call's answer, as the job (and a model) reads it. */
  result(): CallToolResult {
    const offers = '(it has no person to ask and no model to sample)';
    const text = this.refused
      ? `oz0: the server refused the call: it needs a client that offers ${this.asked}, which oz0 does not ${offers}.`
      : `oz0: the server asked for ${this.asked}, which oz0 does not offer ${offers}: the call ends here, unanswered.`;
    return { isError: true, content: [{ type: 'text', text }] };
  }

  /** The trace's note on the attempt. */
  note(): string {
    return this.refused
      ? `the server needs ${this.asked}: not offered`
      : `the server asked for ${this.asked}: not offered`;
  }
}

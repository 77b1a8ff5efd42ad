/**
 * An agent harness in TypeScript on the MCP SDK's client, v2 (SPEC H1-H8): it decides each call from the answers to the
 * last ones. It has no oz0 code: it speaks MCP to OZ0_MCP_URL with the bearer OZ0_MCP_TOKEN, reads its input from
 * OZ0_INPUT and prints its result as its last line on stdout. oz0 makes every call durable: keys, retries, policy,
 * cancels, progress, a fresh start on another node if this one is lost.
 *
 * What it does with `{ "order_id": "o-1", "amount": 500 }`: looks the order up; charges it when nothing was charged,
 * refunds what was charged and not yet refunded otherwise; then, at once, sets the order's status, writes a line to
 * the audit log, and runs a slow check it cancels itself when its own deadline passes.
 */
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import type { CallToolResult } from '@modelcontextprotocol/client';

interface Input {
  order_id: string;
  amount?: number;
  /** How long the slow check may take before the agent cancels it itself. */
  deadline_ms?: number;
  /** How long the slow check would take if nobody cancelled it. */
  check_ms?: number;
}

interface Order {
  order_id: string;
  charged: number;
  refunded: number;
  status: string | null;
}

/** What the agent says it does, on stderr: oz0 puts it in the node's log. */
function say(line: string): void {
  process.stderr.write(`refunds: ${line}\n`);
}

function structured<T>(result: CallToolResult, what: string): T {
  if (result.isError) throw new Error(`${what} failed: ${JSON.stringify(result.content)}`);
  return result.structuredContent as T;
}

async function main(): Promise<void> {
  const input = JSON.parse(process.env.OZ0_INPUT ?? 'null') as Input | null;
  if (!input?.order_id) throw new Error('OZ0_INPUT needs an order_id');
  const url = process.env.OZ0_MCP_URL;
  if (!url) throw new Error('OZ0_MCP_URL is not set: run me as an oz0 harness');
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${process.env.OZ0_MCP_TOKEN}` } },
  });
  // The gateway speaks 2026-07-28: asked with server/discover, it answers, and the agent speaks it too.
  const client = new Client({ name: 'refunds-agent', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
  await client.connect(transport);
  // The gateway lists each tool under the name a model API takes, `ledger__refund` for `ledger.refund` (H3), and takes
  // a call by either name; the trace and the node's metrics say `ledger.refund`.
  const { tools } = await client.listTools();
  say(
    `session ${process.env.OZ0_SESSION} run ${process.env.OZ0_SESSION_RUN}: ${tools.length} tools, ` +
      `MCP ${client.getNegotiatedProtocolVersion()}`,
  );

  const order = structured<Order>(
    await client.callTool({ name: 'ledger__lookup_order', arguments: { order_id: input.order_id } }),
    'lookup_order',
  );
  let action: string;
  if (order.charged === 0) {
    const amount = input.amount ?? 100;
    await client.callTool({ name: 'ledger__charge', arguments: { order_id: input.order_id, amount } });
    action = `charged ${amount}`;
  } else if (order.refunded < order.charged) {
    const amount = order.charged - order.refunded;
    // A refund may wait for a person's yes (the tenant's policy says `confirm`, A7): oz0 says so in a progress
    // notification every 10 s, and each one starts the 60 s timeout again, so the agent waits as long as they take.
    await client.callTool(
      { name: 'ledger__refund', arguments: { order_id: input.order_id, amount } },
      {
        timeout: 60_000,
        resetTimeoutOnProgress: true,
        onprogress: (p) => {
          if (p.message) say(p.message);
        },
      },
    );
    action = `refunded ${amount}`;
  } else {
    action = 'nothing to do';
  }
  say(action);

  // Several calls at once; the slow check is cancelled by the agent itself when its deadline passes.
  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort('its deadline passed'), input.deadline_ms ?? 500);
  const [status, , check] = await Promise.allSettled([
    client.callTool({
      name: 'ledger__set_status',
      arguments: { id: input.order_id, status: action.startsWith('refunded') ? 'refunded' : 'charged' },
    }),
    client.callTool({ name: 'reader__echo', arguments: { text: `refunds agent on ${input.order_id}: ${action}` } }),
    client.callTool(
      { name: 'reader__sleep', arguments: { ms: input.check_ms ?? 30_000 } },
      { signal: deadline.signal, timeout: 120_000 },
    ),
  ]);
  clearTimeout(timer);
  // The cancel (the call's stream closed, on 2026-07-28) is on its way: a moment before closing lets it arrive.
  if (check.status === 'rejected') await new Promise((r) => setTimeout(r, 200));
  await client.close();
  console.log(
    JSON.stringify({
      order_id: input.order_id,
      action,
      status: status.status === 'fulfilled' && !status.value.isError ? 'set' : 'not set',
      check: check.status === 'rejected' ? 'cancelled at its deadline' : 'done',
    }),
  );
}

main().catch((err: unknown) => {
  say(`failed: ${(err as Error).message}`);
  process.exit(1);
});

/**
 * I14 (issue 44.10): a tenant's own agent outside the node reaches its external session only through a node's gateway,
 * with a token scoped to that session, and never needs Temporal. `startJob` makes a token for each external session
 * and gives the job only its digest. Tried as a hostile tenant would: no token, a token forged for another tenant's
 * job, a real token of one job pointed at another, and a token after its session closed — each 401 — beside the
 * control: the right token lists the tenant's tools (and the close tool), makes a call under the job's key, and closes
 * the session with a result the job records. Asserted on the server's side: the job's trace.
 */
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { startJob } from '../../client/jobs';
import { sessionTokenDigest } from '../../common/session-token';
import { isSessionTrace } from '../../model/job';
import type { JobTrace, SessionTrace } from '../../model/job';
import { createNode } from '../../worker/node';
import { example, logger, openedHistoryText, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();

/** A raw request to the gateway with this bearer: its HTTP status. */
async function statusWith(url: string, token: string): Promise<number> {
  const response = await fetch(url, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
  });
  await response.body?.cancel();
  return response.status;
}

/** An MCP client of the SDK, as any agent framework's, with the session's token. */
async function agent(url: string, token: string): Promise<Client> {
  const client = new Client({ name: 'tenant-agent', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${token}` } } }),
  );
  return client;
}

test('I14: an external session’s agent comes in through the gateway with its session’s token alone — no token, a forged one, another job’s, a closed session’s are refused (401); the right one calls and closes (the control)', async () => {
  const config = temporal.config({ servers: { reader: { command: 'node', args: [example('reader')] } } });
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const jc = { client: temporal.client, taskQueue: config.temporal.taskQueue };
    const spec = (tenant: string) => ({
      tenant,
      steps: [{ session: { external: true as const } }, { call: 'reader.echo', args: { text: 'after' } }],
    });
    const acme = await startJob(jc, spec('acme'));
    // Beta's session comes after a call of 3 s: its agent, there at once, waits for its job to reach it.
    const beta = await startJob(jc, {
      tenant: 'beta',
      steps: [{ call: 'reader.sleep', args: { ms: 3000 } }, { session: { external: true as const } }],
    });
    const [mine, theirs] = [acme.sessionTokens[0].token, beta.sessionTokens[0].token];
    expect(acme.sessionTokens).toEqual([{ step: 0, token: expect.stringMatching(/^oz0s_/) }]);
    expect(beta.sessionTokens).toEqual([{ step: 1, token: expect.stringMatching(/^oz0s_/) }]);
    // The job holds the token's digest, never the token.
    // Every payload of its history, opened (D4) and decoded: its input among them.
    const history = await openedHistoryText(acme);
    expect(history).not.toContain(mine);
    expect(history).toContain(sessionTokenDigest(mine));

    const url = node.gateway.url;
    const [, acmePart] = /^oz0s_([^.]+)\./.exec(mine)!;
    const forged = `oz0s_${acmePart}.${'A'.repeat(43)}`;
    const pointed = theirs.replace(/^oz0s_[^.]+\./, `oz0s_${acmePart}.`);
    expect(await statusWith(url, 'not-a-token')).toBe(401);
    expect(await statusWith(url, forged)).toBe(401);
    expect(await statusWith(url, pointed)).toBe(401);

    // The control: acme's own token, through an MCP client as any agent framework has.
    const client = await agent(url, mine);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(['reader__echo', 'oz0_close_session']));
    const echoed = await client.callTool({ name: 'reader__echo', arguments: { text: 'from the agent' } });
    expect(echoed.isError).toBeFalsy();
    expect(JSON.stringify(echoed.content)).toContain('from the agent');
    const closed = await client.callTool({ name: 'oz0_close_session', arguments: { result: { done: true } } });
    expect(closed.isError).toBeFalsy();
    await client.close();
    const trace: JobTrace = await acme.result();
    const session = trace.steps.find(isSessionTrace) as SessionTrace;
    expect(session).toMatchObject({ kind: 'external', status: 'ended', result: { structuredContent: { done: true } } });
    expect(session.runs).toEqual([
      { run: 1, node: node.identity.id, client: 'its agent, through a gateway (I14)', ended: 'closed by its client' },
    ]);
    expect(session.calls).toHaveLength(1);
    expect(session.calls[0]).toMatchObject({ tool: 'reader.echo', result: { isError: false } });
    expect(trace.status).toBe('COMPLETED');
    // Its session closed: the token opens nothing more.
    expect(await statusWith(url, mine)).toBe(401);
    // Beta's token, the control of the pointed one: beta's own session opens with it, once its job reaches it.
    const betaClient = await agent(url, theirs);
    expect((await betaClient.listTools()).tools.map((t) => t.name)).toContain('oz0_close_session');
    await betaClient.callTool({ name: 'oz0_close_session', arguments: { result: 'beta done' } });
    await betaClient.close();
    expect((await beta.result()).status).toBe('COMPLETED');
  });
});

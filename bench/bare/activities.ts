/** A bare Temporal activity making the same MCP call as oz0 does: no keys, policy, heartbeats or trace. */
import type { Client } from '@modelcontextprotocol/client';

export function bareActivities(client: Client) {
  return {
    async bareEcho(text: string): Promise<unknown> {
      return client.callTool({ name: 'echo', arguments: { text } });
    },
    /** D7: the pages server's read_page: an answer of `kib` KiB, returned as the activity's result. */
    async bareRead(kib: number, seed: number): Promise<unknown> {
      return client.callTool({ name: 'read_page', arguments: { kib, seed } }, { timeout: 120_000 });
    },
    /** The reader's sleep, with a request timeout past it (the SDK's default is 60 s). */
    async bareSleep(ms: number): Promise<unknown> {
      return client.callTool({ name: 'sleep', arguments: { ms } }, { timeout: ms + 60_000 });
    },
  };
}

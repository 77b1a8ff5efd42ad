/**
 * One `tools/call` as oz0 makes it, to its end: a plain request through the SDK's client, or a task (either form,
 * ./task.ts) followed to its result. The attempt makes its call with it, and `oz0 plugin test` its samples and drills.
 *
 * oz0 fulfils no input request: an `input_required` answer, and a `-32021` refusal, end the call with AskedForInput
 * (./asked.ts), for the caller to answer with what the server asked for.
 */
import { ProtocolError } from '@modelcontextprotocol/client';
import type { CallToolResult, Tool } from '@modelcontextprotocol/client';
import { AskedForInput, MISSING_REQUIRED_CLIENT_CAPABILITY, askedFor, missingCapabilities } from './asked';
import { TaskGone, runTask } from './task';
import type { TaskCall } from './task';

export interface MakeCall extends TaskCall {
  /** The function's listing, as oz0 read it. */
  tool: Tool;
  /** It runs as a task (SEP-1686), or its server takes tasks as the extension (./task.ts `taskPlan`). */
  asTask: boolean;
}

/** The call's answer; a failure because its server's process ended says how it ended, with its last words. */
export async function makeCall(call: MakeCall): Promise<CallToolResult> {
  try {
    return await (call.asTask ? runTask(call) : plainCall(call));
  } catch (err) {
    if (err instanceof AskedForInput || err instanceof TaskGone) throw err;
    throw await call.connection.explained(err);
  }
}

/**
 * A plain `tools/call` through the SDK's client. The client is handed the listing oz0 read without its output schema:
 * whether structured content fits it is the job's business (the server checks its own), and an input_required
 * answer has none.
 */
async function plainCall(call: MakeCall): Promise<CallToolResult> {
  const { signal, timeoutMs } = call;
  const toolDefinition = uncheckedDefinition(call.tool);
  const options = { signal, timeout: timeoutMs, maxTotalTimeout: timeoutMs, allowInputRequired: true, toolDefinition };
  let raw: CallToolResult & { resultType?: string; inputRequests?: unknown; toolResult?: unknown };
  try {
    raw = await call.connection.client.callTool(call.params, options);
  } catch (err) {
    if (err instanceof ProtocolError && err.code === MISSING_REQUIRED_CLIENT_CAPABILITY) {
      throw new AskedForInput(missingCapabilities(err.data), true);
    }
    throw err;
  }
  if (raw.resultType === 'input_required') throw new AskedForInput(askedFor(raw.inputRequests));
  // A server of a revision before 2024-11-05 answers `toolResult`.
  if (raw.toolResult !== undefined && raw.content === undefined) {
    return { content: [{ type: 'text', text: JSON.stringify(raw.toolResult) }], isError: false };
  }
  return raw;
}

/** Each listing's function without its output schema, made once while the listing is held (not a copy a call). */
const unchecked = new WeakMap<Tool, Tool>();

function uncheckedDefinition(tool: Tool): Tool {
  let definition = unchecked.get(tool);
  if (!definition) {
    const { outputSchema: _unchecked, ...rest } = tool;
    unchecked.set(tool, (definition = rest));
  }
  return definition;
}

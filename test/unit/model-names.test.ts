/**
 * H3: the name a model takes for each tool (model/model-names.ts). Every name matches what OpenAI's and
 * Anthropic's APIs take, the mapping is one-to-one with `<server>.<function>` and stable, and a name of the first form
 * reads back to its tool: shown on a table of cases, on every small name there is, and on many generated ones.
 */
import { createHash } from 'node:crypto';
import { SERVER_PATTERN, toolProblem } from '../../model/checks';
import { MODEL_NAME_PATTERN, modelToolName, toolOfModelName } from '../../model/model-names';

const digest = (tool: string) => createHash('sha256').update(tool).digest('hex').slice(0, 16);

test.each([
  ['ledger.set_status', 'ledger__set_status'],
  ['reader.echo', 'reader__echo'],
  ['ev.simulate-research-query', 'ev__simulate-research-query'],
  ['my-server.Get_Thing-2', 'my-server__Get_Thing-2'],
  ['_lead.x', '_lead__x'],
  ['a.b_', 'a__b_'],
  // 64 characters: the first form still.
  [`s.${'f'.repeat(61)}`, `s__${'f'.repeat(61)}`],
])('H3: %s is listed as %s, and that name reads back to it', (tool, name) => {
  expect(modelToolName(tool)).toBe(name);
  expect(toolOfModelName(name)).toBe(tool);
});

test.each([
  // A function name with characters outside the set: dots, colons, slashes.
  ['files.docs.read', 'files__docs_read__'],
  ['files.ns:read/v2', 'files__ns_read_v2__'],
  // Names whose first form would read back to another tool: `__` in a server or a function, a server ending in `_`
  // (`a_` + `__` + `b` is `a___b`, which reads as `a` and `_b`), a function starting with `_`.
  ['my__srv.echo', 'my__srv__echo__'],
  ['srv.a__b', 'srv__a__b__'],
  ['srv_.echo', 'srv___echo__'],
  ['srv._echo', 'srv___echo__'],
  // Past 64 characters: a readable prefix and a digest.
  [`s.${'f'.repeat(62)}`, `s__${'f'.repeat(43)}__`],
  [`${'s'.repeat(64)}.${'f'.repeat(100)}`, `${'s'.repeat(20)}__${'f'.repeat(24)}__`],
])('H3: %s is listed under a readable prefix and its digest: %s…', (tool, prefix) => {
  const name = modelToolName(tool);
  expect(name).toBe(`${prefix}${digest(tool)}`);
  expect(name).toMatch(MODEL_NAME_PATTERN);
  expect(name.length).toBeLessThanOrEqual(64);
  // It never reads back as a tool: the gateway finds it in the listing it came from.
  expect(toolOfModelName(name)).toBeUndefined();
});

test('H3: names that a simpler mapping would give to two tools are each its own', () => {
  const groups = [
    ['a.b_c', 'a_b.c'],
    ['a.b.c', 'a.b_c', 'a_b.c', 'a.b:c', 'a.b/c', 'a.b-c'],
    ['a__b.c', 'a.b__c', 'a_.b_c', 'a._b_c'],
    ['srv_.echo', 'srv._echo', 'srv.__echo', 'srv__.echo'],
  ];
  for (const tools of groups) {
    const names = tools.map(modelToolName);
    expect(new Set(names).size).toBe(tools.length);
  }
});

test('H3: names that are no model name of a tool read back as nothing', () => {
  for (const name of [
    '',
    'ledger',
    'ledger__',
    '__charge',
    'a___b',
    'a__b__c',
    'ledger.charge',
    `s__${'f'.repeat(62)}`,
  ])
    expect(toolOfModelName(name)).toBeUndefined();
});

/**
 * What is wrong with the mapping over a set of tools, if anything: a name off the pattern, two tools under one name, a
 * name that changes, a name of the first form that reads back to another tool, one of the second without its digest.
 */
function problemsOver(
  tools: Iterable<string>,
  mapping = { name: modelToolName, back: toolOfModelName },
): { count: number; problems: string[] } {
  const seen = new Map<string, string>();
  const problems: string[] = [];
  let count = 0;
  for (const tool of tools) {
    if (toolProblem(tool)) continue;
    count++;
    const name = mapping.name(tool);
    if (!MODEL_NAME_PATTERN.test(name)) problems.push(`${tool}: ${name} is off the pattern`);
    const before = seen.get(name);
    if (before !== undefined && before !== tool) problems.push(`${before} and ${tool} are both ${name}`);
    seen.set(name, tool);
    if (mapping.name(tool) !== name) problems.push(`${tool}: its name changed`);
    const back = mapping.back(name);
    if (back !== undefined && back !== tool) problems.push(`${tool}: ${name} reads back as ${back}`);
    if (back === undefined && !name.endsWith(`__${digest(tool)}`)) problems.push(`${tool}: ${name} has no digest`);
  }
  return { count, problems: problems.slice(0, 10) };
}

/** Every string of 1..max characters over `alphabet`. */
function* strings(alphabet: string, max: number): Generator<string> {
  let level = [''];
  for (let n = 1; n <= max; n++) {
    level = level.flatMap((s) => [...alphabet].map((c) => s + c));
    yield* level;
  }
}

/** Every tool whose server and function are at most 4 characters of a, _, -, . and :. */
function smallTools(): string[] {
  const servers = [...strings('a_-', 4)].filter((s) => SERVER_PATTERN.test(s));
  return servers.flatMap((s) => [...strings('a_.:', 4)].map((f) => `${s}.${f}`));
}

test('H3 (control): the check finds the collisions of a simpler mapping, `.` → `__` and the rest → `_`', () => {
  const naive = {
    name: (tool: string) =>
      tool
        .replace('.', '__')
        .replace(/[^a-zA-Z0-9_-]/g, '_')
        .slice(0, 64),
    back: (name: string) => (name.includes('__') ? name.replace('__', '.') : undefined),
  };
  const { problems } = problemsOver(smallTools(), naive);
  expect(problems.filter((p) => p.includes(' are both '))).not.toEqual([]);
  expect(problems.filter((p) => p.includes(' reads back as '))).not.toEqual([]);
});

test('H3: one-to-one on every tool whose server and function are at most 4 characters of a, _, -, . and :', () => {
  const tools = smallTools();
  expect(problemsOver(tools)).toEqual({ count: tools.length, problems: [] });
});

test('H3: one-to-one on 50,000 generated tools of every length, with runs of _ and characters outside the set', () => {
  // A seeded generator (mulberry32): the same names on every run.
  let seed = 32;
  const random = () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const pick = (chars: string, max: number) => {
    const length = 1 + Math.floor(random() * max);
    let out = '';
    for (let i = 0; i < length; i++) out += chars[Math.floor(random() * chars.length)];
    return out;
  };
  function* tools(): Generator<string> {
    for (let i = 0; i < 50_000; i++) {
      const server = pick(random() < 0.5 ? 'ab_' : 'abcXY09_-', random() < 0.9 ? 12 : 64);
      const fn = pick(random() < 0.5 ? 'ab_.' : 'abcXY09_-.:/', random() < 0.8 ? 40 : 130);
      yield `${server}.${fn}`;
    }
  }
  const { count, problems } = problemsOver(tools());
  expect(problems).toEqual([]);
  expect(count).toBeGreaterThan(49_000);
});

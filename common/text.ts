/** Text for people: a tool result's content as words, and tables with padded columns. */

/** A result's content as one string: its text parts, `[image]` (or the part's type) for the others. */
export function contentText(content: readonly unknown[] | undefined): string {
  return (content ?? [])
    .map((c) => {
      const part = c as { type?: unknown; text?: unknown } | null;
      return part?.type === 'text' && typeof part.text === 'string'
        ? part.text
        : `[${String(part?.type ?? 'content')}]`;
    })
    .join(' ');
}

/** Columns padded to their widest cell; the last column is not padded. */
export function table(header: string[], rows: string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]))).join('  ');
  return [line(header), ...rows.map(line)];
}

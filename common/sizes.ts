/**
 * D1: what an answer weighs and holds, in bytes and in words, without writing it out again (an answer may be tens of
 * MiB: its strings are measured where they lie).
 */

/**
 * D1: about how many bytes an answer weighs as its server sent it, without writing it out again: its strings (the text,
 * the base64 of images and audio and blobs), and a little for each item around them.
 */
export function answerBytes(answer: { content?: unknown; structuredContent?: unknown; _meta?: unknown }): number {
  let bytes = 64;
  const walk = (value: unknown, depth: number): void => {
    if (typeof value === 'string') bytes += Buffer.byteLength(value) + 2;
    else if (typeof value === 'number' || typeof value === 'boolean' || value === null) bytes += 8;
    else if (depth > 64) bytes += 16;
    else if (Array.isArray(value)) {
      for (const item of value) {
        bytes += 1;
        walk(item, depth + 1);
      }
    } else if (value && typeof value === 'object') {
      for (const [key, item] of Object.entries(value)) {
        bytes += key.length + 4;
        walk(item, depth + 1);
      }
    }
  };
  walk(answer.content, 0);
  walk(answer.structuredContent, 0);
  walk(answer._meta, 0);
  return bytes;
}

/** What an answer holds, for a person: `text 3.0 MiB`, `image/png 1.5 MiB, text 120 B`, `resource file:///a.pdf 2.5 MiB`. */
export function holdsOf(answer: { content: unknown[]; structuredContent?: unknown }): string {
  const parts: string[] = [];
  for (const item of answer.content.slice(0, 20)) {
    const c = (item ?? {}) as Record<string, unknown>;
    const mime = typeof c.mimeType === 'string' ? c.mimeType.slice(0, 100) : undefined;
    if (c.type === 'text') parts.push(`text ${sizeInWords(byteLengthOf(c.text))}`);
    else if (c.type === 'image' || c.type === 'audio')
      parts.push(`${mime ?? c.type} ${sizeInWords(base64Bytes(c.data))}`);
    else if (c.type === 'resource') {
      const r = (c.resource ?? {}) as Record<string, unknown>;
      const size = typeof r.blob === 'string' ? base64Bytes(r.blob) : byteLengthOf(r.text);
      parts.push(`resource ${String(r.uri ?? '').slice(0, 200)} ${sizeInWords(size)}`);
    } else if (c.type === 'resource_link') parts.push(`link ${String(c.uri ?? '').slice(0, 200)}`);
    else parts.push(String(c.type ?? 'item').slice(0, 40));
  }
  if (answer.content.length > 20) parts.push(`${answer.content.length - 20} more`);
  if (answer.structuredContent)
    parts.push(`structured ${sizeInWords(answerBytes({ content: answer.structuredContent }))}`);
  return parts.join(', ') || 'nothing';
}

function byteLengthOf(value: unknown): number {
  return typeof value === 'string' ? Buffer.byteLength(value) : 0;
}

function base64Bytes(value: unknown): number {
  return typeof value === 'string' ? Math.floor((value.length * 3) / 4) : 0;
}

/** `120 B`, `30.0 KiB`, `3.0 MiB`. */
export function sizeInWords(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

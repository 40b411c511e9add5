/**
 * JSON with object keys sorted at every level (and undefined members left out, as JSON.stringify
 * does): the same value gives the same text however its keys were ordered. What a request's or a
 * call's identity is hashed from: replay fingerprints, Cold job ids, workflow keys.
 */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const o = value as Record<string, unknown>;
    const keys = Object.keys(o).filter((k) => o[k] !== undefined);
    return `{${keys
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/**
 * What differs between two routing maps, one line per JSON path, so routing changes are visible
 * in review (`npm run routes:diff`, bin/routes-diff.ts).
 */

type Json = unknown;

export function diffJson(a: Json, b: Json, path = ''): string[] {
  if (JSON.stringify(a) === JSON.stringify(b)) return [];
  const isObj = (v: Json) => v !== null && typeof v === 'object';
  if (isObj(a) && isObj(b) && Array.isArray(a) === Array.isArray(b)) {
    const keys = Array.isArray(a)
      ? [...Array(Math.max((a as Json[]).length, (b as Json[]).length)).keys()].map(String)
      : [...new Set([...Object.keys(a as object), ...Object.keys(b as object)])];
    return keys.flatMap((k) => {
      const p = Array.isArray(a) ? `${path}[${k}]` : path ? `${path}.${k}` : k;
      const av = (a as Record<string, Json>)[k];
      const bv = (b as Record<string, Json>)[k];
      if (av === undefined) return [`+ ${p}: ${JSON.stringify(bv)}`];
      if (bv === undefined) return [`- ${p}: ${JSON.stringify(av)}`];
      return diffJson(av, bv, p);
    });
  }
  return [`~ ${path || '(top level)'}: ${JSON.stringify(a)} → ${JSON.stringify(b)}`];
}

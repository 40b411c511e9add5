/**
 * Keys written twice in one object of an operator's JSON file. JSON.parse keeps the last one, so a
 * second `"hot": [...]` dropped the first list with nothing said. The `yaml` package reads JSON (a
 * subset of YAML 1.2) and keeps every pair, with where it sits, so each duplicate is found with its path.
 */
import { isPair, isScalar, isSeq, parseDocument, visit, type Document, type Node, type Pair, type YAMLMap } from 'yaml';

/** A key written twice: the path to it (keys and array indexes, as the parsed value has it). */
export type DuplicateKey = Array<string | number>;

type Ancestor = Document | Node | Pair;

/** The path of a node from its ancestors: a pair's key, an array's index of the next node down. */
function pathOf(ancestors: readonly Ancestor[], node: YAMLMap): DuplicateKey {
  return ancestors.flatMap((a, i): DuplicateKey => {
    const child = (ancestors[i + 1] ?? node) as Node | Pair;
    if (isPair(a) && isScalar(a.key)) return [String(a.key.value)];
    if (isSeq(a)) return [a.items.indexOf(child)];
    return [];
  });
}

/** Every key written twice in `text` (JSON that JSON.parse took), in the order they are written. */
export function duplicateKeys(text: string): DuplicateKey[] {
  const doc = parseDocument(text, { uniqueKeys: false });
  if (doc.errors.length) return []; // not read the same way as JSON.parse: the parsed value is the authority
  const found: DuplicateKey[] = [];
  visit(doc, {
    Map(_, map, ancestors) {
      const seen = new Set<string>();
      for (const pair of map.items) {
        const key = isScalar(pair.key) ? String(pair.key.value) : null;
        if (key !== null && seen.has(key)) found.push([...pathOf(ancestors, map), key]);
        if (key !== null) seen.add(key);
      }
    },
  });
  return found;
}

/** What a duplicate is said as, after its path. */
export const duplicateMessage = (path: DuplicateKey): string =>
  `"${String(path[path.length - 1])}" is written twice in one object (only the last would count)`;

/**
 * A response's `usage` as the realtime model reports it, cleaned once for both the meter and the
 * spend guard: each count the bridge uses must be a whole number from 0 to MAX_AUDIO_TOKENS (the
 * guard's own bound), else that field alone is dropped and named, so a negative, fractional,
 * string or huge figure can neither put a made-up cost in the meter nor make the guard refuse the
 * response (which would blind it to the turn and its cost). Fields the bridge does not use are left out.
 */
import { MAX_AUDIO_TOKENS, PRICED_COUNTS, type RealtimeUsage } from '../spend-guard';
import { isObject } from '../../json-object';

export interface Usage extends RealtimeUsage {
  input_tokens?: number;
  output_tokens?: number;
}

/** The totals the meter shows, and every count the guard prices. */
const COUNTS: ReadonlyArray<readonly string[]> = [['input_tokens'], ['output_tokens'], ...PRICED_COUNTS];

type Obj = Record<string, unknown>;
const isCount = (v: unknown): v is number => Number.isInteger(v) && (v as number) >= 0 && (v as number) <= MAX_AUDIO_TOKENS;

/** The cleaned usage (undefined when none was reported) and what was dropped, `field=value`. */
export function cleanUsage(raw: unknown): { usage: Usage | undefined; dropped: string[] } {
  if (raw === undefined || raw === null) return { usage: undefined, dropped: [] };
  if (!isObject(raw)) return { usage: undefined, dropped: [`usage=${shown(raw)}`] };
  const usage: Obj = {};
  const dropped = new Set<string>();
  for (const path of COUNTS) {
    const { value, at } = dig(raw, path);
    if (value === undefined) continue;
    if (isCount(value) && at === path.length) put(usage, path, value);
    else dropped.add(`${path.slice(0, at).join('.')}=${shown(value)}`);
  }
  return { usage: usage as Usage, dropped: [...dropped] };
}

/** The value at `path`, or the first step on the way that is present but not an object (`at` says how deep). */
function dig(o: Obj, path: readonly string[]): { value: unknown; at: number } {
  let cur: unknown = o;
  for (let i = 0; i < path.length; i++) {
    if (!isObject(cur)) return { value: cur, at: i };
    cur = cur[path[i]];
    if (cur === undefined) return { value: undefined, at: i + 1 };
  }
  return { value: cur, at: path.length };
}

function put(o: Obj, path: readonly string[], value: number): void {
  let cur = o;
  for (const key of path.slice(0, -1)) cur = (cur[key] ??= {}) as Obj;
  cur[path.at(-1)!] = value;
}

// JSON.stringify shows strings quoted; Infinity (JSON's 1e309) and NaN as themselves.
const shown = (v: unknown) => (typeof v === 'number' ? String(v) : (JSON.stringify(v) ?? String(v))).slice(0, 40);

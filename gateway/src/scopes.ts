/**
 * Scope definitions (a YAML file kept by the team): per protected job
 * type (`x-job-type`), its maximum time-to-answer and its fallback variant (the `degrade` field) when Hot and Warm both
 * fail. Its fields (docs/gateway.md#scopes):
 *
 *   scopes:
 *     invoice-summary:
 *       time_to_answer_ms: 30000
 *       degrade: queue            # queue | smaller_model | shorter_context
 *       smaller_model: gpt-4o-mini   # for smaller_model
 *       keep_last_messages: 4         # for shorter_context
 */
import { existsSync, readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { z } from 'zod';
import { ConfigError } from './errors';

const Scope = z.strictObject({
  time_to_answer_ms: z.number().int().positive().max(600_000),
  degrade: z.enum(['queue', 'smaller_model', 'shorter_context']).default('queue'),
  smaller_model: z.string().min(1).optional(),
  keep_last_messages: z.number().int().positive().optional(),
});
const ScopeFile = z.strictObject({ scopes: z.record(z.string(), Scope) });

export type ScopeConfig = z.infer<typeof Scope>;
export type Scopes = Record<string, ScopeConfig>;

export const DEFAULT_TIME_TO_ANSWER_MS = 30_000;

/**
 * The scopes of `file`; none when it is missing. `required` (production, with SCOPES_FILE set): a
 * file named and missing is refused, since a mistyped path ran every job type without its scope.
 */
export function loadScopes(file: string | undefined, required = false): Scopes {
  if (!file || !existsSync(file)) {
    if (required)
      throw new ConfigError(
        `SCOPES_FILE: ${file} not found (every job type would run without its scope; unset SCOPES_FILE to run without scopes)`,
      );
    return {};
  }
  let raw: unknown;
  try {
    raw = parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw new ConfigError(`${file}: not valid YAML (${(error as Error).message})`);
  }
  const parsed = ScopeFile.safeParse(raw);
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((i) => `${file}: ${i.path.join('.') || '(top level)'}: ${i.message}`).join('\n'));
  }
  for (const [name, scope] of Object.entries(parsed.data.scopes)) {
    if (scope.degrade === 'smaller_model' && !scope.smaller_model) {
      throw new ConfigError(`${file}: scopes.${name}.smaller_model: required when degrade is smaller_model`);
    }
  }
  return parsed.data.scopes;
}

/**
 * The scope of a job type (`x-job-type`, the client's text), if the file defines one: only its own
 * names count. `scopes.constructor` or `scopes.toString` is what every object has, no scope: read
 * as one, its time-to-answer was undefined and every call timed out at once, tripping the breakers.
 */
export function scopeOf(scopes: Scopes, jobType: string): ScopeConfig | undefined {
  return Object.hasOwn(scopes, jobType) ? scopes[jobType] : undefined;
}

/**
 * The scope's fallback variant of a request, tried once more before the queue when Hot and Warm
 * both failed: a smaller model on the same routes, or a shorter context (system messages plus the
 * last `keep_last_messages`, 4 by default). null for `queue` (straight to the Cold tier), and for
 * a body without chat messages.
 */
export function fallbackVariant<T extends object>(scope: ScopeConfig | undefined, body: T): { body: T; model?: string } | null {
  if (!scope || scope.degrade === 'queue') return null;
  if (scope.degrade === 'smaller_model') return { body, model: scope.smaller_model };
  const messages = (body as { messages?: unknown }).messages;
  if (!Array.isArray(messages)) return null;
  const keep = scope.keep_last_messages ?? 4;
  const system = (messages as Array<{ role: string }>).filter((m) => m.role === 'system' || m.role === 'developer');
  const rest = (messages as Array<{ role: string }>).filter((m) => m.role !== 'system' && m.role !== 'developer');
  if (rest.length <= keep) return null; // nothing to shorten
  return { body: { ...body, messages: [...system, ...rest.slice(-keep)] } };
}

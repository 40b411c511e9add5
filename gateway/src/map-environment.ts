/**
 * A routing map against the environment it is to run in, at start and on a reload, one rule for
 * both: the provider keys production lacks, a key holding a line break, and the budget pause's
 * provider (CAPPED_PROVIDER), which the map must name (a map without it leaves the budget webhook
 * pausing nothing and the pause skipping no route).
 */
import { missingKeys, brokenKeys } from './keys';
import { providersOf, type RoutesMapConfig } from './routes-map';

export interface MapEnvironment {
  /** Where the provider keys are read from. */
  keys: NodeJS.ProcessEnv;
  production: boolean;
  /** The provider the budget pause is for. */
  capped: string;
}

/** Every problem, one line each (none: the map can run here). */
export function mapEnvironmentProblems(map: RoutesMapConfig, env: MapEnvironment): string[] {
  const problems: string[] = [];
  const missing = missingKeys(map, env.keys);
  if (missing.length && env.production) problems.push(`provider keys not set: ${missing.join(', ')}`);
  for (const name of brokenKeys(map, env.keys)) problems.push(`${name}: expected no line break in the key (a secret file's last newline?)`);
  const providers = providersOf(map);
  if (!providers.includes(env.capped))
    problems.push(`CAPPED_PROVIDER: expected a provider of the routing map (${providers.join(', ')}), got "${env.capped}"`);
  return problems;
}

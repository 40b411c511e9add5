/**
 * Which API key a route uses. Keys come from the environment only, never from the routing map:
 * every Hot route uses HOT_API_KEY; a Warm route picks its key by provider kind. The mapping is
 * explicit: the first Warm provider kind seen in the map uses WARM_A_API_KEY, the second
 * WARM_B_API_KEY (Document 1 names two Warm providers, A and B); `WARM_KEY_<KIND>` (e.g.
 * WARM_KEY_MISTRAL) overrides that for a kind.
 */
import type { RoutesMapConfig } from './routes-map';
import { ConfigError } from './errors';

export type KeyFor = (tier: 'hot' | 'warm', provider: string) => string;

function warmKeyNames(map: RoutesMapConfig): Map<string, string> {
  const kinds = [...new Set(map.warm.map((r) => r.provider))];
  const letters = ['WARM_A_API_KEY', 'WARM_B_API_KEY'];
  return new Map(kinds.map((kind, i) => [kind, letters[i] ?? `WARM_KEY_${kind.toUpperCase().replace(/[^A-Z0-9]/g, '_')}`]));
}

export function keyResolver(map: RoutesMapConfig, env: NodeJS.ProcessEnv): KeyFor {
  const names = warmKeyNames(map);
  return (tier, provider) => {
    if (tier === 'hot') return env.HOT_API_KEY ?? '';
    const override = env[`WARM_KEY_${provider.toUpperCase().replace(/[^A-Z0-9]/g, '_')}`];
    if (override) return override;
    const name = names.get(provider);
    if (!name) throw new ConfigError(`no API key mapping for warm provider ${provider}`);
    return env[name] ?? '';
  };
}

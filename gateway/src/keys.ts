/**
 * Which API key a route uses. Keys come from the environment only, never from the routing map:
 * every Hot route uses HOT_API_KEY; a Warm route picks its key by provider kind. The mapping is
 * explicit: the first Warm provider kind seen in the map uses WARM_A_API_KEY, the second
 * WARM_B_API_KEY (two Warm providers, A and B, by default); `WARM_KEY_<KIND>` (e.g.
 * WARM_KEY_MISTRAL) overrides that for a kind.
 */
import type { RoutesMapConfig } from './routes-map';
import { ConfigError } from './errors';

export type KeyFor = (tier: 'hot' | 'warm', provider: string) => string;

const overrideName = (provider: string) => `WARM_KEY_${provider.toUpperCase().replace(/[^A-Z0-9]/g, '_')}`;

function warmKeyNames(map: RoutesMapConfig): Map<string, string> {
  const kinds = [...new Set(map.warm.map((r) => r.provider))];
  const letters = ['WARM_A_API_KEY', 'WARM_B_API_KEY'];
  return new Map(kinds.map((kind, i) => [kind, letters[i] ?? overrideName(kind)]));
}

/** Reads each key once (process.env is slow to read on every call); a reload of the map reads them again. */
export function keyResolver(map: RoutesMapConfig, env: NodeJS.ProcessEnv): KeyFor {
  const names = warmKeyNames(map);
  const hot = env.HOT_API_KEY ?? '';
  const warm = new Map<string, string>();
  const warmKey = (provider: string) => {
    const override = env[overrideName(provider)];
    if (override) return override;
    const name = names.get(provider);
    if (!name) throw new ConfigError(`no API key mapping for warm provider ${provider}`);
    return env[name] ?? '';
  };
  return (tier, provider) => {
    if (tier === 'hot') return hot;
    let key = warm.get(provider);
    if (key === undefined) warm.set(provider, (key = warmKey(provider)));
    return key;
  };
}

/** The variable each Warm provider kind's key is read from under this map. */
function warmKeySources(map: RoutesMapConfig, env: NodeJS.ProcessEnv): Map<string, string> {
  const letters = warmKeyNames(map);
  return new Map([...letters].map(([kind, letter]) => [kind, env[overrideName(kind)] ? overrideName(kind) : letter]));
}

/**
 * How a reload would move keys between Warm provider kinds (by letter, reordering the kinds moves
 * them): `kind: OLD → NEW` for each kind whose variable changes, or whose variable fed another
 * kind until now. Either way one provider would be sent another provider's key.
 */
export function movedKeys(current: RoutesMapConfig, next: RoutesMapConfig, env: NodeJS.ProcessEnv): string[] {
  const was = warmKeySources(current, env);
  const fed = new Map([...was].map(([kind, name]) => [name, kind]));
  const moved: string[] = [];
  for (const [kind, name] of warmKeySources(next, env)) {
    if (was.has(kind) && was.get(kind) !== name) moved.push(`${kind}: ${was.get(kind)} → ${name}`);
    else if (fed.has(name) && fed.get(name) !== kind) moved.push(`${kind}: ${name}, until now ${fed.get(name)}'s`);
  }
  return moved;
}

/** The variable each route's key is read from under this map, each with its routes' providers. */
function keySources(map: RoutesMapConfig, env: NodeJS.ProcessEnv): Map<string, Set<string>> {
  const sources = new Map<string, Set<string>>();
  const need = (name: string, provider: string) => sources.set(name, (sources.get(name) ?? new Set()).add(provider));
  for (const r of map.hot) need('HOT_API_KEY', r.provider);
  const names = warmKeyNames(map);
  for (const r of map.warm) need(env[overrideName(r.provider)] ? overrideName(r.provider) : names.get(r.provider)!, r.provider);
  return sources;
}

/** The key names the map's routes need that the environment does not set, each with its routes' providers. */
export function missingKeys(map: RoutesMapConfig, env: NodeJS.ProcessEnv): string[] {
  return [...keySources(map, env)].filter(([name]) => !env[name]).map(([name, providers]) => `${name} (${[...providers].join(', ')})`);
}

/**
 * The key names the map's routes use whose value holds a line break (a secret file's last
 * newline): undici refuses such a header, so every call with the key failed.
 */
export function brokenKeys(map: RoutesMapConfig, env: NodeJS.ProcessEnv): string[] {
  return [...keySources(map, env).keys()].filter((name) => /[\r\n]/.test(env[name] ?? ''));
}

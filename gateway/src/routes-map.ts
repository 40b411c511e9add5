/**
 * The routing map: `hot` and `warm` routes tried in order, and the `cold` queue
 * definition. Read at start from ROUTES_FILE (and again on a reload, routes-reload.ts), checked
 * with zod, `${NAME}` references resolved from the environment. Keys never live in the map (see
 * keys.ts). Its version is the start of the SHA-256 of the file's text, so two instances that run
 * the same map show the same version in /health.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { duplicateKeys, duplicateMessage } from './duplicate-keys';
import { ConfigError } from './errors';
import { withoutBom } from './json-object';

/**
 * A model name is sent as written: a space after it (`"gpt-4o-mini "`) failed every call at the
 * provider and opened the route's breaker. Refused rather than trimmed, as a baseUrl with a space is:
 * the map says what is sent. Quoted as JSON, so a tab or line break shows.
 */
const modelName = () =>
  z
    .string()
    .min(1)
    .refine((v) => v === v.trim(), {
      error: (i) => `expected a model name without spaces or line breaks around it, got ${JSON.stringify(i.input)}`,
    });

const Route = z.strictObject({
  /** The route's name in metrics, logs and /health (default: its tier and place, `hot-1`, `warm-2`). */
  id: z
    .string()
    .regex(/^[a-z0-9][a-z0-9._-]{0,63}$/, 'lowercase letters, digits, . _ - (at most 64)')
    .optional(),
  provider: z
    .string()
    .min(1)
    .regex(/^[a-z0-9][a-z0-9._-]*$/, 'a lowercase provider kind such as openai'),
  model: modelName(),
  baseUrl: z.string().min(1),
  /** Cloud region of the endpoint, for the meter's `region` field (`global` when unset). */
  region: z.string().min(1).optional(),
  /**
   * The OpenAI APIs this endpoint offers (default by provider kind: `openai` offers chat and
   * responses, every other kind chat only). A route that lists `embeddings` serves embeddings of
   * its `model` only.
   */
  apis: z
    .array(z.enum(['chat', 'responses', 'embeddings']))
    .min(1)
    .optional(),
});

/** How a notice reaches a target: an https webhook (plain http on loopback only, for local peers) or an e-mail address. */
export function noticeChannel(target: string): 'webhook' | 'email' | null {
  if (/^https:\/\//.test(target) || /^http:\/\/(127\.0\.0\.1|localhost)[:/]/.test(target)) return 'webhook';
  // No slash: `http://user:pw@host/x` was taken for an address, and logged whole as an unsent e-mail.
  return /^[^\s@/]+@[^\s@/]+$/.test(target) ? 'email' : null;
}

/**
 * Why a notice target could never be reached, or ''. fetch refuses a URL it cannot parse (a space
 * in the host) or with user:password in it: every notice failed, and each failure's warning quoted
 * the URL whole, its secret path (and password) included.
 */
function noticeProblem(target: string): string {
  const channel = noticeChannel(target);
  if (!channel || (channel === 'webhook' && !URL.canParse(target))) return 'expected an https webhook URL or an e-mail address';
  const url = channel === 'webhook' ? new URL(target) : null;
  return url?.username || url?.password ? 'expected a webhook URL without user:password in it (fetch refuses one)' : '';
}

const Cold = z.strictObject({
  mode: z.literal('graceful_degrade'),
  queue: z.literal('ai-tasks'),
  // Checked here, not found out at the first outage; the message leaves out the target (a webhook's secret).
  notify: z.array(
    z.string().superRefine((t, ctx) => {
      const message = noticeProblem(t);
      if (message) ctx.addIssue({ code: 'custom', message });
    }),
  ),
});

const Flags = z.strictObject({
  enable_warm_fallback: z.boolean().default(true),
  enable_cold_queue: z.boolean().default(true),
  /** Models switched off (kill-switch per model). */
  killed_models: z.array(z.string()).default([]),
});

const RoutesMap = z.strictObject({
  hot: z.array(Route).min(1),
  warm: z.array(Route),
  cold: Cold,
  flags: Flags.default({ enable_warm_fallback: true, enable_cold_queue: true, killed_models: [] }),
  /** The cheaper model spend-cap routing may switch to. */
  cheaper_model: modelName().optional(),
  /** Rate limits: per tenant (x-customer-id) and token budgets per provider, per minute. */
  limits: z
    .strictObject({
      tenant_requests_per_minute: z.number().int().positive().optional(),
      provider_tokens_per_minute: z.record(z.string(), z.number().int().positive()).optional(),
    })
    .optional(),
  /** Stored objects of the provider account any client key may name (stored-objects.ts): their ids. */
  shared_objects: z
    .array(
      z
        .string()
        .regex(
          /^[^\s]{1,200}$/,
          'expected the id of a stored prompt, file, vector store, container, skill or custom voice (no spaces, at most 200 characters)',
        ),
    )
    .optional(),
});

export type RouteConfig = z.infer<typeof Route>;
export type RoutesMapConfig = z.infer<typeof RoutesMap>;

const REF = /\$\{([A-Z0-9_]+)\}/g;

/** A problem of the map: its JSON path and what is wrong there. */
type Problem = [path: string, what: string];

/** What resolving `${NAME}` found: the problems so far, and the names the map uses. */
interface Refs {
  env: NodeJS.ProcessEnv;
  problems: Problem[];
  used: Set<string>;
}

/** Replaces `${NAME}` in every string; an unset NAME is a problem where it is used (the reference stays). */
function resolveRefs(value: unknown, refs: Refs, path: string): unknown {
  if (typeof value === 'string') {
    return value.replace(REF, (ref, name: string) => {
      refs.used.add(name);
      const v = refs.env[name];
      if (v !== undefined && v !== '') return v;
      refs.problems.push([path, `environment value ${name} is not set`]);
      return ref;
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => resolveRefs(v, refs, `${path}[${i}]`));
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, resolveRefs(v, refs, path ? `${path}.${k}` : k)]));
  }
  return value;
}

function jsonPath(path: PropertyKey[]): string {
  return (
    path.reduce<string>((out, p) => (typeof p === 'number' ? `${out}[${p}]` : out ? `${out}.${String(p)}` : String(p)), '') || '(top level)'
  );
}

function parsedUrl(text: string): URL | null {
  try {
    return new URL(text);
  } catch {
    return null;
  }
}

/**
 * What is wrong with a baseUrl, or null. The API path is appended to it, so after a query it went
 * into the query; credentials were dropped unsaid (and are a secret, never shown). `shown` is how
 * the message quotes it: a value from the environment is named by its `${NAME}`, not shown (a
 * provider key put in the endpoint's variable, a proxy's token in a query: secrets in the start log).
 */
function baseUrlProblem(text: string, shown: string): string | null {
  const url = parsedUrl(text);
  if (url?.username || url?.password) return 'expected an http(s) URL without credentials (keys come from the environment)';
  if (!url || !/^https?:$/.test(url.protocol)) return `expected an http(s) URL, got ${shown}`;
  if (url.search || url.hash || /[?#]/.test(text))
    return `expected an http(s) URL without a query or fragment (the API path is appended), got ${shown}`;
  // A space stayed in every call's path (`/v1%20/chat/completions`); tabs and line breaks the URL parser drops.
  if (/\s/.test(text.replace(/[\t\n\r]/g, ''))) return `expected an http(s) URL without spaces (the API path is appended), got ${shown}`;
  return null;
}

/** A baseUrl as a message quotes it: as written, or, when it takes `${NAME}`s, by their names alone. */
function quotedBaseUrl(written: unknown, text: string): string {
  if (typeof written !== 'string' || !written.match(REF)) return `"${text}"`;
  return written === written.match(REF)![0]
    ? `the value of ${written} (not shown)`
    : `"${written}" with its \${NAME}s filled in (not shown)`;
}

/** The routes of a tier, as the map has them (anything, before zod). */
function routesOf(map: unknown, tier: 'hot' | 'warm'): unknown[] {
  const routes = map && typeof map === 'object' ? (map as Record<string, unknown>)[tier] : undefined;
  return Array.isArray(routes) ? routes : [];
}

/**
 * The checks zod does not make (ids unique over both tiers, a baseUrl that is a plain http(s) URL),
 * made on the map as read, so a map zod refuses has these problems named in the same read. `written`:
 * the map before its `${NAME}`s were filled in (what messages quote).
 */
function routeProblems(map: unknown, written: unknown): Problem[] {
  const problems: Problem[] = [];
  const ids = new Set<string>();
  for (const tier of ['hot', 'warm'] as const) {
    const unfilled = routesOf(written, tier);
    routesOf(map, tier).forEach((r: unknown, i) => {
      if (!r || typeof r !== 'object') return;
      const { id, baseUrl } = r as { id?: unknown; baseUrl?: unknown };
      const name = typeof id === 'string' ? id : `${tier}-${i + 1}`;
      if (ids.has(name)) problems.push([`${tier}[${i}].id`, `"${name}" is already the id of another route`]);
      ids.add(name);
      const asWritten = (unfilled[i] as { baseUrl?: unknown } | undefined)?.baseUrl;
      const wrong = typeof baseUrl === 'string' ? baseUrlProblem(baseUrl, quotedBaseUrl(asWritten, baseUrl)) : null;
      if (wrong) problems.push([`${tier}[${i}].baseUrl`, wrong]);
    });
  }
  return problems;
}

/**
 * Token budgets are looked up by a route's provider: one under another name (a typo, `OpenAI`)
 * weighed nothing, and the provider ran unbudgeted with nothing said.
 */
function limitProblems(map: RoutesMapConfig): Problem[] {
  const providers = providersOf(map);
  return Object.keys(map.limits?.provider_tokens_per_minute ?? {})
    .filter((name) => !providers.includes(name))
    .map((name) => [`limits.provider_tokens_per_minute.${name}`, `expected a provider of the routing map (${providers.join(', ')})`]);
}

export function parseRoutesMap(text: string, file: string, env: NodeJS.ProcessEnv): RoutesMapConfig {
  return checkMap(text, file, env).map;
}

/**
 * Every problem of the map at once, one line each: a fix is not followed by the next problem on the
 * next try. Also the `${NAME}`s it uses (the start log names the embedded defaults it took).
 */
function checkMap(text: string, file: string, env: NodeJS.ProcessEnv): { map: RoutesMapConfig; refs: string[] } {
  let raw: unknown;
  try {
    // A byte-order mark (Windows PowerShell's UTF-8) is read past, as every editor shows the file without it.
    raw = JSON.parse(withoutBom(text));
  } catch (error) {
    throw new ConfigError(`${file}: not valid JSON (${(error as Error).message})`);
  }
  const problems: Problem[] = duplicateKeys(withoutBom(text)).map((path): Problem => [jsonPath(path), duplicateMessage(path)]);
  const used = new Set<string>();
  const resolved = resolveRefs(raw, { env, problems, used }, '');
  const parsed = RoutesMap.safeParse(resolved);
  if (!parsed.success) problems.push(...parsed.error.issues.map((i): Problem => [jsonPath(i.path), i.message]));
  else problems.push(...limitProblems(parsed.data));
  // One line per path: a path already named (an unset ${NAME}, an empty baseUrl) is not named again.
  const named = new Set(problems.map(([path]) => path));
  problems.push(...routeProblems(resolved, raw).filter(([path]) => !named.has(path)));
  if (problems.length) throw new ConfigError(problems.map(([path, what]) => `${file}: ${path}: ${what}`).join('\n'));
  return { map: parsed.data!, refs: [...used] };
}

/** The provider kinds the map's routes use, each once, Hot first. */
export function providersOf(map: RoutesMapConfig): string[] {
  return [...new Set([...map.hot, ...map.warm].map((r) => r.provider))];
}

/** Which map an instance runs: the file, the version of its text, when it was put in force. */
export interface MapVersion {
  file: string;
  version: string;
  loaded_at: string;
}

export function loadRoutesMap(file: string, env: NodeJS.ProcessEnv): RoutesMapConfig {
  return readRoutesMap(file, env).map;
}

/** Reads and checks the map; a ConfigError names the file and the JSON path of what is wrong. `refs`: the `${NAME}`s it uses. */
export function readRoutesMap(file: string, env: NodeJS.ProcessEnv): { map: RoutesMapConfig; version: MapVersion; refs: string[] } {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    throw new ConfigError(`${file}: cannot read the routing map (ROUTES_FILE)`);
  }
  const { map, refs } = checkMap(text, file, env);
  const version = createHash('sha256').update(text).digest('hex').slice(0, 12);
  return { map, refs, version: { file, version, loaded_at: new Date().toISOString() } };
}

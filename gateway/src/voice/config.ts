/**
 * The call-flow configuration of the voice concierge, `concierge.json`: one zod
 * schema is its definition, used by the gateway and by `npm run concierge:lint`. The lint adds
 * what a schema cannot say alone: bracketed placeholders left, functions an intent calls that do
 * not exist, targets, https, E.164, IANA time zones, business hours, BCP 47 language tags.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { REQUIRED_ARGS, type BackOfficeAction } from '../../../schema/backoffice-args';
import { MAX_TEXT_LENGTH } from '../../../schema/event-record';
import { duplicateKeys, duplicateMessage } from '../duplicate-keys';
import { withoutBom } from '../json-object';
import { parseBusinessHours } from './business-hours';

const INTENT_IDS = ['book', 'reschedule', 'qualify', 'pricing_deflection', 'voicemail'] as const;
export type IntentId = (typeof INTENT_IDS)[number];

const unit = z.number().min(0).max(1);
/** The longest callback window the pricing deflection may offer, in minutes (a week). */
const MAX_CALLBACK_MINUTES = 10_080;
/** Beyond this many seconds a latency budget is no budget: a value in milliseconds (1800 for 1.8 s) never fires. */
const MAX_LATENCY_S = 60;
const positive = z.number().positive();
/** Text with something in it: a consent line (a question, a link) of spaces alone is none, and the caller is told nothing. */
const text = z.string().refine((v) => v.trim() !== '', 'expected text, not empty nor spaces alone');

const Meta = z.strictObject({
  version: z.literal('1.0'),
  model: text,
  timezone: text,
  business_hours_local: text,
  primary_language: text,
  alt_languages: z.array(text),
});

const Guardrails = z.strictObject({
  max_turns: z.number().int().min(1),
  min_confidence: unit,
  latency_budget_s: positive,
  vad_enabled: z.boolean(),
  after_hours_to_voicemail: z.boolean(),
});

const Consent = z.strictObject({
  opening_line: text,
  retry_if_no_ack: z.boolean(),
  max_retries: z.number().int().min(0),
});

const SpendGuard = z.strictObject({
  per_call_usd_cap: positive,
  monthly_usd_cap: positive,
  disconnect_when_exceeded: z.boolean(),
  log_to: text,
  audio_in_per_million: positive,
  audio_out_per_million: positive,
  /** Cached input audio tokens (the model's lower rate for them); absent: the full input rate. */
  audio_in_cached_per_million: positive.optional(),
  /**
   * Text tokens (instructions, the conversation's text, the answers' words); absent: they go
   * unpriced (the startup log says so, the meter marks the responses UNPRICED). In and out are set
   * together; the cached rate, absent, is the text input rate.
   */
  text_in_per_million: positive.optional(),
  text_in_cached_per_million: positive.optional(),
  text_out_per_million: positive.optional(),
});

/** The Realtime API refuses a session whose tool has a longer name (`^[a-zA-Z0-9_-]{1,64}$`): no call could start. */
const MAX_FUNCTION_NAME = 64;
const FunctionDef = z.strictObject({
  name: z
    .string()
    .regex(/^[a-z][a-z0-9_]*$/, 'a snake_case function name')
    .max(MAX_FUNCTION_NAME, `expected at most ${MAX_FUNCTION_NAME} characters (the Realtime API refuses a longer tool name)`),
  args: z.array(z.string().min(1)),
  webhook: text.optional(),
  static_url: text.optional(),
  dial: text.optional(),
});

const OnMatch = z.strictObject({
  call: z.string().min(1).optional(),
  confirm_readback: z.boolean().optional(),
  ask: z.array(text).optional(),
  qualify_rules: z.strictObject({ service_in: z.array(text).min(1), geo_whitelist: z.array(text).min(1) }).optional(),
  say: text.optional(),
  link: text.optional(),
  offer_callback: z.boolean().optional(),
  // The window is said to the caller and its end recorded as a time: a week at most (a larger one is no offer, and one past the last date a time can hold fails the deflection).
  callback_minutes_window: z
    .number()
    .int()
    .positive()
    .max(MAX_CALLBACK_MINUTES, `expected at most ${MAX_CALLBACK_MINUTES} minutes (a week)`)
    .optional(),
  privacy_notice: z.boolean().optional(),
});

const Intent = z.strictObject({
  id: z.enum(INTENT_IDS),
  triggers: z.array(text).min(1),
  on_match: OnMatch,
  handoff_if_confidence_below: unit.optional(),
});

const ESCALATION_TRIGGERS = [
  'confidence_below',
  'frustration_detected',
  'turn_cap_reached',
  'latency_over_budget',
  'caller_request',
] as const;
type EscalationTrigger = (typeof ESCALATION_TRIGGERS)[number];
/** The reason the spend guard records each trigger's escalations with (spend-guard.ts). */
const RECORDED_REASON: Record<EscalationTrigger, string> = {
  confidence_below: 'low_confidence',
  frustration_detected: 'frustration_markers',
  turn_cap_reached: 'turn_cap',
  latency_over_budget: 'latency',
  caller_request: 'caller_request',
};
const Rule = z.strictObject({
  trigger: z.enum(ESCALATION_TRIGGERS),
  threshold: z.number().positive().optional(),
  repeat: z.number().int().min(1).optional(),
  markers: z.array(text).optional(),
  action: z.literal('escalate_to_human'),
  reason: z.enum(['low_confidence', 'frustration_markers', 'turn_cap', 'latency', 'caller_request']),
});

export const ConciergeConfig = z.strictObject({
  meta: Meta,
  guardrails: Guardrails,
  consent: Consent,
  spend_guard: SpendGuard,
  functions: z.array(FunctionDef).min(1),
  intents: z.array(Intent).length(5),
  escalation: z.strictObject({ rules: z.array(Rule).min(1) }),
  workflow: z.strictObject({ dlq_url: text }),
});
export type Concierge = z.infer<typeof ConciergeConfig>;

export interface Problem {
  path: string;
  message: string;
}

const PLACEHOLDER = /<[^<>]+>/;

function pathOf(parts: ReadonlyArray<PropertyKey>): string {
  return parts.reduce<string>((p, k) => (typeof k === 'number' ? `${p}[${k}]` : `${p}.${String(k)}`), '$');
}

function valueAt(root: unknown, parts: ReadonlyArray<PropertyKey>): unknown {
  let v: unknown = root;
  for (const k of parts) v = v && typeof v === 'object' ? (v as Record<PropertyKey, unknown>)[k] : undefined;
  return v;
}

function walk(value: unknown, parts: PropertyKey[], visit: (v: unknown, parts: PropertyKey[]) => void): void {
  visit(value, parts);
  if (Array.isArray(value)) value.forEach((v, i) => walk(v, [...parts, i], visit));
  else if (value && typeof value === 'object') for (const [k, v] of Object.entries(value)) walk(v, [...parts, k], visit);
}

const isHttps = (u: string) => {
  try {
    return new URL(u).protocol === 'https:';
  } catch {
    return false;
  }
};
/**
 * fetch refuses a URL with user:password in it: a webhook's every call failed, and the failure,
 * quoting the URL whole, reached the log, the dead letter and the answer the model reads.
 */
const withoutCredentials = (u: string) => !URL.canParse(u) || (!new URL(u).username && !new URL(u).password);
const NO_CREDENTIALS = 'expected an https URL without user:password in it (fetch refuses one)';
const isE164 = (n: string) => /^\+[1-9]\d{1,14}$/.test(n);
function isTimeZone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en', { timeZone: tz });
    return tz.includes('/') || tz === 'UTC';
  } catch {
    return false;
  }
}
function isLanguageTag(tag: string): boolean {
  try {
    return Intl.getCanonicalLocales(tag).length === 1 && /^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$/.test(tag);
  } catch {
    return false;
  }
}

/** Checks the string at `parts`, when there is one and it is not a placeholder (reported already). */
type Check = (parts: PropertyKey[], ok: (v: string) => boolean, message: string | ((v: string) => string)) => void;

/** Bracketed placeholders left from the template; their paths, so other checks skip them. */
function placeholderProblems(raw: unknown, problems: Problem[]): Set<string> {
  const placeholders = new Set<string>();
  walk(raw, [], (v, parts) => {
    if (typeof v === 'string' && PLACEHOLDER.test(v)) {
      placeholders.add(pathOf(parts));
      problems.push({ path: pathOf(parts), message: `placeholder ${PLACEHOLDER.exec(v)![0]} must be replaced` });
    }
  });
  return placeholders;
}

function schemaProblems(raw: unknown, placeholders: Set<string>, problems: Problem[]): void {
  const parsed = ConciergeConfig.safeParse(raw);
  if (parsed.success) return;
  for (const issue of parsed.error.issues) {
    const parts = issue.path as PropertyKey[];
    const path = pathOf(parts);
    if (placeholders.has(path)) continue; // already reported as a placeholder
    const keys = (issue as { keys?: string[] }).keys;
    if (issue.code === 'unrecognized_keys' && keys) {
      for (const k of keys) problems.push({ path: pathOf([...parts, k]), message: 'unknown field' });
      continue;
    }
    const missing = valueAt(raw, parts) === undefined;
    problems.push({ path, message: missing ? 'missing field' : issue.message });
  }
}

function formatProblems(c: Partial<Concierge>, check: Check): void {
  // The model names every call record and voice meter event: longer than their text, the meter refuses them all.
  check(['meta', 'model'], (v) => v.length <= MAX_TEXT_LENGTH, `expected at most ${MAX_TEXT_LENGTH} characters (the meter's limit)`);
  check(['meta', 'timezone'], isTimeZone, 'expected an IANA time zone such as Europe/Lisbon');
  check(
    ['meta', 'business_hours_local'],
    (v) => parseBusinessHours(v).ok,
    (v) => {
      const parsed = parseBusinessHours(v);
      return `expected business hours such as "Mon-Fri 08:00-18:00; Sat 09:00-13:00"${parsed.ok ? '' : `: ${parsed.error}`}`;
    },
  );
  check(['meta', 'primary_language'], isLanguageTag, 'expected a BCP 47 language tag such as en-US');
  (Array.isArray(c.meta?.alt_languages) ? c.meta!.alt_languages : []).forEach((_, i) =>
    check(['meta', 'alt_languages', i], isLanguageTag, 'expected a BCP 47 language tag such as pt-PT'),
  );
  check(['spend_guard', 'log_to'], isHttps, 'expected an https URL');
  check(['spend_guard', 'log_to'], withoutCredentials, NO_CREDENTIALS);
  check(['workflow', 'dlq_url'], isHttps, 'expected an https URL');
  check(['workflow', 'dlq_url'], withoutCredentials, NO_CREDENTIALS);
}

/**
 * Text prices come as a pair: with one alone, half of the text tokens would go unpriced while the
 * configuration looks priced; a cached rate alone prices nothing (it is a rate of the input price).
 */
function textPriceProblems(g: Partial<Concierge['spend_guard']> | undefined, problems: Problem[]): void {
  if (!g || typeof g !== 'object') return;
  const set = (k: 'text_in_per_million' | 'text_out_per_million' | 'text_in_cached_per_million') => g[k] !== undefined;
  for (const [k, other] of [
    ['text_in_per_million', 'text_out_per_million'],
    ['text_out_per_million', 'text_in_per_million'],
  ] as const)
    if (set(k) && !set(other))
      problems.push({ path: pathOf(['spend_guard', other]), message: `missing field (set with ${k}: text tokens are priced in and out)` });
  if (set('text_in_cached_per_million') && !set('text_in_per_million') && !set('text_out_per_million'))
    problems.push({
      path: pathOf(['spend_guard', 'text_in_per_million']),
      message: 'missing field (set with text_in_cached_per_million, and text_out_per_million with it)',
    });
}

/** The index and value of each entry that repeats an earlier one. */
const repeats = (values: unknown[]) => values.flatMap((v, i) => (values.indexOf(v) < i ? [[i, v] as const] : []));

/** The back-office action a webhook names (`?action=book_slot`, as the meter web app takes it), or null. */
function backOfficeAction(webhook: unknown): BackOfficeAction | null {
  if (typeof webhook !== 'string' || !URL.canParse(webhook)) return null;
  const action = new URL(webhook).searchParams.get('action');
  return action !== null && Object.hasOwn(REQUIRED_ARGS, action) ? (action as BackOfficeAction) : null;
}

/**
 * A function whose webhook is a back-office action declares the arguments that action cannot do
 * without: the phone bridge passes on only the declared ones, so the back office would refuse
 * every call of it. `recording_url` is the voice server's to add (the bridge's recording callback).
 */
function backOfficeArgs(f: { webhook?: unknown; args?: unknown }, i: number, problems: Problem[]): void {
  const action = backOfficeAction(f.webhook);
  if (!action || !Array.isArray(f.args)) return;
  const missing = REQUIRED_ARGS[action].filter((a) => a !== 'recording_url' && !(f.args as unknown[]).includes(a));
  if (missing.length)
    problems.push({
      path: pathOf(['functions', i, 'args']),
      message: `expected ${missing.join(', ')} among the arguments: the back office's ${action} refuses a call without ${missing.length > 1 ? 'them' : 'it'}, and the phone bridge passes on only the arguments declared`,
    });
}

/** Each function once, its arguments once each, with exactly one well-formed target; answers the function names. */
function functionProblems(c: Partial<Concierge>, check: Check, problems: Problem[]): Set<string | undefined> {
  const functions = Array.isArray(c.functions) ? c.functions : [];
  functions.forEach((f, i) => {
    if (!f || typeof f !== 'object') return;
    for (const [j, name] of repeats(Array.isArray(f.args) ? f.args : []))
      problems.push({ path: pathOf(['functions', i, 'args', j]), message: `argument ${String(name)} is named twice` });
    const targets = (['webhook', 'static_url', 'dial'] as const).filter((t) => f[t] !== undefined);
    if (targets.length !== 1)
      problems.push({
        path: pathOf(['functions', i]),
        message: `expected exactly one target (webhook, static_url or dial), found ${targets.length ? targets.join(' and ') : 'none'}`,
      });
    backOfficeArgs(f, i, problems);
    check(['functions', i, 'webhook'], isHttps, 'expected an https URL');
    check(['functions', i, 'webhook'], withoutCredentials, NO_CREDENTIALS);
    check(['functions', i, 'static_url'], isHttps, 'expected an https URL');
    check(['functions', i, 'dial'], isE164, 'expected a phone number in E.164, such as +351211234567');
  });
  // Of two functions with one name only the first could ever run (a call is found by its name).
  for (const [i, name] of repeats(functions.map((f) => f?.name)))
    if (name !== undefined) problems.push({ path: pathOf(['functions', i, 'name']), message: `function ${name} is defined twice` });
  return new Set(functions.map((f) => f?.name));
}

/**
 * The function an intent calls when its `call` is not set: the phone bridge and the voice endpoints
 * fall back on these names; `book` and `reschedule` have none (the model would be told to call
 * "undefined"); `pricing_deflection` calls none (its link comes from the `static_url` function).
 */
const DEFAULT_CALL: Partial<Record<IntentId, string | null>> = {
  book: null,
  reschedule: null,
  qualify: 'create_lead',
  voicemail: 'route_to_voicemail',
};

/** A latency in seconds too large to be one: most likely milliseconds. */
const latencyMessage = (v: number) =>
  `expected seconds, at most ${MAX_LATENCY_S}: ${v} never fires (in milliseconds? ${v} ms is ${v / 1000})`;

/** Every intent once, each calling a function that exists, each but voicemail with a handoff threshold. */
function intentProblems(c: Partial<Concierge>, names: Set<string | undefined>, check: Check, problems: Problem[]): void {
  const intents = Array.isArray(c.intents) ? c.intents : [];
  const seen = new Set<string>();
  intents.forEach((intent, i) => {
    if (!intent || typeof intent !== 'object') return;
    if (seen.has(intent.id)) problems.push({ path: pathOf(['intents', i, 'id']), message: `intent ${intent.id} is defined twice` });
    seen.add(intent.id);
    const call = intent.on_match?.call;
    const callPath = pathOf(['intents', i, 'on_match', 'call']);
    if (call && !names.has(call)) problems.push({ path: callPath, message: `calls ${call}, which is not in functions` });
    const fallback = Object.hasOwn(DEFAULT_CALL, intent.id) ? DEFAULT_CALL[intent.id] : undefined;
    if (call === undefined && intent.on_match && typeof intent.on_match === 'object') {
      if (fallback === null) problems.push({ path: callPath, message: `missing field (the ${intent.id} intent calls a function)` });
      else if (fallback !== undefined && !names.has(fallback))
        problems.push({
          path: callPath,
          message: `missing field: without it the ${intent.id} intent calls ${fallback}, which is not in functions`,
        });
    }
    if (intent.id !== 'voicemail' && intent.handoff_if_confidence_below === undefined) {
      problems.push({
        path: pathOf(['intents', i, 'handoff_if_confidence_below']),
        message: 'missing field (every intent but voicemail has one)',
      });
    }
    check(['intents', i, 'on_match', 'link'], isHttps, 'expected an https URL');
  });
  for (const id of INTENT_IDS)
    if (intents.length && !seen.has(id)) problems.push({ path: '$.intents', message: `intent ${id} is missing` });
}

/** Every problem of a configuration, as `<JSON path>: <what is wrong>` pairs. Empty = clean. */
export function lintConcierge(raw: unknown): Problem[] {
  const problems: Problem[] = [];
  const placeholders = placeholderProblems(raw, problems);
  schemaProblems(raw, placeholders, problems);
  // Checks beyond the schema run on whatever is there, so one pass reports everything.
  const c = (raw && typeof raw === 'object' ? raw : {}) as Partial<Concierge>; // null or a number: the schema said so
  const check: Check = (parts, ok, message) => {
    const v = valueAt(raw, parts);
    const path = pathOf(parts);
    if (typeof v === 'string' && !placeholders.has(path) && !ok(v))
      problems.push({ path, message: typeof message === 'string' ? message : message(v) });
  };
  formatProblems(c, check);
  textPriceProblems(c.spend_guard, problems);
  const budget = c.guardrails?.latency_budget_s;
  if (typeof budget === 'number' && budget > MAX_LATENCY_S)
    problems.push({ path: pathOf(['guardrails', 'latency_budget_s']), message: latencyMessage(budget) });
  intentProblems(c, functionProblems(c, check, problems), check, problems);
  const rules = Array.isArray(c.escalation?.rules) ? c.escalation!.rules : [];
  const firstOf = new Map<unknown, number>();
  rules.forEach((r, i) => {
    if (r?.trigger === 'confidence_below' && typeof r.threshold === 'number' && r.threshold > 1) {
      problems.push({ path: pathOf(['escalation', 'rules', i, 'threshold']), message: 'expected a confidence from 0 to 1' });
    }
    // Turns are whole: a fraction such as 0.5 escalates every call after its first response.
    if (r?.trigger === 'turn_cap_reached' && typeof r.threshold === 'number' && !Number.isInteger(r.threshold))
      problems.push({ path: pathOf(['escalation', 'rules', i, 'threshold']), message: 'expected a whole number of turns' });
    if (r?.trigger === 'latency_over_budget' && typeof r.threshold === 'number' && r.threshold > MAX_LATENCY_S)
      problems.push({ path: pathOf(['escalation', 'rules', i, 'threshold']), message: latencyMessage(r.threshold) });
    // Frustration has no built-in phrases (a person-asking rule has): without markers the rule never escalates.
    if (r?.trigger === 'frustration_detected' && (r.markers === undefined || (Array.isArray(r.markers) && !r.markers.length)))
      problems.push({
        path: pathOf(['escalation', 'rules', i, 'markers']),
        message: 'expected at least one phrase: a frustration_detected rule without markers never escalates a call',
      });
    // The spend guard records each trigger's escalations with one reason, whatever a rule says.
    const recorded = r && Object.hasOwn(RECORDED_REASON, r.trigger) ? RECORDED_REASON[r.trigger] : undefined;
    if (recorded && typeof r.reason === 'string' && r.reason !== recorded)
      problems.push({
        path: pathOf(['escalation', 'rules', i, 'reason']),
        message: `expected ${recorded}, the reason escalations of ${r.trigger} are recorded with`,
      });
  });
  // The guard takes the first rule of each trigger: a later one (a stricter threshold added below) is never used.
  rules.forEach((r, i) => {
    if (!r || typeof r !== 'object') return;
    const first = firstOf.get(r.trigger);
    if (first === undefined) return void firstOf.set(r.trigger, i);
    problems.push({
      path: pathOf(['escalation', 'rules', i, 'trigger']),
      message: `${String(r.trigger)} has a rule already (rules[${first}]); only the first rule of a trigger is used`,
    });
  });
  const unique = new Map<string, Problem>();
  for (const p of problems) unique.set(`${p.path}\u0000${p.message}`, p);
  return [...unique.values()];
}

/** The file's text; a byte-order mark (Windows PowerShell's UTF-8) is read past, as editors show the file without it. */
const readText = (file: string): string => withoutBom(readFileSync(file, 'utf8'));
const readJson = (file: string): unknown => JSON.parse(readText(file));

/** Reads and lints a file; a file that is not JSON is one problem at `$`. A key written twice is a problem: JSON keeps the last. */
export function lintFile(file: string): Problem[] {
  let text: string;
  let raw: unknown;
  try {
    text = readText(file);
    raw = JSON.parse(text);
  } catch (error) {
    return [{ path: '$', message: `not readable JSON (${(error as Error).message})` }];
  }
  const twice = duplicateKeys(text).map((path): Problem => ({ path: pathOf(path), message: duplicateMessage(path) }));
  return [...twice, ...lintConcierge(raw)];
}

/** Fields no call can be taken without (Intl refuses an unknown zone; the hours decide every call): their problems make the file unusable. */
const NEEDED = new Set(['$.meta.timezone', '$.meta.business_hours_local']);

/** The configuration, or null when it is not one the gateway can run (outside production, lint problems elsewhere are allowed). */
export function loadConcierge(file: string): { config: Concierge | null; problems: Problem[] } {
  const problems = lintFile(file);
  const parsed = ConciergeConfig.safeParse(readJson(file));
  const usable = parsed.success && !problems.some((p) => NEEDED.has(p.path));
  return { config: usable ? parsed.data : null, problems };
}

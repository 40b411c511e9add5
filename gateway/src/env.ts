/**
 * The gateway's environment, read once at start and checked with one zod schema: every value the
 * gateway reads is named here with its default, and a bad value stops the start with its name and
 * what was expected (never a 500 on the first request). Provider keys and `${NAME}` references of
 * the routing map are read from the raw environment (their names depend on the map), and so are
 * the phone bridge's values (voice/phone/settings.ts: a bad one turns the bridge off, not the gateway).
 */
import addressparser from 'nodemailer/lib/addressparser/index.js';
import { z } from 'zod';
import { parseDecimalText } from '../../schema/event-record';
import { ConfigError } from './errors';

const url = (schemes: string[]) =>
  z.string().refine(
    (v) => {
      try {
        return schemes.includes(new URL(v).protocol);
      } catch {
        return false;
      }
    },
    `expected an absolute ${schemes.map((s) => s.replace(':', '')).join(' or ')} URL`,
  );

/** Decimal text only (the record's rule): Number() reads spaces as 0 (PORT=" " listened on a random port) and 0x1F90 as 8080. */
const number = (min: number, max: number, whole = false) =>
  z
    .string()
    .transform(parseDecimalText)
    .refine(
      (n) => n >= min && n <= max && (!whole || Number.isInteger(n)),
      `expected ${whole ? 'a whole number' : 'a number'} from ${min} to ${max}`,
    );

/**
 * The meter is reached with fetch, which refuses a URL with user:password in it: every post and
 * spend read failed, and the spend read's warning quoted the URL with the password and METER_TOKEN.
 */
const meterUrl = () =>
  url(['https:', 'http:']).refine((v) => {
    const u = URL.canParse(v) ? new URL(v) : null;
    return !u?.username && !u?.password;
  }, "expected a URL without user:password in it (the meter's token is METER_TOKEN)");

/**
 * A token as it must be sent: a secret made from a file often ends with a newline, and then no
 * caller's token matched it (a header's value is sent trimmed) and the meter refused every post.
 */
const secret = () =>
  z.string().refine((v) => v === v.trim(), "expected no spaces or line breaks around it (a secret file's last newline?)");

/**
 * ioredis decodes the user and password of QUEUE_STORE_URL: a `%` not followed by two hex digits (a
 * generated password's, not written %25) stopped the start with "URIError: URI malformed" and a
 * stack trace, and `npm run ops` said only "URI malformed", neither naming the setting.
 */
const decodable = (v: string) => {
  if (!URL.canParse(v)) return true; // refused as no URL already
  const u = new URL(v);
  try {
    decodeURIComponent(u.username);
    decodeURIComponent(u.password);
    return true;
  } catch {
    return false;
  }
};

/**
 * The sender of e-mail notices, as nodemailer reads it: a name alone (`AI Gateway`) or no address
 * went out with an empty sender (`MAIL FROM:<>`) and no From header, which relays refuse or file as
 * spam, found out at the first outage's notice.
 */
const sender = () =>
  z.string().refine((v) => {
    const parsed = addressparser(v, { flatten: true });
    return parsed.length === 1 && /^[^\s@]+@[^\s@]+$/.test(parsed[0].address);
  }, 'expected one e-mail address, a name before it if wanted: AI Gateway <ai@example.com>');

const redisUrl = () =>
  url(['redis:', 'rediss:'])
    .refine(decodable, 'expected its user and password percent-encoded (a % in them is written %25)')
    // ioredis reads the path as the database; one that is no number (`/abc`, `/0/x`) it sent as SELECT NaN,
    // unhandled: the gateway ended in a stack trace, and `npm run ops -- pause` first wrote to database 0.
    .refine(
      (v) => !URL.canParse(v) || /^\/?\d*$/.test(new URL(v).pathname),
      'expected the database as a number after the port: redis://host:6379/0',
    );

const Env = z.object({
  /**
   * Only `production` changes anything, so a near miss (`prod`) would run open and without Redis
   * unnoticed: a value outside the three conventional ones is refused.
   */
  NODE_ENV: z
    .enum(['production', 'development', 'test'], 'expected production, development or test (only production changes what the gateway does)')
    .optional(),
  PORT: number(0, 65535, true).default(8080),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** How long a SIGTERM waits for requests and streams in flight before cutting them. */
  SHUTDOWN_GRACE_MS: number(0, 600_000, true).default(25_000),
  /** `off`: no Cold worker in this process (run `npm run worker`). */
  WORKER: z.enum(['on', 'off']).default('on'),
  ROUTES_FILE: z.string().min(1).optional(),
  SCOPES_FILE: z.string().min(1).default('scopes.yaml'),
  QUEUE_STORE_URL: redisUrl().optional(),
  REDIS_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9._:-]{1,64}$/, 'expected 1-64 letters, digits, . _ : -')
    .optional(),
  METER_URL: meterUrl().optional(),
  METER_TOKEN: secret().optional(),
  METER_CSV_FILE: z.string().min(1).default('.data/events.csv'),
  METER_SPOOL_DIR: z.string().min(1).default('.data/meter-spool'),
  /** With Redis: how long a meter event stays pending with a gateway before another one claims it. */
  METER_CLAIM_IDLE_MS: number(100, 86_400_000, true).default(60_000),
  ADMIN_TOKEN: secret().optional(),
  /** `keys`: every /v1 request (voice aside) needs a client key; default `keys` in production, else `open`. */
  GATEWAY_AUTH: z.enum(['keys', 'open']).optional(),
  /** Where client keys are kept without Redis (with QUEUE_STORE_URL they are in Redis). */
  CLIENT_KEYS_FILE: z.string().min(1).default('.data/client-keys.json'),
  CAPPED_PROVIDER: z.string().optional(),
  BUDGET_PAUSE_AT_PERCENT: number(1, 1000, true).default(80),
  DAILY_CAP_USD: number(0, 1e9).default(50),
  BURN_7D_CAP_USD: number(0, 1e9).default(200),
  NOTIFY_WINDOW_MS: number(0, 3_600_000, true).default(60_000),
  // nodemailer decodes its user and password as ioredis does (the same URIError and stack trace).
  SMTP_URL: url(['smtp:', 'smtps:'])
    .refine(decodable, 'expected its user and password percent-encoded (a % in them is written %25)')
    .optional(),
  SMTP_FROM: sender().default('ai-gateway@localhost'),
  ON_CALL: z.string().optional(),
  /** Connections per provider origin (unset: no cap; see upstream.ts). */
  UPSTREAM_CONNECTIONS: number(1, 1_000_000, true).optional(),
  /** `on`: HTTP/2 to providers that offer it (TLS with ALPN). */
  UPSTREAM_HTTP2: z.enum(['on', 'off']).default('off'),
  /** `off` keeps the built-in demo providers from starting when no provider is configured. */
  DEMO_PROVIDERS: z.enum(['auto', 'off']).default('auto'),
  VOICE_TOKEN: secret().optional(),
  CONCIERGE_FILE: z.string().min(1).default('concierge.json'),
  CALLS_CSV_FILE: z.string().min(1).default('.data/calls.csv'),
  TELEPHONY_RATES_FILE: z.string().min(1).optional(),
  VOICE_PROVIDER: z.string().min(1).default('openai'),
});

export type GatewayEnv = Omit<z.infer<typeof Env>, 'GATEWAY_AUTH'> & {
  GATEWAY_AUTH: 'keys' | 'open';
  production: boolean;
  raw: NodeJS.ProcessEnv;
};

/** Empty strings count as unset: `FOO= npm start` should behave like no FOO. */
function withoutEmpty(env: NodeJS.ProcessEnv): Record<string, string> {
  return Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined && e[1] !== ''));
}

/**
 * Values that are each valid but cannot work together in production. The meter's setup() always
 * makes a token and it refuses posts without it: METER_URL alone left every event waiting, refused.
 */
const Production = Env.superRefine((env, ctx) => {
  if (env.NODE_ENV === 'production' && env.METER_URL && !env.METER_TOKEN)
    ctx.addIssue({
      code: 'custom',
      path: ['METER_TOKEN'],
      message: "expected the meter's token with METER_URL in production (its setup() made one; the meter refuses every post without it)",
    });
});

export function readEnv(raw: NodeJS.ProcessEnv): GatewayEnv {
  const parsed = Production.safeParse(withoutEmpty(raw));
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => {
      const name = String(i.path[0]);
      // Values that may hold a secret (tokens, keys, URLs with passwords) are not echoed; others escaped (a CRLF file's \r).
      const shown = /TOKEN|KEY|SECRET|URL/.test(name) ? '' : `, got ${JSON.stringify(String(raw[name]).slice(0, 80))}`;
      return `${name}: ${i.message}${shown}`;
    });
    throw new ConfigError(`environment:\n${lines.join('\n')}`);
  }
  const production = parsed.data.NODE_ENV === 'production';
  return { ...parsed.data, GATEWAY_AUTH: parsed.data.GATEWAY_AUTH ?? (production ? 'keys' : 'open'), production, raw };
}

/**
 * A routing map against the environment it is to run in, at start and on a reload, one rule for
 * both: the provider keys production lacks, a key holding a line break, the budget pause's
 * provider (CAPPED_PROVIDER), which the map must name (a map without it leaves the budget webhook
 * pausing nothing and the pause skipping no route), and, in production, notice targets nobody
 * reads (the shipped placeholders, an e-mail target without SMTP_URL).
 */
import { missingKeys, brokenKeys } from './keys';
import { noticeChannel, providersOf, type RoutesMapConfig } from './routes-map';

export interface MapEnvironment {
  /** Where the provider keys (and SMTP_URL) are read from: the raw environment. */
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
    problems.push(`CAPPED_PROVIDER: expected a provider of the routing map (${providers.join(', ')}), got ${JSON.stringify(env.capped)}`);
  if (env.production) problems.push(...unreadNotices(map.cold.notify, Boolean(env.keys.SMTP_URL)));
  return problems;
}

/** routes.prod.json's Slack webhook, to be replaced: Slack answers it 404, so no notice reached anyone. */
const PLACEHOLDER_WEBHOOK = /^https:\/\/hooks\.slack\.com\/services\/REPLACE\/ME\/?$/;
/** Domains reserved for examples (RFC 2606), such as the shipped oncall@example.com: no mail is ever delivered there. */
const EXAMPLE_DOMAIN = /@(?:[^@]+\.)?example(?:\.(?:com|net|org))?$/i;

/**
 * Targets no person would read: a notice to them (a pause, a dead letter, queued work) went out
 * into nothing, or only into the log, and the first anyone heard of an outage was from a client.
 */
function unreadNotices(targets: readonly string[], smtp: boolean): string[] {
  const problems: string[] = [];
  targets.forEach((target, i) => {
    if (PLACEHOLDER_WEBHOOK.test(target) || EXAMPLE_DOMAIN.test(target))
      problems.push(`cold.notify[${i}]: expected your own webhook URL or e-mail address, got the placeholder "${target}"`);
  });
  const emails = targets.filter((t) => noticeChannel(t) === 'email');
  if (emails.length && !smtp)
    problems.push(
      `SMTP_URL: expected an smtp(s) URL for the e-mail target(s) of cold.notify (${emails.join(', ')}): without it a notice is only logged`,
    );
  return problems;
}

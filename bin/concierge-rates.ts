/** `npm run concierge:rates -- US GB …`: per-country telephony rates from Twilio's pricing API into the rates file. */
import { asksForHelp } from '../gateway/src/help';
import { DEFAULT_RATES_FILE, fetchCountryRates, inboundRate, readRates, writeRates } from '../gateway/src/voice/rates';

type Rates = ReturnType<typeof readRates>;
type Account = { baseUrl: string; sid: string; token: string };
const say = (line: string) => process.stderr.write(`${line}\n`);
const USAGE = 'usage: npm run concierge:rates -- US GB ...';
const WHERE_HELP = 'npm run concierge:rates -- --help';
const WHERE = `the account: TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN; the rates file: TELEPHONY_RATES_FILE (${DEFAULT_RATES_FILE}): docs/voice.md#telephony-rates`;

/** The countries asked for, or null (said): checked before anything is fetched or written, a typo being a usage error. */
function countriesAsked(args: string[]): string[] | null {
  // An option, named as typed: it was read as a country ("--FILE").
  const option = args.find((a) => a.startsWith('-'));
  if (option !== undefined) {
    say(`option "${option}": expected country codes only (the account and the rates file are environment values: ${WHERE_HELP})`);
    say(USAGE);
    return null;
  }
  const countries = args.map((c) => c.toUpperCase());
  const bad = countries.filter((c) => !/^[A-Z]{2}$/.test(c));
  if (countries.length && !bad.length) return countries;
  if (bad.length) say(`country: expected ISO 3166 alpha-2 codes such as US, got ${bad.map((c) => `"${c}"`).join(', ')}`);
  say(USAGE);
  return null;
}

/** Twilio's account and the pricing service, from the environment, or null (said). */
function account(env: NodeJS.ProcessEnv): Account | null {
  const sid = env.TWILIO_ACCOUNT_SID;
  const token = env.TWILIO_AUTH_TOKEN;
  if (!sid || !token) return (say('TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN must be set'), null);
  const baseUrl = pricingUrl(env.TWILIO_PRICING_URL || 'https://pricing.twilio.com');
  if (baseUrl) return { baseUrl, sid, token };
  say(
    'TWILIO_PRICING_URL: expected an http or https URL without user:password in it (the account is TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN)',
  );
  return null;
}

/** Each country's rates, said as they come; a country that failed is said and left out. */
async function fetchRates(countries: string[], from: Account): Promise<{ fetched: Rates; failed: number }> {
  const fetched: Rates = {};
  let failed = 0;
  for (const iso of countries) {
    try {
      fetched[iso] = await fetchCountryRates(iso, from);
      const r = inboundRate(fetched, iso);
      process.stdout.write(
        `${iso}: inbound ${r ? `${r.perMinute} ${r.unit}/min` : 'none'}; ${fetched[iso].outbound.length} outbound prefix price(s)\n`,
      );
    } catch (error) {
      failed++;
      say((error as Error).message);
    }
  }
  return { fetched, failed };
}

/** Whether `action` ran; its error said otherwise (a rates file that cannot be read or written). */
function done(action: () => void): boolean {
  try {
    action();
    return true;
  } catch (error) {
    say((error as Error).message);
    return false;
  }
}

async function main(): Promise<number> {
  // Before the account is looked for: help needs none, and fetches and writes nothing.
  if (asksForHelp(process.argv.slice(2))) return (process.stdout.write(`${USAGE}\n${WHERE}\n`), 0);
  const countries = countriesAsked(process.argv.slice(2));
  const from = countries && account(process.env);
  if (!countries || !from) return 2;
  // An empty value counts as unset, as the gateway reads it (env.ts): `VAR=` in an env file.
  const file = process.env.TELEPHONY_RATES_FILE || DEFAULT_RATES_FILE;
  // A file that cannot be read is left as it is: it holds the rates of countries fetched before, which the operator may want back.
  if (!done(() => readRates(file))) return 1;
  const { fetched, failed } = await fetchRates(countries, from);
  // Nothing fetched, nothing written: a first run with the service away left an empty `{}` file,
  // and "rates written" under every country's failure.
  if (failed === countries.length) return (say(`no country's rates fetched: ${file} not written`), 1);
  // Onto the file as it is now: a second run, for other countries, may have written it while this one
  // fetched, and writing what was read at the start put its countries back as they were (lost).
  if (!done(() => writeRates(file, { ...readRates(file), ...fetched }))) return 1;
  process.stdout.write(`rates written to ${file}\n`);
  return failed ? 1 : 0;
}

/**
 * The pricing service's URL, or null: checked before anything is fetched, since fetch refuses a URL
 * with user:password in it and its refusal quotes the URL, password and all, once per country.
 */
function pricingUrl(value: string): string | null {
  const u = URL.canParse(value) ? new URL(value) : null;
  return u && ['http:', 'https:'].includes(u.protocol) && !u.username && !u.password ? value : null;
}

main().then((code) => (process.exitCode = code));

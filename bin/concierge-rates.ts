/** `npm run concierge:rates -- US GB …`: per-country telephony rates from Twilio's pricing API into the rates file. */
import { DEFAULT_RATES_FILE, fetchCountryRates, inboundRate, readRates, writeRates } from '../gateway/src/voice/rates';

async function main(): Promise<number> {
  const countries = process.argv.slice(2).map((c) => c.toUpperCase());
  // Checked before anything is fetched or written: a typo is a usage error, not a half-done run.
  const bad = countries.filter((c) => !/^[A-Z]{2}$/.test(c));
  if (!countries.length || bad.length) {
    if (bad.length)
      process.stderr.write(`country: expected ISO 3166 alpha-2 codes such as US, got ${bad.map((c) => `"${c}"`).join(', ')}\n`);
    process.stderr.write('usage: npm run concierge:rates -- US GB ...\n');
    return 2;
  }
  const sid = process.env.TWILIO_ACCOUNT_SID;
  const token = process.env.TWILIO_AUTH_TOKEN;
  if (!sid || !token) {
    process.stderr.write('TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN must be set\n');
    return 2;
  }
  const baseUrl = pricingUrl(process.env.TWILIO_PRICING_URL || 'https://pricing.twilio.com');
  if (!baseUrl) {
    process.stderr.write(
      'TWILIO_PRICING_URL: expected an http or https URL without user:password in it (the account is TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN)\n',
    );
    return 2;
  }
  // An empty value counts as unset, as the gateway reads it (env.ts): `VAR=` in an env file.
  const file = process.env.TELEPHONY_RATES_FILE || DEFAULT_RATES_FILE;
  let rates: ReturnType<typeof readRates>;
  try {
    rates = readRates(file);
  } catch (error) {
    // Left as it is: it holds the rates of countries fetched before, which the operator may want back.
    process.stderr.write(`${(error as Error).message}\n`);
    return 1;
  }
  let failed = 0;
  const fetched: typeof rates = {};
  for (const iso of countries) {
    try {
      rates[iso] = fetched[iso] = await fetchCountryRates(iso, { baseUrl, sid, token });
      const r = inboundRate(rates, iso);
      process.stdout.write(
        `${iso}: inbound ${r ? `${r.perMinute} ${r.unit}/min` : 'none'}; ${rates[iso].outbound.length} outbound prefix price(s)\n`,
      );
    } catch (error) {
      failed++;
      process.stderr.write(`${(error as Error).message}\n`);
    }
  }
  // Nothing fetched, nothing written: a first run with the service away left an empty `{}` file,
  // and "rates written" under every country's failure.
  if (failed === countries.length) {
    process.stderr.write(`no country's rates fetched: ${file} not written\n`);
    return 1;
  }
  // Onto the file as it is now: a second run, for other countries, may have written it while this one
  // fetched, and writing what was read at the start put its countries back as they were (lost).
  try {
    writeRates(file, { ...readRates(file), ...fetched });
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n`);
    return 1;
  }
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

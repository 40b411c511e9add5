// Telephony prices from the pricing service: only a price is a price (money is never made up); the rates file.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from '../children';
import { refusedUrl } from '../gateway/fake-provider';
import { fetchCountryRates, readRates, writeRates } from '../../gateway/src/voice/rates';

const root = join(import.meta.dirname, '..', '..');

/** The pricing service answering `local`'s current price as `price` (Twilio sends prices as strings). */
let pricing: Server;
let url = '';
let price: unknown = '0.0085';
beforeAll(async () => {
  pricing = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        price_unit: 'USD',
        inbound_call_prices: [{ number_type: 'local', base_price: '0.0085', current_price: price }],
        outbound_prefix_prices: [],
      }),
    );
  });
  await new Promise<void>((r) => pricing.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(pricing.address() as AddressInfo).port}`;
});
afterAll(() => pricing.close());

const fetchUs = () => fetchCountryRates('US', { baseUrl: url, sid: 'ACsid', token: 'tok' });

describe('telephony prices', () => {
  it('takes decimal text and numbers', async () => {
    for (const [sent, read] of [
      ['0.0220', 0.022],
      ['1e-3', 0.001],
      [0.5, 0.5],
      ['0', 0],
    ] as const) {
      price = sent;
      expect((await fetchUs()).inbound.local).toBe(read);
    }
  });

  it('refuses empty or blank text, hex, a sign and Infinity as prices, naming where (they were read as 0, 16, -1 …)', async () => {
    for (const sent of ['', ' ', '0x10', '-1', '+1', 'Infinity', '1_000', true]) {
      price = sent;
      await expect(fetchUs(), JSON.stringify(sent)).rejects.toThrow(
        `US inbound_call_prices[0]: expected a price, got ${JSON.stringify(sent)}`,
      );
    }
  });
});

describe('the pricing service away', () => {
  // Each country failed with "fetch failed" alone: neither the country nor the service named.
  it('names the country, the service and why when it cannot be reached, or answers what is not JSON', async () => {
    const away = (await refusedUrl()).replace(/\/v1$/, '');
    await expect(fetchCountryRates('GB', { baseUrl: away, sid: 'ACsid', token: 'tok' })).rejects.toThrow(
      new RegExp(`^GB: pricing service ${away} not reached \\(.*ECONNREFUSED`),
    );
    const html = createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html>maintenance</html>'));
    await new Promise<void>((r) => html.listen(0, '127.0.0.1', r));
    try {
      const baseUrl = `http://127.0.0.1:${(html.address() as AddressInfo).port}`;
      await expect(fetchCountryRates('GB', { baseUrl, sid: 'ACsid', token: 'tok' })).rejects.toThrow(
        /^GB: pricing service answered what is not JSON \(/,
      );
    } finally {
      html.close();
    }
  });
});

describe('the rates file', () => {
  it('npm run concierge:rates on a rates file cut short: one line naming it, exit 1, the file left for the operator', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rates-'));
    const file = join(dir, 'rates.json');
    writeFileSync(file, '{"GB": {"price_unit": "GBP", "inbo');
    // Synchronous is fine: the file is refused before the pricing service is asked.
    const r = spawnSync(join(root, 'node_modules', '.bin', 'tsx'), ['bin/concierge-rates.ts', 'US'], {
      cwd: root,
      encoding: 'utf8',
      env: { ...process.env, TWILIO_PRICING_URL: url, TWILIO_ACCOUNT_SID: 'ACsid', TWILIO_AUTH_TOKEN: 'tok', TELEPHONY_RATES_FILE: file },
    });
    expect(r.status).toBe(1);
    expect(r.stderr.trim().split('\n')).toEqual([expect.stringContaining(`${file}: not a rates file (`)]);
    expect(readFileSync(file, 'utf8')).toBe('{"GB": {"price_unit": "GBP", "inbo');
    rmSync(dir, { recursive: true, force: true });
  });

  it('npm run concierge:rates with a code that is not alpha-2 is a usage error before anything is fetched or written', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rates-'));
    const file = join(dir, 'rates.json');
    const r = spawnSync(join(root, 'node_modules', '.bin', 'tsx'), ['bin/concierge-rates.ts', 'US', 'usa', 'U1'], {
      cwd: root,
      encoding: 'utf8',
      env: { ...process.env, TWILIO_PRICING_URL: url, TWILIO_ACCOUNT_SID: 'ACsid', TWILIO_AUTH_TOKEN: 'tok', TELEPHONY_RATES_FILE: file },
    });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('country: expected ISO 3166 alpha-2 codes such as US, got "USA", "U1"');
    expect(r.stdout).toBe('');
    expect(readdirSync(dir)).toEqual([]);
    rmSync(dir, { recursive: true, force: true });
  });

  // An option was read as a country: `--file rates.json` was said as "--FILE", "RATES.JSON", not as an option.
  it('npm run concierge:rates with an option is a usage error naming it as typed and where the settings are, before anything is fetched or written', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rates-'));
    const file = join(dir, 'rates.json');
    const r = spawnSync(join(root, 'node_modules', '.bin', 'tsx'), ['bin/concierge-rates.ts', 'US', '--file', 'x.json'], {
      cwd: root,
      encoding: 'utf8',
      env: { ...process.env, TWILIO_PRICING_URL: url, TWILIO_ACCOUNT_SID: 'ACsid', TWILIO_AUTH_TOKEN: 'tok', TELEPHONY_RATES_FILE: file },
    });
    expect([r.status, r.stdout]).toEqual([2, '']);
    expect(r.stderr.split('\n')[0]).toBe(
      'option "--file": expected country codes only (the account and the rates file are environment values: npm run concierge:rates -- --help)',
    );
    expect(readdirSync(dir)).toEqual([]);
    rmSync(dir, { recursive: true, force: true });
  });

  // fetch refuses a URL with user:password in it, quoting the URL: each country's line showed the password.
  it('npm run concierge:rates with a TWILIO_PRICING_URL that is no URL, or has user:password in it, names it before anything is fetched, never the password', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rates-'));
    const file = join(dir, 'rates.json');
    for (const bad of [url.replace('http://', 'http://ACsid:tok-secret@'), 'pricing.twilio.com']) {
      const r = spawnSync(join(root, 'node_modules', '.bin', 'tsx'), ['bin/concierge-rates.ts', 'US', 'GB'], {
        cwd: root,
        encoding: 'utf8',
        env: { ...process.env, TWILIO_PRICING_URL: bad, TWILIO_ACCOUNT_SID: 'ACsid', TWILIO_AUTH_TOKEN: 'tok', TELEPHONY_RATES_FILE: file },
      });
      expect([r.status, r.stdout, r.stderr]).toEqual([
        2,
        '',
        'TWILIO_PRICING_URL: expected an http or https URL without user:password in it (the account is TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN)\n',
      ]);
    }
    expect(readdirSync(dir)).toEqual([]);
    rmSync(dir, { recursive: true, force: true });
  });

  // A first run with the service away wrote an empty `{}` rates file and said "rates written".
  it('npm run concierge:rates with no country fetched writes nothing and says so, exit 1', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rates-'));
    const file = join(dir, 'rates.json');
    const child = spawn(join(root, 'node_modules', '.bin', 'tsx'), [join(root, 'bin/concierge-rates.ts'), 'US', 'GB'], {
      cwd: root,
      env: {
        ...process.env,
        TWILIO_PRICING_URL: await refusedUrl(),
        TWILIO_ACCOUNT_SID: 'ACsid',
        TWILIO_AUTH_TOKEN: 'tok',
        TELEPHONY_RATES_FILE: file,
      },
    });
    let [out, err] = ['', ''];
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise((r) => child.on('exit', r));
    expect([code, out]).toEqual([1, '']);
    expect(err.trim().split('\n')).toEqual([
      expect.stringMatching(/^US: pricing service .* not reached/),
      expect.stringMatching(/^GB: pricing service .* not reached/),
      `no country's rates fetched: ${file} not written`,
    ]);
    expect(readdirSync(dir)).toEqual([]);
    rmSync(dir, { recursive: true, force: true });
  });

  // Each run wrote the file as it read it at its start with its own countries added: the run that
  // finished last put back the other's countries as they were (two runs, US and GB: only US stayed).
  it('two npm run concierge:rates at once, for different countries: the file keeps both', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rates-'));
    const file = join(dir, 'rates.json');
    let askedUs: () => void = () => {};
    const usAsked = new Promise<void>((r) => (askedUs = r));
    const heldUs: (() => void)[] = [];
    const body = JSON.stringify({
      price_unit: 'USD',
      inbound_call_prices: [{ number_type: 'local', base_price: '0.01', current_price: '0.01' }],
      outbound_prefix_prices: [],
    });
    const service = createServer((req, res) => {
      const answer = () => res.writeHead(200, { 'content-type': 'application/json' }).end(body);
      if (!req.url?.endsWith('/US')) return answer();
      heldUs.push(answer); // held until the GB run has written the file
      askedUs();
    });
    await new Promise<void>((r) => service.listen(0, '127.0.0.1', r));
    const env = {
      ...process.env,
      TWILIO_PRICING_URL: `http://127.0.0.1:${(service.address() as AddressInfo).port}`,
      TWILIO_ACCOUNT_SID: 'ACsid',
      TWILIO_AUTH_TOKEN: 'tok',
      TELEPHONY_RATES_FILE: file,
    };
    const ratesRun = (country: string) => {
      const child = spawn(join(root, 'node_modules', '.bin', 'tsx'), [join(root, 'bin/concierge-rates.ts'), country], { cwd: root, env });
      return new Promise((r) => child.on('exit', r));
    };
    const us = ratesRun('US');
    await usAsked;
    expect(await ratesRun('GB')).toBe(0);
    heldUs.forEach((answer) => answer());
    expect(await us).toBe(0);
    service.close();
    expect(Object.keys(readRates(file)).sort()).toEqual(['GB', 'US']);
    rmSync(dir, { recursive: true, force: true });
  });

  // The gateway counts an empty variable as unset (an env file's `TELEPHONY_RATES_FILE=`); this
  // command fetched every country, then died renaming its file to "" with a stack trace.
  it('npm run concierge:rates with TELEPHONY_RATES_FILE set empty writes the default file, as the gateway reads it', async () => {
    price = '0.0085';
    const dir = mkdtempSync(join(tmpdir(), 'rates-'));
    const child = spawn(join(root, 'node_modules', '.bin', 'tsx'), [join(root, 'bin/concierge-rates.ts'), 'US'], {
      cwd: dir,
      env: { ...process.env, TWILIO_PRICING_URL: url, TWILIO_ACCOUNT_SID: 'ACsid', TWILIO_AUTH_TOKEN: 'tok', TELEPHONY_RATES_FILE: '' },
    });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise((r) => child.on('exit', r));
    expect([code, err]).toEqual([0, '']);
    expect(readRates(join(dir, '.data', 'telephony-rates.json')).US.inbound.local).toBe(0.0085);
    rmSync(dir, { recursive: true, force: true });
  });

  it('writeRates replaces the file in one rename: a reader sees the old rates or the new, never half', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rates-'));
    const file = join(dir, 'rates.json');
    writeRates(file, {});
    const before = statSync(file).ino;
    writeRates(file, { US: { price_unit: 'USD', inbound: { local: 0.0085 }, outbound: [], fetched_at: '2026-11-27T00:00:00Z' } });
    expect(statSync(file).ino).not.toBe(before);
    expect(readRates(file).US.inbound.local).toBe(0.0085);
    expect(readdirSync(dir)).toEqual(['rates.json']);
    rmSync(dir, { recursive: true, force: true });
  });
});

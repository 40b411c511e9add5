// The voice concierge's wiring (voice/index.ts) through the whole stack, without Redis: what the
// endpoints answer and what the start-up log says when the concierge is off, unusable or on.
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createStack } from '../../gateway/src/stack';
import { captureLogger, listenStack } from '../gateway/harness';
import { filled } from './filled';

const dir = mkdtempSync(join(tmpdir(), 'voice-wiring-'));
const base = { METER_CSV_FILE: join(dir, 'e.csv'), SCOPES_FILE: join(dir, 'none.yaml'), CALLS_CSV_FILE: join(dir, 'calls.csv') };
const open: Array<{ stop: () => Promise<void> }> = [];
afterEach(async () => {
  for (const s of open.splice(0)) await s.stop();
});

async function up(env: NodeJS.ProcessEnv) {
  const logs: string[] = [];
  const h = await listenStack({ ...base, ...env }, { http: true, worker: false }, captureLogger(logs));
  open.push(h);
  const start = (token = 'v') =>
    fetch(`${h.url}/v1/voice/calls`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ call_id: 'w1', from: '+351900000000', at: '2026-11-23T10:00:00Z' }),
    });
  return { ...h, logs: () => logs.map((l) => JSON.parse(l).msg as string), start };
}

/** Set up for phone calls (the Twilio account, a public URL, the realtime key), the concierge aside. */
const PHONE = {
  PUBLIC_URL: 'https://voice.example.test',
  TWILIO_ACCOUNT_SID: 'AC1',
  TWILIO_AUTH_TOKEN: 'tw-secret',
  OPENAI_API_KEY: 'sk-x',
};

describe('voice wiring', () => {
  it('without VOICE_TOKEN the endpoints refuse everyone with 401 and nothing is loaded', async () => {
    const gw = await up({});
    expect((await gw.start()).status).toBe(401);
    expect(gw.logs().some((m) => /voice (concierge|endpoints)|lint problem/.test(m))).toBe(false);
  });

  it('a file that is not a configuration: 503 naming the reason, on every endpoint, and a warning at start', async () => {
    const file = join(dir, 'broken.json');
    writeFileSync(file, '{ not json');
    const gw = await up({ VOICE_TOKEN: 'v', CONCIERGE_FILE: file });
    const res = await gw.start();
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: string }).error).toBe(
      `voice endpoints unavailable: ${file} is not a valid configuration (1 problem(s); run npm run concierge:lint)`,
    );
    const workflow = await fetch(`${gw.url}/v1/workflow/function-called`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer v' },
      body: '{}',
    });
    expect(workflow.status).toBe(503);
    expect(gw.logs()).toContain(
      `voice endpoints answer 503: ${file} is not a valid configuration (1 problem(s); run npm run concierge:lint)`,
    );
  });

  // Outside production a file with lint problems is still loaded: one whose time zone Intl cannot use
  // answered every call 500, and business hours that do not parse stopped the whole gateway with a stack trace.
  it('a time zone or business hours the gateway cannot use: 503 naming the file, the gateway itself serving', async () => {
    for (const [name, change] of [
      ['zone', (c: ReturnType<typeof filled>) => (c.meta.timezone = 'Lisbon')],
      ['hours', (c: ReturnType<typeof filled>) => (c.meta.business_hours_local = 'weekdays 9-5')],
    ] as const) {
      const file = join(dir, `unusable-${name}.json`);
      const config = filled();
      change(config);
      writeFileSync(file, JSON.stringify(config));
      const gw = await up({ VOICE_TOKEN: 'v', CONCIERGE_FILE: file });
      const res = await gw.start();
      expect([name, res.status, ((await res.json()) as { error: string }).error]).toEqual([
        name,
        503,
        `voice endpoints unavailable: ${file} is not a valid configuration (1 problem(s); run npm run concierge:lint)`,
      ]);
    }
  });

  it('set up for phone calls with the concierge off: the start log and /twilio/* say why (503), not a bare 404', async () => {
    const twilio = (url: string) =>
      fetch(`${url}/twilio/voice`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: 'CallSid=CA1',
      });
    const noToken = await up(PHONE);
    const res = await twilio(noToken.url);
    expect(res.status).toBe(503);
    expect(await res.text()).toBe('phone bridge off: VOICE_TOKEN is not set (the voice concierge is off)');
    expect(noToken.logs()).toContain('phone bridge off: VOICE_TOKEN is not set (the voice concierge is off)');
    const file = join(dir, 'broken-phone.json');
    writeFileSync(file, '{ not json');
    const broken = await up({ ...PHONE, VOICE_TOKEN: 'v', CONCIERGE_FILE: file });
    expect((await twilio(broken.url)).status).toBe(503);
    expect(broken.logs()).toContain(
      `phone bridge off: ${file} is not a valid configuration (1 problem(s); run npm run concierge:lint) (the voice concierge is off)`,
    );
    expect(JSON.stringify(noToken.logs().concat(broken.logs()))).not.toMatch(/tw-secret|sk-x/);
  });

  it("the concierge file's path stays in the start log: /twilio/* answer anyone, unsigned, and do not name it", async () => {
    const file = join(dir, 'secret-place', 'broken-phone.json');
    mkdirSync(join(dir, 'secret-place'), { recursive: true });
    writeFileSync(file, '{ not json');
    const gw = await up({
      PUBLIC_URL: 'https://voice.example.test',
      TWILIO_AUTH_TOKEN: 'tw-secret',
      VOICE_TOKEN: 'v',
      CONCIERGE_FILE: file,
    });
    const res = await fetch(`${gw.url}/twilio/status`, { method: 'POST', body: new URLSearchParams({ CallSid: 'CA1' }) });
    expect(res.status).toBe(503);
    expect(await res.text()).toBe(
      'phone bridge off: the concierge file is not a valid configuration (the voice concierge is off; the start log names the file)',
    );
    expect(gw.logs()).toContain(
      `phone bridge off: ${file} is not a valid configuration (1 problem(s); run npm run concierge:lint) (the voice concierge is off)`,
    );
    // None of the phone's variables set: no bridge, as before (a bare 404).
    const plain = await up({ VOICE_TOKEN: 'v', CONCIERGE_FILE: file });
    expect((await fetch(`${plain.url}/twilio/voice`, { method: 'POST', body: 'CallSid=CA1' })).status).toBe(404);
    expect(plain.logs().some((m) => m.includes('phone bridge'))).toBe(false);
  });

  // A worker serves no /twilio/*: a phone line in its log sent the operator looking for a problem it does not have.
  it('npm run worker with the phone set up says nothing of a phone bridge, on or off', async () => {
    const file = join(dir, 'worker-phone.json');
    writeFileSync(file, JSON.stringify(filled()));
    for (const env of [PHONE, { ...PHONE, VOICE_TOKEN: 'v', CONCIERGE_FILE: file }]) {
      const logs: string[] = [];
      const stack = await createStack({ ...base, ...env }, captureLogger(logs), { http: false, worker: true });
      await stack.close();
      expect(logs.join('\n')).toContain('worker: running in this process');
      expect(logs.join('\n')).not.toContain('phone bridge');
    }
  });

  it('a usable file with lint problems runs outside production, with a warning; the in-process stores serve calls', async () => {
    const c = filled() as any;
    c.functions[0].webhook = 'http://hooks.example.com/book'; // not https: a lint problem, still usable
    const file = join(dir, 'trial.json');
    writeFileSync(file, JSON.stringify(c));
    const gw = await up({ VOICE_TOKEN: 'v', CONCIERGE_FILE: file });
    expect(gw.logs()).toContain(`${file}: 1 lint problem(s); fine for a trial, refused with NODE_ENV=production`);
    expect(gw.logs()).toContain(`voice concierge: ${file}`);
    expect(gw.stack.redis).toBeNull();
    expect(await (await gw.start()).json()).toMatchObject({ action: 'answer' });
    expect(await (await gw.start('wrong')).json()).toMatchObject({ error: expect.stringMatching(/^unauthorized/) });
  });
});

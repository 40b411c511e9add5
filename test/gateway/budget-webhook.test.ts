// The budget webhook as its sender and the operator see it: a provider name the map does not have.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { ADMIN, captureLogger, listenStack } from './harness';

let app: Awaited<ReturnType<typeof listenStack>> | undefined;
afterEach(async () => {
  await app?.stop();
  app = undefined;
});

const webhook = (url: string, body: unknown) =>
  fetch(`${url}/budget/webhook`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

// `OpenAI` from a billing alert where the map says `openai` answered 204 and paused nothing, with nothing logged.
it('a provider the map has no route of: 204 for the sender, paused nothing, and one warning naming it and the providers the map has', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'budget-webhook-'));
  const file = join(dir, 'routes.json');
  const route = (provider: string) => ({ provider, model: 'm', baseUrl: 'http://127.0.0.1:9/v1' });
  const cold = { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] };
  writeFileSync(file, JSON.stringify({ hot: [route('openai')], warm: [route('anthropic')], cold }));
  const logs: string[] = [];
  const env = { ROUTES_FILE: file, ADMIN_TOKEN: ADMIN, METER_CSV_FILE: join(dir, 'e.csv'), SCOPES_FILE: join(dir, 'none.yaml') };
  app = await listenStack(env, { http: true, worker: false }, captureLogger(logs));

  for (let i = 0; i < 3; i++) expect((await webhook(app.url, { provider: 'OpenAI', percentUsed: 95 })).status).toBe(204);
  expect(app.stack.pause.paused()).toBe(false);
  const warned = logs.map((l) => JSON.parse(l) as { level: number; msg: string }).filter((l) => l.msg.includes('budget webhook'));
  expect(warned).toHaveLength(1); // repeated by the sender: said once, the rest counted
  expect(warned[0].level).toBe(40);
  expect(warned[0].msg).toContain(
    'budget webhook for provider "OpenAI", which the routing map has no route of (openai, anthropic): nothing paused; the budget pause is for openai',
  );
  // A provider of the map that is not the capped one is what the docs say: no pause, nothing to warn of.
  expect((await webhook(app.url, { provider: 'anthropic', percentUsed: 95 })).status).toBe(204);
  expect(logs.filter((l) => l.includes('budget webhook'))).toHaveLength(1);
});

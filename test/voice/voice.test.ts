// The voice concierge: configuration lint, the spend guard (its rules, step by step),
// intent matching, and the /v1/voice/* endpoints through HTTP with a real Redis.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createStack, type Stack } from '../../gateway/src/stack';
import { lintConcierge, loadConcierge } from '../../gateway/src/voice/config';
import { matchIntent } from '../../gateway/src/voice/intents';
import {
  applyEvent,
  estUsdFromDurations,
  guardConfig,
  newCall,
  unpricedTextWarning,
  usageCost,
  type VoiceEvent,
} from '../../gateway/src/voice/spend-guard';
import { captureLogger, listenStack } from '../gateway/harness';
import type { CallRecord } from '../../schema/call-record';
import { filled, template } from './filled';
import { TEST_REDIS_URL } from '../redis-db';

const root = join(import.meta.dirname, '..', '..');

describe('concierge.json and its lint', () => {
  it('the template lists every placeholder; a filled copy is clean', () => {
    const problems = lintConcierge(template());
    expect(problems.length).toBeGreaterThanOrEqual(20);
    expect(problems.every((p) => /placeholder <[^>]+> must be replaced/.test(p.message))).toBe(true);
    expect(problems.map((p) => p.path)).toContain('$.functions[5].dial');
    expect(lintConcierge(filled())).toEqual([]);
    const t = template();
    expect([
      t.guardrails.max_turns,
      t.guardrails.min_confidence,
      t.guardrails.latency_budget_s,
      t.spend_guard.per_call_usd_cap,
      t.consent.max_retries,
    ]).toEqual([8, 0.6, 1.8, 0.35, 1]);
    expect(t.functions.map((f: { name: string }) => f.name)).toEqual([
      'book_slot',
      'reschedule_slot',
      'create_lead',
      'lookup_pricing_page',
      'route_to_voicemail',
      'escalate_to_human',
    ]);
    expect(t.escalation.rules).toHaveLength(4);
  });

  it('finds what is wrong, one line per problem with its JSON path', () => {
    const c = filled() as any;
    c.meta.colour = 'blue';
    delete c.consent.max_retries;
    c.guardrails.min_confidence = 1.4;
    c.guardrails.max_turns = 0;
    c.spend_guard.per_call_usd_cap = -1;
    c.intents[0].on_match.call = 'book_table';
    c.functions[3].webhook = 'https://x.example.com';
    delete c.functions[4].webhook;
    c.functions[0].webhook = 'http://hooks.example.com/book';
    c.functions[1].webhook = 'https://hook:wh-s3cret@hooks.example.com/reschedule';
    c.workflow.dlq_url = 'https://dlq:dl-s3cret@hooks.example.com/dlq';
    c.functions[5].dial = '211 234 567';
    c.meta.timezone = 'Lisbon';
    c.meta.business_hours_local = 'weekdays 9 to 5';
    c.meta.primary_language = 'portuguese!';
    c.escalation.rules[0].threshold = 6;
    c.meta.model = 'm'.repeat(1001);
    const lines = lintConcierge(c).map((p) => `${p.path}: ${p.message}`);
    const expectLine = (re: RegExp) =>
      expect(
        lines.some((l) => re.test(l)),
        `${re} in\n${lines.join('\n')}`,
      ).toBe(true);
    expectLine(/^\$\.meta\.colour: unknown field$/);
    expectLine(/^\$\.consent\.max_retries: missing field$/);
    expectLine(/^\$\.guardrails\.min_confidence: /);
    expectLine(/^\$\.guardrails\.max_turns: /);
    expectLine(/^\$\.spend_guard\.per_call_usd_cap: /);
    expectLine(/^\$\.intents\[0\]\.on_match\.call: calls book_table, which is not in functions$/);
    expectLine(/^\$\.functions\[3\]: expected exactly one target .* found webhook and static_url$/);
    expectLine(/^\$\.functions\[4\]: expected exactly one target .* found none$/);
    expectLine(/^\$\.functions\[0\]\.webhook: expected an https URL$/);
    // fetch refuses a URL with user:password in it, quoting it whole wherever the failure goes.
    expectLine(/^\$\.functions\[1\]\.webhook: expected an https URL without user:password in it \(fetch refuses one\)$/);
    expectLine(/^\$\.workflow\.dlq_url: expected an https URL without user:password in it \(fetch refuses one\)$/);
    expect(lines.join('\n')).not.toMatch(/wh-s3cret|dl-s3cret/);
    expectLine(/^\$\.functions\[5\]\.dial: expected a phone number in E\.164/);
    expectLine(/^\$\.meta\.timezone: expected an IANA time zone/);
    expectLine(/^\$\.meta\.business_hours_local: expected business hours/);
    expectLine(/^\$\.meta\.primary_language: expected a BCP 47 language tag/);
    expectLine(/^\$\.escalation\.rules\[0\]\.threshold: expected a confidence from 0 to 1$/);
    expectLine(/^\$\.meta\.model: expected at most 1000 characters \(the meter's limit\)$/);
  });

  it('a function named twice, or an argument named twice, is a problem naming it (of two functions with one name, only the first could ever run)', () => {
    const c = filled() as any;
    c.functions.push({ ...c.functions[0] });
    c.functions[1].args = [...c.functions[1].args, c.functions[1].args[0]];
    expect(lintConcierge(c).map((p) => `${p.path}: ${p.message}`)).toEqual([
      `$.functions[1].args[${c.functions[1].args.length - 1}]: argument ${c.functions[1].args[0]} is named twice`,
      `$.functions[${c.functions.length - 1}].name: function ${c.functions[0].name} is defined twice`,
    ]);
  });

  it('a function name longer than the 64 characters the Realtime API takes for a tool is a problem naming it (every call would fail to start)', () => {
    const c = filled() as any;
    const name = `book_${'a'.repeat(60)}`; // 65 characters
    c.functions[0].name = name;
    c.intents[1].on_match.call = name; // the book intent
    expect(lintConcierge(c).map((p) => `${p.path}: ${p.message}`)).toEqual([
      '$.functions[0].name: expected at most 64 characters (the Realtime API refuses a longer tool name)',
    ]);
    c.functions[0].name = c.intents[1].on_match.call = name.slice(0, 64);
    expect(lintConcierge(c)).toEqual([]);
  });

  it('a consent line, a line to say or a question of spaces alone is a problem naming it: the caller would be told nothing (not that an AI answers, nor that the call is recorded)', () => {
    const c = filled() as any;
    c.consent.opening_line = '   ';
    c.intents[3].on_match.say = '\n';
    c.intents[2].on_match.ask[1] = '';
    expect(lintConcierge(c).map((p) => `${p.path}: ${p.message}`)).toEqual([
      '$.consent.opening_line: expected text, not empty nor spaces alone',
      '$.intents[2].on_match.ask[1]: expected text, not empty nor spaces alone',
      '$.intents[3].on_match.say: expected text, not empty nor spaces alone',
    ]);
  });

  it('an escalation rule whose trigger an earlier rule has, or whose reason is not the one its trigger is recorded with, is a problem naming it', () => {
    const c = filled() as any;
    // Added below the template's rule: the guard takes the first rule of a trigger, so this stricter one was never used.
    c.escalation.rules.push({
      trigger: 'confidence_below',
      threshold: 0.8,
      repeat: 1,
      action: 'escalate_to_human',
      reason: 'low_confidence',
    });
    c.escalation.rules[1].reason = 'caller_request'; // frustration_detected: its escalations are recorded as frustration_markers
    expect(lintConcierge(c).map((p) => `${p.path}: ${p.message}`)).toEqual([
      '$.escalation.rules[1].reason: expected frustration_markers, the reason escalations of frustration_detected are recorded with',
      `$.escalation.rules[${c.escalation.rules.length - 1}].trigger: confidence_below has a rule already (rules[0]); only the first rule of a trigger is used`,
    ]);
  });

  it('a turn cap that is a fraction is a problem: turns are whole, and 0.5 would escalate every call after its first response', () => {
    const c = filled() as any;
    c.escalation.rules.find((r: any) => r.trigger === 'turn_cap_reached').threshold = 0.5;
    const i = c.escalation.rules.findIndex((r: any) => r.trigger === 'turn_cap_reached');
    expect(lintConcierge(c).map((p) => `${p.path}: ${p.message}`)).toEqual([
      `$.escalation.rules[${i}].threshold: expected a whole number of turns`,
    ]);
  });

  it('a latency budget given in milliseconds (1800 for 1.8 s), which would never fire, is a problem saying so', () => {
    const c = filled() as any;
    const i = c.escalation.rules.findIndex((r: any) => r.trigger === 'latency_over_budget');
    c.escalation.rules[i].threshold = 1800;
    c.guardrails.latency_budget_s = 1800;
    const hint = 'expected seconds, at most 60: 1800 never fires (in milliseconds? 1800 ms is 1.8)';
    expect(lintConcierge(c).map((p) => `${p.path}: ${p.message}`)).toEqual([
      `$.guardrails.latency_budget_s: ${hint}`,
      `$.escalation.rules[${i}].threshold: ${hint}`,
    ]);
    c.escalation.rules[i].threshold = 45; // seconds, if slow: allowed
    c.guardrails.latency_budget_s = 2.5;
    expect(lintConcierge(c)).toEqual([]);
  });

  it('a callback window beyond a week is a problem (a huge one made the pricing deflection fail after its text was sent)', () => {
    const c = filled() as any;
    const i = c.intents.findIndex((x: any) => x.id === 'pricing_deflection');
    c.intents[i].on_match.callback_minutes_window = 1e11;
    expect(lintConcierge(c).map((p) => `${p.path}: ${p.message}`)).toEqual([
      `$.intents[${i}].on_match.callback_minutes_window: expected at most 10080 minutes (a week)`,
    ]);
    c.intents[i].on_match.callback_minutes_window = 10_080;
    expect(lintConcierge(c)).toEqual([]);
  });

  it('business hours that do not parse are refused saying why: a range past midnight, a day it does not know', () => {
    const c = filled() as any;
    const said = (hours: string) => {
      c.meta.business_hours_local = hours;
      return lintConcierge(c).map((p) => `${p.path}: ${p.message}`);
    };
    expect(said('Fri-Sat 18:00-02:00')).toEqual([
      '$.meta.business_hours_local: expected business hours such as "Mon-Fri 08:00-18:00; Sat 09:00-13:00": "Fri-Sat 18:00-02:00": the range must end after it starts (hours past midnight are two segments: "Fri 18:00-24:00; Sat 00:00-02:00")',
    ]);
    expect(said('Mo-Fr 08:00-18:00')).toEqual([
      '$.meta.business_hours_local: expected business hours such as "Mon-Fri 08:00-18:00; Sat 09:00-13:00": "Mo-Fr 08:00-18:00": unknown day in "Mo-Fr"',
    ]);
  });

  it('an intent without on_match.call is a problem when the function it would then call is not there', () => {
    const c = filled() as any;
    // Each falls back on a function the template has: no problem.
    delete c.intents[2].on_match.call;
    delete c.intents[4].on_match.call;
    expect(lintConcierge(c)).toEqual([]);
    // Without it, every lead failed, and every voicemail recorded after hours was lost (logged only).
    c.functions = c.functions.filter((f: { name: string }) => f.name !== 'create_lead' && f.name !== 'route_to_voicemail');
    // The model was told to call "undefined" to book.
    delete c.intents[1].on_match.call;
    expect(lintConcierge(c).map((p) => `${p.path}: ${p.message}`)).toEqual([
      '$.intents[1].on_match.call: missing field (the book intent calls a function)',
      '$.intents[2].on_match.call: missing field: without it the qualify intent calls create_lead, which is not in functions',
      '$.intents[4].on_match.call: missing field: without it the voicemail intent calls route_to_voicemail, which is not in functions',
    ]);
  });

  it('a function whose webhook is a back-office action (?action=book_slot) must declare the arguments that action cannot do without', () => {
    const c = filled() as any;
    const meter = 'https://script.google.com/macros/s/AKfy/exec?token=t0k&action=';
    for (const f of c.functions) if (f.webhook) f.webhook = `${meter}${f.name}`;
    // The template's arguments: clean (recording_url is the voice server's to add).
    expect(lintConcierge(c)).toEqual([]);
    // Trimmed by an operator: the bridge passes on only these, and the back office refused every booking.
    c.functions[0].args = ['name', 'date', 'time', 'notes'];
    c.functions[2].args = ['name', 'email'];
    expect(lintConcierge(c).map((p) => `${p.path}: ${p.message}`)).toEqual([
      "$.functions[0].args: expected phone, service among the arguments: the back office's book_slot refuses a call without them, and the phone bridge passes on only the arguments declared",
      "$.functions[2].args: expected phone among the arguments: the back office's create_lead refuses a call without it, and the phone bridge passes on only the arguments declared",
    ]);
  });

  it('a frustration_detected rule without markers, or with none in its list, is a problem naming them: it would never escalate', () => {
    const c = filled() as any;
    delete c.escalation.rules[1].markers;
    expect(lintConcierge(c).map((p) => `${p.path}: ${p.message}`)).toEqual([
      '$.escalation.rules[1].markers: expected at least one phrase: a frustration_detected rule without markers never escalates a call',
    ]);
    c.escalation.rules[1].markers = [];
    expect(lintConcierge(c).map((p) => p.path)).toEqual(['$.escalation.rules[1].markers']);
    // A person-asking rule without markers keeps the built-in phrases: no problem.
    c.escalation.rules[1] = { trigger: 'caller_request', action: 'escalate_to_human', reason: 'caller_request' };
    expect(lintConcierge(c)).toEqual([]);
  });

  it('spend_guard.audio_in_cached_per_million is optional: a price > 0 is accepted, anything else named', () => {
    const c = filled() as any;
    c.spend_guard.audio_in_cached_per_million = 0.3;
    expect(lintConcierge(c)).toEqual([]);
    c.spend_guard.audio_in_cached_per_million = -1;
    expect(lintConcierge(c).map((p) => p.path)).toEqual(['$.spend_guard.audio_in_cached_per_million']);
  });

  it('spend_guard text prices are optional, set in and out together; a cached text price needs the text input price', () => {
    const c = filled() as any;
    c.spend_guard.text_in_cached_per_million = 0.06;
    expect(lintConcierge(c)).toEqual([]);
    delete c.spend_guard.text_out_per_million;
    expect(lintConcierge(c).map((p) => p.path)).toEqual(['$.spend_guard.text_out_per_million']);
    delete c.spend_guard.text_in_per_million;
    expect(lintConcierge(c).map((p) => p.path)).toEqual(['$.spend_guard.text_in_per_million']);
    delete c.spend_guard.text_in_cached_per_million;
    expect(lintConcierge(c)).toEqual([]); // none: the text tokens go unpriced, as the startup log says
    expect(unpricedTextWarning(c.spend_guard)).toMatch(/text_in_per_million or text_out_per_million: .* go unpriced/);
    expect(unpricedTextWarning(filled().spend_guard)).toBeNull();
    c.spend_guard.text_out_per_million = 0;
    c.spend_guard.text_in_per_million = 0.6;
    expect(lintConcierge(c).map((p) => p.path)).toEqual(['$.spend_guard.text_out_per_million']);
  });

  it('a file holding JSON that is not an object is one problem at $, not a crash', () => {
    for (const raw of [null, 42, 'text', []]) {
      const problems = lintConcierge(raw);
      expect(problems.length).toBeGreaterThanOrEqual(1);
      expect(problems[0]).toMatchObject({ path: '$', message: expect.stringMatching(/expected object/) });
    }
  });

  it('npm run concierge:lint exits 1 on the template and 0 on a filled file', () => {
    const tsx = join(root, 'node_modules', '.bin', 'tsx');
    const bad = spawnSync(tsx, ['bin/concierge-lint.ts'], { cwd: root, encoding: 'utf8' });
    expect(bad.status).toBe(1);
    expect(bad.stdout.split('\n')[0]).toBe('$.meta.model: placeholder <REALTIME_MODEL> must be replaced');
    const file = join(mkdtempSync(join(tmpdir(), 'concierge-')), 'c.json');
    writeFileSync(file, JSON.stringify(filled()));
    const good = spawnSync(tsx, ['bin/concierge-lint.ts', file], { cwd: root, encoding: 'utf8' });
    expect(good.status).toBe(0);
    // Saved by Windows PowerShell (UTF-8 with a byte-order mark): "not readable JSON", about a character no editor shows.
    writeFileSync(file, `\uFEFF${JSON.stringify(filled())}`);
    const marked = spawnSync(tsx, ['bin/concierge-lint.ts', file], { cwd: root, encoding: 'utf8' });
    expect([marked.status, marked.stdout]).toEqual([0, `${file}: clean\n`]);
    expect(loadConcierge(file).config?.meta.model).toBe(filled().meta.model); // and the gateway loads it
    // An empty CONCIERGE_FILE counts as unset, as the gateway reads it: it was opened as the file "".
    const empty = spawnSync(tsx, ['bin/concierge-lint.ts'], { cwd: root, encoding: 'utf8', env: { ...process.env, CONCIERGE_FILE: '' } });
    expect([empty.status, empty.stdout.split('\n')[0]]).toEqual([1, '$.meta.model: placeholder <REALTIME_MODEL> must be replaced']);
    // The drill's spelling linted a file named "--config"; a second file went unread (and the first passed).
    for (const args of [
      ['--config', file],
      [file, 'concierge.json'],
    ]) {
      const usage = spawnSync(tsx, ['bin/concierge-lint.ts', ...args], { cwd: root, encoding: 'utf8' });
      expect([usage.status, usage.stdout], args.join(' ')).toEqual([2, '']);
      expect(usage.stderr).toMatch(
        /^usage: npm run concierge:lint -- \[file\] \(one file; default CONCIERGE_FILE or concierge\.json\), got "/,
      );
    }
  });

  // JSON.parse keeps the last of a key written twice: an operator's first business_hours was dropped unsaid.
  it('npm run concierge:lint names a key written twice, with its JSON path, and exits 1', () => {
    const tsx = join(root, 'node_modules', '.bin', 'tsx');
    const file = join(mkdtempSync(join(tmpdir(), 'concierge-')), 'c.json');
    const text = JSON.stringify(filled(), null, 2);
    writeFileSync(file, text.replace('"meta": {', '"meta": {\n    "timezone": "Europe/Paris",'));
    const twice = spawnSync(tsx, ['bin/concierge-lint.ts', file], { cwd: root, encoding: 'utf8' });
    expect([twice.status, twice.stdout]).toEqual([
      1,
      '$.meta.timezone: "timezone" is written twice in one object (only the last would count)\n',
    ]);
  });
});

describe('intent matching', () => {
  const intents = filled().intents;
  it('matches whole words and phrases, case-insensitively; otherwise unknown', () => {
    expect(matchIntent("Hi, I'd like to BOOK a table", intents)).toBe('book');
    expect(matchIntent('can we change time please', intents)).toBe('reschedule');
    expect(matchIntent('How much is it?', intents)).toBe('pricing_deflection');
    expect(matchIntent('my notebook broke', intents)).toBe('unknown');
    expect(matchIntent('rebooking', intents)).toBe('unknown');
  });

  it('the template’s reschedule triggers match: a caller moving an appointment is not taken for a booking', () => {
    // Book came first, with "appointment": "move appointment" never matched, and every such caller was a booking.
    expect(matchIntent('I need to move appointment to Friday', intents)).toBe('reschedule');
    expect(matchIntent('Can I reschedule my appointment?', intents)).toBe('reschedule');
    expect(matchIntent('I would like to book an appointment', intents)).toBe('book');
  });
});

describe('spend guard', () => {
  const cfg = guardConfig(filled()); // audio in 10 $/M, out 20 $/M, cap 0.35, 8 turns, 1.8 s
  const run = (events: VoiceEvent[], state = newCall()) => {
    for (const e of events) applyEvent(state, e, cfg);
    return state;
  };

  it('audio frames add their duration; empty frames are refused', () => {
    const s = run([
      { type: 'user.audio_frame', ms: 20 },
      { type: 'user.audio_frame', ms: 30 },
      { type: 'assistant.audio_frame', ms: 40 },
    ]);
    expect([s.inputMs, s.outputMs]).toEqual([50, 40]);
    expect(() => applyEvent(s, { type: 'user.audio_frame', ms: 0 }, cfg)).toThrow(
      /user\.audio_frame\.ms: expected a duration in milliseconds > 0/,
    );
    expect(() => applyEvent(s, { type: 'assistant.audio_frame', ms: -5 }, cfg)).toThrow(/> 0/);
  });

  it('estimates cost as inputMs/100 and outputMs/50 tokens at the per-million prices', () => {
    const s = run([
      { type: 'user.audio_frame', ms: 60_000 },
      { type: 'assistant.audio_frame', ms: 30_000 },
      { type: 'assistant.response.done' },
    ]);
    // 600 input tokens x 10/1e6 + 600 output tokens x 20/1e6 = 0.006 + 0.012
    expect(s.estUsd).toBeCloseTo(0.018, 12);
    expect(estUsdFromDurations(s, cfg)).toBeCloseTo(0.018, 12);
    expect(s.turns).toBe(1);
  });

  it('bills from the reported usage when response.done carries it, keeping the estimate beside it', () => {
    const s = run([
      { type: 'user.audio_frame', ms: 1000 },
      {
        type: 'assistant.response.done',
        usage: { input_token_details: { audio_tokens: 5000 }, output_token_details: { audio_tokens: 1000 } },
      },
      {
        type: 'assistant.response.done',
        usage: { input_token_details: { audio_tokens: 9000 }, output_token_details: { audio_tokens: 500 } },
      },
    ]);
    expect(s.billedUsd).toBeCloseTo((14_000 * 10 + 1500 * 20) / 1e6, 12);
    expect(s.estUsd).toBe(s.billedUsd);
    expect(s.estUsdFromDurations).toBeCloseTo((10 * 10) / 1e6, 12);
    expect(s.estUsdFromDurations).toBeLessThan(s.estUsd);
  });

  it("bills the usage's text tokens at the text prices (cached text at its own), so they count toward the per-call cap", () => {
    const c = filled(); // text in 0.6 $/M, out 2.4 $/M
    c.spend_guard.text_in_cached_per_million = 0.06;
    c.spend_guard.per_call_usd_cap = 0.004;
    const g = guardConfig(c);
    // The instructions and the conversation's text, re-read as input (4,000 of them cached), and a few words said.
    const usage = {
      input_token_details: { audio_tokens: 0, text_tokens: 10_000, cached_tokens_details: { text_tokens: 4000 } },
      output_token_details: { audio_tokens: 5, text_tokens: 100 },
    };
    const usd = (5 * 20 + 6000 * 0.6 + 4000 * 0.06 + 100 * 2.4) / 1e6; // 0.00418: the audio alone is 0.0001
    expect(usageCost(usage, g)).toEqual({ usd: expect.closeTo(usd, 12), unpricedTextTokens: 0 });
    const s = applyEvent(newCall(), { type: 'assistant.response.done', usage }, g);
    expect(s.estUsd).toBeCloseTo(usd, 12);
    expect([s.action, s.reason, s.estUsd_at_disconnect]).toEqual(['disconnect', 'per_call_cap', s.estUsd]);
    // Without text prices the text tokens add nothing here and are counted as unpriced (the meter marks them).
    delete c.spend_guard.text_in_per_million;
    delete c.spend_guard.text_in_cached_per_million;
    delete c.spend_guard.text_out_per_million;
    const unpriced = guardConfig(c);
    expect(usageCost(usage, unpriced)).toEqual({ usd: expect.closeTo(0.0001, 12), unpricedTextTokens: 10_100 });
    expect(applyEvent(newCall(), { type: 'assistant.response.done', usage }, unpriced).action).toBe('continue');
    // A text count is checked where it enters, as an audio count is.
    const bad = { input_token_details: { text_tokens: -1 } };
    expect(() => applyEvent(newCall(), { type: 'assistant.response.done', usage: bad }, g)).toThrow(
      /usage\.input_token_details\.text_tokens: expected a whole number/,
    );
  });

  it('a response without usage is billed the estimate of its audio: before the first with usage and after it', () => {
    const usage = { output_token_details: { audio_tokens: 1000 } }; // 0.02 USD
    const s = run([
      { type: 'assistant.audio_frame', ms: 5000 }, // 100 tokens: 0.002 USD
      { type: 'assistant.response.done' },
      { type: 'assistant.response.done', usage },
      { type: 'user.audio_frame', ms: 10_000 }, // 100 tokens: 0.001 USD
      { type: 'assistant.audio_frame', ms: 5000 },
      { type: 'assistant.response.done' }, // none reported (cancelled by barge-in, or omitted)
    ]);
    expect(s.billedUsd).toBeCloseTo(0.002 + 0.02 + 0.001 + 0.002, 12);
    expect(s.estUsd).toBeCloseTo(s.billedUsd!, 12);
  });

  it("adds each transcription's cost to the call's, with or without usage from the responses; the next response.done checks the cap with it", () => {
    const usage = { output_token_details: { audio_tokens: 1000 } }; // 0.02 USD
    const s = run([
      { type: 'transcription.done', usd: 0.001 },
      { type: 'assistant.response.done', usage },
      { type: 'transcription.done', usd: 0.002 },
    ]);
    expect(s.estUsd).toBeCloseTo(0.001 + 0.02 + 0.002, 12);
    const estimated = run([{ type: 'transcription.done', usd: 0.5 }, { type: 'assistant.response.done' }]);
    expect(estimated.estUsd).toBeCloseTo(0.5, 12);
    expect([estimated.action, estimated.reason]).toEqual(['disconnect', 'per_call_cap']);
    expect(() => applyEvent(newCall(), { type: 'transcription.done', usd: -1 }, cfg)).toThrow(/transcription\.done\.usd: expected USD/);
  });

  it('checks in order at the end of each response: turn cap, then per-call cap (disconnect), then latency', () => {
    const done = { type: 'assistant.response.done' } as const;
    // Turn 8 with the cost also over the cap at that moment: turn_cap wins (first match ends the evaluation).
    const both = run([...Array(7).fill(done), { type: 'assistant.audio_frame', ms: 1_000_000 }, done]);
    expect([both.action, both.reason]).toEqual(['escalate', 'turn_cap']);
    // Cost over the cap before the turn cap: disconnect, with estUsd_at_disconnect.
    const cost = run([{ type: 'assistant.audio_frame', ms: 900_000 }, done]);
    expect([cost.action, cost.reason]).toEqual(['disconnect', 'per_call_cap']);
    expect(cost.estUsd_at_disconnect).toBeCloseTo(0.36, 12);
    // Exactly at the cap counts (>=).
    const exact = run([{ type: 'assistant.audio_frame', ms: 875_000 }, done]);
    expect(exact.reason).toBe('per_call_cap');
    // So does a call billed exactly the cap in parts whose float sum falls short of it: 1,500 +
    // 14,100 + 1,900 output audio tokens are 17,500 at 20 $/M, 0.35 USD, summed as 0.3499999999999999.
    const parts = run([1500, 14_100, 1900].map((n) => ({ ...done, usage: { output_token_details: { audio_tokens: n } } })));
    expect([parts.turns, parts.action, parts.reason]).toEqual([3, 'disconnect', 'per_call_cap']);
    expect(parts.estUsd).toBe(0.35);
    // Two ttfb breaches and cost over the cap: the cap wins.
    const order = run([
      { type: 'assistant.response.start', ttfb_ms: 2000 },
      { type: 'assistant.response.start', ttfb_ms: 2500 },
      { type: 'assistant.audio_frame', ms: 900_000 },
      done,
    ]);
    expect(order.reason).toBe('per_call_cap');
    // Latency alone: escalate after the second breach, not the first; at the budget is no breach.
    const lat = run([{ type: 'assistant.response.start', ttfb_ms: 1800 }, done, { type: 'assistant.response.start', ttfb_ms: 1801 }, done]);
    expect([lat.ttfbBreaches, lat.action]).toEqual([1, 'continue']);
    run([{ type: 'assistant.response.start', ttfb_ms: 3000 }, done], lat);
    expect([lat.action, lat.reason]).toEqual(['escalate', 'latency']);
  });

  it('escalation rules on the caller’s words: confidence twice, intent handoff at once, frustration, a person', () => {
    const user = (text: string, confidence = 0.9) => ({ type: 'transcript', text, confidence, speaker: 'user' }) as const;
    const twice = run([user('hmm', 0.5)]);
    expect(twice.action).toBe('continue');
    run([user('what', 0.4)], twice);
    expect([twice.action, twice.reason]).toEqual(['escalate', 'low_confidence']);
    const c = filled();
    c.intents.find((i) => i.id === 'book')!.handoff_if_confidence_below = 0.8;
    const strict = guardConfig(c);
    const first = newCall();
    applyEvent(first, user('I want to book a table', 0.95), strict);
    applyEvent(first, user('for four', 0.75), strict);
    expect([first.intent, first.reason]).toEqual(['book', 'low_confidence']);
    expect(run([user('this is ridiculous')]).reason).toBe('frustration_markers');
    expect(run([user('can I speak to a person please')]).reason).toBe('caller_request');
    expect(run([{ type: 'transcript', text: 'this is ridiculous', confidence: 0.1, speaker: 'assistant' }]).action).toBe('continue');
  });

  it('a marker typed with punctuation or a typographic apostrophe fires on the caller’s words as they are transcribed', () => {
    const c = filled();
    c.escalation.rules[1].markers = ['this is ridiculous!', 'no, no, no', 'I’m angry', 'waste  of time', '?!'];
    const g = guardConfig(c);
    const said = (text: string) => applyEvent(newCall(), { type: 'transcript', text, confidence: 0.9, speaker: 'user' }, g).reason;
    expect(said('This is ridiculous!')).toBe('frustration_markers');
    expect(said('No, no, no.')).toBe('frustration_markers');
    expect(said("I'm angry now")).toBe('frustration_markers');
    expect(said('What a waste of time.')).toBe('frustration_markers');
    // A marker of punctuation alone matches nothing, not every sentence.
    expect(said('Can I book for Friday?!')).toBe(null);
  });
});

describe('/v1/voice endpoints (HTTP, Redis)', () => {
  const REDIS_URL = TEST_REDIS_URL;
  const prefix = `test-voice-${process.pid}`;
  let redis: Redis;
  const stacks: Array<{ stack: Stack; url: string; stop: () => Promise<void> }> = [];
  let env: NodeJS.ProcessEnv;
  beforeAll(() => {
    redis = new Redis(REDIS_URL);
    const dir = mkdtempSync(join(tmpdir(), 'voice-'));
    writeFileSync(join(dir, 'concierge.json'), JSON.stringify(filled()));
    env = {
      CONCIERGE_FILE: join(dir, 'concierge.json'),
      VOICE_TOKEN: 'voice-secret',
      QUEUE_STORE_URL: REDIS_URL,
      REDIS_PREFIX: prefix,
      METER_CSV_FILE: join(dir, 'e.csv'),
      CALLS_CSV_FILE: join(dir, 'calls.csv'),
      SCOPES_FILE: join(dir, 'none.yaml'),
      HOT_BASE_URL: 'http://127.0.0.1:9/v1',
    };
  });
  afterEach(async () => {
    for (const s of stacks.splice(0)) await s.stop();
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length) await redis.del(...keys);
  });
  afterAll(() => redis.disconnect());

  async function up() {
    const h = await listenStack(env);
    stacks.push(h);
    return h;
  }
  const post = (url: string, path: string, body: unknown, token = 'voice-secret') =>
    fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify(body),
    });

  it('answers in business hours (Lisbon time) with the consent line; voicemail after hours and on no_answer', async () => {
    const { url } = await up();
    expect((await post(url, '/v1/voice/calls', { call_id: 'c1', from: '+351900000000' }, 'nope')).status).toBe(401);
    const open = (await (
      await post(url, '/v1/voice/calls', { call_id: 'c1', from: '+351900000000', at: '2026-11-23T10:00:00Z' })
    ).json()) as Record<string, unknown>;
    expect(open).toMatchObject({
      action: 'answer',
      consent_line: expect.stringContaining('AI assistant'),
      consent: { retry_if_no_ack: true, max_retries: 1 },
    });
    const night = (await (
      await post(url, '/v1/voice/calls', { call_id: 'c2', from: '+351900000000', at: '2026-11-23T19:30:00Z' })
    ).json()) as Record<string, unknown>;
    expect(night).toMatchObject({ action: 'voicemail', reason: 'after_hours', function: 'route_to_voicemail', privacy_notice: true });
    const sunday = (await (await post(url, '/v1/voice/calls', { call_id: 'c3', from: '+1', at: '2026-11-22T10:00:00Z' })).json()) as Record<
      string,
      unknown
    >;
    expect(sunday.action).toBe('voicemail');
    const missed = (await (
      await post(url, '/v1/voice/calls', { call_id: 'c4', from: '+1', at: '2026-11-23T10:00:00Z', trigger: 'no_answer' })
    ).json()) as Record<string, unknown>;
    expect(missed).toMatchObject({ action: 'voicemail', reason: 'no_answer' });
    const bad = await post(url, '/v1/voice/calls', { call_id: 'c 5', from: '+1' });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: string }).error).toMatch(/^call_id: /);
  });

  it('events in batches through any instance; a bad event refuses the batch; the verdict comes back', async () => {
    const a = await up();
    const b = await up();
    await post(a.url, '/v1/voice/calls', { call_id: 'call-9', from: '+351900000000', at: '2026-11-23T10:00:00Z' });
    const frames = Array.from({ length: 50 }, () => ({ type: 'user.audio_frame', ms: 20 }));
    const r1 = (await (await post(a.url, '/v1/voice/calls/call-9/events', frames)).json()) as Record<string, any>;
    expect(r1).toMatchObject({ action: 'continue', state: { inputMs: 1000, outputMs: 0, turns: 0, ttfbBreaches: 0 } });
    const refused = await post(b.url, '/v1/voice/calls/call-9/events', [
      { type: 'assistant.audio_frame', ms: 40 },
      { type: 'assistant.audio_frame', ms: 0 },
    ]);
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: string }).error).toMatch(/^events\[1\]\.assistant\.audio_frame\.ms: /);
    const r2 = (await (
      await post(b.url, '/v1/voice/calls/call-9/events', [
        { type: 'assistant.audio_frame', ms: 900_000 },
        { type: 'assistant.response.done' },
      ])
    ).json()) as Record<string, any>;
    expect(r2).toMatchObject({ action: 'disconnect', reason: 'per_call_cap', state: { inputMs: 1000, outputMs: 900_000, turns: 1 } });
    expect(r2.estUsd_at_disconnect).toBeGreaterThanOrEqual(0.35);
    expect((await post(a.url, '/v1/voice/calls/unknown/events', { type: 'user.audio_frame', ms: 1 })).status).toBe(404);
    const ttl = await redis.ttl(`${prefix}:voice:call:call-9`);
    expect(ttl).toBeGreaterThan(3600);
  });

  it('40 concurrent events for one call through two instances: every one 200, none lost', async () => {
    const a = await up();
    const b = await up();
    await post(a.url, '/v1/voice/calls', { call_id: 'call-40', from: '+351900000000', at: '2026-11-23T10:00:00Z' });
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        post(i % 2 ? a.url : b.url, '/v1/voice/calls/call-40/events', { type: 'user.audio_frame', ms: 20 }),
      ),
    );
    expect(answers.map((r) => r.status)).toEqual(Array(40).fill(200));
    const seen = await Promise.all(answers.map(async (r) => ((await r.json()) as { state: { inputMs: number } }).state.inputMs));
    expect([...seen].sort((x, y) => x - y)).toEqual(Array.from({ length: 40 }, (_, i) => 20 * (i + 1))); // each saw its own frame and those before
    const last = (await (await post(a.url, '/v1/voice/calls/call-40/events', { type: 'user.audio_frame', ms: 20 })).json()) as {
      state: { inputMs: number };
    };
    expect(last.state.inputMs).toBe(41 * 20);
    expect(await redis.llen(`${prefix}:voice:call:call-40:changes`)).toBe(0); // every change folded into the saved call
  });

  it('a batch sent again with its Idempotency-Key (a retry after a timeout, through any instance, even at once) is counted once', async () => {
    const a = await up();
    const b = await up();
    await post(a.url, '/v1/voice/calls', { call_id: 'retry', from: '+351900000000', at: '2026-11-23T10:00:00Z' });
    const send = async (url: string, body: unknown, key?: string) => {
      const res = await fetch(`${url}/v1/voice/calls/retry/events`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer voice-secret', ...(key ? { 'idempotency-key': key } : {}) },
        body: JSON.stringify(body),
      });
      expect(res.status).toBe(200);
      return ((await res.json()) as { state: { inputMs: number; outputMs: number; turns: number; estUsd: number } }).state;
    };
    const turn = [
      { type: 'user.audio_frame', ms: 2000 },
      { type: 'assistant.audio_frame', ms: 3000 },
      {
        type: 'assistant.response.done',
        usage: { input_token_details: { audio_tokens: 1000 }, output_token_details: { audio_tokens: 2000 } },
      },
    ];
    const first = await send(a.url, turn, 'turn-1');
    expect(first).toMatchObject({ inputMs: 2000, outputMs: 3000, turns: 1, estUsd: 0.05 });
    expect(await send(b.url, turn, 'turn-1')).toEqual(first); // sent again through the other instance
    // Sent again with its members in another order: the same batch.
    const reordered = turn.map((e) => Object.fromEntries(Object.entries(e).reverse()));
    expect(await send(a.url, reordered, 'turn-1')).toEqual(first);
    const both = await Promise.all([send(a.url, turn, 'turn-2'), send(b.url, turn, 'turn-2')]);
    expect(both.map((s) => s.turns)).toEqual([2, 2]);
    // The key sent again with another batch: refused, naming the key, and nothing of it applied.
    const reused = await fetch(`${b.url}/v1/voice/calls/retry/events`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer voice-secret', 'idempotency-key': 'turn-1' },
      body: JSON.stringify([{ type: 'user.audio_frame', ms: 700 }]),
    });
    expect([reused.status, ((await reused.json()) as { error: string }).error]).toEqual([
      422,
      'Idempotency-Key: call retry took another batch with this key; nothing of this one was applied (a new batch needs a new key)',
    ]);
    // Without a key, a batch is a new one each time, as before.
    expect(await send(a.url, { type: 'user.audio_frame', ms: 100 })).toMatchObject({ inputMs: 4100 });
    expect(await send(b.url, { type: 'user.audio_frame', ms: 100 })).toMatchObject({ inputMs: 4200, turns: 2, estUsd: 0.1 });
  });

  it('events after the end are refused 409 and left out of the call, not answered as counted while its record and meter events are made', async () => {
    const a = await up();
    const b = await up();
    await post(a.url, '/v1/voice/calls', { call_id: 'late', from: '+351900000000', at: '2026-11-23T10:00:00Z' });
    const turn = [
      { type: 'assistant.audio_frame', ms: 1000 },
      {
        type: 'assistant.response.done',
        usage: { input_token_details: { audio_tokens: 1000 }, output_token_details: { audio_tokens: 2000 } },
      },
    ];
    const keyed = (url: string, key: string) =>
      fetch(`${url}/v1/voice/calls/late/events`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer voice-secret', 'idempotency-key': key },
        body: JSON.stringify(turn),
      });
    expect((await keyed(a.url, 'before')).status).toBe(200);
    const record = (await (await post(a.url, '/v1/voice/calls/late/end', { outcome: 'abandoned', duration_s: 30 })).json()) as CallRecord;
    expect([record.turns, record.est_audio_cost_usd]).toEqual([1, 0.05]);
    const late = await post(b.url, '/v1/voice/calls/late/events', turn);
    expect(late.status).toBe(409);
    expect(((await late.json()) as { error: string }).error).toMatch(/^call late has ended: /);
    // A batch applied before the end and sent again with its key is answered as applied; a new one is not.
    expect((await keyed(b.url, 'before')).status).toBe(200);
    expect((await keyed(a.url, 'after')).status).toBe(409);
    // The call as stored is the call as recorded.
    const stored = JSON.parse((await redis.get(`${prefix}:voice:call:late`))!) as { state: Record<string, number> };
    expect(stored.state).toMatchObject({ turns: 1, outputMs: 1000, estUsd: 0.05 });
  });

  it('a call billed by the estimate costs all its audio: frames after the last response.done (an answer reported as it plays) are in its record', async () => {
    const { url } = await up();
    await post(url, '/v1/voice/calls', { call_id: 'played', from: '+351900000000', at: '2026-11-23T10:00:00Z' });
    await post(url, '/v1/voice/calls/played/events', [
      { type: 'user.audio_frame', ms: 60_000 },
      { type: 'assistant.audio_frame', ms: 30_000 },
      { type: 'assistant.response.done' },
    ]);
    // The last answer's audio, reported as it is played to the caller, after its response.done.
    const played = (await (await post(url, '/v1/voice/calls/played/events', { type: 'assistant.audio_frame', ms: 30_000 })).json()) as {
      state: { outputMs: number; estUsd: number };
    };
    // 600 input tokens x 10/1e6 + 1,200 output tokens x 20/1e6, as the estimate's formula over the call's audio
    expect(played.state).toMatchObject({ outputMs: 60_000, estUsd: 0.03 });
    const record = (await (await post(url, '/v1/voice/calls/played/end', { outcome: 'abandoned', duration_s: 95 })).json()) as CallRecord;
    expect(record.est_audio_cost_usd).toBe(0.03);
  });

  it('numbers that cannot be money are refused 400 naming the field; the call’s cost stays finite and >= 0', async () => {
    const { url } = await up();
    await post(url, '/v1/voice/calls', { call_id: 'call-n', from: '+351900000000', at: '2026-11-23T10:00:00Z' });
    const refused = async (body: string) => {
      const res = await fetch(`${url}/v1/voice/calls/call-n/events`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer voice-secret' },
        body,
      });
      expect(res.status).toBe(400);
      return ((await res.json()) as { error: string }).error;
    };
    const done = (usage: string) => `[{"type":"assistant.response.done","usage":${usage}}]`;
    expect(await refused(done('{"input_token_details":{"audio_tokens":-5000}}'))).toBe(
      'events[0].assistant.response.done.usage.input_token_details.audio_tokens: expected a whole number of tokens from 0 to 10000000, got -5000',
    );
    expect(await refused(done('{"output_token_details":{"audio_tokens":1e308}}'))).toMatch(
      /^events\[0\]\.assistant\.response\.done\.usage\.output_token_details\.audio_tokens: expected a whole number/,
    );
    expect(await refused(done('{"output_token_details":{"audio_tokens":1e309}}'))).toMatch(
      /output_token_details\.audio_tokens: .*got Infinity$/,
    );
    expect(await refused('[{"type":"user.audio_frame","ms":1e308}]')).toMatch(/^events\[0\]\.user\.audio_frame\.ms: expected a duration/);
    expect(await refused('[{"type":"billing.monthly_rollup","monthly_usd":1e309}]')).toBe(
      'events[0].monthly_usd: expected a finite number >= 0',
    );
    // A transcript's field is named too, with what was sent.
    const said = (fields: string) => `[{"type":"user.audio_frame","ms":20},{"type":"transcript",${fields}}]`;
    expect(await refused(said('"text":"hi","confidence":1e309,"speaker":"user"'))).toBe(
      'events[1].transcript.confidence: expected a number from 0 to 1, got Infinity',
    );
    expect(await refused(said('"text":"hi","confidence":-0.5,"speaker":"user"'))).toBe(
      'events[1].transcript.confidence: expected a number from 0 to 1, got -0.5',
    );
    expect(await refused(said('"text":"hi","confidence":0.9,"speaker":"caller"'))).toBe(
      'events[1].transcript.speaker: expected "user" or "assistant", got "caller"',
    );
    expect(await refused(said('"confidence":0.9,"speaker":"user"'))).toBe('events[1].transcript.text: expected text, got nothing');
    // What was sent is quoted cut short: a value of megabytes is not sent back whole.
    const long = await refused(said(`"text":"hi","confidence":0.9,"speaker":"${'x'.repeat(100_000)}"`));
    expect([long.length < 300, long.startsWith('events[1].transcript.speaker: expected "user" or "assistant", got "xxx')]).toEqual([
      true,
      true,
    ]);
    expect((await refused(`[{"type":"user.audio_frame","ms":"${'9'.repeat(100_000)}"}]`)).length).toBeLessThan(300);
    // An event's type too: one of megabytes is not named back whole.
    const type = await refused(`[{"type":"${'t'.repeat(100_000)}"}]`);
    expect([type.length < 500, type.startsWith('events[0].type: expected one of user.audio_frame')]).toEqual([true, true]);
    const ok = await post(url, '/v1/voice/calls/call-n/events', [
      {
        type: 'assistant.response.done',
        usage: { input_token_details: { audio_tokens: 1000 }, output_token_details: { audio_tokens: 500 } },
      },
    ]);
    expect(ok.status).toBe(200);
    const { state } = (await ok.json()) as { state: { estUsd: number; turns: number } };
    expect(state.turns).toBe(1); // none of the refused batches counted
    expect(Number.isFinite(state.estUsd) && state.estUsd >= 0).toBe(true);
  });

  it('a start ahead of the clock, an end ahead of it or a duration longer than a phone call is a 400 naming the field; nothing is kept or metered', async () => {
    const { url } = await up();
    const error = async (res: Response) => [res.status, ((await res.json()) as { error: string }).error];
    const tomorrow = new Date(Date.now() + 86_400_000).toISOString();
    expect(await error(await post(url, '/v1/voice/calls', { call_id: 'ahead', from: '+1', at: tomorrow }))).toEqual([
      400,
      'at: expected a time at most 5 minutes after the gateway’s clock (the meter refuses a call record that starts later)',
    ]);
    expect((await post(url, '/v1/voice/calls/ahead/end', { outcome: 'abandoned', duration_s: 1 })).status).toBe(404);
    expect((await post(url, '/v1/voice/calls', { call_id: 'long', from: '+1' })).status).toBe(200);
    expect(await error(await post(url, '/v1/voice/calls/long/end', { outcome: 'abandoned', duration_s: 1e9 }))).toEqual([
      400,
      'duration_s: expected seconds from 0 to 86400 (a phone call lasts at most 24 hours)',
    ]);
    expect(await error(await post(url, '/v1/voice/calls/long/end', { outcome: 'abandoned', ended_at: tomorrow }))).toEqual([
      400,
      'ended_at: expected a time at most 5 minutes after the gateway’s clock',
    ]);
    // Refused ends changed nothing: the call ends once, with what it was given.
    const record = (await (await post(url, '/v1/voice/calls/long/end', { outcome: 'abandoned', duration_s: 61 })).json()) as CallRecord;
    expect([record.duration_s, record.telephony_minutes]).toEqual([61, 2]);
  });

  it('an end whose duration would be counted from a start days ago, or that ends before its start, is a 400 asking for duration_s; the call stays open', async () => {
    const { url } = await up();
    const error = async (res: Response) => [res.status, ((await res.json()) as { error: string }).error];
    const started = new Date(Date.now() - 5 * 86_400_000).toISOString();
    expect((await post(url, '/v1/voice/calls', { call_id: 'stale', from: '+1', at: started })).status).toBe(200);
    expect(await error(await post(url, '/v1/voice/calls/stale/end', { outcome: 'abandoned' }))).toEqual([
      400,
      `duration_s: required for this call: from its start (${started}) to its end is 120 hours, longer than a phone call lasts (24 hours)`,
    ]);
    const before = new Date(Date.parse(started) - 60_000).toISOString();
    expect(await error(await post(url, '/v1/voice/calls/stale/end', { outcome: 'abandoned', ended_at: before }))).toEqual([
      400,
      `ended_at: expected a time after the call's start (${started})`,
    ]);
    const record = (await (await post(url, '/v1/voice/calls/stale/end', { outcome: 'abandoned', duration_s: 90 })).json()) as CallRecord;
    expect([record.duration_s, record.telephony_minutes]).toEqual([90, 2]);
  });

  it('a monthly rollup at the cap pauses new calls on every instance; calls in progress go on; a rollup below resumes', async () => {
    const a = await up();
    const b = await up();
    await post(a.url, '/v1/voice/calls', { call_id: 'live', from: '+1', at: '2026-11-23T10:00:00Z' });
    expect((await post(a.url, '/v1/voice/billing/monthly-rollup', { monthly_usd: 300 })).status).toBe(204);
    const refused = await post(b.url, '/v1/voice/calls', { call_id: 'new', from: '+1', at: '2026-11-23T10:00:00Z' });
    expect(refused.status).toBe(503);
    expect(((await refused.json()) as { reason: string }).reason).toBe('monthly_cap');
    expect((await post(b.url, '/v1/voice/calls/live/events', { type: 'user.audio_frame', ms: 20 })).status).toBe(200);
    expect((await post(b.url, '/v1/voice/calls/live/events', { type: 'billing.monthly_rollup', monthly_usd: 120 })).status).toBe(200);
    expect((await post(a.url, '/v1/voice/calls', { call_id: 'new-2', from: '+1', at: '2026-11-23T10:00:00Z' })).status).toBe(200);
    expect((await post(a.url, '/v1/voice/billing/monthly-rollup', { monthly_usd: 'lots' })).status).toBe(400);
  });

  it('a start sent again answers the call as it was stored: an answered call goes on through a pause, a voicemail keeps its reason', async () => {
    const a = await up();
    const b = await up();
    const start = async (url: string, body: Record<string, unknown>) => {
      const res = await post(url, '/v1/voice/calls', { from: '+351900000000', at: '2026-11-23T10:00:00Z', ...body });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    // Answered, then the monthly cap is reached: the voice server's start sent again (its answer lost) is the same call.
    expect((await start(a.url, { call_id: 'live' })).body.action).toBe('answer');
    expect((await post(a.url, '/v1/voice/billing/monthly-rollup', { monthly_usd: 300 })).status).toBe(204);
    expect(await start(b.url, { call_id: 'live' })).toMatchObject({ status: 200, body: { action: 'answer' } });
    // A call refused while paused stays refused, also once the pause has lifted.
    expect(await start(b.url, { call_id: 'refused' })).toMatchObject({ status: 503, body: { reason: 'monthly_cap' } });
    expect((await post(a.url, '/v1/voice/billing/monthly-rollup', { monthly_usd: 10 })).status).toBe(204);
    expect(await start(a.url, { call_id: 'refused' })).toMatchObject({ status: 503, body: { reason: 'monthly_cap' } });
    // Its record says why it was not answered, as the phone bridge's do.
    const ended = (await (await post(b.url, '/v1/voice/calls/refused/end', { outcome: 'abandoned', duration_s: 4 })).json()) as CallRecord;
    expect([ended.intent_primary, ended.ended_reason]).toEqual(['voicemail', 'monthly_cap']);
    // A no_answer voicemail sent again without its trigger, in business hours: still no_answer, not after_hours.
    expect((await start(a.url, { call_id: 'missed', trigger: 'no_answer' })).body).toMatchObject({
      action: 'voicemail',
      reason: 'no_answer',
    });
    expect((await start(b.url, { call_id: 'missed' })).body).toMatchObject({ action: 'voicemail', reason: 'no_answer' });
  });

  it('says at startup when spend_guard has no text prices: the text tokens go unpriced', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'voice-'));
    const c = filled() as any;
    delete c.spend_guard.text_in_per_million;
    delete c.spend_guard.text_out_per_million;
    writeFileSync(join(dir, 'concierge.json'), JSON.stringify(c));
    for (const [file, warned] of [
      [join(dir, 'concierge.json'), true],
      [env.CONCIERGE_FILE!, false],
    ] as const) {
      const logs: string[] = [];
      const stack = await createStack({ ...env, CONCIERGE_FILE: file }, captureLogger(logs), { http: true, worker: false });
      await stack.close();
      expect(logs.some((l) => l.includes('no text_in_per_million or text_out_per_million'))).toBe(warned);
    }
  });

  it('says at startup which trigger never matches because an earlier intent takes it (a file made from the template that listed book first)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'voice-'));
    const c = filled() as any;
    const [reschedule, book] = c.intents; // the template's order now
    c.intents.splice(0, 2, book, reschedule);
    expect(matchIntent('can I move appointment to Friday?', c.intents)).toBe('book');
    writeFileSync(join(dir, 'concierge.json'), JSON.stringify(c));
    for (const [file, warned] of [
      [join(dir, 'concierge.json'), true],
      [env.CONCIERGE_FILE!, false],
    ] as const) {
      const logs: string[] = [];
      const stack = await createStack({ ...env, CONCIERGE_FILE: file }, captureLogger(logs), { http: true, worker: false });
      await stack.close();
      const shadowed = logs.map((l) => (JSON.parse(l) as { msg: string }).msg).filter((m) => m.includes('never matches'));
      expect(shadowed.length).toBe(warned ? 1 : 0);
      if (warned)
        expect(shadowed[0]).toContain(
          '$.intents[1].triggers[2]: "move appointment" never matches: the book intent, before it, matches its "appointment" first, so such callers are recorded as book; put reschedule before book',
        );
    }
  });

  it('refuses, in production, a configuration that does not lint clean', async () => {
    await expect(
      createStack({ ...env, NODE_ENV: 'production', CONCIERGE_FILE: join(root, 'concierge.json') }, captureLogger([]), {
        http: true,
        worker: false,
      }),
    ).rejects.toThrow(/does not lint clean/);
  });
});

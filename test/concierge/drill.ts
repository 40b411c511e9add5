/**
 * `npm run concierge:drill [-- --config FILE] [--countries PT,GB]`: the voice concierge's launch
 * checklist against local peers, with the operator's configuration (default CONCIERGE_FILE, else
 * concierge.json). One row per step with what it measured; exit 0 only if steps 1-8 all pass.
 *   1 lint clean              2 price constants             3 telephony rates of the countries
 *   4 both caps fire          5 consent opt-out tagged      6 webhook replayed → one booking
 *   7 low confidence twice    8 after hours → recording and next-day task
 *   9-10 the operator's: the drill's transcripts to read, freezing v1 and the observability URL.
 * Calls go through the phone bridge with the configuration's targets replaced by local peers
 * (drill-stack.ts); the rates file is TELEPHONY_RATES_FILE (default .data/telephony-rates.json).
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { asksForHelp } from '../../gateway/src/help';
import { ConciergeConfig } from '../../gateway/src/voice/config';
import { DEFAULT_RATES_FILE } from '../../gateway/src/voice/rates';
import { capsStep, lowConfidenceStep, replayStep } from './call-steps';
import { configuredCountries, lintStep, priceStep, ratesStep, type Row } from './config-steps';
import { drillStack, type DrillStack } from './drill-stack';
import { afterHoursStep, consentStep } from './edge-steps';
import { freezeStep, reviewStep, transcripts } from './operator-steps';

const started = Date.now();

function readRaw(file: string): Record<string, any> | null {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as Record<string, any>;
  } catch {
    return null;
  }
}

/** A step that threw is a failed row that says what went wrong. */
async function guarded(step: string, run: () => Promise<Row>): Promise<Row> {
  try {
    return await run();
  } catch (error) {
    return { step, measured: `stopped: ${(error as Error).message}`, target: 'the step runs to its end', status: 'FAIL' };
  }
}

const CALL_STEPS: Array<[string, (s: DrillStack) => Promise<Row>]> = [
  ['4. Both caps fire: per_call_usd_cap disconnects, max_turns escalates', capsStep],
  ['5. The consent flow: an opt-out tags the contact', consentStep],
  ['6. The workflow webhook replayed twice yields one booking', replayStep],
  ['7. Low confidence twice escalates', lowConfidenceStep],
  ['8. An after-hours call leaves a recording and a next-day task', afterHoursStep],
];

const USAGE = 'usage: npm run concierge:drill -- [--config FILE] [--countries PT,GB]';

/** The options, or the reason they are refused (a usage error, before anything runs). */
function options(): { file: string; countries: string[] } | { refused: string } {
  let values: { config?: string; countries?: string };
  try {
    let tokens;
    ({ values, tokens } = parseArgs({ options: { config: { type: 'string' }, countries: { type: 'string' } }, tokens: true }));
    // parseArgs keeps the last of an option given twice: `--config a.json --config b.json` drilled
    // b.json alone, as if a.json had passed. Which of the two was meant is not ours to guess.
    const seen = new Set<string>();
    for (const token of tokens)
      if (token.kind === 'option') {
        if (seen.has(token.name)) return { refused: `${token.rawName}: given twice; give it once\n${USAGE}` };
        seen.add(token.name);
      }
  } catch (error) {
    return { refused: `${(error as Error).message}\n${USAGE}` };
  }
  const countries = (values.countries ?? '').split(',').filter(Boolean);
  const odd = countries.filter((c) => !/^[A-Za-z]{2}$/.test(c));
  if (odd.length)
    return { refused: `--countries: expected ISO 3166 alpha-2 codes separated by commas, such as PT,GB; got ${odd.join(', ')}` };
  return { file: values.config ?? (process.env.CONCIERGE_FILE || 'concierge.json'), countries };
}

/** Steps 4-8 on the drill's stack (or each marked not run, saying why), then 9-10; the stack is closed after. */
async function callRows(raw: Record<string, any> | null, ratesFile: string): Promise<{ rows: Row[]; stack: DrillStack | null }> {
  const parsed = ConciergeConfig.safeParse(raw);
  let stack: DrillStack | null = null;
  let notRun = 'the configuration is not usable (step 1)';
  const rows: Row[] = [];
  try {
    if (parsed.success) stack = await drillStack(parsed.data, ratesFile).catch((error: Error) => ((notRun = error.message), null));
    for (const [step, run] of CALL_STEPS)
      rows.push(
        stack
          ? await guarded(step, () => run(stack!))
          : { step, measured: `not run: ${notRun}`, target: 'a configuration the gateway loads', status: 'FAIL' },
      );
    rows.push(reviewStep(stack), freezeStep(raw, stack));
  } finally {
    await stack?.close();
  }
  return { rows, stack };
}

function print(file: string, rows: Row[], stack: DrillStack | null): number {
  console.log(
    `Concierge drill: ${file} against local peers (Twilio, realtime model, back office); store: ${stack?.store ?? 'none, no call placed'}\n`,
  );
  for (const r of rows) {
    console.log(`${r.status.padEnd(4)}  ${r.step}`);
    console.log(`      measured: ${r.measured}`);
    console.log(`      target:   ${r.target}`);
  }
  if (stack) console.log(`\nTranscripts of the drill's calls (step 9; the model's words are the drill's script):\n${transcripts(stack)}`);
  const counted = rows.filter((r) => r.status !== 'TODO');
  const failed = counted.filter((r) => r.status === 'FAIL');
  const named = failed.length ? ` (${failed.map((r) => r.step.split('.')[0]).join(', ')})` : '';
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`\n${counted.length - failed.length} passed, ${failed.length} failed${named}; steps 9-10 are yours (${seconds} s)`);
  return failed.length ? 1 : 0;
}

async function main(): Promise<number> {
  if (asksForHelp(process.argv.slice(2))) {
    console.log(USAGE);
    return 0;
  }
  const opts = options();
  if ('refused' in opts) {
    console.error(opts.refused);
    return 2;
  }
  const ratesFile = process.env.TELEPHONY_RATES_FILE || DEFAULT_RATES_FILE; // set empty counts as unset, as in the gateway
  const raw = readRaw(opts.file);
  const fileRows = [lintStep(opts.file), priceStep(raw), ratesStep(configuredCountries(raw, opts.countries), ratesFile)];
  const { rows, stack } = await callRows(raw, ratesFile);
  return print(opts.file, [...fileRows, ...rows], stack);
}

main().then(
  (code) => process.exit(code),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);

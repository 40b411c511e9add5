// The launch checklist's steps that read files only: 1 the lint, 2 the price constants,
// 3 the telephony rates of the configured countries.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { calcPrice } from '@pydantic/genai-prices';
import { lintFile } from '../../gateway/src/voice/config';
import { inboundRate, readRates } from '../../gateway/src/voice/rates';

export interface Row {
  step: string;
  measured: string;
  target: string;
  /** TODO: the operator's own step (9, 10), not counted. */
  status: 'PASS' | 'FAIL' | 'TODO';
}

export const pass = (ok: boolean): Row['status'] => (ok ? 'PASS' : 'FAIL');

const TEMPLATE = join(import.meta.dirname, '..', '..', 'concierge.json');

export function lintStep(file: string): Row {
  const problems = lintFile(file);
  const shown = problems.slice(0, 5).map((p) => `${p.path}: ${p.message}`);
  return {
    step: '1. Every bracketed value replaced; the configuration lints clean',
    measured: problems.length ? `${problems.length} problem(s): ${shown.join('; ')}${problems.length > 5 ? '; …' : ''}` : `${file}: clean`,
    target: 'npm run concierge:lint finds nothing',
    status: pass(problems.length === 0),
  };
}

type Prices = { in: number; out: number };

/** USD per million audio and text tokens of the model in @pydantic/genai-prices (the list the gateway prices with), if it knows the model. */
function listPrices(model: string): { audio: Prices; text: Prices } | null {
  const price = (usage: Parameters<typeof calcPrice>[0]) => calcPrice(usage, model, { providerId: 'openai' })?.total_price;
  try {
    const [audioIn, audioOut, textIn, textOut] = [
      price({ input_tokens: 1_000_000, input_audio_tokens: 1_000_000 }),
      price({ output_tokens: 1_000_000, output_audio_tokens: 1_000_000 }),
      price({ input_tokens: 1_000_000 }),
      price({ output_tokens: 1_000_000 }),
    ];
    if (audioIn === undefined || audioOut === undefined || textIn === undefined || textOut === undefined) return null;
    return { audio: { in: audioIn, out: audioOut }, text: { in: textIn, out: textOut } };
  } catch {
    return null;
  }
}

const same = (a: number, b: number) => Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(b));

/** A price field's problem: not a number > 0, or the template's value. */
function priceProblem(k: string, v: unknown, template: Record<string, unknown>): string | null {
  if (typeof v !== 'number' || !(v > 0)) return `${k} is ${JSON.stringify(v) ?? 'missing'}, not a price > 0`;
  return v === template[k] ? `${k} is the template's ${v}` : null;
}

/**
 * Audio prices set (numbers > 0), not the template's values, and equal to the model's list prices
 * when the list knows the model; the text prices likewise when set (absent: the text tokens go
 * unpriced, which the row says).
 */
export function priceStep(raw: Record<string, any> | null): Row {
  const template = JSON.parse(readFileSync(TEMPLATE, 'utf8')).spend_guard;
  const guard = raw?.spend_guard ?? {};
  const model = typeof raw?.meta?.model === 'string' ? raw.meta.model : '';
  const text = guard.text_in_per_million !== undefined || guard.text_out_per_million !== undefined;
  const kinds = text ? (['audio', 'text'] as const) : (['audio'] as const);
  const problems = kinds.flatMap((kind) =>
    [`${kind}_in_per_million`, `${kind}_out_per_million`].flatMap((k) => priceProblem(k, guard[k], template) ?? []),
  );
  const list = problems.length ? null : listPrices(model);
  for (const kind of kinds) {
    const [inPrice, outPrice] = [guard[`${kind}_in_per_million`], guard[`${kind}_out_per_million`]];
    if (list && (!same(inPrice, list[kind].in) || !same(outPrice, list[kind].out)))
      problems.push(`${kind} set to ${inPrice} / ${outPrice} USD, but the price list has ${model} at ${list[kind].in} / ${list[kind].out}`);
  }
  const set = kinds
    .map(
      (kind) =>
        `${kind}_in_per_million ${JSON.stringify(guard[`${kind}_in_per_million`])}, ${kind}_out_per_million ${JSON.stringify(guard[`${kind}_out_per_million`])} USD`,
    )
    .join('; ');
  const against = list
    ? `; list price of ${model}: ${kinds.map((kind) => `${kind} ${list[kind].in} / ${list[kind].out}`).join(', ')}`
    : problems.length
      ? ''
      : `; ${model || 'the model'} is not in the price list: check them against the vendor's`;
  const unpriced = text ? '' : '; no text prices: the text tokens go unpriced (the meter marks those responses UNPRICED)';
  return {
    step: '2. Price constants set from current prices',
    measured: problems.length ? problems.join('; ') : `${set}${against}${unpriced}`,
    target:
      "audio prices set (> 0), not the template's, equal to the model's list price (@pydantic/genai-prices) when it has one; text prices likewise when set",
    status: pass(problems.length === 0),
  };
}

/** The countries of the configuration: the regions of its languages (pt-PT → PT), plus any the operator names. */
export function configuredCountries(raw: Record<string, any> | null, extra: string[]): string[] {
  const langs = [raw?.meta?.primary_language, ...(Array.isArray(raw?.meta?.alt_languages) ? raw.meta.alt_languages : [])];
  const regions = langs.flatMap((l) => {
    try {
      const region = typeof l === 'string' ? new Intl.Locale(l).region : undefined;
      return region && /^[A-Z]{2}$/.test(region) ? [region] : [];
    } catch {
      return [];
    }
  });
  return [...new Set([...regions, ...extra.map((c) => c.toUpperCase())])];
}

export function ratesStep(countries: string[], ratesFile: string): Row {
  const target = 'an inbound per-minute rate for every configured country (npm run concierge:rates -- <ISO> …)';
  const step = '3. Telephony rates fetched for the configured countries';
  if (!countries.length)
    return {
      step,
      measured: 'no country: the configured languages name no region (such as pt-PT); name them with --countries PT,GB',
      target,
      status: 'FAIL',
    };
  let rates: ReturnType<typeof readRates>;
  try {
    rates = readRates(ratesFile);
  } catch (error) {
    return { step, measured: `${ratesFile}: not readable (${(error as Error).message})`, target, status: 'FAIL' };
  }
  const found = countries.map((c) => ({ c, r: inboundRate(rates, c) }));
  const missing = found.filter((f) => !f.r).map((f) => f.c);
  const shown = found.map((f) => (f.r ? `${f.c} ${f.r.perMinute} ${f.r.unit}/min` : `${f.c} none`)).join(', ');
  return {
    step,
    measured: `${ratesFile}: ${shown}${missing.length ? ` — run npm run concierge:rates -- ${missing.join(' ')}` : ''}`,
    target,
    status: pass(missing.length === 0),
  };
}

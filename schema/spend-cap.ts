/**
 * When spend is over a cap: strictly greater (spend equal to the cap is still within it). The one
 * rule behind the meter's `cap_exceeded`, its Slack alerts and the gateway's spend-cap routing.
 * Spend is a sum of float costs, so it is compared once rounded (roundUsd): three calls of $0.10
 * are $0.30, within a $0.30 cap, whichever side adds them.
 */

/** Sums of floats carry noise (0.05 + 3.10 = 3.1500000000000004); money is shown and compared without it. */
export function roundUsd(value: number): number {
  return Number(value.toFixed(10));
}

export function overCap(spendUsd: number, capUsd: number): boolean {
  // Rounding moves a figure by under 1e-10: only one that close to the cap needs it (every request checks).
  if (spendUsd < capUsd - 1e-9) return false;
  return roundUsd(spendUsd) > capUsd;
}

/** Today's and the rolling 7-day spend beside their caps. */
export interface CapView {
  today: number;
  last7d: number;
  dailyCap: number;
  burnCap: number;
}

export function capExceeded(v: CapView): boolean {
  return overCap(v.today, v.dailyCap) || overCap(v.last7d, v.burnCap);
}

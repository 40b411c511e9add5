/**
 * When spend is over a cap: strictly greater (spend equal to the cap is still within it). The one
 * rule behind the meter's `cap_exceeded`, its Slack alerts and the gateway's spend-cap routing.
 */

export function overCap(spendUsd: number, capUsd: number): boolean {
  return spendUsd > capUsd;
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

/**
 * A caller who declines the consent line is tagged opted out in the back office, through the
 * existing path: the contact upsert of the qualify intent's function (`create_lead`), whose
 * `opted_out: true` (and `consent: "opted_out"`) marks the contact. That function needs a name;
 * the caller gave none, so the lead is named "(opted out)". Failures are logged, never thrown:
 * the caller has already been told the call ends.
 */
import type { Workflow } from '../workflow';

export async function tagOptedOut(opts: {
  workflow: Pick<Workflow, 'called'>;
  fn: string;
  callId: string;
  phone: string | null;
  transcript: string;
  log: { info: (m: string) => void; error: (m: string) => void };
}): Promise<void> {
  const { workflow, fn, callId, phone, log } = opts;
  if (!phone) return void log.error(`call ${callId}: the caller opted out but their number is unknown; no contact to tag`);
  const args = { name: '(opted out)', phone, opted_out: true, consent: 'opted_out', transcript: opts.transcript, utm: 'consent_opt_out' };
  try {
    const answer = await workflow.called({ function: fn, args, call_id: callId });
    if (answer.ok) log.info(`call ${callId}: the contact is tagged opted out (${fn})`);
    else log.error(`call ${callId}: tagging the opt-out failed: ${answer.error ?? 'refused'}`);
  } catch (error) {
    log.error(`call ${callId}: tagging the opt-out failed: ${(error as Error).message}`);
  }
}

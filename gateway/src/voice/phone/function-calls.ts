/**
 * The model's function calls, run through the existing workflow (same idempotency key:
 * sha256(call id + function + canonical args), same retries and dead letters). A call the model
 * repeats with the same arguments is a replay there: one booking, and the model gets the same
 * answer both times. Results are held until the response that asked for them is done (a new
 * response cannot start while one is in progress; one that starts says it is over, though its
 * `response.done` never came); then each becomes a `function_call_output` item (function-outputs.ts
 * gives them to the model). A `dial` target is not run: it asks the session to transfer the call.
 * Nor is the voicemail function during a call: a message is a recording, which the model cannot
 * give (its target requires the recording's URL), so the call is moved to voicemail's `<Record>`
 * and its recording callback files the message (voicemail.ts); the model is told so.
 * The same call_id announced twice is started once (one output for it).
 * Only the arguments the function declares are passed on: the realtime API does not hold the model
 * to its tools' schemas, and a caller can talk it into others the target acts on (a `recording_url`
 * for the back office to fetch, an `opted_out`). A booking or move for a time outside business hours
 * is refused to the model without calling the target (`refuse`), so it offers a time they are open.
 */
import { cutText } from '../../../../schema/cut-text';
import type { Workflow, WorkflowAnswer } from '../workflow';

type Outcome = 'booking' | 'rescheduled' | 'lead_created' | 'deflected_to_pricing' | 'voicemail_left';
type Intent = 'book' | 'reschedule' | 'qualify' | 'pricing_deflection' | 'voicemail';

/** What each function achieves when it succeeds, most telling first. */
const ACHIEVES: Array<[string, Outcome, Intent]> = [
  ['book_slot', 'booking', 'book'],
  ['reschedule_slot', 'rescheduled', 'reschedule'],
  ['create_lead', 'lead_created', 'qualify'],
  ['route_to_voicemail', 'voicemail_left', 'voicemail'],
  ['lookup_pricing_page', 'deflected_to_pricing', 'pricing_deflection'],
];

export interface FunctionCallEvent {
  call_id: string;
  name: string;
  arguments: string;
  response_id: string;
}

export interface FunctionOutput {
  call_id: string;
  /** The call as the model made it: a new session after a reconnect is given it with its output. */
  name: string;
  arguments: string;
  output: string;
}

const OUTPUT_LIMIT = 4000;

/** A name or id the model sent, as the log shows it: cut short, whatever its length (or its type). */
const logged = (v: unknown): string => (typeof v === 'string' ? cutText(v, 80) : `(${typeof v})`);

export class FunctionCalls {
  private readonly byResponse = new Map<string, Array<Promise<FunctionOutput | null>>>();
  private readonly done = new Set<string>();
  /** The call_ids already started in this call. */
  private readonly started = new Set<string>();
  private readonly inFlight = new Set<Promise<unknown>>();

  constructor(
    private readonly deps: {
      workflow: Pick<Workflow, 'called'>;
      callId: string;
      dialTarget: (name: string) => boolean;
      /** The arguments a function declares (concierge.json), or undefined for a function it does not have. */
      declaredArgs: (name: string) => readonly string[] | undefined;
      onDial: (fn: string, args: Record<string, unknown>) => void;
      /** Whether this function files a voicemail (then the call is moved to the recording: `onVoicemail`). */
      voicemailTarget?: (name: string) => boolean;
      onVoicemail?: () => void;
      /** Why a call is refused before it reaches its target (a booking outside business hours), or null. */
      refuse?: (fn: string, args: Record<string, unknown>) => string | null;
      /** What the model is given for a function's result (the pricing deflection adds to it). */
      enrich?: (fn: string, result: unknown) => Promise<unknown>;
      log: { warn: (m: string) => void };
    },
  ) {}

  start(ev: FunctionCallEvent): void {
    // The model answers each call_id once: the same event again (a resend) would otherwise get a
    // second function_call_output for one call.
    if (this.started.has(ev.call_id)) {
      this.deps.log.warn(`call ${this.deps.callId}: function call ${logged(ev.call_id)} (${logged(ev.name)}) announced again; ignored`);
      return;
    }
    this.started.add(ev.call_id);
    const run = this.run(ev);
    this.inFlight.add(run);
    void run.finally(() => this.inFlight.delete(run));
    const list = this.byResponse.get(ev.response_id) ?? [];
    list.push(run);
    this.byResponse.set(ev.response_id, list);
  }

  /** The outputs for a finished response (empty when it called nothing, or only a transfer). */
  async outputs(responseId: string): Promise<FunctionOutput[]> {
    const list = this.byResponse.get(responseId);
    this.byResponse.delete(responseId);
    if (!list) return [];
    return (await Promise.all(list)).filter((o): o is FunctionOutput => o !== null);
  }

  /** Whether some call's output is still to come: running, or its response not yet done. */
  get outstanding(): boolean {
    return this.inFlight.size > 0 || this.byResponse.size > 0;
  }

  /** Responses that announced calls and were never done (their session was lost): their outputs are still owed. */
  unclaimed(): string[] {
    return [...this.byResponse.keys()];
  }

  /** Waits (at most `ms`) for calls still running, so the call's outcome includes them. */
  async idle(ms: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const limit = new Promise<void>((r) => (timer = setTimeout(r, ms)));
    await Promise.race([Promise.allSettled([...this.inFlight]), limit]);
    clearTimeout(timer);
  }

  /** The call's outcome and intent from the functions that succeeded. */
  result(): { outcome: Outcome | 'abandoned'; intent: Intent | null } {
    const hit = ACHIEVES.find(([fn]) => this.done.has(fn));
    return hit ? { outcome: hit[1], intent: hit[2] } : { outcome: 'abandoned', intent: null };
  }

  /**
   * Never rejects: a fault on the model's call (a name or arguments a check chokes on) is its
   * failed output, so the model is still answered and the call goes on.
   */
  private async run(ev: FunctionCallEvent): Promise<FunctionOutput | null> {
    try {
      return await this.attempt(ev);
    } catch (error) {
      this.deps.log.warn(`call ${this.deps.callId}: a function call failed in the bridge: ${(error as Error).message}`);
      return this.output(ev, { ok: false, error: 'the call could not be made' });
    }
  }

  private async attempt(ev: FunctionCallEvent): Promise<FunctionOutput | null> {
    let args: unknown;
    try {
      args = JSON.parse(ev.arguments || '{}');
    } catch {
      args = null;
    }
    if (!args || typeof args !== 'object' || Array.isArray(args)) {
      return this.output(ev, { ok: false, error: 'arguments: expected a JSON object' });
    }
    const declared = this.deps.declaredArgs(ev.name);
    if (declared) args = Object.fromEntries(Object.entries(args).filter(([name]) => declared.includes(name)));
    if (this.deps.dialTarget(ev.name)) {
      this.deps.onDial(ev.name, args as Record<string, unknown>);
      return null;
    }
    if (this.deps.voicemailTarget?.(ev.name)) {
      this.deps.onVoicemail?.();
      return this.output(ev, {
        ok: true,
        result: 'The caller is being put through to voicemail: they hear the tone and record their message, which is kept for a call back.',
      });
    }
    const refused = this.deps.refuse?.(ev.name, args as Record<string, unknown>);
    if (refused) return this.output(ev, { ok: false, error: refused });
    try {
      const answer: WorkflowAnswer = await this.deps.workflow.called({
        function: ev.name,
        args: args as Record<string, unknown>,
        call_id: this.deps.callId,
      });
      if (!answer.ok) return this.output(ev, { ok: false, error: answer.error ?? 'failed' });
      this.done.add(ev.name);
      const result = this.deps.enrich ? await this.deps.enrich(ev.name, answer.result) : answer.result;
      return this.output(ev, { ok: true, result });
    } catch (error) {
      // Unknown function, the first call with this key still running elsewhere, or the workflow
      // store not answering in time (nothing called: the model may call it again).
      // The message may quote the name (an unknown function): cut as well.
      this.deps.log.warn(`call ${this.deps.callId}: function ${logged(ev.name)} failed: ${cutText((error as Error).message, 1000)}`);
      return this.output(ev, { ok: false, error: (error as Error).message });
    }
  }

  private output(ev: FunctionCallEvent, value: unknown): FunctionOutput {
    const text = JSON.stringify(value);
    const { call_id, name } = ev;
    return {
      call_id,
      name,
      arguments: ev.arguments || '{}',
      output: text.length > OUTPUT_LIMIT ? `${cutText(text, OUTPUT_LIMIT)}…` : text,
    };
  }
}

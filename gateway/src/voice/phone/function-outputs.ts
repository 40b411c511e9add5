/**
 * The function results the model is owed, across realtime reconnects. A result goes into the
 * conversation as a `function_call_output` item, then `response.create` asks for the answer; it is
 * owed until a response created after the conversation holds it is done (the model has answered it).
 *
 * One response at a time writes to the conversation: a result that comes in while one is in
 * progress (the model answering the caller) is added at once, and the answer is asked for when
 * that response is done (asking then would be refused, `conversation_already_has_active_response`,
 * and nothing would ask again), or once the server holds the result if that comes later. Which
 * results a response saw is read from the server's order of events: its `conversation.item.added`
 * for the output came before the `response.created`.
 *
 * The caller's keys are answered here too, one answer at a time: asked for at once when no
 * response runs and none is asked for. One asked for before the keys (or under way, and cut by
 * them) does not see them, so once it is done an answer is asked for again, or the keys would get
 * none; one asked for beside it would be refused, and would not see them either. Whether a
 * response saw the keys is read from the server's echo of their item (its id is the bridge's own),
 * never from that of another caller item: a line replayed into a new session, a turn committed.
 *
 * A reconnect starts a new conversation that never saw the call, and the Realtime API refuses an
 * output whose `function_call` item the conversation does not hold. So the new conversation is
 * given every owed result (one still running is given when it is in; one the lost session had but
 * never answered is given again), each after its `function_call` item, created by the client
 * with the same call_id, name and arguments. Until a session is ready, results wait.
 *
 * Once the call is being transferred or closed nothing more is asked for: a result that comes in
 * then, or that the server adds then, would have the model talk after "connecting you" or over the
 * closing line (its audio is dropped, but the response is billed, metered and counted as a turn).
 */
import type { FunctionOutput } from './function-calls';

type Send = (event: { type: string } & Record<string, unknown>) => void;

interface Owed {
  result: FunctionOutput;
  /** The conversation that was given the output (0: none yet). */
  givenIn: number;
  /** The server added the output to that conversation: a response created from now on sees it. */
  held: boolean;
  /** The response that answers it, once one is created after it is held. */
  answeredBy: string | null;
}

export class FunctionOutputs {
  private conversation = 1;
  /** The conversation in which the model announced each call (holding its function_call item). */
  private readonly announcedIn = new Map<string, number>();
  private readonly owed: Owed[] = [];
  /** The response in progress in the current conversation, if any. */
  private active: string | null = null;
  /** An answer asked for and not yet created. */
  private asked = false;
  /**
   * The caller's keys, given while results are owed, that no response has seen yet: their item's
   * id, and whether the server holds it (its own echo; another user item, such as a line replayed
   * into a new session, may come before it).
   */
  private keys: { item: string; held: boolean } | null = null;
  /** The call is being transferred or closed: no answer is asked for any more. */
  private closed = false;

  constructor(private readonly send: Send) {}

  /** Whether results wait to be given or answered (a new session then asks for the answer here). */
  get owing(): boolean {
    return this.owed.length > 0;
  }

  /** An answer was asked for here and has not begun: another asked now would be refused. */
  get asking(): boolean {
    return this.asked;
  }

  announced(callId: string): void {
    this.announcedIn.set(callId, this.conversation);
  }

  /** A reconnect: the new session holds none of the old conversation's items, and runs no response. */
  newConversation(): void {
    this.conversation++;
    this.active = null;
    this.asked = false;
    this.keys = null; // the new session is given them with the history, and asked to answer
  }

  /** The call is being transferred or closed: from now on no answer is asked for. */
  close(): void {
    this.closed = true;
  }

  /** The caller's keys were given to the model as their turn: they are answered (now, or after the answer under way). */
  typed(item: string): void {
    this.keys = { item, held: false };
    this.ask();
  }

  /** An answer the call asks for itself (a failed one, again): one at a time, as any asked here. */
  answer(): void {
    this.ask();
  }

  add(results: FunctionOutput[]): void {
    for (const result of results) this.owed.push({ result, givenIn: 0, held: false, answeredBy: null });
  }

  /** Gives the current conversation the results it lacks, then asks for the answer (a session must be ready). */
  give(): void {
    const missing = this.owed.filter((o) => o.givenIn !== this.conversation);
    for (const o of missing) {
      const { call_id, name, arguments: args, output } = o.result;
      if (this.announcedIn.get(call_id) !== this.conversation) {
        this.send({ type: 'conversation.item.create', item: { type: 'function_call', call_id, name, arguments: args } });
      }
      this.send({ type: 'conversation.item.create', item: { type: 'function_call_output', call_id, output } });
      Object.assign(o, { givenIn: this.conversation, held: false, answeredBy: null });
    }
    if (missing.length) this.ask();
  }

  /** The server added an item to the conversation: an output of ours is now held there. */
  added(item: { id?: unknown; type?: unknown; call_id?: unknown } | undefined): void {
    if (this.keys && item?.id === this.keys.item) this.keys.held = true;
    if (item?.type !== 'function_call_output') return;
    const ours = this.owed.filter((o) => o.result.call_id === item.call_id && o.givenIn === this.conversation);
    for (const o of ours) o.held = true;
    // Given beside a response that was done before the server held it: that one did not see it
    // and asked for nothing, so the answer is asked for now (not while another runs or is asked for).
    if (ours.length) this.ask();
  }

  /** A response was created: it answers the results its conversation already holds. */
  responseCreated(id: string): void {
    this.active = id;
    this.asked = false;
    if (this.keys?.held) this.keys = null;
    for (const o of this.owed) if (o.givenIn === this.conversation && o.held && o.answeredBy === null) o.answeredBy = id;
  }

  /** A response is done: the results it answered are paid; those added while it ran are asked about now. */
  responseDone(id: string): void {
    if (this.active === id) this.active = null;
    for (let i = this.owed.length - 1; i >= 0; i--) {
      if (this.owed[i].answeredBy !== id) continue;
      this.announcedIn.delete(this.owed[i].result.call_id); // paid: never given again
      this.owed.splice(i, 1);
    }
    if (this.keys || this.owed.some((o) => o.givenIn === this.conversation && o.held && o.answeredBy === null)) this.ask();
  }

  /** One response at a time: asked for only while none is in progress or already asked for. */
  private ask(): void {
    if (this.closed || this.active !== null || this.asked) return;
    this.asked = true;
    this.keys = null; // asked after them: the answer sees them
    this.send({ type: 'response.create' });
  }
}

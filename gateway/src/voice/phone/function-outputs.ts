/**
 * The function results the model is owed, across realtime reconnects. A result goes into the
 * conversation as a `function_call_output` item, then `response.create` asks for the answer; it is
 * owed until a response created after it is done (the model has answered it).
 *
 * A reconnect starts a new conversation that never saw the call, and the Realtime API refuses an
 * output whose `function_call` item the conversation does not hold. So the new conversation is
 * given every owed result (one still running is given when it is in; one the lost session had but
 * never answered is given again), each after its `function_call` item, created by the client
 * with the same call_id, name and arguments. Until a session is ready, results wait.
 */
import type { FunctionOutput } from './function-calls';

type Send = (event: { type: string } & Record<string, unknown>) => void;

interface Owed {
  result: FunctionOutput;
  /** The conversation that holds the output (0: none yet). */
  givenIn: number;
  /** The response that answers it, once one is created after it. */
  answeredBy: string | null;
}

export class FunctionOutputs {
  private conversation = 1;
  /** The conversation in which the model announced each call (holding its function_call item). */
  private readonly announcedIn = new Map<string, number>();
  private readonly owed: Owed[] = [];

  constructor(private readonly send: Send) {}

  /** Whether results wait to be given or answered (a new session then asks for the answer here). */
  get owing(): boolean {
    return this.owed.length > 0;
  }

  announced(callId: string): void {
    this.announcedIn.set(callId, this.conversation);
  }

  /** A reconnect: the new session holds none of the old conversation's items. */
  newConversation(): void {
    this.conversation++;
  }

  add(results: FunctionOutput[]): void {
    for (const result of results) this.owed.push({ result, givenIn: 0, answeredBy: null });
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
      o.givenIn = this.conversation;
      o.answeredBy = null;
    }
    if (missing.length) this.send({ type: 'response.create' });
  }

  /** A response was created: it answers the results its conversation already holds. */
  responseCreated(id: string): void {
    for (const o of this.owed) if (o.givenIn === this.conversation && o.answeredBy === null) o.answeredBy = id;
  }

  responseDone(id: string): void {
    for (let i = this.owed.length - 1; i >= 0; i--) if (this.owed[i].answeredBy === id) this.owed.splice(i, 1);
  }
}

/**
 * Service calls of the fakes: every call is counted by `Class.method` (so tests and benches can
 * show that a feature's cost does not grow with the sheet), faults are injected here (a call that
 * throws, as Google's services do half-way through a script), and observers see every call.
 */

/** Which calls a fault or an observer is about: the call's `Class.method` and, for writes, the tab. */
type CallFilter = (name: string, tab?: string) => boolean;

/** The message Apps Script throws when the Sheets service times out part-way through a script. */
export const SHEETS_TIMEOUT = 'Service Spreadsheets timed out while accessing document with id fake-spreadsheet-id.';
/** What Apps Script throws when Drive or Calendar fails part-way (the call may have done its work). */
const SERVER_ERROR = "We're sorry, a server error occurred. Please wait a bit and try again.";
/** Calls that reach the Sheets service. */
export const SHEETS_CALL: CallFilter = (name) => /^(Spreadsheet|Sheet|Range|TextFinder)\./.test(name);

/**
 * Counts service calls by `Class.method`. Coordinates of a Range object are local, not calls.
 * Also where faults are injected (a call that throws, as Google's services do half-way through a
 * script) and where observers see every call.
 */
export class CallCounter {
  readonly byName = new Map<string, number>();
  total = 0;
  private faults: Array<{ after: CallFilter; fail: CallFilter; message: string; armed: boolean }> = [];
  private lostReplies: Array<{ lost: CallFilter; message: string }> = [];
  private readonly observers: Array<(name: string) => void> = [];
  count(name: string, tab?: string): void {
    const fault = this.faults.find((f) => f.armed && f.fail(name, tab));
    if (fault) {
      this.faults.splice(this.faults.indexOf(fault), 1);
      throw new Error(fault.message);
    }
    this.total++;
    this.byName.set(name, (this.byName.get(name) ?? 0) + 1);
    for (const f of this.faults) if (!f.armed && f.after(name, tab)) f.armed = true;
    for (const observe of this.observers) observe(name);
  }
  /** Once a call matching `after` has run, the next call matching `fail` throws `message` (once). */
  failAfter(after: CallFilter, fail: CallFilter = SHEETS_CALL, message = SHEETS_TIMEOUT): void {
    this.faults.push({ after, fail, message, armed: false });
  }
  /**
   * The next call matching `lost` does its work and then throws `message` (once): its reply was
   * lost, as when Drive or Calendar times out after doing what it was asked. Only calls whose fake
   * reports `done` can lose their reply.
   */
  loseReply(lost: CallFilter, message = SERVER_ERROR): void {
    this.lostReplies.push({ lost, message });
  }
  /** Called by a fake once a call has done its work: throws when that call's reply is to be lost. */
  done(name: string, tab?: string): void {
    const lost = this.lostReplies.find((l) => l.lost(name, tab));
    if (!lost) return;
    this.lostReplies.splice(this.lostReplies.indexOf(lost), 1);
    throw new Error(lost.message);
  }
  /** Whether an injected fault is still waiting to fire. */
  pendingFaults(): number {
    return this.faults.length + this.lostReplies.length;
  }
  observe(observer: (name: string) => void): void {
    this.observers.push(observer);
  }
  reset(): void {
    this.total = 0;
    this.byName.clear();
  }
  get(name: string): number {
    return this.byName.get(name) ?? 0;
  }
}

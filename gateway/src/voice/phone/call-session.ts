/**
 * (Over 300 lines: the call's life in one place, every event of both sides beside the state it changes;
 * the edges hook in here, their rules live in consent.ts, own-responses.ts, pricing.ts, voicemail.ts.)
 *
 * One phone call: Twilio's media stream on one side, the realtime session on the other, the
 * configuration's policy in between.
 *
 *   caller frame      → `input_audio_buffer.append` at once, bytes unchanged; its duration to the guard once sent
 *   `output_audio.delta` → Twilio `media` at once, bytes unchanged, then a `mark` (see playback.ts)
 *   caller speaks over the assistant → Twilio `clear` + `conversation.item.truncate` at what was heard
 *   end of caller speech → first audio of the answer: the TTFB the guard checks against the budget
 *   consent           the opening line first (no model turn before it), then the caller's answer
 *                     decides (consent.ts): repeated, declined (told, ended, tagged) or agreed;
 *                     a line the model fails to say (no audio of it sent) is a realtime failure
 *   caller transcript → the guard, with its confidence (confidence.ts); each caller turn has its
 *                     place from its commit, transcribed or not (caller-transcript.ts); what the
 *                     transcription used → the meter and the guard's cost (transcription-usage.ts)
 *   caller keys (`dtmf`) → one entry per run of keys (keypad.ts): `0` alone transfers to a person,
 *                     any other is the caller's turn, as text, once the opening line was said
 *   `response.done`   → the guard (usage), the meter (one event per response), function outputs
 *   a reconnect       → the new session is given the function results the model has not answered
 *   guard: escalate   → transfer to a person; disconnect → closing line, then the call is completed
 *   what the call cost (each response.done, each guard verdict) → the session's `max_output_tokens`:
 *                     no response can generate more than what is left of the per-call budget
 *   the end (Twilio `stop`, hang-up, transfer, disconnect) → the call record, with `ended_reason`
 */
import type { RealtimeResponse } from 'openai/resources/realtime/realtime';
import { cutText } from '../../../../schema/cut-text';
import WebSocket from 'ws';
import { AssistantTranscript } from './assistant-transcript';
import { slotOutsideHours } from '../business-hours';
import { CallActions } from './call-actions';
import { CallerTranscript } from './caller-transcript';
import { ConsentGate } from './consent';
import type { EndReason, SessionDeps, TwilioMessage } from './call-types';
import { writeCallRecord } from './call-record';
import { transcriptConfidence } from './confidence';
import { FunctionCalls } from './function-calls';
import { FunctionOutputs } from './function-outputs';
import { GuardFeed, type Verdict } from './guard-feed';
import { entryText, Keypad, type KeypadEntry } from './keypad';
import { tagOptedOut } from './opt-out';
import { OwnResponses } from './own-responses';
import { PricingDeflection } from './pricing';
import { responseEvent } from './meter-event';
import { base64Bytes, Playback } from './playback';
import { describeError, type RealtimeServerMessage } from './realtime-link';
import { RealtimeSession, type SaidLine } from './realtime-session';
import { outputAllowance, outputLimit, sessionUpdate, TRANSCRIBE_MODEL, turnTaking } from './session-config';
import { TranscriptionUsage } from './transcription-usage';
import { TurnTiming } from './turn-timing';
import { cleanUsage, type Usage } from './usage';
import { tokenPrices, usageCost } from '../spend-guard';

/** Whole base64 (groups of 4, padding only at the end): anything else is not audio the API or Twilio takes. */
const B64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const CLOSING_LIMIT_MS = 10_000;
/**
 * The output a closing line may have whatever is left of the budget (it is said once the budget is
 * gone): more than its 10 s of audio (200 tokens) and its transcript.
 */
const CLOSING_OUTPUT_TOKENS = 300;
const STOP_WAIT_MS = 10_000;
/** 4 MiB of media messages is about 6 minutes of audio: more than the longest answer (4,096 tokens, 205 s). */
const OUTBOUND_LIMIT_BYTES = 4 * 1024 * 1024;
/** How long an ended call waits for the response.done of the answer it cancelled (the API answers a cancel at once). */
const SETTLE_WAIT_MS = 2_000;
/**
 * How long an ended call's record waits for its function calls: the workflow's own bound (3
 * attempts of 15 s, 1.5 s between them), so a booking that succeeds after the caller hung up is
 * recorded as one; at shutdown only 5 s (the grace must cover every live call).
 */
const FUNCTIONS_WAIT_MS = 47_000;
const FUNCTIONS_WAIT_AT_SHUTDOWN_MS = 5_000;
const CONSENT_WAIT_MS = 8_000;
/**
 * How long past the time the opening line has had to play its last mark may be awaited: a stream
 * that loses marks would otherwise never let the line be heard (no turns, no answer to it, no keys).
 */
const MARKS_LATE_MS = 2_000;
const KEYPAD_PAUSE_MS = 2_000;
/** Reasons the model may give when it transfers (its `reason` argument); anything else is `transfer`. */
const MODEL_REASONS = new Set<string>(['caller_request', 'frustration_markers', 'low_confidence'] satisfies EndReason[]);

export class CallSession {
  private phase: 'live' | 'closing' | 'transferring' | 'ended' = 'live';
  private reason: EndReason | null = null;
  /** The cap was reached and the call goes on (disconnect_when_exceeded false): logged once. */
  private overCapSaid = false;
  /** The agent's audio reached the caller at least once. */
  private spoke = false;
  /** Handed to voicemail (network issue, the caller's request): true once Twilio took the redirect (the voicemail flow writes the record). */
  private toVoicemail: Promise<boolean> | null = null;
  private escalated = false;
  private readonly playback = new Playback();
  private readonly feed: GuardFeed;
  private readonly functions: FunctionCalls;
  private readonly results: FunctionOutputs;
  private readonly rt: RealtimeSession;
  private readonly actions: CallActions;
  private readonly said: SaidLine[] = [];
  private readonly spoken: AssistantTranscript;
  private readonly heard: CallerTranscript;
  private readonly timing = new TurnTiming();
  private responding: string | null = null;
  /** Responses metered and given to the guard as lost (responseLost): a response.done of theirs that still comes counts nothing more. */
  private readonly countedLost = new Set<string>();
  private playingResponse: string | null = null;
  /** The item whose audio was sent last (playingResponse's). */
  private playingItem: string | null = null;
  /** The last item whose audio the model finished (response.output_audio.done): one heard whole, not cut. */
  private audioEnded: string | null = null;
  /** Responses of which some audio reached Twilio. */
  private readonly voiced = new Set<string>();
  /** The audio items of the current realtime session: the only ones it can truncate. */
  private readonly sessionItems = new Set<string>();
  private readonly own: OwnResponses;
  /** The bridge's own lines all of whose audio is with Twilio: said, whatever their response.done (ownLineSent). */
  private readonly ownSaid = new Set<string>();
  private closing: {
    line: string;
    id: string | null;
    generated: boolean;
    retried: boolean;
    done: () => void;
    /** Ends the wait at the limit: from the request until the line's first audio, then from that. */
    timer: NodeJS.Timeout | null;
    /** Some audio of the line as now asked for was sent. */
    playing: boolean;
  } | null = null;
  private readonly consent: ConsentGate;
  private readonly keypad: Keypad;
  /** Where a transfer goes: a person's number, or none (then a closing line). */
  private readonly dialNumber: string | null;
  /** The opening line being said: done once generated and every mark of it came back. */
  private consentLine: { id: string; generated: boolean } | null = null;
  /** Takes the opening line as heard should its marks never come back. */
  private lineTimer: NodeJS.Timeout | null = null;
  /** Caller turns committed while the model took no turns (the consent line being said), by item id. */
  private readonly unansweredTurns = new Set<string>();
  /** The caller agreed in such a turn, over the line said again: the model answers it once the line is heard. */
  private answerAgreement = false;
  /** The model answers turns by itself only once the opening line was said. */
  private respondOnTurn = false;
  /** What the session's server VAD is to do: answer and cut turns, or not (until the consent line is heard). */
  private vadResponds = false;
  /** What the current realtime session was told of it (its session.update, or a partial one since). */
  private vadTold = false;
  /** A caller turn the server VAD committed, to be answered by itself: its response has not begun yet. */
  private turnOwed = false;
  private readonly tagging: Array<Promise<void>> = [];
  private readonly pricing: PricingDeflection;
  private readonly transcriptions: TranscriptionUsage;
  private lastConfidence: number | null = null;
  private estAtDisconnect: number | null = null;
  private failure: string | null = null;
  private warnedNoLogprobs = false;
  private ended: Promise<void> | null = null;
  /** The response under way when the call ended, cancelled: its response.done ends the wait. */
  private settling: { id: string; done: () => void } | null = null;
  private stopTimer: NodeJS.Timeout | null = null;
  /** Keypad entries given to the model so far: each one's item id. */
  private keyEntries = 0;
  /** Answers that failed in a row (rate limited, out of quota): the first is asked for again, the second is a realtime failure. */
  private failedAnswers = 0;
  /** What the call cost so far, as the guard last said (or more: responses it has not answered for yet). */
  private spentUsd = 0;
  /** Responses given to the guard: once its answer counts as many turns, its figure is the call's cost. */
  private responsesFed = 0;
  /** The session's `max_output_tokens`, from what is left of the budget (outputAllowance). */
  private allowance: number | 'inf';

  constructor(
    readonly callSid: string,
    private readonly streamSid: string,
    private readonly numbers: { from: string | null; to: string | null },
    private readonly ws: WebSocket,
    private readonly deps: SessionDeps,
  ) {
    const { config, log } = deps;
    const callerNumber = numbers.from;
    const dial = { number: config.functions.find((f) => f.dial)?.dial ?? null, action: deps.urls.dial(callerNumber) };
    this.dialNumber = dial.number;
    this.allowance = outputAllowance(config, 0);
    this.keypad = new Keypad(deps.keypadPauseMs ?? KEYPAD_PAUSE_MS, (entry) => this.keyed(entry));
    this.pricing = new PricingDeflection({ config, calls: deps.calls, callSid, caller: numbers.from, business: numbers.to, log });
    this.feed = new GuardFeed(deps.voice, callSid, (v) => this.verdict(v), log);
    this.transcriptions = new TranscriptionUsage({
      meter: deps.meter,
      guard: (usd) => this.feed.event({ type: 'transcription.done', usd }),
    });
    this.actions = new CallActions({ calls: deps.calls, callSid, dial, lines: deps.lines, log });
    this.functions = this.functionCalls();
    this.rt = this.realtimeSession(callerNumber);
    this.consent = this.consentGate();
    this.spoken = new AssistantTranscript((id) => this.voiced.has(id), {
      add: (line) => this.remember(line),
      remove: (line) => this.forget(line),
    });
    this.heard = new CallerTranscript({ add: (line) => this.remember(line), remove: (line) => this.forget(line) }, (m) =>
      log.warn(`call ${callSid}: ${m}`),
    );
    this.own = new OwnResponses((e) => this.rt.send(e));
    this.results = new FunctionOutputs((e) => this.rt.send(e));
    this.rt.onEvent = (e) => this.onRealtime(e);
    this.rt.onReady = (first) => this.ready(first);
    this.rt.onLost = (why) => (this.responseLost(), this.lost(why));
    // Counted as the model gets it: audio held through a reconnect that fails is never billed.
    this.rt.onAudioSent = (bytes) => this.feed.frame('user', bytes);
    this.rt.start();
  }

  /** The model's function calls, run through the workflow; a transfer among them moves the call. */
  private functionCalls(): FunctionCalls {
    const { config, workflow, log } = this.deps;
    return new FunctionCalls({
      workflow,
      callId: this.callSid,
      dialTarget: (name) => config.functions.some((f) => f.name === name && f.dial),
      declaredArgs: (name) => config.functions.find((f) => f.name === name)?.args,
      enrich: (fn, result) => this.pricing.handle(fn, result),
      refuse: (fn, args) => slotOutsideHours(config.meta.business_hours_local, config.meta.timezone, fn, args),
      // Text only: String() of an object the model wrote, such as {"toString": 1}, throws.
      onDial: (_fn, args) =>
        void this.transfer(typeof args.reason === 'string' && MODEL_REASONS.has(args.reason) ? (args.reason as EndReason) : 'transfer'),
      voicemailTarget: (name) => name === this.deps.voicemail.fn,
      onVoicemail: () => void this.voicemail('caller_request'),
      log,
    });
  }

  /** The realtime model's session, which this call's state steers across reconnects. */
  private realtimeSession(callerNumber: string | null): RealtimeSession {
    const { config, settings, log } = this.deps;
    return new RealtimeSession({
      url: settings.realtimeUrl,
      apiKey: settings.openaiApiKey,
      update: () => sessionUpdate(config, callerNumber, { respond: (this.vadTold = this.vadResponds), maxOutputTokens: this.allowance }),
      budgetMs: config.guardrails.latency_budget_s * 1000,
      // A response under way sends its events faster than its audio plays, and one asked for (or owed
      // a committed turn) begins at once: a server silent meanwhile has stalled.
      watch: { silentForMs: this.deps.realtimeSilentForMs, owed: () => this.owedByServer() },
      // A session being replaced finishes nothing more: what it had said of a line counts now,
      // and the caller's turns it had not transcribed stay as such; no answer runs or is asked
      // for in the new one (results counts from there: the answer below is asked through it).
      history: () => (this.spoken.flush(), this.heard.flush('the session was lost first'), this.results.newConversation(), this.said),
      // A new session that owes one of the bridge's lines says it (ready), not an answer; a
      // function result still owed asks for the answer itself, once it is given (ready). Nor while
      // the opening line plays: words said over it are not answered (vadTakesTurns), or the answer
      // would queue behind it and the caller's next words, a barge-in on it, clear the line.
      awaitingAnswer: () =>
        this.phase === 'live' &&
        this.respondOnTurn &&
        !this.consentLine &&
        !this.owedLine() &&
        !this.functions.outstanding &&
        !this.results.owing &&
        ((this.responding !== null && !this.ownSaid.has(this.responding)) || this.said.at(-1)?.speaker === 'user'),
      // Through results, one answer at a time: keys pressed before it begins are answered after it.
      answer: () => this.results.answer(),
      log,
      callId: this.callSid,
    });
  }

  /** What the realtime server owes the call now, if anything: the response under way, one asked for, a turn's answer. */
  private owedByServer(): string | null {
    // Transferring, the model is heard no more; ended, the settle waits for it, briefly.
    if (this.phase === 'transferring' || this.phase === 'ended') return null;
    if (this.responding !== null) return 'the response in progress';
    if (this.results.asking || this.own.awaited) return 'the answer asked for';
    return this.turnOwed && this.phase === 'live' ? "the answer to the caller's turn" : null;
  }

  /** The consent line's gate: said again, declined, or never answered. */
  private consentGate(): ConsentGate {
    const { config, lines, consentWaitMs } = this.deps;
    const triggers = config.intents.filter((i) => i.id !== 'voicemail').flatMap((i) => i.triggers);
    return new ConsentGate({
      retryIfNoAck: config.consent.retry_if_no_ack,
      maxRetries: config.consent.max_retries,
      triggers,
      waitMs: consentWaitMs ?? CONSENT_WAIT_MS,
      actions: {
        repeat: () => this.sayConsent(true),
        declined: (text) => this.optOut(text),
        noAck: () => void this.closeWith(lines.noConsent, 'no_consent'),
      },
    });
  }

  /** A message from Twilio's media stream (already parsed). */
  onTwilio(m: TwilioMessage): void {
    if (m.event === 'media') {
      const payload = m.media?.payload;
      if (this.phase !== 'live' || typeof payload !== 'string' || !B64.test(payload)) return;
      const bytes = base64Bytes(payload);
      if (bytes > 0) this.rt.append(payload, bytes);
    } else if (m.event === 'mark') {
      if (typeof m.mark?.name === 'string') this.playback.echoed(m.mark.name);
      this.checkClosing();
      this.checkConsentLine();
    } else if (m.event === 'dtmf') this.keypad.pressed(m.dtmf);
    else if (m.event === 'stop') void this.finish('caller_hangup');
  }

  /**
   * A keypad entry. `0` alone is the caller asking for a person (the usual "press 0"): transferred,
   * as when they say so, when a person's number is configured. Any other entry is the caller's
   * turn, as text the model answers (an answer it was giving is cut, as by the caller speaking);
   * until the opening line was heard to its end (it is never cut) it is dropped (logged).
   */
  private keyed(entry: KeypadEntry): void {
    if (this.phase !== 'live') return;
    if (entry.keys === '0' && this.dialNumber) return void this.transfer('caller_request');
    if (!this.respondOnTurn || this.consentLine)
      return this.deps.log.info(`call ${this.callSid}: keys pressed before the opening line was heard: ignored`);
    const text = entryText(entry);
    const cutting = this.rt.isReady && (this.responding !== null || this.playback.playing());
    // The line the keys cut, or the lost session's unfinished one (reconnecting), came first: it
    // is settled, as far as it had come, before the keys.
    if (cutting || !this.rt.isReady) this.spoken.flush();
    this.remember({ speaker: 'user', text });
    // Not ready (reconnecting): the new session gets it with the history and is asked to answer.
    if (!this.rt.isReady) return;
    if (cutting) this.silenceModel();
    // Its own id, so the server's echo of it is told from that of any other caller item.
    const id = `keys_${++this.keyEntries}`;
    this.rt.send({
      type: 'conversation.item.create',
      item: { id, type: 'message', role: 'user', content: [{ type: 'input_text', text }] },
    });
    if (this.owedLine()) return;
    // A function result still to come asks for the answer itself, and that answer sees the keys.
    if (this.functions.outstanding && !this.results.owing && !this.results.asking) return;
    // One answer at a time (another asked beside it would be refused): results asks for it now,
    // or once the answer running or asked for is done, if that one did not see the keys.
    this.results.typed(id);
  }

  /** Why the call ended, once decided (a realtime failure handed to voicemail says so here). */
  get decidedReason(): EndReason | null {
    return this.reason;
  }

  /** Whether the call is ending or ended (whatever comes now changes nothing). */
  get over(): boolean {
    return this.ended !== null;
  }

  /** Ends the call (idempotent); the reason already decided, if any, wins. */
  finish(reason: EndReason): Promise<void> {
    return (this.ended ??= this.end(reason));
  }

  /**
   * A stream that has stopped taking what is sent (Twilio reads nothing, its frames may still come)
   * would have every answer's audio held here, in memory, for as long as the call lasts: past
   * OUTBOUND_LIMIT_BYTES (minutes of audio, more than any one answer) nothing more is sent and the
   * call ends as `stream_lost`, as one that falls silent does.
   */
  private toTwilio(text: string): void {
    if (this.ws.readyState !== WebSocket.OPEN) return;
    if (this.ws.bufferedAmount <= OUTBOUND_LIMIT_BYTES) return this.ws.send(text);
    if (this.phase === 'ended') return;
    this.deps.log.warn(
      `call ${this.callSid}: Twilio is not taking the audio (${this.ws.bufferedAmount} bytes waiting to be written to it); ending the call`,
    );
    void this.finish('stream_lost');
    this.ws.terminate(); // what it holds is let go now, not after the close handshake it will not read
  }

  private ready(first: boolean): void {
    // The line was heard (or said again) while this session was being set up, after its
    // session.update went: told now, or its VAD would keep the old setting for the rest of the call.
    if (this.vadTold !== this.vadResponds) this.sendTurnTaking();
    if (!first) {
      // A new conversation after a reconnect: nothing of the old one is in progress there.
      this.turnOwed = false;
      this.responseLost();
      this.sessionItems.clear();
      this.timing.reset();
      // Function results the model has not answered go to the new conversation (results began it
      // as it was given the history), those of calls whose response the lost session never finished too.
      for (const id of this.functions.unclaimed()) void this.deliver(id);
      if (this.phase === 'live') this.results.give();
      // A repeat of the line the caller agreed over before it was generated is not asked of the
      // new session (owedLine): it is done with, as heard, or the model would take no turns for
      // the rest of the call and the agreement would never be answered.
      if (
        this.phase === 'live' &&
        this.consent.settled &&
        ((this.consentLine && !this.consentLine.generated) || this.own.expects('consent'))
      ) {
        this.own.forget('consent');
        this.lineHeard();
      }
    }
    this.sayOwedLine();
  }

  /**
   * The bridge's own line a session owes: the opening line until it was said once; a repeat of it,
   * or the closing line, that the lost session had not finished generating (asked of it, maybe
   * begun, never done) is asked of the new one, or the caller would be left in silence.
   */
  private sayOwedLine(): void {
    const owed = this.owedLine();
    if (owed === 'closing') this.askClosing();
    else if (owed === 'opening') this.sayConsent(false);
    else if (owed === 'repeat') this.sayConsent(true);
  }

  private owedLine(): 'opening' | 'repeat' | 'closing' | null {
    if (this.phase === 'closing') return this.closing && !this.closing.generated ? 'closing' : null;
    if (this.phase !== 'live') return null;
    if (!this.respondOnTurn) return 'opening';
    const repeating = (this.consentLine && !this.consentLine.generated) || this.own.expects('consent');
    return repeating && !this.consent.settled ? 'repeat' : null;
  }

  /** The opening line, first or again; the model's own answer to the caller (if any) gives way. */
  private sayConsent(again: boolean): void {
    if (this.phase !== 'live') return;
    const line = this.deps.config.consent.opening_line;
    const instructions = again
      ? `Repeat to the caller exactly these words, in full: "${line}"`
      : `Greet the caller now with exactly these words, in full: "${line}"`;
    if (again) {
      // Said again, it is heard whole too: the server VAD neither cuts nor answers it until it is said.
      this.vadTakesTurns(false);
      this.silenceModel();
    }
    this.own.ask('consent', { instructions }, this.responding !== null);
  }

  /** Stops what the model is saying (or about to say): cancelled, muted, cleared at Twilio. */
  private silenceModel(): void {
    this.rt.send({ type: 'response.cancel' }); // also one we have not seen created yet
    this.own.mute(this.responding);
    this.cutPlayback();
  }

  /**
   * Stops the assistant audio playing at Twilio, and truncates each item at what the caller heard
   * of it (those queued behind the one playing at 0), so the model's conversation holds what was
   * said, not an answer the caller never heard.
   */
  private cutPlayback(): void {
    if (!this.playback.playing()) return this.cutPaused();
    const heard = this.playback.heard().map((h) => ({ ...h, sentMs: this.playback.sentMs(h.item) }));
    this.toTwilio(`{"event":"clear","streamSid":"${this.streamSid}"}`);
    this.playback.clear();
    // The transcript too keeps what was heard (the truncated item holds no more).
    for (const h of heard) this.spoken.cut(h.item, h.ms, h.sentMs);
    this.own.mute(this.playingResponse);
    // Audio left from a lost session plays at Twilio, but its items are not in this conversation.
    for (const h of heard.filter((h) => this.sessionItems.has(h.item)))
      this.rt.send({ type: 'conversation.item.truncate', item_id: h.item, content_index: 0, audio_end_ms: h.ms });
  }

  /**
   * Nothing is playing, yet the answer under way, now being cancelled, had sent audio, all of it
   * heard: the model had paused mid-answer. What it generated since never plays (muted), so its
   * item is truncated at what was sent, and its line kept as far as that, as a barge-in over audio
   * still playing is; else the model's conversation and the transcript held words never said.
   */
  private cutPaused(): void {
    const id = this.responding;
    const item = this.playingItem;
    const sentMs = item ? this.playback.sentMs(item) : 0;
    this.playback.clear();
    if (id === null || item === null || sentMs <= 0 || this.playingResponse !== id || !this.own.isMuted(id)) return;
    // Its line as far as it had come, marked cut (keys settled it already): not when its audio was all generated and heard.
    if (this.audioEnded !== item) this.spoken.stopped(item);
    if (this.sessionItems.has(item))
      this.rt.send({ type: 'conversation.item.truncate', item_id: item, content_index: 0, audio_end_ms: Math.floor(sentMs) });
  }

  private created(r: RealtimeResponse | undefined): void {
    const id = String(r?.id ?? '');
    const purpose = this.own.created(id, r?.metadata);
    // One response at a time runs in the conversation, so the one before is over though its
    // response.done never came (lost): counted now as one lost with its session is, or its turn
    // and cost would never reach the guard (the turn and per-call caps blind) nor the meter; nor
    // its function results the model (given once a response is done). A closing line is out of
    // band: it may run beside one of the conversation's.
    this.turnOwed = false;
    const before = this.responding;
    const lost = before !== null && before !== id && purpose !== 'closing' && before !== this.closing?.id ? before : null;
    if (lost !== null) {
      this.responseLost();
      void this.deliver(lost);
    }
    this.responding = id;
    this.timing.responseCreated(id);
    this.results.responseCreated(id);
    // The function results it answered are paid: left owed, a new session after a reconnect was
    // given them again (the caller told twice). After this one's creation: nothing asked beside it.
    if (lost !== null) this.results.responseDone(lost);
    if (purpose === 'consent') this.consentLine = { id, generated: false };
    if (purpose === 'closing' && this.closing) this.closing.id = id;
    // Begun once the caller is being transferred (asked for before): nobody would hear it.
    if (this.phase === 'transferring') this.rt.send({ type: 'response.cancel', response_id: id });
  }

  /** The opening line heard to its end: the wait for the caller's answer starts. */
  private checkConsentLine(): void {
    if (!this.consentLine?.generated || !this.playback.drained()) return;
    this.lineHeard();
  }

  private lineHeard(): void {
    if (this.lineTimer) clearTimeout(this.lineTimer);
    this.consentLine = null;
    // Not before: the line is generated faster than it plays, and a caller speaking over what is
    // still to play would be answered, and their next words would cut the line.
    if (this.phase === 'live') this.vadTakesTurns(true);
    this.consent.lineHeard();
    if (this.answerAgreement && this.phase === 'live') {
      this.answerAgreement = false;
      this.results.answer();
    }
  }

  /**
   * The caller agreed over the line said again, in a turn the model was told not to answer: it is
   * answered once the line is heard (now, if it already was), or the caller would wait in silence.
   */
  private agreedUnanswered(): void {
    if (this.consentLine || this.own.expects('consent')) this.answerAgreement = true;
    else this.results.answer();
  }

  private optOut(text: string): void {
    const fn = this.deps.config.intents.find((i) => i.id === 'qualify')?.on_match.call ?? 'create_lead';
    const { workflow, log } = this.deps;
    this.tagging.push(tagOptedOut({ workflow, fn, callId: this.callSid, phone: this.numbers.from, transcript: text, log }));
    void this.closeWith(this.deps.lines.optedOut, 'opted_out');
  }

  private onRealtime(e: RealtimeServerMessage): void {
    // An ended call only waits for what the response it cancelled cost (settle); a transcription
    // that completes meanwhile is billed too, so it is metered (its words come too late to matter).
    if (this.phase === 'ended' && e.type === 'conversation.item.input_audio_transcription.completed') return this.transcribed(e);
    // So does a function call of that response: the caller may have hung up on confirming it (below).
    if (this.phase === 'ended' && e.type !== 'response.done' && e.type !== 'response.function_call_arguments.done') return;
    switch (e.type) {
      case 'response.output_audio.delta':
        return this.audioOut(e);
      case 'input_audio_buffer.speech_started':
        this.consent.speechStarted();
        return this.bargeIn();
      case 'input_audio_buffer.speech_stopped':
        this.consent.speechStopped();
        return this.timing.speechStopped(e.audio_end_ms, this.rt.appendedMs);
      case 'input_audio_buffer.committed':
        if (!this.vadResponds) this.unansweredTurns.add(String(e.item_id));
        else if (this.vadTold) this.turnOwed = true;
        return this.heard.committed(String(e.item_id));
      case 'conversation.item.input_audio_transcription.completed':
        this.callerSaid(e);
        return this.transcribed(e);
      case 'conversation.item.input_audio_transcription.failed':
        return this.heard.failed(String(e.item_id), e.error);
      case 'response.output_audio.done':
        this.audioEnded = String(e.item_id);
        this.markIf(this.playback.mark()); // the end of the answer's audio is always marked
        return this.ownLineSent(String(e.response_id));
      case 'response.output_audio_transcript.delta':
        return this.spoken.delta(e);
      case 'response.output_audio_transcript.done':
        // An answer muted before any of it reached the caller is not part of what was said (one cut
        // by barge-in was partly heard and stays).
        return this.spoken.done(e, !this.own.isMuted(String(e.response_id)) || this.voiced.has(String(e.response_id)));
      case 'response.created':
        return this.created(e.response as RealtimeResponse | undefined);
      case 'conversation.item.added':
        return this.results.added(e.item as { id?: unknown; type?: unknown; call_id?: unknown } | undefined);
      case 'response.function_call_arguments.done':
        this.results.announced(String(e.call_id));
        // Ended: made before the cancel reached the model, it is run and its outcome recorded (end waits for it).
        if (this.phase === 'live' || this.phase === 'ended') this.functions.start(e as never);
        return;
      case 'response.done':
        return this.responseDone(e.response as RealtimeResponse);
      case 'error':
        // The bridge cancels before its own lines whether or not a response is running.
        if ((e.error as { code?: string } | undefined)?.code === 'response_cancel_not_active') return;
        this.deps.log.warn(`call ${this.callSid}: realtime error (${describeError(e)})`);
    }
  }

  private audioOut(e: RealtimeServerMessage): void {
    const { delta, item_id: item, response_id: resp } = e as { delta?: unknown; item_id?: unknown; response_id?: unknown };
    if (this.phase === 'transferring' || this.phase === 'ended') return;
    if (this.phase === 'closing' && resp !== this.closing?.id) return;
    if (this.own.isMuted(String(resp))) return this.neverHeard(item);
    if (typeof delta !== 'string' || !B64.test(delta)) return;
    const bytes = base64Bytes(delta);
    if (!bytes) return;
    this.toTwilio(`{"event":"media","streamSid":"${this.streamSid}","media":{"payload":"${delta}"}}`);
    this.spoke = true;
    const key = String(item ?? resp);
    this.sessionItems.add(key);
    this.markIf(this.playback.sent(key, bytes));
    this.playingResponse = String(resp);
    this.playingItem = key;
    this.voiced.add(this.playingResponse);
    if (this.phase === 'closing' && !this.closing!.playing) {
      this.closing!.playing = true;
      this.closingLimit();
    }
    this.feed.frame('assistant', bytes);
    const ttfb = this.timing.firstAudio();
    if (ttfb !== null) this.feed.event({ type: 'assistant.response.start', ttfb_ms: ttfb });
  }

  /**
   * Audio of an answer cut before any of it was sent (the caller spoke or pressed keys over the one
   * before it, or the bridge's own line took its place): its item holds what the model generated,
   * which the model would take as said (a booking it confirmed, never heard). Truncated at 0, once.
   */
  private neverHeard(item: unknown): void {
    if (this.phase !== 'live' || typeof item !== 'string' || !item || this.sessionItems.has(item)) return;
    this.sessionItems.add(item);
    this.rt.send({ type: 'conversation.item.truncate', item_id: item, content_index: 0, audio_end_ms: 0 });
  }

  private markIf(name: string | null): void {
    if (name) this.toTwilio(`{"event":"mark","streamSid":"${this.streamSid}","mark":{"name":"${name}"}}`);
  }

  /**
   * The caller started speaking: if assistant audio is still playing, stop it where the caller is.
   * Not the consent line: the caller hears it whole whatever they say over it (a refusal still counts).
   */
  private bargeIn(): void {
    this.timing.speechStarted();
    if (this.phase !== 'live') return;
    if (this.consentLine && this.playingResponse === this.consentLine.id) return;
    // Once the line was said the model's VAD cancels the answer in progress (interrupt_response):
    // what is still on its way of it must not play over the caller.
    if (this.vadResponds) this.own.mute(this.responding);
    this.cutPlayback();
  }

  private callerSaid(e: RealtimeServerMessage): void {
    const text = typeof e.transcript === 'string' ? e.transcript.trim() : '';
    const confidence = text ? transcriptConfidence(e.logprobs) : null;
    // A completed transcription the server repeats: its words were taken (consent, guard) once.
    if (!this.heard.words(e.item_id, text, confidence) || !text) return;
    if (this.phase === 'live' && !this.consent.settled && this.consent.heard(text) === 'yes' && this.unansweredTurns.has(String(e.item_id)))
      this.agreedUnanswered();
    if (confidence === null) {
      if (!this.warnedNoLogprobs)
        this.deps.log.warn(`call ${this.callSid}: transcripts carry no log-probabilities; confidence rules cannot run`);
      this.warnedNoLogprobs = true;
      return;
    }
    this.lastConfidence = confidence;
    this.feed.event({ type: 'transcript', text, confidence, speaker: 'user' });
  }

  /** What the transcription of a caller's turn used: one meter event (with its own confidence), and its cost to the guard. */
  private transcribed(e: RealtimeServerMessage): void {
    const { provider, tenant, log } = this.deps;
    const confidence = transcriptConfidence(e.logprobs);
    const facts = { provider, model: TRANSCRIBE_MODEL, tenant, callId: this.callSid, confidence, log };
    this.transcriptions.completed(e.item_id, e.usage, facts);
  }

  private remember(line: SaidLine): void {
    this.said.push(line);
    if (this.said.length > 200) this.said.shift();
  }

  private forget(line: SaidLine): void {
    const at = this.said.indexOf(line);
    if (at >= 0) this.said.splice(at, 1);
  }

  /**
   * Not async: a fault here throws to the realtime link (that session's failure), where in a
   * promise nobody awaits it was an unhandled rejection, which ends the process. Metered first, so
   * a fault after it does not lose what the response cost.
   */
  private responseDone(r: RealtimeResponse | undefined): void {
    const id = String(r?.id ?? '');
    if (this.responding === id) this.responding = null;
    this.turnOwed = false; // whatever order the server sent the turn's events in, it was answered
    // One already counted as lost (its response.done late after all) is not counted twice.
    if (!this.countedLost.delete(id)) this.meterResponse(r, id);
    if (this.phase === 'ended') {
      // Only what it cost: the conversation is over, nothing more is asked of it.
      return this.settling?.id === id ? this.settling.done() : undefined;
    }
    this.results.responseDone(id);
    this.spoken.responseDone(r);
    if (this.closing && id === this.closing.id) this.closingDone(r);
    if (this.consentLine?.id === id) this.consentDone(r);
    else if (r?.status === 'failed' && !this.voiced.has(id)) this.answerFailed(r);
    else if (this.voiced.has(id)) this.failedAnswers = 0;
    this.own.done();
    void this.deliver(id);
  }

  /** A response done: its turn and cost to the guard, one event to the meter. */
  private meterResponse(r: RealtimeResponse | undefined, id: string): void {
    const usage = this.usageOf(r);
    this.feed.event({ type: 'assistant.response.done', ...(usage ? { usage } : {}) });
    this.responsesFed++;
    // At once, not when the guard answers: the server VAD may start the next answer meanwhile.
    const usd = usage ? (usageCost(usage, tokenPrices(this.deps.config.spend_guard))?.usd ?? null) : null;
    if (usd !== null) this.spent(this.spentUsd + usd);
    const { config, provider, tenant } = this.deps;
    const latencyMs = this.timing.responseDone(id);
    const facts = { config, provider, tenant, callId: this.callSid, response: r, usage, latencyMs, confidence: this.lastConfidence };
    this.deps.meter.send(responseEvent(facts));
  }

  /**
   * The response under way on a session that is gone never reports its usage (its response.done
   * went with the socket), though the API bills what it generated: it is metered without a price
   * (UNPRICED) and given to the guard as a response without usage, which bills it at the estimate
   * of the audio since the response before it, so neither the meter nor the per-call cap misses it.
   */
  private responseLost(): void {
    const id = this.responding;
    if (id === null) return;
    this.responding = null;
    this.countedLost.add(id);
    this.meterResponse({ id, status: 'failed' } as RealtimeResponse, id);
  }

  /**
   * A response's function results, once all are in; with no session ready, they wait for the next
   * one. Never rejects (nobody awaits it): a fault is logged and ends the call as the bridge's error.
   */
  private async deliver(responseId: string): Promise<void> {
    try {
      this.results.add(await this.functions.outputs(responseId));
      if (this.phase === 'live' && this.rt.isReady) this.results.give();
    } catch (error) {
      this.deps.log.error(
        `call ${this.callSid}: giving the model its function results failed (${(error as Error).message}); ending the call`,
      );
      void this.finish('bridge_error');
    }
  }

  /** The response's usage as the meter and the guard take it: a bad count is dropped, and logged. */
  private usageOf(r: RealtimeResponse | undefined): Usage | undefined {
    const { usage, dropped } = cleanUsage(r?.usage);
    if (dropped.length)
      this.deps.log.warn(
        `call ${this.callSid}: response ${cutText(String(r?.id), 80)}: dropped usage field(s) that are not token counts: ${dropped.join(', ')}`,
      );
    return usage;
  }

  private verdict(v: Verdict): void {
    // The guard's figure can fall: before any response reported usage it costs the audio at the
    // estimate as it plays, and the first usage replaces that estimate. Once it has answered for
    // every response given to it, its figure is the call's cost; before, responses it has not
    // answered for yet are counted here already, and the higher figure is kept.
    const st = v.state;
    if (typeof st?.estUsd === 'number') this.spent(st.estUsd, st.turns === this.responsesFed);
    if (this.phase !== 'live' || v.action === 'continue') return;
    if (v.action === 'escalate') void this.transfer(v.reason ?? 'transfer');
    else void this.disconnect(v);
  }

  /**
   * What the call cost so far: the session's `max_output_tokens` follows what is left of the
   * budget, so the next response, whoever asks for it (the server VAD, the bridge), cannot pass
   * the cap by more than a token's price of output.
   */
  private spent(usd: number, exact = false): void {
    this.spentUsd = exact ? usd : Math.max(this.spentUsd, usd);
    const allowance = outputAllowance(this.deps.config, this.spentUsd);
    if (allowance === this.allowance) return;
    this.allowance = allowance;
    if (this.phase !== 'ended') this.rt.send(outputLimit(allowance));
  }

  private lost(why: string): void {
    if (this.phase === 'ended') return this.settling?.done(); // its socket failed while settling: nothing more to wait for
    this.failure = why;
    // Closing: a line not yet generated never will be (the wait ends); one generated plays on
    // from Twilio to its end, the hang-up after it.
    if (this.phase === 'closing') {
      if (!this.closing?.generated) this.closing?.done();
      return;
    }
    if (this.spoke) {
      this.deps.log.error(`call ${this.callSid}: the realtime model is unreachable (${why}); transferring the caller`);
      return void this.transfer('realtime_failure');
    }
    this.deps.log.error(
      `call ${this.callSid}: the realtime model is unreachable (${why}) before the agent spoke; voicemail (network_issue)`,
    );
    void this.voicemail('network_issue');
  }

  /**
   * To voicemail, as Twilio TwiML: a network issue before the agent could speak, or the caller
   * asked to leave a message (the model called the voicemail function; its answer is cut, as for
   * a transfer).
   */
  private async voicemail(why: 'network_issue' | 'caller_request'): Promise<void> {
    if (this.phase !== 'live') return;
    this.phase = 'transferring';
    this.reason = why === 'network_issue' ? 'realtime_failure' : 'caller_request';
    this.results.close();
    if (why === 'caller_request') {
      this.rt.send({ type: 'response.cancel' });
      if (this.playback.playing()) this.toTwilio(`{"event":"clear","streamSid":"${this.streamSid}"}`);
      this.playback.clear();
    }
    const twiml = this.deps.voicemail.twiml(why, this.numbers.from);
    // In the store first: Twilio's status callback for this call may reach another instance.
    await this.deps.voice
      .toVoicemail(this.callSid, why)
      .catch((error: Error) => this.deps.log.error(`call ${this.callSid}: the voicemail handover was not stored (${error.message})`));
    if (this.phase !== 'transferring') return; // the call ended meanwhile
    this.toVoicemail = this.actions.redirect(
      twiml,
      why === 'network_issue' ? 'voicemail after a realtime failure' : 'voicemail: the caller asked to leave a message',
    );
    if (!(await this.toVoicemail)) this.ws.close(1000); // the answer's fallback: a person
    this.awaitStop();
  }

  private async transfer(reason: EndReason): Promise<void> {
    if (this.phase !== 'live') return;
    this.phase = 'transferring';
    this.reason = reason;
    this.escalated = true;
    this.results.close(); // a result that comes in now is recorded, not answered
    // Also one asked for whose response.created is still on its way: it would run unheard, and be
    // billed. None running: the API's error, which is ignored.
    this.rt.send({ type: 'response.cancel' });
    if (this.playback.playing()) this.toTwilio(`{"event":"clear","streamSid":"${this.streamSid}"}`);
    this.playback.clear();
    // Not taken by Twilio: closing the stream runs the answer's fallback (the same line and <Dial>).
    if (!(await this.actions.transfer(reason))) this.ws.close(1000);
    this.awaitStop();
  }

  private async disconnect(v: Verdict): Promise<void> {
    if (!this.deps.config.spend_guard.disconnect_when_exceeded) {
      // The guard's verdict stays `disconnect` once reached: said once per call, not per batch.
      if (!this.overCapSaid)
        this.deps.log.warn(`call ${this.callSid}: ${v.reason} reached; disconnect_when_exceeded is false, so the call goes on`);
      this.overCapSaid = true;
      return;
    }
    this.estAtDisconnect = v.estUsd_at_disconnect ?? null;
    this.deps.log.warn(
      `call ${this.callSid}: ${v.reason ?? 'per_call_cap'} at ${this.estAtDisconnect} USD; closing line, then the call ends`,
    );
    await this.closeWith(this.deps.lines.closing, v.reason ?? 'per_call_cap');
  }

  /** A last line the model says (out of band, no tools), heard to its end (or 10 s of it), then the call is completed. */
  private async closeWith(line: string, reason: EndReason): Promise<void> {
    if (this.phase !== 'live') return;
    this.phase = 'closing';
    this.reason = reason;
    this.results.close(); // nothing after the closing line, nor over it
    await new Promise<void>((resolve) => {
      this.closing = { line, id: null, generated: false, retried: false, done: resolve, timer: null, playing: false };
      // A session reconnecting is asked once it is ready (sayOwedLine); one given up before the
      // line was generated ends the wait (lost).
      if (this.rt.isReady) this.askClosing();
      this.closingLimit();
    });
    if (this.closing?.timer) clearTimeout(this.closing.timer);
    if (this.phase !== 'closing') return;
    if (!(await this.actions.hangUp(reason))) this.ws.close(1000);
    this.awaitStop();
  }

  /**
   * The closing line's limit starts over: the line is heard to its end (its last mark) or for
   * 10 s from its first audio, so the time the model takes to begin it (a slow model, a retry)
   * never cuts it; nothing of it in 10 s from the request ends the wait too (nothing to hear).
   */
  private closingLimit(): void {
    const closing = this.closing!;
    if (closing.timer) clearTimeout(closing.timer);
    closing.timer = setTimeout(closing.done, this.deps.closingLimitMs ?? CLOSING_LIMIT_MS);
    closing.timer.unref();
  }

  /** Asks the model for the closing line (again after a reconnect); the model's own answer gives way. */
  private askClosing(): void {
    this.closing!.id = null;
    this.closing!.playing = false;
    this.silenceModel(); // the closing line comes next, nothing else
    const lang = this.deps.config.meta.primary_language;
    const instructions = `Say this to the caller in ${lang}, and nothing else: "${this.closing!.line}"`;
    // Its own allowance: the session's may be spent (the budget is gone), the line is still said.
    this.own.ask(
      'closing',
      {
        conversation: 'none',
        output_modalities: ['audio'],
        tool_choice: 'none',
        max_output_tokens: CLOSING_OUTPUT_TOKENS,
        instructions,
      },
      this.responding !== null,
    );
  }

  /**
   * The opening line's response is done. Not cancelled (by the bridge ending the call, or the
   * caller) and none of its audio reached the caller (it failed: out of quota, rate limited):
   * nothing was said, and waiting for an answer to it would leave the caller in silence; that is
   * the model failing, so a realtime failure (voicemail before the agent spoke).
   */
  private consentDone(r: RealtimeResponse | undefined): void {
    const unsaid = this.phase === 'live' && r?.status !== 'cancelled' && !this.voiced.has(this.consentLine!.id);
    if (!unsaid) return this.consentSaid();
    this.lost(`the opening line was not said (response ${statusOf(r)})`);
  }

  /**
   * An answer failed before any of it was said: the caller would wait in silence for one that never
   * comes. Asked for once more (unless function results will ask), through results, so keys
   * pressed meanwhile are answered after it rather than beside it; failing again, that is a
   * realtime failure (the caller goes to a person).
   */
  private answerFailed(r: RealtimeResponse): void {
    if (this.phase !== 'live') return;
    const why = `an answer failed (response ${statusOf(r)})`;
    if (++this.failedAnswers >= 2) return this.lost(why);
    this.deps.log.warn(`call ${this.callSid}: ${why}; asking once more`);
    if (!this.results.owing) this.results.answer();
  }

  /** The opening line is generated; once it is heard to its end the model answers the caller's turns by itself. */
  private consentSaid(): void {
    const line = this.consentLine!;
    line.generated = true;
    this.respondOnTurn = true;
    this.checkConsentLine();
    if (this.consentLine !== line) return;
    if (this.lineTimer) clearTimeout(this.lineTimer);
    this.lineTimer = setTimeout(
      () => {
        if (this.consentLine !== line || this.phase !== 'live') return;
        this.deps.log.warn(`call ${this.callSid}: no mark came back for the opening line; taking it as heard`);
        this.lineHeard();
      },
      this.playback.endsAt() - performance.now() + MARKS_LATE_MS,
    ).unref();
  }

  /** The server VAD answers and cuts the caller's turns (`on`), or not: a partial session.update when that changes. */
  private vadTakesTurns(on: boolean): void {
    if (this.vadResponds === on) return;
    this.vadResponds = on;
    if (this.rt.isReady) this.sendTurnTaking();
  }

  private sendTurnTaking(): void {
    const update = turnTaking(this.deps.config, this.vadResponds);
    this.vadTold = this.vadResponds;
    if (update) this.rt.send(update);
  }

  /**
   * The closing line's response is done: heard once its marks come back; one that failed before
   * any of it was sent (rate limited, out of quota) is asked for once more, or the caller would be
   * hung up on without it.
   */
  private closingDone(r: RealtimeResponse | undefined): void {
    const closing = this.closing!;
    if (r?.status === 'failed' && !this.voiced.has(String(closing.id)) && !closing.retried) {
      closing.retried = true;
      this.deps.log.warn(`call ${this.callSid}: the closing line was not said (response ${statusOf(r)}); asking once more`);
      return this.askClosing();
    }
    this.closingSaid();
  }

  private closingSaid(): void {
    this.closing!.generated = true;
    this.checkClosing();
  }

  /**
   * All of the audio of one of the bridge's own lines (the opening line, its repeat, a closing
   * line) is with Twilio: it is said, whatever comes of its response.done. A session lost before
   * that came must not have it asked again: a reconnect would cut the line the caller is hearing
   * and start it over, or say it twice.
   */
  private ownLineSent(responseId: string): void {
    if (!this.voiced.has(responseId)) return;
    if (this.closing?.id === responseId) this.closingSaid();
    else if (this.consentLine?.id === responseId) this.consentSaid();
    else return;
    this.ownSaid.add(responseId); // nor is it an answer a new session owes the caller
  }

  /** The closing line is over once it is generated and every mark of it came back. */
  private checkClosing(): void {
    if (this.closing?.generated && this.playback.drained()) this.closing.done();
  }

  /**
   * A response still under way when the call ends (the caller hung up over an answer) is cancelled
   * and its `response.done` awaited, briefly: that event carries the usage the API bills for it,
   * so it reaches the meter and the guard like every other response; closing the socket on it
   * left its cost unseen, in the call record too.
   */
  private async settle(): Promise<void> {
    const id = this.responding;
    if (id === null || !this.rt.isReady) return;
    this.rt.noRetry();
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, SETTLE_WAIT_MS);
      this.settling = { id, done: () => (clearTimeout(timer), resolve()) };
      // By its id: a bare cancel does not reach an out-of-band response (a closing line).
      this.rt.send({ type: 'response.cancel', response_id: id });
    });
    this.settling = null;
  }

  /** Twilio ends the stream after a redirect or completion; if it never says so, end anyway. */
  private awaitStop(): void {
    this.stopTimer ??= setTimeout(() => void this.finish(this.reason ?? 'completed'), STOP_WAIT_MS);
    this.stopTimer.unref();
  }

  private async end(fallback: EndReason): Promise<void> {
    // The call ends now, not when its record is written: that waits below, up to 47 s for a booking.
    const endedAt = this.deps.voice.now().toISOString(); // on the service's clock, as the call's start
    const reason = this.reason ?? fallback;
    this.phase = 'ended';
    this.consent.close();
    this.keypad.close();
    if (this.stopTimer) clearTimeout(this.stopTimer);
    if (this.lineTimer) clearTimeout(this.lineTimer);
    this.closing?.done();
    this.spoken.flush();
    this.heard.flush('the call ended first');
    if (this.ws.readyState === WebSocket.OPEN) this.ws.close(1000);
    await this.settle();
    this.responseLost(); // not settled: reconnecting, or no response.done in time
    this.rt.close();
    await this.feed.flush();
    await this.functions.idle(reason === 'shutdown' ? FUNCTIONS_WAIT_AT_SHUTDOWN_MS : FUNCTIONS_WAIT_MS);
    await Promise.all(this.tagging);
    const facts = { functions: this.functions, escalated: this.escalated, reason, endedAt, tenant: this.deps.tenant };
    // Twilio ends the stream as it takes the redirect, maybe before its answer is read: wait for it.
    const toVoicemail = (await this.toVoicemail) ?? false;
    const record = toVoicemail ? undefined : await writeCallRecord(this.deps.voice, this.callSid, facts, this.deps.log);
    this.deps.log.info(`call ${this.callSid}: ended (${reason})`);
    this.deps.onEnded({
      call_id: this.callSid,
      ended_reason: reason,
      record,
      transcript: [...this.said],
      estUsd_at_disconnect: this.estAtDisconnect,
      realtime_failure: this.failure,
      pricing: this.pricing.record,
    });
  }
}

/** A response's status and, when it failed, the error the API reports in its status_details. */
function statusOf(r: RealtimeResponse | undefined): string {
  const error = (r?.status_details as { error?: { type?: unknown; code?: unknown } } | null | undefined)?.error;
  const why = [...new Set([error?.type, error?.code])].filter((v): v is string => typeof v === 'string' && v !== '');
  const status = typeof r?.status === 'string' ? r.status : 'without a status';
  return [status, ...why].map((v) => v.slice(0, 60)).join(': ');
}

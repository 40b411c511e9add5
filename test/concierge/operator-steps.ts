// Steps 9 and 10 of the launch checklist are the operator's: the drill prints what to do, with
// what it can show (the transcripts of its own calls; what reached the observability stand-in).
import type { Row } from './config-steps';
import type { DrillStack } from './drill-stack';

export function reviewStep(s: DrillStack | null): Row {
  return {
    step: '9. Review the first 10 transcripts; update the copy and the triggers',
    measured: s
      ? `the drill's ${s.ended.length} call(s) are printed below: check the consent line and the closing as the caller hears them`
      : 'no call was placed (the configuration is not usable)',
    target:
      'after the first 10 real calls: read their transcripts and adjust consent.opening_line, the pricing message and each intent’s triggers; again after 50 calls',
    status: 'TODO',
  };
}

export function freezeStep(raw: Record<string, any> | null, s: DrillStack | null): Row {
  const version = JSON.stringify(raw?.meta?.version);
  const logTo = typeof raw?.spend_guard?.log_to === 'string' ? raw.spend_guard.log_to : '(unset)';
  const summaries = s ? `; in the drill ${s.observe.seen.length} call summary post(s) reached its stand-in for log_to (one per call)` : '';
  return {
    step: '10. Freeze v1; turn on logging to the observability URL',
    measured: `meta.version ${version}; spend_guard.log_to ${logTo}${summaries}`,
    target:
      'commit or tag this file as version 1 and change it only as a new version; make sure the service at log_to receives one summary per call',
    status: 'TODO',
  };
}

/** Each call the drill placed: its id, how it ended, and who said what. */
export function transcripts(s: DrillStack): string {
  return s.ended
    .map((c) => {
      const lines = c.transcript.map((l) => `    ${l.speaker === 'user' ? 'caller   ' : 'assistant'}  ${l.text}`);
      const said = lines.length ? lines : ['    (no conversation)'];
      return [`  ${c.call_id} (${c.ended_reason}, outcome ${c.record?.outcome ?? '?'})`, ...said].join('\n');
    })
    .join('\n');
}

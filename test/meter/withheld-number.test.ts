// Callers whose number is withheld, on the built bundle: the phone bridge sends their voicemail
// with `phone: "unknown"` (and a model may pass such a word for a lead). They are not one person:
// no contact row is made for them, so none overwrites another's name and intent.
import { describe, expect, it } from 'vitest';
import { backOffice, lead, voicemail } from './backoffice-setup';

const withheld = (
  body: { call_id: string; idempotency_key: string; args: Record<string, unknown> },
  call: string,
  key: string,
  more = {},
) => ({
  ...body,
  call_id: call,
  idempotency_key: key,
  args: { ...body.args, phone: 'unknown', ...more },
});

describe('a caller whose number is withheld', () => {
  it('leaves voicemails and leads that are kept with the call, but no shared contact row', () => {
    const { act, rows } = backOffice();
    expect(
      act('route_to_voicemail', withheld(voicemail(), 'call-a', 'key-vm-a0001', { transcript: 'this is Ana, call me' })),
    ).toMatchObject({ ok: true });
    expect(act('route_to_voicemail', withheld(voicemail(), 'call-b', 'key-vm-b0001', { transcript: 'this is Rui' }))).toMatchObject({
      ok: true,
    });
    expect(act('create_lead', withheld(lead(), 'call-c', 'key-lead-c001', { name: 'Marta' }))).toMatchObject({ ok: true, stage: 'New' });
    expect(rows('contacts')).toEqual([]);
    expect(rows('tasks').map((r) => [r[4], r[5]])).toEqual([
      ['unknown', 'call-a'],
      ['unknown', 'call-b'],
    ]);
    expect(rows('leads')).toHaveLength(1);
    // A caller with a number still has their contact.
    act('create_lead', lead());
    expect(rows('contacts').map((r) => [r[0], r[1]])).toEqual([['+351930000000', 'Rui']]);
  });
});

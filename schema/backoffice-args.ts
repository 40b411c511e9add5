/**
 * The arguments each back-office action cannot do without: the meter refuses a call missing one,
 * naming it (apps-script/src/backoffice.ts), and the concierge's lint asks a function whose webhook
 * is one of these actions to declare them, since the phone bridge passes on only the arguments a
 * function declares.
 */
export type BackOfficeAction = 'book_slot' | 'reschedule_slot' | 'create_lead' | 'route_to_voicemail';

export const REQUIRED_ARGS: Record<BackOfficeAction, readonly string[]> = {
  book_slot: ['name', 'phone', 'service', 'date', 'time'],
  reschedule_slot: ['booking_id', 'new_date', 'new_time'],
  create_lead: ['name', 'phone'],
  route_to_voicemail: ['phone', 'recording_url'],
};

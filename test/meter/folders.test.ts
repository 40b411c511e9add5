// The Drive folders the meter makes (the archive's, the voicemail recordings'), on the built
// bundle: a run cut off between making a folder and recording its id in Config, or a Drive call
// that made the folder but lost its reply, must not leave the next run making a second folder.
import { describe, expect, it } from 'vitest';
import { backOffice, voicemail } from './backoffice-setup';
import { FakePlatform, loadBundle } from './fakes/platform';
import { freshMeter, post } from './maintenance-setup';

const configValue = (platform: FakePlatform, key: string) => platform.spreadsheet.tab('Config')!.data.find((r) => r[0] === key)![1];

describe('a Drive folder the meter makes', () => {
  it('setup(): Sheets times out before the archive folder id is recorded; setup again finds that folder, makes none', () => {
    const platform = new FakePlatform();
    const meter = loadBundle(platform);
    platform.calls.failAfter((name) => name === 'DriveApp.createFolder');
    expect(() => meter.setup()).toThrow(/Service Spreadsheets timed out/);
    meter.setup();
    const folders = platform.drive.live('AI meter archive');
    expect(folders).toHaveLength(1);
    expect(String(configValue(platform, 'ARCHIVE_FOLDER_ID'))).toBe(folders[0].id);
    expect(platform.drive.folders).toHaveLength(1);
  });

  it('route_to_voicemail: Drive made the folder but its reply was lost; the retry saves the recording in that folder', () => {
    const { platform, act } = backOffice();
    platform.calls.loseReply((name) => name === 'DriveApp.createFolder');
    expect(act('route_to_voicemail', voicemail())).toMatchObject({ ok: false, code: 'internal' });
    expect(act('route_to_voicemail', voicemail())).toMatchObject({ ok: true, recording: '/voicemail/call-4.mp3' });
    const voicemailFolders = platform.drive.folders.filter((f) => f.name.startsWith('voicemail'));
    expect(voicemailFolders).toHaveLength(1);
    expect(voicemailFolders[0].files.map((f) => f.name)).toEqual(['call-4.mp3']);
    expect(String(configValue(platform, 'VOICEMAIL_FOLDER_ID'))).toBe(voicemailFolders[0].id);
  });

  it('two requests that each make the folder at once: one folder is kept and recorded, both recordings land in it', () => {
    const { platform, act, rows } = backOffice();
    let second: unknown = null;
    platform.calls.observe((name) => {
      if (name !== 'DriveApp.createFolder' || second) return;
      second = {}; // another call's voicemail arrives while this one is making the folder
      second = act('route_to_voicemail', { ...voicemail('key-vm-00002'), call_id: 'call-5' });
    });
    expect(act('route_to_voicemail', voicemail())).toMatchObject({ ok: true, recording: '/voicemail/call-4.mp3' });
    expect(second).toMatchObject({ ok: true, recording: '/voicemail/call-5.mp3' });
    const [kept, ...others] = platform.drive.live('voicemail');
    expect(others).toEqual([]);
    expect(platform.drive.folders.filter((f) => f.trashed && f.files.length === 0)).toHaveLength(1); // the other one
    expect(String(configValue(platform, 'VOICEMAIL_FOLDER_ID'))).toBe(kept.id);
    expect(kept.files.map((f) => f.name).sort()).toEqual(['call-4.mp3', 'call-5.mp3']);
    expect(
      rows('tasks')
        .map((r) => r[7])
        .sort(),
    ).toEqual(kept.files.map((f) => f.getUrl()).sort());
  });
  it('a recorded folder someone put in the trash is not written to (Drive empties the trash): the export stops, the rows stay', () => {
    const { platform, meter } = freshMeter('2026-11-21T15:00:00Z');
    post(meter, { events: [{ event_id: 'd1', timestamp: '2026-10-01T10:00:00Z', cost_usd: 1 }] });
    const [archive] = platform.drive.live('AI meter archive');
    archive.setTrashed(true);
    platform.clock.set('2026-11-22T01:00:00Z');
    expect(() => meter.exportArchive()).toThrow(/Config ARCHIVE_FOLDER_ID: .* is in the trash/);
    expect(archive.files).toEqual([]);
    expect(platform.properties.getProperty('EXPORT_WATERMARK')).toBeNull();
    // Retention keeps what no live folder holds.
    expect(meter.applyRetention()).toMatch(/nothing deleted/);
    expect(
      platform.spreadsheet
        .tab('events')!
        .data.slice(1)
        .map((r) => r[0]),
    ).toEqual(['d1']);
    // setup() says so and carries on.
    expect(meter.setup()).toMatch(/Note: Config ARCHIVE_FOLDER_ID: .* is in the trash/);
    // Restored, the next run exports as usual.
    archive.setTrashed(false);
    expect(meter.exportArchive()).toMatch(/wrote 1 row/);
  });

  it('route_to_voicemail into a trashed voicemail folder is refused as config_error, nothing saved there', () => {
    const { platform, act } = backOffice();
    expect(act('route_to_voicemail', voicemail())).toMatchObject({ ok: true });
    const [folder] = platform.drive.live('voicemail');
    folder.setTrashed(true);
    const reply = act('route_to_voicemail', { ...voicemail('key-vm-00002'), call_id: 'call-5' });
    expect(reply).toMatchObject({ ok: false, code: 'config_error' });
    expect(reply.error).toMatch(/VOICEMAIL_FOLDER_ID/);
    expect(folder.files.map((f) => f.name)).toEqual(['call-4.mp3']);
  });
});

// The Drive folders the meter makes (the archive's, the voicemail recordings'), on the built
// bundle: a run cut off between making a folder and recording its id in Config, or a Drive call
// that made the folder but lost its reply, must not leave the next run making a second folder.
import { describe, expect, it } from 'vitest';
import { backOffice, voicemail } from './backoffice-setup';
import { FakePlatform, loadBundle } from './fakes/platform';

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
});

/**
 * Drive folders the meter writes into (the archive exports, the voicemail recordings), named by a
 * Config key. A missing folder is made and its id recorded: the Drive calls run outside the script
 * lock, only the Config read and write take it.
 *
 * The folder's name is fixed (its base name and the spreadsheet's id), so a run cut off between
 * making the folder and recording its id (Sheets timed out, or Drive made the folder and then
 * failed) is finished by the next one, which finds that folder by its name instead of making
 * another. Two runs that each made one at the same moment keep the first one recorded; the other,
 * still empty, goes to the trash.
 */
import { MeterRefusal } from '../../schema/meter-reply';
import { configText, readConfig, writeConfigValue } from './config';
import { withScriptLock } from './lock';
import type { Folder, MeterServices } from './services';

/** The name of this meter's folder: a user's own folder of the base name is never taken for it. */
function folderName(svc: Pick<MeterServices, 'spreadsheet'>, base: string): string {
  return `${base} (${svc.spreadsheet.getId()})`;
}

/** The folder of this name an earlier run made, if any (not one in the trash). */
function madeEarlier(svc: MeterServices, name: string): Folder | null {
  for (const folders = svc.drive.getFoldersByName(name); folders.hasNext();) {
    const folder = folders.next();
    if (!folder.isTrashed()) return folder;
  }
  return null;
}

/**
 * The folder a Config key names, refused when it is in the trash: Drive still takes files there
 * and deletes them with the trash 30 days later, after retention has deleted their rows.
 */
function liveFolder(svc: MeterServices, key: string, id: string): Folder {
  const folder = svc.drive.getFolderById(id);
  if (folder.isTrashed())
    throw new MeterRefusal(
      'config_error',
      `Config ${key}: the folder "${folder.getName()}" (${id}) is in the trash; restore it, or empty ${key} so that a new folder is made`,
    );
  return folder;
}

export function folderFromConfig(svc: MeterServices, key: string, base: string): Folder {
  const id = configText(readConfig(svc.spreadsheet), key);
  if (id) return liveFolder(svc, key, id);
  const name = folderName(svc, base);
  const found = madeEarlier(svc, name);
  const folder = found ?? svc.drive.createFolder(name);
  const mine = folder.getId();
  const recorded = withScriptLock(svc, () => {
    const now = configText(readConfig(svc.spreadsheet), key);
    if (!now) writeConfigValue(svc.spreadsheet, key, mine);
    return now || mine;
  });
  if (recorded === mine) return folder;
  // Another run recorded its folder meanwhile: use that one; ours, just made, holds nothing.
  if (!found) folder.setTrashed(true);
  return liveFolder(svc, key, recorded);
}

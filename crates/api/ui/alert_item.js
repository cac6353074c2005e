// One alert as a list row, shared by the device and alerts pages: its badges, message and
// times, and what an operator can do with it: Acknowledge (open alerts), Snooze for 1, 8 or
// 24 hours and Unsnooze (unresolved alerts). A snooze silences the alert's notifications
// only; its state still follows the readings.
//
// Two kinds: a threshold alert (a metric's value beyond its threshold; the row shows the
// peak and the threshold) and an offline alert (no metric: no reading arrived for the
// device's window, its `value` and `threshold`; the row says how long the device has been,
// or was, silent).
import { api, enc } from './api.js';
import { el, ms, num, time, duration, severityBadge, stateBadge, offlineBadge } from './charts.js';

/** The snooze choices: [label, hours]. */
export const SNOOZES = [['1 h', 1], ['8 h', 8], ['24 h', 24]];
const HOUR = 3600e3;

/** Whether the alert's snooze is still in force at `now` (a passed `snoozedUntil` stays). */
export const snoozed = (al, now = Date.now()) => Boolean(al.snoozedUntil) && ms(al.snoozedUntil) > now;

export const isOffline = (al) => al.kind === 'offline' || al.rule === 'offline';

/**
 * "silent for 14 min": from the device's last arrival (the opening less the window) to the
 * reading that resolved the alert, or to now.
 */
export function silence(al, now = Date.now()) {
  const windowS = al.value;
  const since = ms(al.openedAt) - windowS * 1000;
  const end = al.resolvedAt ? ms(al.resolvedAt) : now;
  const s = Math.max(windowS, Math.round((end - since) / 1000));
  if (!Number.isFinite(s)) return 'silent';
  return `${al.resolvedAt ? 'was ' : ''}silent for ${duration(s)}`;
}

/** A button that makes one API call, then redraws the view (or says why it failed). */
function action(text, busy, attrs, call, refresh) {
  const b = el('button', attrs, text);
  b.addEventListener('click', async () => {
    b.disabled = true;
    b.textContent = busy;
    try {
      await call();
    } catch (e) {
      b.textContent = `Failed: ${e.message}`;
      return;
    }
    await refresh();
  });
  return b;
}

export function alertItem(al, refresh, { showDevice = false } = {}) {
  const path = `/devices/${enc(al.deviceId)}/alerts/${enc(al.alertId)}`;
  const quiet = al.state !== 'resolved' && snoozed(al);
  const actions = [];
  if (al.state === 'open') {
    actions.push(action('Acknowledge', 'Acknowledging…', { class: 'primary', dataset: { ack: al.alertId } },
      () => api(`${path}/ack`, { method: 'POST' }), refresh));
  }
  if (quiet) {
    actions.push(action('Unsnooze', 'Unsnoozing…', { dataset: { unsnooze: al.alertId } },
      () => api(`${path}/snooze`, { method: 'DELETE' }), refresh));
  } else if (al.state !== 'resolved') {
    actions.push(el('span', { class: 'snooze', role: 'group', 'aria-label': 'Snooze' }, 'Snooze',
      SNOOZES.map(([text, hours]) => action(text, '…', { dataset: { snooze: al.alertId, hours }, title: `Snooze for ${text}` },
        () => api(`${path}/snooze`, { method: 'POST', body: { until: new Date(Date.now() + hours * HOUR).toISOString() } }),
        refresh))));
  }
  // Alert IDs are unique per device only (two devices breaching at the same instant share
  // one), so the row names both.
  return el('li', { dataset: { device: al.deviceId, alert: al.alertId, kind: isOffline(al) ? 'offline' : 'threshold', state: al.state, snoozed: String(quiet) } },
    severityBadge(al.severity), stateBadge(al.state),
    quiet ? el('span', { class: 'badge state-snoozed', dataset: { until: al.snoozedUntil } }, 'snoozed until ', time(al.snoozedUntil)) : '',
    showDevice ? el('a', { class: 'id', href: `#/device/${encodeURIComponent(al.deviceId)}` }, al.deviceId) : '',
    isOffline(al)
      ? el('span', { class: 'msg' }, offlineBadge(), ' ', al.message || '',
        el('span', { class: 'muted' }, ` · ${silence(al)}`))
      : el('span', { class: 'msg' }, al.message, el('span', { class: 'muted' }, ` · peak ${num(al.value)}, threshold ${num(al.threshold)}`)),
    el('span', {}, 'opened ', time(al.openedAt), al.resolvedAt ? [' · resolved ', time(al.resolvedAt)] : ''),
    actions);
}

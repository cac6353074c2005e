// One alert as a list row, shared by the device and alerts pages: its badges, message and
// times, and what an operator can do with it: Acknowledge (open alerts), Snooze for 1, 8 or
// 24 hours and Unsnooze (unresolved alerts). A snooze silences the alert's notifications
// only; its state still follows the readings.
//
// Each row is marked with its alert's `kind` (`data-kind` and a badge) and describes the rule
// that raised it:
//   - threshold: a metric's value beyond its threshold ("above 35"); the row shows the peak
//     and the threshold;
//   - offline: no metric, no reading arrived for the device's window (its `value` and
//     `threshold`); the row says how long the device has been, or was, silent;
//   - window, rate, stuck: a rule of the device's `rules` (its `ruleSpec`, described by
//     `ruleText`: "avg over 5m above 30", "rate per minute above 5", "unchanged for 1h");
//     the row shows the peak of what the rule computes (for stuck, the longest time one
//     value lasted);
//   - group: a group rule of the fleet's (its `ruleSpec`: "offline fraction above 10 %", or
//     a window over the members' readings, "temperature avg over 15m above 28") over the
//     devices holding `group`; the row names the group where a device's names its device,
//     links to the fleet filtered by it, shows the share offline (or the window's value and
//     its readings) and acts on the alert under /groups/{group}/alerts/….
// A kind this page does not know yet shows its badge and the alert's message.
import { api, enc } from './api.js';
import { el, ms, num, time, duration, severityBadge, stateBadge, offlineBadge } from './charts.js';

/** The snooze choices: [label, hours]. */
export const SNOOZES = [['1 h', 1], ['8 h', 8], ['24 h', 24]];
const HOUR = 3600e3;

/** Whether the alert's snooze is still in force at `now` (a passed `snoozedUntil` stays). */
export const snoozed = (al, now = Date.now()) => Boolean(al.snoozedUntil) && ms(al.snoozedUntil) > now;

export const isOffline = (al) => al.kind === 'offline' || al.rule === 'offline';

/** The alert's kind; an API that predates `kind` gave only `rule` (min, max or offline). */
export const kindOf = (al) => al.kind || (isOffline(al) ? 'offline' : 'threshold');

/**
 * The kind's badge, the same on alert rows and the device's rule list (offline keeps the
 * offline marker used everywhere).
 */
export function kindBadge(kind) {
  if (kind === 'offline') {
    const b = offlineBadge();
    b.classList.add('kind');
    return b;
  }
  return el('span', { class: `badge kind kind-${kind}`, dataset: { kind } }, kind);
}

/** Whole seconds as a rule writes a window: `1h`, `5m`, `90s`. */
export const span = (s) => (s % 3600 === 0 ? `${s / 3600}h` : s % 60 === 0 ? `${s / 60}m` : `${s}s`);

/**
 * A rule of `rules` in words, without its metric, worded as the alert's message is
 * (crates/schema/src/rules.rs) but with the stuck rule's time as its window is written:
 * "avg over 5m above 30", "rate per minute above 5", "unchanged for 1h". Null for a shape it
 * does not know.
 */
export function ruleText(r) {
  if (!r || typeof r !== 'object') return null;
  if (r.offlineFraction && typeof r.offlineFraction === 'object') {
    const f = r.offlineFraction;
    const pct = (v) => `${num(Math.round(v * 1000) / 10)} %`;
    const lim = typeof f.above === 'number' ? `above ${pct(f.above)}` : typeof f.below === 'number' ? `below ${pct(f.below)}` : '';
    return `offline fraction ${lim}`.trim();
  }
  const side = typeof r.above === 'number' ? `above ${num(r.above)}` : typeof r.below === 'number' ? `below ${num(r.below)}` : '';
  if (typeof r.unchangedForSeconds === 'number') return `unchanged for ${span(r.unchangedForSeconds)}`;
  if (typeof r.rate === 'string') return `rate ${r.rate.replace('_', ' ')} ${side}`.trim();
  if (typeof r.aggregate === 'string') return `${r.aggregate} over ${r.window} ${side}`.trim();
  return null;
}

/**
 * The rule the alert judged, in words and without its metric: a rule's from its `ruleSpec`,
 * a threshold's or a silence's from its message ("above 35", "no reading arrived for 900 s").
 */
function describe(al, kind) {
  const text = kind !== 'threshold' && kind !== 'offline' && ruleText(al.ruleSpec);
  if (text) return text;
  // A message starts with its metric; the row shows the metric on its own.
  const msg = al.message || '';
  return al.metric && msg.startsWith(`${al.metric} `) ? msg.slice(al.metric.length + 1) : msg;
}

/** What the row adds after the rule: how far it went. */
function detail(al, kind) {
  if (kind === 'offline') return silence(al);
  if (kind === 'threshold') return `peak ${num(al.value)}, threshold ${num(al.threshold)}`;
  if (kind === 'stuck') return Number.isFinite(al.value) ? `same value for ${duration(Math.round(al.value))}` : '';
  if (kind === 'group' && Number.isFinite(al.readings)) {
    // A window over the members' readings: its aggregate when it opened, and of how many.
    return Number.isFinite(al.value) ? `${num(al.value)} over ${al.readings} readings` : '';
  }
  if (kind === 'group') {
    const share = Number.isFinite(al.value) ? `${num(Math.round(al.value * 1000) / 10)} % offline` : '';
    const of = Number.isFinite(al.members) && Number.isFinite(al.offlineMembers) ? ` (${al.offlineMembers} of ${al.members})` : '';
    return share + (share ? of : '');
  }
  return Number.isFinite(al.value) ? `peak ${num(al.value)}` : '';
}

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

/** The metric an alert is about: a device alert's own, a group window rule's from its rule. */
const metricOf = (al) => al.metric || (al.group && al.ruleSpec && al.ruleSpec.metric) || '';

export function alertItem(al, refresh, { showDevice = false } = {}) {
  // A group rule's alert belongs to its group, as a device's to its device.
  const owner = al.group ? `/groups/${enc(al.group)}` : `/devices/${enc(al.deviceId)}`;
  const path = `${owner}/alerts/${enc(al.alertId)}`;
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
  const kind = kindOf(al);
  const more = detail(al, kind);
  const who = al.group
    ? el('a', { class: 'id group', href: `#/fleet?tag=${encodeURIComponent(al.group)}` }, al.group)
    : el('a', { class: 'id', href: `#/device/${encodeURIComponent(al.deviceId)}` }, al.deviceId);
  const owned = al.group ? { group: al.group } : { device: al.deviceId };
  return el('li', { dataset: { ...owned, alert: al.alertId, kind, state: al.state, snoozed: String(quiet) } },
    severityBadge(al.severity), stateBadge(al.state),
    quiet ? el('span', { class: 'badge state-snoozed', dataset: { until: al.snoozedUntil } }, 'snoozed until ', time(al.snoozedUntil)) : '',
    showDevice || al.group ? who : '',
    el('span', { class: 'msg' }, kindBadge(kind), ' ',
      metricOf(al) ? [el('span', { class: 'metric' }, metricOf(al)), ' '] : '',
      el('span', { class: 'describe' }, describe(al, kind)),
      more ? el('span', { class: 'muted' }, ` · ${more}`) : ''),
    el('span', {}, 'opened ', time(al.openedAt), al.resolvedAt ? [' · resolved ', time(al.resolvedAt)] : ''),
    actions);
}

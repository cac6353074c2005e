// Fleet: one page of devices (in device-ID order, as the API lists them) with their latest
// reading, unresolved alerts and whether they are offline. Four calls a page: GET /devices,
// GET /latest for the page's IDs, GET /alerts (fleet-wide, unresolved) and
// GET /devices?connectivity=offline (fleet-wide; the status listing does not say).
import { api, all } from './api.js';
import { el, ago, num, when, offlineBadge } from './charts.js';

export const PAGE_SIZE = 50;
const STATUSES = ['', 'active', 'inactive', 'maintenance'];
const RANK = { critical: 3, warning: 2, info: 1 };
/** At most this many offline devices are read a refresh (one page). */
const OFFLINE_MAX = 1000;

export async function render(out, route, { navigate }) {
  const status = route.params.get('status') || '';
  const cursor = route.params.get('cursor') || '';
  // The latest readings need the page's IDs; the alerts need nothing: ask for them meanwhile.
  const alertsP = all('/alerts', { limit: 1000 }, 5000);
  const offlineP = all('/devices', { connectivity: 'offline', limit: OFFLINE_MAX }, OFFLINE_MAX);
  const page = await api('/devices', { query: { status, limit: PAGE_SIZE, cursor } });
  const ids = page.items.map((d) => d.deviceId);
  const [alerts, offline, latest] = await Promise.all([
    alertsP,
    offlineP,
    ids.length ? api('/latest', { query: { ids: ids.join(',') } }).then((r) => r.items) : [],
  ]);
  const latestBy = new Map(latest.map((r) => [r.deviceId, r]));
  const offlineBy = new Map(offline.items.map((d) => [d.deviceId, d]));
  const alertsBy = new Map();
  for (const a of alerts.items) {
    if (!alertsBy.has(a.deviceId)) alertsBy.set(a.deviceId, []);
    alertsBy.get(a.deviceId).push(a);
  }

  const filter = el('select', { id: 'status-filter', 'aria-label': 'status' },
    STATUSES.map((s) => el('option', { value: s, selected: s === status }, s || 'every status')));
  filter.addEventListener('change', () => navigate('fleet', [], { status: filter.value }));
  const critical = ids.filter((id) => (alertsBy.get(id) || []).some((a) => a.severity === 'critical' && a.state === 'open'));

  out.append(
    el('div', { class: 'toolbar' },
      el('h1', {}, 'Fleet'),
      el('span', { class: 'spacer' }),
      el('label', {}, 'Status ', filter)),
    el('p', { class: 'muted', id: 'fleet-summary' },
      `${ids.length} device${ids.length === 1 ? '' : 's'} on this page`,
      critical.length ? ` · ${critical.length} with an open critical alert` : '',
      offline.items.length ? ` · ${offline.items.length}${offline.complete ? '' : '+'} offline fleet-wide` : '',
      ` · ${alerts.items.length} unresolved alert${alerts.items.length === 1 ? '' : 's'} fleet-wide`));

  if (!ids.length) {
    out.append(el('div', { class: 'panel empty' }, status ? `No ${status} devices.` : 'No devices yet: send readings and they register themselves.'));
  } else {
    const rows = page.items.map((d) => row(d, latestBy.get(d.deviceId), alertsBy.get(d.deviceId) || [], offlineBy.get(d.deviceId)));
    out.append(el('div', { class: 'table-wrap' },
      el('table', { class: 'cards', id: 'fleet' },
        el('thead', {}, el('tr', {}, ['Device', 'Type', 'Status', 'Last seen', 'Latest values', 'Alerts'].map((h) => el('th', {}, h)))),
        el('tbody', {}, rows))));
  }
  out.append(el('div', { class: 'toolbar', style: 'margin-top:.75rem' },
    cursor ? el('button', { onclick: () => navigate('fleet', [], { status }) }, '« First page') : '',
    el('span', { class: 'spacer' }),
    page.cursor ? el('button', { id: 'next-page', onclick: () => navigate('fleet', [], { status, cursor: page.cursor }) }, 'Next page »') : ''));
}

/**
 * One device. `off`: the device as the offline listing has it, when it is there. The status
 * listing carries no `connectivity`; when a device does, "online"/"unknown" show quietly.
 */
function row(d, reading, alerts, off) {
  const conn = off ? 'offline' : d.connectivity;
  const since = off && off.offline && off.offline.since;
  const open = alerts.filter((a) => a.state === 'open');
  const worst = open.reduce((w, a) => Math.max(w, RANK[a.severity] || 0), 0);
  const metrics = reading ? Object.entries(reading).filter(([k, v]) => typeof v === 'number' && k !== 'timestamp') : [];
  const counts = {};
  for (const a of alerts) counts[a.severity] = (counts[a.severity] || 0) + 1;
  const classes = [worst === 3 && 'critical', conn === 'offline' && 'offline'].filter(Boolean).join(' ');
  return el('tr', { class: classes, dataset: conn ? { device: d.deviceId, connectivity: conn } : { device: d.deviceId } },
    el('td', { 'data-label': 'Device' },
      el('a', { href: `#/device/${encodeURIComponent(d.deviceId)}`, class: 'id' }, d.deviceId),
      d.name ? el('div', { class: 'muted' }, d.name) : ''),
    el('td', { 'data-label': 'Type' }, d.type || '—'),
    el('td', { 'data-label': 'Status', class: `status-${d.status}` }, d.status,
      conn === 'offline' ? [' ', offlineBadge(since && `no reading arrived since ${when(since)}`)]
        : conn ? [' ', el('span', { class: 'muted connectivity' }, conn)] : ''),
    el('td', { 'data-label': 'Last seen' }, reading ? el('time', { datetime: reading.timestamp, title: reading.timestamp }, ago(reading.timestamp)) : '—'),
    el('td', { 'data-label': 'Latest' }, el('div', { class: 'chips' },
      metrics.length ? metrics.map(([k, v]) => el('span', { class: 'chip', title: `${k} ${v}`, dataset: { metric: k, value: v } }, `${k} `, el('b', {}, num(v)))) : '—')),
    el('td', { 'data-label': 'Alerts' }, Object.keys(counts).length
      ? el('div', { class: 'chips' }, Object.entries(counts).sort((a, b) => (RANK[b[0]] || 0) - (RANK[a[0]] || 0))
        .map(([s, n]) => el('span', { class: `badge sev-${s}`, title: `${n} unresolved ${s} alert(s)` }, `${n} ${s}`)))
      : el('span', { class: 'muted' }, 'none')));
}

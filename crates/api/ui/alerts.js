// Alerts: unresolved alerts fleet-wide (GET /alerts, newest first), grouped by severity,
// with acknowledge and snooze.
import { all } from './api.js';
import { el } from './charts.js';
import { alertItem } from './alert_item.js';

const ORDER = ['critical', 'warning', 'info'];

export async function render(out, route, { navigate, refresh }) {
  const state = route.params.get('state') || 'open';
  const { items, complete } = await all('/alerts', { state: state === 'all' ? '' : state, limit: 1000 }, 2000);
  const pick = el('select', { id: 'state-filter', 'aria-label': 'state' },
    [['open', 'open'], ['acknowledged', 'acknowledged'], ['all', 'open and acknowledged']]
      .map(([v, t]) => el('option', { value: v, selected: v === state }, t)));
  pick.addEventListener('change', () => navigate('alerts', [], { state: pick.value }));
  out.append(el('div', { class: 'toolbar' }, el('h1', {}, 'Alerts'), el('span', { class: 'spacer' }), el('label', {}, 'State ', pick)));
  if (!items.length) {
    out.append(el('div', { class: 'panel empty' }, `No ${state === 'all' ? 'unresolved' : state} alerts.`));
    return;
  }
  for (const sev of ORDER) {
    const these = items.filter((a) => a.severity === sev);
    if (!these.length) continue;
    out.append(el('h2', {}, `${sev[0].toUpperCase()}${sev.slice(1)} (${these.length})`),
      el('div', { class: 'panel' }, el('ul', { class: 'alert-list', dataset: { severity: sev } },
        these.map((a) => alertItem(a, refresh, { showDevice: true })))));
  }
  if (!complete) out.append(el('p', { class: 'muted' }, `Showing the newest ${items.length}.`));
}

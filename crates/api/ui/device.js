// Device: a range picker, one chart per metric with its threshold, the device's own alert
// rules (`rules`: windows, rates, stuck values), its alerts with acknowledge and snooze.
//
// The rule for what a chart draws (MAX_POINTS = 1000 per chart, about a laptop chart's width
// in pixels and the API's largest page):
//   1. a range longer than MAX_POINTS hours draws daily rollups;
//   2. otherwise, when the range holds at most MAX_POINTS readings, it draws the raw readings
//      (the hourly rollups' counts give the estimate; the readings query confirms it, asking
//      for at most MAX_POINTS + 1);
//   3. otherwise it draws the hourly rollups.
// Rollups draw as an average line inside a min–max band.
import { api, all, enc } from './api.js';
import { el, ms, ago, num, when, metricChart, offlineBadge } from './charts.js';
import { alertItem, kindBadge, ruleText } from './alert_item.js';

export const MAX_POINTS = 1000;
const HOUR = 3600e3;
const RANGES = [['1h', 'Last hour', HOUR], ['1d', 'Day', 24 * HOUR], ['7d', 'Week', 168 * HOUR], ['30d', '30 days', 720 * HOUR]];

/**
 * [fromMs, toMs, label] from the URL: `range=1h|1d|7d|30d` or `from=…&to=…`; null when it
 * names no range (the page then shows the range the device's data covers: `dataRange`).
 */
export function rangeOf(params, now = Date.now()) {
  const from = params.get('from');
  const to = params.get('to');
  if (from && to && Number.isFinite(ms(from)) && Number.isFinite(ms(to)) && ms(from) < ms(to)) {
    return [ms(from), ms(to), 'custom'];
  }
  const preset = RANGES.find((r) => r[0] === params.get('range'));
  return preset ? [now - preset[2], now, preset[0]] : null;
}

/**
 * The range a device's data covers, for a link that names none: from its first reading of
 * the day before its newest one to that newest one, with a margin of 2 % each side (a lone
 * reading: a minute around it). A device with a minute of data shows that minute across the
 * chart, not crowded at the edge of a day; a device with none shows the last day.
 */
export async function dataRange(id, device, now = Date.now()) {
  const last = device.lastSeenAt ? ms(device.lastSeenAt) : NaN;
  if (!Number.isFinite(last)) return [now - 24 * HOUR, now, 'data'];
  const page = await api(`/devices/${enc(id)}/readings`, {
    query: { from: iso(last - 24 * HOUR), to: iso(last), order: 'asc', limit: 1 },
  });
  const first = page.items.length ? Math.min(ms(page.items[0].timestamp), last) : last;
  const pad = first === last ? 30e3 : Math.max((last - first) * 0.02, 500);
  return [first - pad, last + pad, 'data'];
}

const iso = (t) => new Date(t).toISOString();
const METRIC_SKIP = new Set(['deviceId', 'timestamp', 'metadata']);

/** Readings in the range, or null when there are more than MAX_POINTS. */
async function rawReadings(id, query) {
  const items = [];
  let cursor = null;
  do {
    const page = await api(`/devices/${enc(id)}/readings`, { query: { ...query, limit: Math.min(MAX_POINTS, MAX_POINTS + 1 - items.length), cursor } });
    items.push(...page.items);
    cursor = page.cursor;
  } while (cursor && items.length <= MAX_POINTS);
  return items.length > MAX_POINTS ? null : items;
}

/** What to draw over [from, to], by the rule above. */
export async function seriesFor(id, from, to) {
  const query = { from: iso(from), to: iso(to) };
  const path = `/devices/${enc(id)}/aggregates`;
  if ((to - from) / HOUR > MAX_POINTS) {
    return { resolution: 'daily', buckets: (await all(path, { ...query, period: 'daily', limit: 1000 })).items };
  }
  const hourly = (await all(path, { ...query, period: 'hourly', limit: 1000 })).items;
  const estimate = hourly.reduce((n, b) => n + Math.max(0, ...Object.values(b.metrics).map((s) => s.count)), 0);
  if (estimate <= MAX_POINTS) {
    const raw = await rawReadings(id, query);
    if (raw) return { resolution: 'raw', readings: raw };
  }
  return { resolution: 'hourly', buckets: hourly };
}

/** Per metric: {xs, raw} or {xs, avg, min, max}, and its extremes. */
export function perMetric(s) {
  const out = {};
  if (s.resolution === 'raw') {
    for (const r of s.readings) {
      for (const [k, v] of Object.entries(r)) {
        if (METRIC_SKIP.has(k) || typeof v !== 'number') continue;
        const m = (out[k] ||= { xs: [], raw: [] });
        m.xs.push(ms(r.timestamp)); m.raw.push(v);
      }
    }
    for (const m of Object.values(out)) { m.lo = Math.min(...m.raw); m.hi = Math.max(...m.raw); }
  } else {
    for (const b of s.buckets) {
      for (const [k, st] of Object.entries(b.metrics)) {
        const m = (out[k] ||= { xs: [], avg: [], min: [], max: [] });
        m.xs.push(ms(b.start)); m.avg.push(st.avg); m.min.push(st.min); m.max.push(st.max);
      }
    }
    for (const m of Object.values(out)) { m.lo = Math.min(...m.min); m.hi = Math.max(...m.max); }
  }
  return out;
}

const localInput = (t) => {
  const d = new Date(t - new Date(t).getTimezoneOffset() * 60e3);
  return d.toISOString().slice(0, 16);
};

export async function render(out, route, { navigate, refresh }) {
  const id = route.args[0];
  const deviceP = api(`/devices/${enc(id)}`);
  const alertsP = api(`/devices/${enc(id)}/alerts`, { query: { limit: 100 } });
  const [from, to, label] = rangeOf(route.params) || await dataRange(id, await deviceP);
  const [device, alerts, series] = await Promise.all([deviceP, alertsP, seriesFor(id, from, to)]);
  const metrics = perMetric(series);
  const names = Object.keys(metrics).sort();
  const thresholds = device.thresholds || {};

  const picker = el('div', { class: 'toolbar', id: 'range' },
    RANGES.map(([key, text]) => el('button', {
      'aria-pressed': String(label === key), dataset: { range: key },
      onclick: () => navigate('device', [id], { range: key }),
    }, text)),
    el('span', { class: 'spacer' }));
  const a = el('input', { type: 'datetime-local', 'aria-label': 'from', value: localInput(from) });
  const b = el('input', { type: 'datetime-local', 'aria-label': 'to', value: localInput(to) });
  const custom = el('form', { class: 'toolbar', style: 'margin:0' }, a, '→', b,
    el('button', { type: 'submit', 'aria-pressed': String(label === 'custom') }, 'Custom'));
  custom.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (a.value && b.value) navigate('device', [id], { from: iso(new Date(a.value).getTime()), to: iso(new Date(b.value).getTime()) });
  });
  picker.append(custom);

  const seen = device.lastSeenAt;
  const conn = device.connectivity;
  const since = device.offline && device.offline.since;
  const windowS = device.offlineAfterSeconds;
  out.append(
    el('p', { class: 'muted', style: 'margin:0' }, el('a', { href: '#/fleet' }, '← Fleet')),
    el('h1', {}, device.name || id, ' ', el('span', { class: 'muted id' }, device.name ? id : '')),
    el('p', { class: 'muted', id: 'device-facts', dataset: conn ? { connectivity: conn } : {} },
      conn === 'offline' ? [offlineBadge(), since ? ` no reading arrived since ${when(since)} · ` : ' '] : '',
      [device.type, device.status, device.firmware && `firmware ${device.firmware}`, seen && `last seen ${ago(seen)}`,
        conn !== 'offline' && conn,
        typeof windowS === 'number' && (windowS ? `offline after ${seconds(windowS)} without a reading` : 'never offline')]
        .filter(Boolean).join(' · ')),
    deviceTags(device),
    picker,
    el('p', { class: 'rule', id: 'rule' },
      `Showing ${series.resolution === 'raw' ? 'raw readings' : `${series.resolution} rollups (average, min–max band)`} from ${new Date(from).toLocaleString()} to ${new Date(to).toLocaleString()}`
      + `${label === 'data' ? ' (the range its data covers, up to a day before its latest reading)' : ''}. `
      + `A chart draws at most ${MAX_POINTS} points: raw readings when the range holds that many or fewer, `
      + `hourly rollups when it spans up to ${MAX_POINTS} hours, daily beyond.`));

  const boxes = [];
  const charts = el('div', { class: 'charts' });
  for (const name of names) {
    const m = metrics[name];
    const box = el('div', { class: 'plot' });
    boxes.push([box, name]);
    charts.append(el('section', {
      class: 'chart', dataset: { metric: name, points: m.xs.length, min: m.lo, max: m.hi, resolution: series.resolution },
    }, el('h3', {}, name, el('small', {}, `${m.xs.length} ${series.resolution === 'raw' ? 'readings' : series.resolution + ' buckets'} · min ${num(m.lo)} · max ${num(m.hi)}`)),
    thresholds[name] ? el('p', { class: 'threshold', dataset: { metric: name } }, thresholdText(thresholds[name])) : '',
    box));
  }
  out.append(names.length ? charts : el('div', { class: 'panel empty' }, 'No readings in this range.'));

  out.append(...deviceRules(device));
  out.append(el('h2', {}, 'Alerts'));
  if (!alerts.items.length) out.append(el('div', { class: 'panel empty' }, 'No alerts for this device.'));
  else out.append(el('div', { class: 'panel' }, el('ul', { class: 'alert-list', id: 'device-alerts' }, alerts.items.map((al) => alertItem(al, refresh)))));

  window.tidemark.device = {
    id, resolution: series.resolution, from, to, range: label,
    charts: Object.fromEntries(names.map((n) => [n, { points: metrics[n].xs.length, min: metrics[n].lo, max: metrics[n].hi }])),
  };
  return () => boxes.forEach(([box, name], i) => {
    const marks = [];
    for (const al of alerts.items.filter((x) => x.metric === name)) {
      marks.push({ at: ms(al.openedAt), kind: 'open' });
      if (al.resolvedAt) marks.push({ at: ms(al.resolvedAt), kind: 'resolved' });
    }
    metricChart(box, i, { ...metrics[name], thresholds: thresholds[name] || thresholdOf(alerts.items, name), marks, range: [from, to] });
  });
}

/**
 * The device's tags, each a link to the fleet filtered by it; tags declared to apply later
 * (`tagsFrom` ahead) say from when.
 */
function deviceTags(device) {
  const tags = Object.entries(device.tags || {});
  if (!tags.length) return '';
  const later = device.tagsFrom && ms(device.tagsFrom) > Date.now();
  return el('p', { class: 'chips tags', id: 'device-tags' },
    tags.map(([k, v]) => el('a', {
      class: 'chip tag', href: `#/fleet?tag=${encodeURIComponent(`${k}:${v}`)}`, title: `devices tagged ${k}:${v}`, dataset: { tag: `${k}:${v}` },
    }, `${k}:${v}`)),
    later ? el('span', { class: 'muted' }, `from ${when(device.tagsFrom)}`) : '');
}

/**
 * The device's own rules (`rules`), a heading and a list, one a line: "window temperature avg over 5m above 30 ·
 * warning for 10 min". Nothing when it has none of its own (`rules` absent: the fleet's
 * default, which the API does not list; `[]`: none).
 */
function deviceRules(device) {
  const rules = Array.isArray(device.rules) ? device.rules : [];
  if (!rules.length) return [];
  return [el('h2', {}, 'Rules'), el('div', { class: 'panel' }, el('ul', { class: 'rule-list', id: 'device-rules' },
    rules.map((r) => {
      const kind = typeof r.unchangedForSeconds === 'number' ? 'stuck' : typeof r.rate === 'string' ? 'rate' : 'window';
      return el('li', { dataset: { kind, metric: r.metric } }, kindBadge(kind), ' ',
        el('span', { class: 'metric' }, r.metric), ' ', el('span', { class: 'describe' }, ruleText(r) || JSON.stringify(r)),
        el('span', { class: 'muted' }, ` · ${ruleConditions(r)}`));
    })))];
}

/** A rule's severity and timing in words: "critical for 10 min; keeps firing 5 min after it clears". */
export function ruleConditions(r) {
  const lasting = r.forSeconds ? ` for ${seconds(r.forSeconds)}` : '';
  const keep = r.keepFiringForSeconds ? `; keeps firing ${seconds(r.keepFiringForSeconds)} after it clears` : '';
  const band = r.deadband ? `; resolves ${num(r.deadband)} back inside` : '';
  return `${r.severity || 'warning'}${lasting}${keep}${band}`;
}

/**
 * A device without thresholds of its own is judged by the deployment's defaults, which the
 * API does not list; its newest alert of the metric says which bound was crossed.
 */
function thresholdOf(alerts, metric) {
  // A rule's alert (window, rate, stuck) bounds what the rule computes, not the readings.
  const a = alerts.find((x) => x.metric === metric && (!x.rule || x.rule === 'min' || x.rule === 'max'));
  if (!a) return undefined;
  const rule = a.rule || (a.value > a.threshold ? 'max' : 'min');
  return { [rule]: a.threshold, severity: a.severity };
}

const seconds = (s) => (s % 3600 === 0 ? `${s / 3600} h` : s % 60 === 0 ? `${s / 60} min` : `${s} s`);

/** A threshold in words: "critical above 30 or below -5 for 2 min; resolves 1.5 back inside". */
export function thresholdText(t) {
  const bounds = [typeof t.max === 'number' && `above ${num(t.max)}`, typeof t.min === 'number' && `below ${num(t.min)}`]
    .filter(Boolean).join(' or ');
  const lasting = t.forSeconds ? ` for ${seconds(t.forSeconds)}` : '';
  const band = t.deadband ? `; resolves ${num(t.deadband)} back inside` : '';
  return `Alert: ${t.severity} ${bounds}${lasting}${band}`;
}

// Fleet: one page of devices (in device-ID order, as the API lists them) with their latest
// reading, unresolved alerts and whether they are offline, filtered by status and by tags
// (`key:value`; several must all match; the URL keeps them as repeated `tag=`). Four calls a
// page: GET /devices (with the filter), GET /latest for the page's IDs, GET /alerts
// (fleet-wide, unresolved) and GET /devices?connectivity=offline (fleet-wide; the status
// listing does not say). With a tag filter, a group chart of one of its tags (the group) and a
// metric over a range: GET /groups/series, the hourly (or daily) average inside the min–max
// band of every member's readings, and the p95.
import { api, all } from './api.js';
import { el, ago, num, when, ms, offlineBadge, metricChart } from './charts.js';

export const PAGE_SIZE = 50;
const STATUSES = ['', 'active', 'inactive', 'maintenance'];
const RANK = { critical: 3, warning: 2, info: 1 };
/** At most this many offline devices are read a refresh (one page). */
const OFFLINE_MAX = 1000;
/** A tag as the API takes it (`crates/schema/src/tags.rs`), and how many a filter may hold. */
export const TAG = /^[a-z][a-z0-9_.-]{0,31}:[A-Za-z0-9_.:/-]{1,64}$/;
export const MAX_TAGS = 16;
const HOUR = 3600e3;
/** The group chart's ranges; beyond GROUP_MAX_HOURS hours it draws days. */
const GROUP_RANGES = [['1d', 'Day', 24 * HOUR], ['7d', 'Week', 168 * HOUR], ['30d', '30 days', 720 * HOUR]];
const GROUP_MAX_HOURS = 1000;
const iso = (t) => new Date(t).toISOString();

/** A group's series of one metric over [from, to): {resolution, xs, avg, min, max, p95}. */
export async function groupSeries(tag, metric, from, to) {
  const resolution = (to - from) / HOUR > GROUP_MAX_HOURS ? '1d' : '1h';
  const { items } = await all('/groups/series', {
    tag, metric, from: iso(from), to: iso(to), resolution, aggregates: 'avg,min,max,p95,count', format: 'rows',
  }, 5000);
  const rows = items.filter((r) => r.metric === metric && typeof r.avg === 'number');
  return {
    resolution,
    xs: rows.map((r) => ms(r.time)),
    avg: rows.map((r) => r.avg),
    min: rows.map((r) => r.min),
    max: rows.map((r) => r.max),
    p95: rows.map((r) => (typeof r.p95 === 'number' ? r.p95 : null)),
    count: rows.reduce((n, r) => n + (r.count || 0), 0),
  };
}

export async function render(out, route, { navigate }) {
  const status = route.params.get('status') || '';
  const cursor = route.params.get('cursor') || '';
  const tags = [...new Set(route.params.getAll('tag'))];
  const group = tags.includes(route.params.get('group')) ? route.params.get('group') : tags[0] || '';
  const rangeKey = GROUP_RANGES.find((r) => r[0] === route.params.get('range')) ? route.params.get('range') : '1d';
  const view = { status, tag: tags, group: tags.length > 1 ? group : '', metric: route.params.get('metric') || '', range: rangeKey === '1d' ? '' : rangeKey };
  /** The same view with `changes` (a new filter goes back to the first page). */
  const go = (changes) => navigate('fleet', [], { ...view, ...changes });
  // The latest readings need the page's IDs; the alerts need nothing: ask for them meanwhile.
  const alertsP = all('/alerts', { limit: 1000 }, 5000);
  const offlineP = all('/devices', { connectivity: 'offline', limit: OFFLINE_MAX }, OFFLINE_MAX);
  const page = await api('/devices', { query: { status, tag: tags, limit: PAGE_SIZE, cursor } });
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
  filter.addEventListener('change', () => go({ status: filter.value }));
  const critical = ids.filter((id) => (alertsBy.get(id) || []).some((a) => a.severity === 'critical' && a.state === 'open'));
  const tagged = tags.length ? ` tagged ${tags.join(' and ')}` : '';

  out.append(
    el('div', { class: 'toolbar' },
      el('h1', {}, 'Fleet'),
      el('span', { class: 'spacer' }),
      el('label', {}, 'Status ', filter)),
    tagFilter(tags, page.items, go),
    el('p', { class: 'muted', id: 'fleet-summary' },
      `${ids.length} device${ids.length === 1 ? '' : 's'}${tagged} on this page`,
      critical.length ? ` · ${critical.length} with an open critical alert` : '',
      offline.items.length ? ` · ${offline.items.length}${offline.complete ? '' : '+'} offline fleet-wide` : '',
      ` · ${alerts.items.length} unresolved alert${alerts.items.length === 1 ? '' : 's'} fleet-wide`));

  let draw = null;
  if (group) {
    const metrics = [...new Set(latest.flatMap((r) => Object.entries(r)
      .filter(([k, v]) => typeof v === 'number' && k !== 'timestamp').map(([k]) => k)))].sort();
    const metric = view.metric || metrics[0] || '';
    const to = Date.now();
    const from = to - GROUP_RANGES.find((r) => r[0] === rangeKey)[2];
    const series = metric ? await groupSeries(group, metric, from, to).catch((e) => ({ error: e })) : null;
    const panel = groupPanel({ tags, group, metric, metrics, rangeKey, from, to, series, go });
    out.append(panel.node);
    draw = panel.draw;
  }

  if (!ids.length) {
    const what = [status, tags.length ? `devices${tagged}` : 'devices'].filter(Boolean).join(' ');
    out.append(el('div', { class: 'panel empty' }, status || tags.length ? `No ${what}.` : 'No devices yet: send readings and they register themselves.'));
  } else {
    const rows = page.items.map((d) => row(d, latestBy.get(d.deviceId), alertsBy.get(d.deviceId) || [], offlineBy.get(d.deviceId)));
    out.append(el('div', { class: 'table-wrap' },
      el('table', { class: 'cards', id: 'fleet' },
        el('thead', {}, el('tr', {}, ['Device', 'Type', 'Status', 'Last seen', 'Latest values', 'Alerts'].map((h) => el('th', {}, h)))),
        el('tbody', {}, rows))));
  }
  out.append(el('div', { class: 'toolbar', style: 'margin-top:.75rem' },
    cursor ? el('button', { onclick: () => go({}) }, '« First page') : '',
    el('span', { class: 'spacer' }),
    page.cursor ? el('button', { id: 'next-page', onclick: () => go({ cursor: page.cursor }) }, 'Next page »') : ''));
  return draw;
}

/** The tags of a listed device: its `tags` (listed by tag), else its `location.site`. */
function tagsOf(d) {
  if (d.tags && typeof d.tags === 'object') return Object.entries(d.tags).map(([k, v]) => `${k}:${v}`);
  return d.location && typeof d.location.site === 'string' ? [`site:${d.location.site}`] : [];
}

/**
 * The tag filter: the tags in force (each removable), and a box taking more (`key:value`,
 * several separated by spaces or commas), suggesting the tags of the devices shown.
 */
function tagFilter(tags, items, go) {
  const input = el('input', {
    id: 'tag-input', type: 'text', list: 'tag-suggestions', placeholder: 'key:value', 'aria-label': 'tag',
    autocomplete: 'off', spellcheck: 'false', autocapitalize: 'off',
  });
  const problem = el('span', { class: 'tag-problem', id: 'tag-problem', role: 'alert' });
  const suggestions = [...new Set(items.flatMap(tagsOf))].filter((t) => !tags.includes(t) && TAG.test(t)).sort();
  const form = el('form', { class: 'toolbar tag-filter', id: 'tag-filter' },
    el('label', { for: 'tag-input' }, 'Tags'),
    el('span', { class: 'chips', id: 'tag-chips' }, tags.map((t) => el('span', { class: 'chip tag', dataset: { tag: t } }, t,
      el('button', {
        type: 'button', class: 'remove', title: `remove ${t}`, 'aria-label': `remove ${t}`, dataset: { removeTag: t },
        onclick: () => go({ tag: tags.filter((x) => x !== t), group: '', cursor: '' }),
      }, '×')))),
    input,
    el('datalist', { id: 'tag-suggestions' }, suggestions.map((t) => el('option', { value: t }))),
    el('button', { type: 'submit', id: 'tag-add' }, tags.length ? 'Add' : 'Filter'),
    tags.length > 1 ? el('button', { type: 'button', id: 'tag-clear', onclick: () => go({ tag: [], group: '', cursor: '' }) }, 'Clear') : '',
    problem);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const typed = input.value.split(/[\s,]+/).filter(Boolean);
    const bad = typed.filter((t) => !TAG.test(t));
    const next = [...new Set([...tags, ...typed])];
    if (bad.length) problem.textContent = `${bad.join(', ')}: a tag is key:value (key a-z, 0-9, _ . -; value A-Z, a-z, 0-9, _ . : / -)`;
    else if (next.length > MAX_TAGS) problem.textContent = `at most ${MAX_TAGS} tags`;
    else if (typed.length) go({ tag: next, cursor: '' });
  });
  return form;
}

/** The group chart: the chosen tag's series of a metric, with its pickers; `draw` after insertion. */
function groupPanel({ tags, group, metric, metrics, rangeKey, from, to, series, go }) {
  const pick = el('div', { class: 'toolbar', id: 'group-pickers' });
  if (tags.length > 1) {
    const g = el('select', { id: 'group-select', 'aria-label': 'group' }, tags.map((t) => el('option', { value: t, selected: t === group }, t)));
    g.addEventListener('change', () => go({ group: g.value }));
    pick.append(el('label', {}, 'Group ', g));
  }
  const choices = metrics.includes(metric) || !metric ? metrics : [metric, ...metrics];
  const m = el('select', { id: 'metric-select', 'aria-label': 'metric' }, choices.map((x) => el('option', { value: x, selected: x === metric }, x)));
  m.addEventListener('change', () => go({ metric: m.value }));
  pick.append(el('label', {}, 'Metric ', m), el('span', { class: 'spacer' }),
    ...GROUP_RANGES.map(([key, text]) => el('button', {
      type: 'button', 'aria-pressed': String(key === rangeKey), dataset: { range: key },
      onclick: () => go({ range: key === '1d' ? '' : key }),
    }, text)));
  const title = el('h2', {}, metric ? `${metric} across ${group}` : `Group ${group}`);
  if (!series || series.error || !series.xs.length) {
    const why = !metric ? 'No readings on this page to chart.'
      : series && series.error ? `No group chart for ${group}: ${series.error.message}`
        : `No ${metric} readings in ${group} from ${new Date(from).toLocaleString()} to ${new Date(to).toLocaleString()}.`;
    return {
      node: el('section', { class: 'group', id: 'group-chart', dataset: { tag: group, metric, points: 0 } },
        title, pick, el('div', { class: series && series.error ? 'error' : 'panel empty', id: 'group-empty' }, why)),
      draw: null,
    };
  }
  const lo = Math.min(...series.min);
  const hi = Math.max(...series.max);
  const box = el('div', { class: 'plot' });
  const unit = series.resolution === '1d' ? 'daily' : 'hourly';
  const [shownFrom, shownTo] = covered(series, from, to);
  const node = el('section', { class: 'group', id: 'group-chart' },
    title, pick,
    el('div', { class: 'chart', dataset: { tag: group, metric, points: series.xs.length, min: lo, max: hi, resolution: series.resolution, from: shownFrom, to: shownTo } },
      el('h3', {}, `${unit} average, min–max band and p95 of every member's readings`,
        el('small', {}, `${series.xs.length} ${unit} buckets · ${series.count} readings · min ${num(lo)} · max ${num(hi)}`)),
      box));
  return { node, draw: () => metricChart(box, 0, { ...series, range: [shownFrom, shownTo] }) };
}

/**
 * The part of [from, to] a group's buckets cover, from its first bucket to the end of its last,
 * so a group with two hours of data fills the chart instead of its right edge (as a device
 * page starts on the range its data covers).
 */
export function covered({ xs, resolution }, from, to) {
  if (!xs.length) return [from, to];
  const bucket = resolution === '1d' ? 24 * HOUR : HOUR;
  return [Math.max(from, xs[0]), Math.min(to, xs[xs.length - 1] + bucket)];
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
      d.name ? el('div', { class: 'muted' }, d.name) : '',
      d.tags && Object.keys(d.tags).length ? el('div', { class: 'chips tags' }, tagsOf(d).map((t) => el('a', {
        class: 'chip tag', href: `#/fleet?tag=${encodeURIComponent(t)}`, title: `devices tagged ${t}`, dataset: { tag: t },
      }, t))) : ''),
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

// Small DOM helpers and the uPlot chart of one metric: a line of raw readings, or an
// average line inside a min–max band for rollups; thresholds as dashed lines; alert
// openings (red) and resolutions (green) marked on the time axis.

/** `el('a', {href}, 'text', child…)`: attributes, then text or nodes (arrays flatten). */
export function el(tag, attrs = {}, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') n.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(n.dataset, v);
    else n.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false || c === '') continue;
    n.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return n;
}

export function clear(n) { while (n.firstChild) n.removeChild(n.firstChild); }

/** Timestamps from the API (milli- or microsecond precision) through Date, never by offset. */
export const ms = (ts) => new Date(ts).getTime();

/** A span of whole seconds in words: `45 s`, `12 min`, `3 h`, `2 d`. */
export function duration(s) {
  if (s < 90) return `${s} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

export function ago(ts) {
  if (!ts) return '—';
  const s = Math.round((Date.now() - ms(ts)) / 1000);
  if (s < 0) return 'just now';
  return `${duration(s)} ago`;
}

export const when = (ts) => (ts ? new Date(ts).toLocaleString() : '—');
export const time = (ts) => el('time', { datetime: ts, title: ts }, when(ts));

/**
 * Labels of axis ticks `splits` spaced `incr` apart: fixed decimals, as many as the spacing
 * needs (0.05 apart: two), and more while two labels would read alike, so no label repeats
 * and each tells its value (17.90, 17.95, 18.00, 18.05, 18.10, never 18.1, 18.1, 18, 17.9,
 * 17.9). Very large or small magnitudes in exponent form, with the digits that keep them apart.
 */
export function axisLabels(splits, incr) {
  const vals = splits.map((v) => (Number.isFinite(incr) && incr > 0 && Math.abs(v) < incr * 1e-9 ? 0 : v));
  const big = Math.max(0, ...vals.filter(Number.isFinite).map(Math.abs));
  const distinct = (ls) => new Set(ls).size === ls.length;
  if (big >= 1e6 || (big > 0 && big < 1e-3)) {
    for (let d = 1; d <= 15; d++) {
      const ls = vals.map((v) => (Number.isFinite(v) ? v.toExponential(d) : ''));
      if (distinct(ls) || d === 15) return ls;
    }
  }
  let d = 0;
  if (Number.isFinite(incr) && incr > 0) {
    d = Math.max(0, -Math.floor(Math.log10(incr)));
    // 0.25 apart needs two decimals, 2.5 apart one.
    while (d < 12 && Math.abs(incr * 10 ** d - Math.round(incr * 10 ** d)) > 1e-6 * incr * 10 ** d) d += 1;
  }
  for (; ; d++) {
    const ls = vals.map((v) => (Number.isFinite(v) ? v.toFixed(d).replace(/^-(0\.?0*)$/, '$1') : ''));
    if (distinct(ls) || d >= 15) return ls;
  }
}

export function num(v) {
  if (typeof v !== 'number' || !Number.isFinite(v)) return '—';
  const a = Math.abs(v);
  return a !== 0 && (a >= 1e6 || a < 1e-3) ? v.toExponential(2) : String(+v.toFixed(a < 10 ? 2 : 1));
}

export const severityBadge = (s) => el('span', { class: `badge sev-${s}` }, s);
export const stateBadge = (s) => el('span', { class: `badge state-${s}` }, s);
/** The marker of a device that is offline (or of an offline alert): the same everywhere. */
export const offlineBadge = (title) => el('span', { class: 'badge offline', title }, 'offline');

const PALETTE = ['#1f6feb', '#8250df', '#0a7f6f', '#bc4c00', '#bf3989', '#4d5a6a'];
const live = new Set();
let resizeHooked = false;

function widthOf(box) {
  return Math.max(260, Math.floor(box.getBoundingClientRect().width) - 4);
}

/**
 * Draws one metric into `box` (already in the document).
 * data: {xs: [ms…], raw: [v…]} or {xs, avg, min, max, p95?}; thresholds: {min?, max?, severity};
 * marks: [{at: ms, kind: 'open'|'resolved'}]; range: [fromMs, toMs], the x axis' extent.
 */
export function metricChart(box, i, { xs, raw, avg, min, max, p95, thresholds, marks, range }) {
  const color = PALETTE[i % PALETTE.length];
  const secs = xs.map((t) => t / 1000);
  const lines = [];
  if (thresholds) {
    if (typeof thresholds.max === 'number') lines.push(thresholds.max);
    if (typeof thresholds.min === 'number') lines.push(thresholds.min);
  }
  const series = [{}];
  let data;
  let bands;
  if (raw) {
    series.push({ label: 'value', stroke: color, width: 1.5, points: { show: xs.length < 120, size: 4 } });
    data = [secs, raw];
  } else {
    series.push({ label: 'avg', stroke: color, width: 1.75, points: { show: xs.length < 60, size: 4 } });
    series.push({ label: 'min', stroke: color + '55', width: 1, points: { show: false } });
    series.push({ label: 'max', stroke: color + '55', width: 1, points: { show: false } });
    data = [secs, avg, min, max];
    bands = [{ series: [3, 2], fill: color + '22' }];
    if (p95) {
      series.push({ label: 'p95', stroke: color, width: 1, dash: [4, 3], points: { show: false } });
      data.push(p95);
    }
  }
  const thresholdColor = thresholds && thresholds.severity === 'critical' ? '#d1242f' : '#bf8700';
  const opts = {
    width: widthOf(box),
    height: 220,
    series,
    bands,
    legend: { show: true, live: true },
    cursor: { drag: { x: true, y: false } },
    scales: {
      x: { time: true, range: range ? () => [range[0] / 1000, range[1] / 1000] : undefined },
      y: {
        range: (u, lo, hi) => {
          const all = [lo, hi, ...lines].filter((v) => typeof v === 'number' && Number.isFinite(v));
          if (!all.length) return [0, 1];
          let a = Math.min(...all);
          let b = Math.max(...all);
          const pad = (b - a) * 0.08 || Math.abs(a) * 0.05 || 1;
          a -= pad; b += pad;
          return [a, b];
        },
      },
    },
    axes: [
      { stroke: '#6b7685', grid: { stroke: '#eef1f5' } },
      {
        stroke: '#6b7685',
        grid: { stroke: '#eef1f5' },
        // Wide enough for the longest label (about 7 px a character at uPlot's 12 px font).
        size: (u, values) => Math.max(64, 16 + 7 * Math.max(0, ...(values || []).map((v) => String(v).length))),
        values: (u, splits, axis, space, incr) => {
          // What the axis draws, kept for tests to read.
          const labels = axisLabels(splits, incr);
          box.dataset.yLabels = JSON.stringify(labels);
          return labels;
        },
      },
    ],
    hooks: {
      draw: [(u) => {
        const { ctx, bbox } = u;
        const dpr = devicePixelRatio || 1;
        ctx.save();
        ctx.lineWidth = 1.5 * dpr;
        ctx.setLineDash([6 * dpr, 4 * dpr]);
        ctx.strokeStyle = thresholdColor;
        ctx.fillStyle = thresholdColor;
        ctx.font = `${11 * dpr}px system-ui, sans-serif`;
        for (const v of lines) {
          const y = u.valToPos(v, 'y', true);
          if (y < bbox.top || y > bbox.top + bbox.height) continue;
          ctx.beginPath(); ctx.moveTo(bbox.left, y); ctx.lineTo(bbox.left + bbox.width, y); ctx.stroke();
          const label = `threshold ${num(v)}`;
          ctx.fillText(label, bbox.left + bbox.width - ctx.measureText(label).width - 4 * dpr, y - 4 * dpr);
        }
        ctx.setLineDash([2 * dpr, 3 * dpr]);
        const [x0, x1] = [u.scales.x.min, u.scales.x.max];
        for (const m of marks || []) {
          const t = m.at / 1000;
          if (t < x0 || t > x1) continue;
          const x = u.valToPos(t, 'x', true);
          const c = m.kind === 'open' ? '#d1242f' : '#1a7f37';
          ctx.strokeStyle = c; ctx.fillStyle = c;
          ctx.beginPath(); ctx.moveTo(x, bbox.top); ctx.lineTo(x, bbox.top + bbox.height); ctx.stroke();
          const yb = bbox.top + bbox.height;
          ctx.beginPath(); ctx.moveTo(x, yb - 8 * dpr); ctx.lineTo(x - 5 * dpr, yb); ctx.lineTo(x + 5 * dpr, yb); ctx.fill();
        }
        ctx.restore();
      }],
    },
  };
  const plot = new window.uPlot(opts, data, box);
  live.add({ plot, box });
  if (!resizeHooked) {
    resizeHooked = true;
    window.addEventListener('resize', () => {
      for (const c of live) {
        if (!c.box.isConnected) { c.plot.destroy(); live.delete(c); continue; }
        c.plot.setSize({ width: widthOf(c.box), height: 220 });
      }
    });
  }
  for (const c of live) if (!c.box.isConnected) { c.plot.destroy(); live.delete(c); }
  return plot;
}

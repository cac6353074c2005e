// Quarantine: a UTC day's quarantined records (GET /quarantine), with a readable preview of
// each payload: the text when it is UTF-8 text, hex otherwise.
import { api } from './api.js';
import { el, time } from './charts.js';

const PREVIEW_BYTES = 256;

/** {kind: 'text'|'hex', text} for base64 payload bytes. */
export function preview(b64) {
  const bin = atob(b64 || '');
  const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
  const head = bytes.subarray(0, PREVIEW_BYTES);
  const more = bytes.length > PREVIEW_BYTES ? ` … (${bytes.length} bytes)` : '';
  try {
    const text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    // Control characters other than whitespace mean binary, even when it decodes.
    if (!/[\u0000-\u0008\u000e-\u001f\u007f]/.test(text)) {
      return { kind: 'text', text: (text.length > PREVIEW_BYTES ? text.slice(0, PREVIEW_BYTES) : text) + (text.length > PREVIEW_BYTES ? more : '') };
    }
  } catch { /* not UTF-8 */ }
  const hex = Array.from(head, (b) => b.toString(16).padStart(2, '0')).join(' ');
  return { kind: 'hex', text: hex + more };
}

const today = () => new Date().toISOString().slice(0, 10);

export async function render(out, route, { navigate }) {
  const day = route.params.get('day') || today();
  const cursor = route.params.get('cursor') || '';
  const page = await api('/quarantine', { query: { day, limit: 100, cursor } });
  const pick = el('input', { type: 'date', id: 'day', value: day, 'aria-label': 'day (UTC)' });
  pick.addEventListener('change', () => pick.value && navigate('quarantine', [], { day: pick.value }));
  out.append(el('div', { class: 'toolbar' }, el('h1', {}, 'Quarantine'), el('span', { class: 'spacer' }), el('label', {}, 'Day (UTC) ', pick)),
    el('p', { class: 'muted' }, 'Records ingest could not store as readings, kept with their bytes: fix the sender, then replay them if they matter.'));
  if (!page.items.length) {
    out.append(el('div', { class: 'panel empty' }, `Nothing quarantined on ${day}.`));
  } else {
    out.append(el('div', { class: 'table-wrap' }, el('table', { class: 'cards', id: 'quarantine' },
      el('thead', {}, el('tr', {}, ['Received', 'Reason', 'Partition key', 'Payload'].map((h) => el('th', {}, h)))),
      el('tbody', {}, page.items.map((q) => {
        const p = preview(q.payload);
        const sub = q.subRecord !== undefined;
        return el('tr', { dataset: { reason: q.reason, sequence: q.sequenceNumber, subRecord: sub ? q.subRecord : '' } },
          el('td', { 'data-label': 'Received' }, time(q.receivedAt), el('div', { class: 'muted id', title: 'sequence number' }, q.sequenceNumber),
            // Only this user record of a KPL aggregate was bad; its siblings were stored.
            sub ? el('div', { class: 'muted sub-record' }, `user record ${q.subRecord} of a KPL aggregate`) : ''),
          el('td', { 'data-label': 'Reason' }, el('b', {}, q.reason), el('div', { class: 'muted' }, q.message)),
          el('td', { 'data-label': 'Partition key', class: 'id' }, q.partitionKey),
          el('td', { 'data-label': 'Payload' }, el('pre', { class: `payload ${p.kind}`, dataset: { kind: p.kind } }, p.text),
            el('div', { class: 'muted' }, `${q.size} bytes, ${p.kind === 'text' ? 'text' : 'binary, shown as hex'}`)));
      })))));
  }
  out.append(el('div', { class: 'toolbar', style: 'margin-top:.75rem' },
    cursor ? el('button', { onclick: () => navigate('quarantine', [], { day }) }, '« First page') : '',
    el('span', { class: 'spacer' }),
    page.cursor ? el('button', { onclick: () => navigate('quarantine', [], { day, cursor: page.cursor }) }, 'Next page »') : ''));
}

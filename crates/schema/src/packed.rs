//! The encoding of packed readings (slot items, docs/decisions/0001-packed-readings.md): many readings of one device in
//! one attribute, exact and small: the codec and the merge rules every slot writer and reader
//! uses ([`crate::slot_item`], `tidemark_store::write::slots`), with their guarantees tested here.
//!
//! Layout (version 2), all integers LEB128 varints:
//! - `2` (version), `n` (readings), then the timestamps as microseconds after the slot's
//!   start: the first offset, then each delta-of-delta (zigzag), so a regular series costs
//!   about one byte per reading;
//! - `m` (metrics), then per metric: its name (length, UTF-8), a presence flag (`0`: in
//!   every reading; `1`: a bitmap of `n` bits follows), a mode byte, then its values in
//!   reading order:
//!   - mode `0`, XOR: each value XORed with the previous one's bits: a `0` byte for an
//!     unchanged value, otherwise one byte `1 + 8·lead + trail` (zero bytes at each end of
//!     the XOR, 0..7) and the bytes in between;
//!   - mode `1 + d` (d in 0..=6), decimal: every value is `k / 10^d` for an integer `k`
//!     (bit for bit, as a reading sent as `18.3` parses), stored as the zigzagged difference
//!     of `k` from the previous value's. Sensors send a few decimals and change a little
//!     from reading to reading, so a value takes one or two bytes instead of six or seven;
//!     the encoder takes it only where it is no longer than XOR.
//!
//! A value read back is bit-for-bit the value written (NaN payloads, -0.0). Version 1 (no
//! mode byte, XOR only) is still read: parts written before version 2 stay as they are
//! until their next write.
//!
//! Worst case ([`encoded_bound`]): a value never takes more than [`MAX_VALUE_BYTES`] (its
//! control byte and all eight bytes of its XOR), whatever it and its neighbours are, and a
//! timestamp never more than [`MAX_TIMESTAMP_BYTES`] (a 64-bit varint; one inside its slot's
//! hour at most 5). Everything else (the header, the names, the presence bitmaps, the
//! timestamps themselves) depends only on which metrics are at which times, not on the
//! values: so a correction, whatever value it writes, can never grow an encoding past the
//! bound of its shape.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::ids::MetricName;
use crate::time::Timestamp;

/// One slot's readings: time → metric values.
pub type SlotReadings = BTreeMap<Timestamp, BTreeMap<MetricName, f64>>;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum PackError {
    #[error("packed readings end early")]
    Truncated,
    #[error("packed readings version {0} is not known")]
    Version(u8),
    #[error("packed readings: {0}")]
    Invalid(&'static str),
    #[error("a reading at {at} is before its slot's start {start}")]
    BeforeStart { at: Timestamp, start: Timestamp },
}

const VERSION: u8 = 2;
/// The first version, XOR values only; still decoded.
const VERSION_XOR_ONLY: u8 = 1;
/// The most decimals the decimal mode tries (`10^6` scales exactly in an `f64`).
const MAX_DECIMALS: u8 = 6;

/// The most bytes one value takes: its control byte and the eight bytes of a XOR with no
/// zero byte at either end (the decimal mode is only taken where it is shorter).
pub const MAX_VALUE_BYTES: usize = 9;

/// The most bytes one timestamp takes: a varint of 64 bits (an offset or a zigzagged
/// delta-of-delta). Inside one hour (every slot) offsets and deltas are under 2^32 µs and a
/// delta-of-delta's zigzag under 2^33, so at most 5 bytes.
pub const MAX_TIMESTAMP_BYTES: usize = 10;

/// The bytes `put_varint` writes for `v`.
fn varint_len(v: u64) -> usize {
    (64 - v.max(1).leading_zeros() as usize).div_ceil(7)
}

/// The most bytes [`encode`] can write for readings at these times with these metrics,
/// whatever their values: the exact bytes of everything but the values, plus
/// [`MAX_VALUE_BYTES`] per value. A correction (a new value of a metric a reading already
/// has) never changes the bound; a new metric or a new time is the only way to raise it.
pub fn encoded_bound(start: Timestamp, readings: &SlotReadings) -> Result<usize, PackError> {
    let n = readings.len();
    let mut bytes = 1 + varint_len(n as u64);
    let (mut prev, mut prev_delta) = (0i64, 0i64);
    for (i, at) in readings.keys().enumerate() {
        let off = at.epoch_micros() - start.epoch_micros();
        if off < 0 {
            return Err(PackError::BeforeStart { at: *at, start });
        }
        bytes += if i == 0 {
            varint_len(off as u64)
        } else {
            let delta = off - prev;
            let dod = zigzag(delta - prev_delta);
            prev_delta = delta;
            varint_len(dod)
        };
        prev = off;
    }
    // Per metric: how many readings carry it.
    let mut counts: BTreeMap<&MetricName, usize> = BTreeMap::new();
    for metrics in readings.values() {
        for m in metrics.keys() {
            *counts.entry(m).or_default() += 1;
        }
    }
    bytes += varint_len(counts.len() as u64);
    for (name, count) in counts {
        let len = name.as_str().len();
        // Name, presence flag, mode.
        bytes += varint_len(len as u64) + len + 2;
        if count < n {
            bytes += n.div_ceil(8);
        }
        bytes += count * MAX_VALUE_BYTES;
    }
    Ok(bytes)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, PackError> {
        let b = *self.bytes.get(self.pos).ok_or(PackError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&[u8], PackError> {
        let end = self.pos.checked_add(n).ok_or(PackError::Truncated)?;
        let s = self.bytes.get(self.pos..end).ok_or(PackError::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    fn varint(&mut self) -> Result<u64, PackError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f)
                .checked_shl(shift)
                .ok_or(PackError::Invalid("varint overflows"))?;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(PackError::Invalid("varint longer than 64 bits"))
    }

    /// A count that cannot exceed what the remaining bytes could describe.
    fn count(&mut self, per_item_bytes: usize) -> Result<usize, PackError> {
        let n = usize::try_from(self.varint()?).map_err(|_| PackError::Invalid("count"))?;
        let left = self.bytes.len() - self.pos;
        if n.saturating_mul(per_item_bytes) > left.saturating_mul(8) {
            return Err(PackError::Truncated);
        }
        Ok(n)
    }
}

/// Encodes a slot's readings; every timestamp must be at or after `start`.
pub fn encode(start: Timestamp, readings: &SlotReadings) -> Result<Vec<u8>, PackError> {
    let mut out = vec![VERSION];
    put_varint(&mut out, readings.len() as u64);
    let (mut prev, mut prev_delta) = (0i64, 0i64);
    for (i, at) in readings.keys().enumerate() {
        let off = at.epoch_micros() - start.epoch_micros();
        if off < 0 {
            return Err(PackError::BeforeStart { at: *at, start });
        }
        if i == 0 {
            put_varint(&mut out, off as u64);
        } else {
            let delta = off - prev;
            put_varint(&mut out, zigzag(delta - prev_delta));
            prev_delta = delta;
        }
        prev = off;
    }
    let mut names: BTreeMap<&MetricName, Vec<Option<f64>>> = BTreeMap::new();
    for (i, metrics) in readings.values().enumerate() {
        for (m, v) in metrics {
            names.entry(m).or_insert_with(|| vec![None; readings.len()])[i] = Some(*v);
        }
    }
    put_varint(&mut out, names.len() as u64);
    for (name, values) in names {
        put_varint(&mut out, name.as_str().len() as u64);
        out.extend_from_slice(name.as_str().as_bytes());
        if values.iter().all(Option::is_some) {
            out.push(0);
        } else {
            out.push(1);
            let mut bits = vec![0u8; values.len().div_ceil(8)];
            for (i, v) in values.iter().enumerate() {
                if v.is_some() {
                    bits[i / 8] |= 1 << (i % 8);
                }
            }
            out.extend_from_slice(&bits);
        }
        let present: Vec<f64> = values.into_iter().flatten().collect();
        let xor = xor_values(&present);
        match decimal_values(&present).filter(|(_, bytes)| bytes.len() <= xor.len()) {
            Some((d, bytes)) => {
                out.push(1 + d);
                out.extend_from_slice(&bytes);
            }
            None => {
                out.push(0);
                out.extend_from_slice(&xor);
            }
        }
    }
    Ok(out)
}

/// `values` in the XOR mode.
fn xor_values(values: &[f64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * 4);
    let mut last = 0u64;
    for v in values {
        let bits = v.to_bits();
        let x = bits ^ last;
        last = bits;
        if x == 0 {
            out.push(0);
            continue;
        }
        let lead = (x.leading_zeros() / 8).min(7) as usize;
        let trail = (x.trailing_zeros() / 8).min(7) as usize;
        out.push((1 + 8 * lead + trail) as u8);
        out.extend_from_slice(&x.to_be_bytes()[lead..8 - trail]);
    }
    out
}

/// The value `k / 10^d` as the decimal mode decodes it.
fn scaled(k: i64, d: u8) -> f64 {
    k as f64 / 10f64.powi(i32::from(d))
}

/// `values` in the decimal mode with the fewest decimals that writes each of them back bit
/// for bit, if there is one: (decimals, bytes).
fn decimal_values(values: &[f64]) -> Option<(u8, Vec<u8>)> {
    const EXACT: f64 = (1u64 << 53) as f64;
    'decimals: for d in 0..=MAX_DECIMALS {
        let scale = 10f64.powi(i32::from(d));
        let mut out = Vec::with_capacity(values.len() * 2);
        let mut last = 0i64;
        for v in values {
            let k = (v * scale).round();
            if !k.is_finite() || k.abs() > EXACT {
                // Too large for an exact integer at any scale: the larger ones only grow.
                return None;
            }
            let k = k as i64;
            if scaled(k, d).to_bits() != v.to_bits() {
                continue 'decimals;
            }
            put_varint(&mut out, zigzag(k - last));
            last = k;
        }
        return Some((d, out));
    }
    None
}

/// Decodes what [`encode`] wrote for the slot starting at `start`.
pub fn decode(start: Timestamp, bytes: &[u8]) -> Result<SlotReadings, PackError> {
    let mut r = Reader { bytes, pos: 0 };
    let moded = match r.byte()? {
        VERSION => true,
        VERSION_XOR_ONLY => false,
        v => return Err(PackError::Version(v)),
    };
    let n = r.count(1)?;
    let mut times = Vec::with_capacity(n);
    let (mut prev, mut prev_delta) = (0i64, 0i64);
    for i in 0..n {
        let off = if i == 0 {
            i64::try_from(r.varint()?).map_err(|_| PackError::Invalid("offset"))?
        } else {
            let delta = prev_delta
                .checked_add(unzigzag(r.varint()?))
                .ok_or(PackError::Invalid("delta"))?;
            if delta <= 0 {
                return Err(PackError::Invalid("timestamps not increasing"));
            }
            prev_delta = delta;
            prev.checked_add(delta)
                .ok_or(PackError::Invalid("offset"))?
        };
        prev = off;
        let at = start
            .plus_micros(off)
            .ok_or(PackError::Invalid("timestamp out of range"))?;
        times.push(at);
    }
    let mut out: SlotReadings = times.iter().map(|t| (*t, BTreeMap::new())).collect();
    let m = r.count(2)?;
    for _ in 0..m {
        let len = r.count(8)?;
        let name = std::str::from_utf8(r.take(len)?)
            .ok()
            .and_then(|s| MetricName::new(s).ok())
            .ok_or(PackError::Invalid("metric name"))?;
        let present: Vec<bool> = match r.byte()? {
            0 => vec![true; n],
            1 => {
                let bits = r.take(n.div_ceil(8))?;
                (0..n).map(|i| bits[i / 8] & (1 << (i % 8)) != 0).collect()
            }
            _ => return Err(PackError::Invalid("presence flag")),
        };
        let decimals = match if moded { r.byte()? } else { 0 } {
            0 => None,
            m if m <= 1 + MAX_DECIMALS => Some(m - 1),
            _ => return Err(PackError::Invalid("value mode")),
        };
        let (mut last, mut k) = (0u64, 0i64);
        for (i, here) in present.into_iter().enumerate() {
            if !here {
                continue;
            }
            let value = match decimals {
                Some(d) => {
                    k = k
                        .checked_add(unzigzag(r.varint()?))
                        .ok_or(PackError::Invalid("decimal value"))?;
                    scaled(k, d)
                }
                None => {
                    let c = r.byte()?;
                    if c != 0 {
                        let c = usize::from(c - 1);
                        let (lead, trail) = (c / 8, c % 8);
                        if c >= 64 || lead + trail >= 8 {
                            return Err(PackError::Invalid("value control byte"));
                        }
                        let mut x = [0u8; 8];
                        x[lead..8 - trail].copy_from_slice(r.take(8 - lead - trail)?);
                        last ^= u64::from_be_bytes(x);
                    }
                    f64::from_bits(last)
                }
            };
            out.get_mut(&times[i])
                .ok_or(PackError::Invalid("reading"))?
                .insert(name.clone(), value);
        }
    }
    if r.pos != bytes.len() {
        return Err(PackError::Invalid("trailing bytes"));
    }
    Ok(out)
}

/// `incoming` merged into `stored` as ingest merges a record into a single reading item: a
/// reading's metrics merge name by name and the incoming value wins for a name both carry. A
/// reading without metrics (a device's keep-alive: alive, nothing to report) is a reading
/// like any other: new, it is added with no metric; at a time `stored` holds, it adds nothing.
/// `None` when nothing changes (an exact resend, or a subset of what is stored), so the slot
/// item is not written at all. Values compare bit for bit.
pub fn merge(stored: &SlotReadings, incoming: &SlotReadings) -> Option<SlotReadings> {
    let mut out = stored.clone();
    let mut changed = false;
    for (at, metrics) in incoming {
        let row = match out.entry(*at) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                changed = true;
                e.insert(BTreeMap::new())
            }
        };
        for (name, v) in metrics {
            if row.get(name).map(|x| x.to_bits()) != Some(v.to_bits()) {
                row.insert(name.clone(), *v);
                changed = true;
            }
        }
    }
    changed.then_some(out)
}

/// One reading's change between two images of a slot item: `before` is `None` for a reading
/// the new image adds, `after` is `None` for one it drops. What the aggregator applies, as it
/// applies a single reading item's INSERT, MODIFY or REMOVE.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadingChange<'a> {
    pub at: Timestamp,
    pub before: Option<&'a BTreeMap<MetricName, f64>>,
    pub after: Option<&'a BTreeMap<MetricName, f64>>,
}

/// The readings that differ between `old` and `new` (bit for bit), in time order.
pub fn diff<'a>(old: &'a SlotReadings, new: &'a SlotReadings) -> Vec<ReadingChange<'a>> {
    let bits = |m: &BTreeMap<MetricName, f64>| {
        m.iter()
            .map(|(k, v)| (k.clone(), v.to_bits()))
            .collect::<Vec<_>>()
    };
    let times: std::collections::BTreeSet<&Timestamp> = old.keys().chain(new.keys()).collect();
    times
        .into_iter()
        .filter_map(|at| {
            let (before, after) = (old.get(at), new.get(at));
            let same = match (before, after) {
                (Some(a), Some(b)) => bits(a) == bits(b),
                _ => false,
            };
            (!same).then_some(ReadingChange {
                at: *at,
                before,
                after,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn start() -> Timestamp {
        Timestamp::parse_rfc3339("2026-04-20T14:00:00Z").unwrap()
    }

    fn m(s: &str) -> MetricName {
        MetricName::new(s).unwrap()
    }

    #[test]
    fn a_regular_one_hertz_minute_packs_in_a_few_bytes_per_reading() {
        let readings: SlotReadings = (0..60)
            .map(|i| {
                (
                    start().plus_micros(i * 1_000_000).unwrap(),
                    BTreeMap::from([
                        (m("temperature"), 22.0 + (i % 3) as f64 * 0.5),
                        (m("battery"), 87.0),
                    ]),
                )
            })
            .collect();
        let bytes = encode(start(), &readings).unwrap();
        assert_eq!(decode(start(), &bytes).unwrap(), readings);
        let per_reading = bytes.len() as f64 / 60.0;
        assert!(per_reading < 6.0, "{per_reading} bytes per reading");
    }

    #[test]
    fn sensor_values_sent_with_a_few_decimals_take_one_or_two_bytes_each() {
        // A minute of a 1 Hz device as the bench fleets send it: four metrics, one decimal,
        // wandering from reading to reading.
        let readings: SlotReadings = (0..60i64)
            .map(|i| {
                let wobble = ((i * 7919) % 13 - 6) as f64;
                let r1 = |x: f64| (x * 10.0).round() / 10.0;
                (
                    start().plus_micros(i * 1_000_000).unwrap(),
                    BTreeMap::from([
                        (m("temperature"), r1(21.0 + wobble * 0.3)),
                        (m("humidity"), r1(45.0 + wobble * 1.7)),
                        (m("pressure"), r1(1012.0 + wobble * 1.1)),
                        (m("battery"), r1(87.0 - i as f64 * 0.1)),
                    ]),
                )
            })
            .collect();
        let bytes = encode(start(), &readings).unwrap();
        assert_eq!(decode(start(), &bytes).unwrap(), readings);
        let per_reading = bytes.len() as f64 / 60.0;
        // Timestamps about 1 byte, four values at most 2 each (XOR took 6 to 7 per value).
        assert!(per_reading <= 9.0, "{per_reading} bytes per reading");
    }

    #[test]
    fn a_part_written_in_version_1_still_reads() {
        // Version 1, one reading at the slot's start, `t` = 1.5 as a XOR of 0x3FF8 and six
        // zero bytes.
        let v1 = [1, 1, 0, 1, 1, b't', 0, 7, 0x3F, 0xF8];
        assert_eq!(
            decode(start(), &v1).unwrap(),
            BTreeMap::from([(start(), BTreeMap::from([(m("t"), 1.5)]))])
        );
    }

    #[test]
    fn a_value_no_decimal_writes_back_exactly_is_kept_as_xor() {
        for v in [
            -0.0,
            f64::NAN,
            f64::INFINITY,
            0.1 + 0.2,
            1e300,
            2f64.powi(60) + 2048.0,
        ] {
            let readings = BTreeMap::from([(start(), BTreeMap::from([(m("t"), v)]))]);
            let back = decode(start(), &encode(start(), &readings).unwrap()).unwrap();
            assert_eq!(back[&start()][&m("t")].to_bits(), v.to_bits(), "{v}");
        }
    }

    #[test]
    fn a_timestamp_takes_at_most_ten_bytes_and_five_inside_an_hour() {
        assert_eq!(varint_len(u64::MAX), MAX_TIMESTAMP_BYTES);
        let hour = 3_600_000_000i64;
        assert_eq!(varint_len(hour as u64), 5);
        assert_eq!(varint_len(zigzag(-hour)), 5);
        assert_eq!(varint_len(zigzag(hour)), 5);
        assert_eq!((varint_len(0), varint_len(127), varint_len(128)), (1, 1, 2));
    }

    #[test]
    fn corrupt_bytes_are_an_error_never_a_panic() {
        let readings: SlotReadings = BTreeMap::from([(start(), BTreeMap::from([(m("t"), 1.5)]))]);
        let bytes = encode(start(), &readings).unwrap();
        for cut in 0..bytes.len() {
            assert!(decode(start(), &bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(decode(start(), &[9]), Err(PackError::Version(9)));
        let mut long = bytes.clone();
        long.push(0);
        assert!(decode(start(), &long).is_err());
        let before = BTreeMap::from([(start().pred().unwrap(), BTreeMap::new())]);
        assert!(matches!(
            encode(start(), &before),
            Err(PackError::BeforeStart { .. })
        ));
    }

    #[test]
    fn a_reading_without_metrics_is_kept_by_a_merge_and_a_resend_of_it_changes_nothing() {
        let t = |s: i64| start().plus_micros(s * 1_000_000).unwrap();
        let alive: SlotReadings = BTreeMap::from([(t(7), BTreeMap::new())]);
        // A keep-alive (a reading with nothing to report) is a reading: merged into a slot
        // without it, it is added.
        let stored: SlotReadings = BTreeMap::from([(t(1), BTreeMap::from([(m("t"), 1.0)]))]);
        let merged = merge(&stored, &alive).expect("the keep-alive is new");
        assert_eq!(merged.len(), 2);
        assert!(merged[&t(7)].is_empty());
        assert_eq!(merge(&SlotReadings::new(), &alive), Some(alive.clone()));
        // Sent again, or sent for a time the slot holds with metrics, it changes nothing.
        assert_eq!(merge(&merged, &alive), None);
        let at_one: SlotReadings = BTreeMap::from([(t(1), BTreeMap::new())]);
        assert_eq!(merge(&stored, &at_one), None);
        // Metrics sent later for its time join it.
        let later = BTreeMap::from([(t(7), BTreeMap::from([(m("h"), 2.0)]))]);
        assert_eq!(merge(&merged, &later).unwrap()[&t(7)].len(), 1);
        // It is encoded as a time with no metric, reads back, and stays within the bound.
        let bytes = encode(start(), &merged).unwrap();
        assert_eq!(decode(start(), &bytes).unwrap(), merged);
        assert!(bytes.len() <= encoded_bound(start(), &merged).unwrap());
        let only = encode(start(), &alive).unwrap();
        assert_eq!(decode(start(), &only).unwrap(), alive);
        assert_eq!(only.len(), encoded_bound(start(), &alive).unwrap());
        // AND the diff of the write names it as a new reading, with no metrics
        let changes = diff(&stored, &merged);
        assert_eq!(changes.len(), 1);
        assert_eq!((changes[0].at, changes[0].before), (t(7), None));
        assert_eq!(changes[0].after.map(|m| m.len()), Some(0));
    }

    fn readings_strategy() -> impl Strategy<Value = SlotReadings> {
        proptest::collection::btree_map(
            0i64..20,
            proptest::collection::btree_map(
                prop_oneof![Just("t"), Just("h")],
                prop_oneof![Just(1.0f64), Just(2.0), Just(-0.0), Just(0.0)],
                // Readings without metrics too (keep-alives).
                0..3,
            ),
            0..8,
        )
        .prop_map(|rows| {
            rows.into_iter()
                .map(|(off, ms)| {
                    (
                        start().plus_micros(off).unwrap(),
                        ms.into_iter().map(|(k, v)| (m(k), v)).collect(),
                    )
                })
                .collect()
        })
    }

    #[test]
    fn a_removed_reading_and_a_corrected_one_are_changes_and_the_rest_is_not() {
        let t = |s| start().plus_micros(s).unwrap();
        let old: SlotReadings = BTreeMap::from([
            (t(1), BTreeMap::from([(m("t"), 1.0)])),
            (t(2), BTreeMap::from([(m("t"), 2.0)])),
            (t(3), BTreeMap::from([(m("t"), 3.0)])),
        ]);
        let new: SlotReadings = BTreeMap::from([
            (t(1), BTreeMap::from([(m("t"), 1.0)])),
            (t(2), BTreeMap::from([(m("t"), -2.0)])),
            (t(4), BTreeMap::from([(m("t"), 4.0)])),
        ]);
        let changes: Vec<_> = diff(&old, &new)
            .into_iter()
            .map(|c| (c.at, c.before.is_some(), c.after.is_some()))
            .collect();
        assert_eq!(
            changes,
            [(t(2), true, true), (t(3), true, false), (t(4), false, true)]
        );
        // -0.0 and 0.0 are different values, bit for bit.
        let zero = BTreeMap::from([(t(1), BTreeMap::from([(m("t"), 0.0)]))]);
        let negative_zero = BTreeMap::from([(t(1), BTreeMap::from([(m("t"), -0.0)]))]);
        assert!(merge(&zero, &negative_zero).is_some());
    }

    proptest! {
        #[test]
        fn any_readings_read_back_bit_for_bit(
            rows in proptest::collection::btree_map(
                0i64..600_000_000,
                proptest::collection::btree_map(
                    prop_oneof![Just("t"), Just("h"), Just("battery_level")],
                    any::<u64>(),
                    0..3,
                ),
                0..50,
            )
        ) {
            let readings: SlotReadings = rows
                .iter()
                .map(|(off, ms)| {
                    (
                        start().plus_micros(*off).unwrap(),
                        ms.iter().map(|(k, b)| (m(k), f64::from_bits(*b))).collect(),
                    )
                })
                .collect();
            let bytes = encode(start(), &readings).unwrap();
            let back = decode(start(), &bytes).unwrap();
            prop_assert_eq!(back.len(), readings.len());
            for ((t1, a), (t2, b)) in readings.iter().zip(&back) {
                prop_assert_eq!(t1, t2);
                let bits = |x: &BTreeMap<MetricName, f64>| {
                    x.iter().map(|(k, v)| (k.clone(), v.to_bits())).collect::<Vec<_>>()
                };
                prop_assert_eq!(bits(a), bits(b));
            }
        }

        #[test]
        fn merging_then_diffing_gives_exactly_the_readings_a_batch_changed(
            stored in readings_strategy(),
            incoming in readings_strategy(),
        ) {
            let merged = merge(&stored, &incoming);
            let after = merged.clone().unwrap_or_else(|| stored.clone());
            // Every incoming value is in the result, every stored reading is kept.
            for (at, ms) in &incoming {
                for (k, v) in ms {
                    prop_assert_eq!(after[at][k].to_bits(), v.to_bits());
                }
            }
            for (at, ms) in &stored {
                for k in ms.keys() {
                    prop_assert!(after[at].contains_key(k));
                }
            }
            // The diff names exactly the readings the batch changed, and none when nothing did.
            let changes = diff(&stored, &after);
            prop_assert_eq!(merged.is_none(), changes.is_empty());
            for c in &changes {
                prop_assert!(incoming.contains_key(&c.at));
                prop_assert!(c.after.is_some());
                prop_assert_eq!(c.before, stored.get(&c.at));
            }
            // Merging the same batch again changes nothing: a replay is free.
            prop_assert!(merge(&after, &incoming).is_none());
        }

        #[test]
        fn no_values_encode_past_the_bound_of_their_shape_and_the_worst_reach_it(
            rows in proptest::collection::btree_map(
                // Anywhere in the hour, or packed a microsecond apart: every delta size.
                prop_oneof![0i64..3_600_000_000, 0i64..64],
                proptest::collection::btree_map(
                    prop_oneof![Just("t"), Just("h"), Just("battery_level"), Just("p")],
                    prop_oneof![
                        any::<u64>(),
                        Just(0u64),
                        Just(u64::MAX),
                        Just(f64::NAN.to_bits()),
                        Just((-0.0f64).to_bits()),
                        Just(0x0100_0000_0000_0001),
                        Just(0x8000_0000_0000_0001),
                    ],
                    0..4,
                ),
                0..60,
            ),
            corrections in proptest::collection::vec(any::<u64>(), 0..60),
        ) {
            let at = |off: &i64| start().plus_micros(*off).unwrap();
            let readings: SlotReadings = rows
                .iter()
                .map(|(off, ms)| {
                    (at(off), ms.iter().map(|(k, b)| (m(k), f64::from_bits(*b))).collect())
                })
                .collect();
            let bound = encoded_bound(start(), &readings).unwrap();
            prop_assert!(encode(start(), &readings).unwrap().len() <= bound);
            // Any correction of any values (same shape) stays under the same bound.
            let mut fixed = readings.clone();
            let mut values = corrections.iter().cycle();
            for ms in fixed.values_mut() {
                for v in ms.values_mut() {
                    if let Some(b) = values.next() {
                        *v = f64::from_bits(*b);
                    }
                }
            }
            prop_assert_eq!(encoded_bound(start(), &fixed).unwrap(), bound);
            prop_assert!(encode(start(), &fixed).unwrap().len() <= bound);
            // The worst values reach it: each one's XOR with the previous has no zero byte at
            // either end (alternating between two such patterns).
            let mut worst = readings.clone();
            let mut flip: BTreeMap<MetricName, bool> = BTreeMap::new();
            for ms in worst.values_mut() {
                for (k, v) in ms.iter_mut() {
                    let f = flip.entry(k.clone()).or_insert(false);
                    *f = !*f;
                    *v = f64::from_bits(if *f { 0x0101_0101_0101_0101 } else { 0 } ^ 0xff00_0000_0000_00ff);
                }
            }
            prop_assert_eq!(encode(start(), &worst).unwrap().len(), bound);
        }

        #[test]
        fn decimal_values_read_back_bit_for_bit_and_stay_under_the_bound(
            values in proptest::collection::vec(
                (any::<i32>(), 0i32..8, prop_oneof![Just(false), Just(false), Just(true)]),
                1..40,
            )
        ) {
            let readings: SlotReadings = values
                .iter()
                .enumerate()
                .map(|(i, (k, d, neg_zero))| {
                    let v = if *neg_zero { -0.0 } else { f64::from(*k) / 10f64.powi(*d) };
                    (
                        start().plus_micros(i as i64 * 1_000).unwrap(),
                        BTreeMap::from([(m("t"), v), (m("h"), f64::from(*k % 1000) / 100.0)]),
                    )
                })
                .collect();
            let bytes = encode(start(), &readings).unwrap();
            prop_assert!(bytes.len() <= encoded_bound(start(), &readings).unwrap());
            let back = decode(start(), &bytes).unwrap();
            for ((t1, a), (t2, b)) in readings.iter().zip(&back) {
                prop_assert_eq!(t1, t2);
                for (k, v) in a {
                    prop_assert_eq!(b[k].to_bits(), v.to_bits());
                }
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(start(), &bytes);
        }
    }
}
